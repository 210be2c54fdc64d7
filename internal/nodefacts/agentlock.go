package nodefacts

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/gnsh/gnsh/internal/drainer"
)

// AgentLockPath is the file the node agent holds an exclusive flock(2) on
// for as long as it runs.
const AgentLockPath = drainer.DefaultLockDir + "/" + drainer.AgentLockName

// Answers of ProbeAgentLock.
const (
	LockHeld   = "held"   // an agent holds it: the agent runs
	LockFree   = "free"   // the file exists, nobody holds it
	LockAbsent = "absent" // no such file: no agent has run since boot (/run is a tmpfs)
	// LockRootOnly: the lock directory is root's alone (no other user
	// may open a lock, or could hold it): only systemd's ActiveState
	// tells another user whether the agent runs.
	LockRootOnly = "root only"
)

// ProbeAgentLock says whether the node agent holds its lock at path (a
// file named drainer.AgentLockName; drainer.ProbeAgentLock is the probe).
// A missing file counts as not running.
func ProbeAgentLock(path string) (string, error) {
	if filepath.Base(path) != drainer.AgentLockName {
		return "", fmt.Errorf("%s: the agent's lock is named %s", path, drainer.AgentLockName)
	}
	held, exists, err := drainer.ProbeAgentLock(filepath.Dir(path))
	switch {
	case errors.Is(err, fs.ErrPermission):
		return LockRootOnly, nil
	case err != nil:
		return "", err
	case held:
		return LockHeld, nil
	case exists:
		return LockFree, nil
	}
	return LockAbsent, nil
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
