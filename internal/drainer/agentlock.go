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
// wrapper probes it (AgentRunning) to tell whether anything will drain
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
	// A probe (AgentRunning, gnsh status) holds a shared lock for a few
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
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			return nil, &AgentRunningError{PID: pid}
		}
		return nil, err
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &AgentLock{f: f}, nil
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
	if dir == "" {
		dir = DefaultLockDir
	}
	f, err := openRunFile(dir, AgentLockName)
	if errors.Is(err, os.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, true, nil
	case err != nil:
		return false, false, &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	return false, true, nil
}

// AgentRunning reports whether a node agent holds its lock in dir
// (ProbeAgentLock).
func AgentRunning(dir string) (bool, error) {
	held, _, err := ProbeAgentLock(dir)
	return held, err
}

// AgentRunning reports whether the node agent holds its lock in this
// drainer's lock directory.
func (d *Drainer) AgentRunning() bool {
	ok, _ := AgentRunning(d.lockDir())
	return ok
}

// HoldAgentLock takes the agent's lock in this drainer's lock directory
// (for gnsh agent).
func (d *Drainer) HoldAgentLock() (*AgentLock, error) { return HoldAgentLock(d.lockDir()) }
