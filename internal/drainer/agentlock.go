package drainer

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// AgentLockName is the file, in the lock directory (/run/gnsh), on which
// the node agent holds an exclusive flock(2) for as long as it runs. The
// wrapper probes it (AgentState) to tell whether anything will drain
// ahead of a shutdown scheduled beyond the drain timeout; no D-Bus is
// needed, and the lock goes with the agent's process however it ends.
const AgentLockName = "agent.flock"

// AgentLock is the node agent's lock, held until Release or the process's
// end.
type AgentLock struct{ f *os.File }

// AgentRunningError is returned by HoldAgentLock when another agent holds
// the lock.
type AgentRunningError struct{ PID int }

func (e *AgentRunningError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("another gnsh agent is running (pid %d)", e.PID)
	}
	return "another gnsh agent is running"
}

// HoldAgentLock takes the agent's lock in dir (DefaultLockDir if "")
// (trying for half a second: a probe holds a shared lock for a moment)
// and writes this process's ID into it. Another agent
// holding it is an *AgentRunningError.
func HoldAgentLock(dir string) (*AgentLock, error) {
	if dir == "" {
		dir = DefaultLockDir
	}
	// A probe (AgentState, gnsh status) holds a shared lock for a few
	// microseconds: try again for a moment before taking the lock for
	// another agent's.
	var f *os.File
	var err error
	for i := 0; i < 20; i++ {
		if f, err = lockFile(dir, AgentLockName, unix.LOCK_EX); !errors.Is(err, syscall.EWOULDBLOCK) {
			break
		}
		if i < 19 {
			f.Close()
			time.Sleep(25 * time.Millisecond)
		}
	}
	if err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			defer f.Close()
			pid, _ := readAgentLock(f)
			return nil, &AgentRunningError{PID: pid}
		}
		return nil, err
	}
	l := &AgentLock{f: f}
	l.SetState(AgentStarting)
	return l, nil
}

// The agent's states, as its lock file tells the wrapper (AgentState).
const (
	// AgentStarting: it has not yet looked for a kubeconfig.
	AgentStarting = "starting"
	// AgentNoKubeconfig: no kubeconfig yet (gnsh installed before
	// kubeadm join): it guards nothing, and looks again every few seconds.
	AgentNoKubeconfig = "no-kubeconfig"
	// AgentGuarding: a Kubernetes node: it guards shutdowns and follows
	// scheduled ones.
	AgentGuarding = "guarding"
)

// SetState writes this process's ID and the agent's state into its lock
// file ("PID STATE"): the wrapper promises a drain ahead of a far schedule
// only while the agent is guarding.
func (l *AgentLock) SetState(state string) {
	if l == nil || l.f == nil {
		return
	}
	// Written over the old content, then cut to its length: a probe
	// never reads the file empty (an empty read of a held lock would say
	// nothing of the agent's state).
	b := []byte(strconv.Itoa(os.Getpid()) + " " + state + "\n")
	if _, err := l.f.WriteAt(b, 0); err == nil {
		_ = l.f.Truncate(int64(len(b)))
	}
}

// olderAgent is the state read from an older agent's lock: its PID alone.
const olderAgent = "(older agent)"

// readAgentLock parses the lock file's "PID STATE" (an older agent wrote
// only "PID": state olderAgent); state is "" when nothing readable is
// there.
func readAgentLock(f *os.File) (pid int, state string) {
	b := make([]byte, 64)
	n, _ := f.ReadAt(b, 0)
	fields := strings.Fields(string(b[:n]))
	if len(fields) > 0 {
		pid, _ = strconv.Atoi(fields[0])
	}
	switch {
	case pid <= 0:
		return 0, ""
	case len(fields) > 1:
		state = fields[1]
	default:
		state = olderAgent
	}
	return pid, state
}

// Release drops the lock (the file stays, empty).
func (l *AgentLock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close()
	l.f = nil
}

// ProbeAgentLock says whether a node agent holds its lock in dir
// (DefaultLockDir if ""): a non-blocking shared flock on the file fails
// exactly while the agent's exclusive one is held; a shared lock it gets
// is dropped at once (closing the file). It opens the file read-only,
// without creating it or following a symlink. Only root may ask: the
// directory is root's alone (lockdir.go), and another user gets an error
// wrapping fs.ErrPermission (systemd's ActiveState of gnsh.service tells
// them instead). exists is false when there is no such file (no agent has
// run since boot: /run is a tmpfs). An error comes with false, false.
func ProbeAgentLock(dir string) (held, exists bool, err error) {
	held, exists, _, err = probeAgentLock(dir)
	return held, exists, err
}

// AgentState is ProbeAgentLock with the state the agent wrote into its
// lock (AgentGuarding, …; "" from an older agent, which wrote none).
func AgentState(dir string) (held bool, state string, err error) {
	held, _, state, err = probeAgentLock(dir)
	return held, state, err
}

func probeAgentLock(dir string) (held, exists bool, state string, err error) {
	if dir == "" {
		dir = DefaultLockDir
	}
	f, held, exists, err := probeFlock(dir, AgentLockName)
	if err != nil {
		return false, false, "", err
	}
	if f == nil {
		return held, exists, "", nil
	}
	defer f.Close()
	_, state = readAgentLock(f)
	return true, true, state, nil
}

// probeFlock reports whether another process holds an flock on dir/name
// (opened read-only, never through a symlink, nothing made); exists is
// false when there is no such file or it cannot be opened (err says why).
// A file held is returned open, to read its holder from; the caller closes
// it.
func probeFlock(dir, name string) (held *os.File, isHeld, exists bool, err error) {
	f, err := openRunFile(dir, name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, false, nil
	}
	if err != nil {
		return nil, false, false, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return f, true, true, nil
	case err != nil:
		f.Close()
		return nil, false, true, &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	f.Close() // the shared lock goes with it
	return nil, false, true, nil
}

// agentGuarding reports whether a node agent runs (held) and whether it
// guards this node (an older agent, which wrote its PID but no state, is
// taken to; a lock whose content cannot be read is not).
func (d *Drainer) agentGuarding() (running, guarding bool) {
	held, state, _ := AgentState(d.lockDir())
	return held, held && (state == AgentGuarding || state == olderAgent)
}

// HoldAgentLock takes the agent's lock in this drainer's lock directory
// (for gnsh agent).
func (d *Drainer) HoldAgentLock() (*AgentLock, error) { return HoldAgentLock(d.lockDir()) }
