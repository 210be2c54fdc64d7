package nodefacts

import (
	"errors"
	"os"
	"syscall"
)

// AgentLockPath is the file the node agent holds an exclusive flock(2) on
// for as long as it runs.
const AgentLockPath = "/run/gnsh/agent.lock"

// Answers of ProbeAgentLock.
const (
	LockHeld   = "held"   // an agent holds it: the agent runs
	LockFree   = "free"   // the file exists, nobody holds it
	LockAbsent = "absent" // no such file: no agent has run since boot (/run is a tmpfs)
)

// ProbeAgentLock says whether a process holds an exclusive flock on the
// file at path, without waiting: a non-blocking shared flock fails with
// EWOULDBLOCK exactly while an exclusive one is held. A shared lock it
// gets is released at once. A missing file counts as not running.
//
// The agent's side (an exclusive flock on AgentLockPath for its lifetime)
// is being added to internal/agent separately; this probe is its reader,
// kept here so that doctor and status need nothing from the agent's code.
// While the probe holds its shared lock (for microseconds), an agent
// starting at that very instant and taking its lock with LOCK_NB would see
// it taken: the agent should take it blocking (or retry once), which costs
// it nothing.
func ProbeAgentLock(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return LockAbsent, nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err == nil:
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return LockFree, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		return LockHeld, nil
	}
	return "", &os.PathError{Op: "flock", Path: path, Err: err}
}

// agentRunning reads the agent's state from systemd's answer and the
// lock: the unit is active (or starting, or reloading), or an agent holds
// the lock (run by hand, or while systemd cannot be asked).
func agentRunning(a AgentFacts) bool {
	switch a.ActiveState {
	case "active", "activating", "reloading":
		return true
	}
	return a.Lock == LockHeld
}
