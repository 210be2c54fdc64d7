package drainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultLockDir holds the lock that allows one drain per node at a time.
const DefaultLockDir = "/run/gnsh"

// DrainLockName is the drain lock's file in the lock directory.
const DrainLockName = "drain.flock"

// Kinds of holder (Holder.Kind): what a wrapper that finds the lock held
// does. A shutdown typed at any moment is never refused because the node
// agent is busy: it waits for the agent (HolderAgent, HolderAgentDrain), at
// most until the holder's own bound (Until); only another wrapper's or
// gnsh drain's hold refuses it (HolderDrain).
const (
	// HolderDrain: a wrapper's or gnsh drain's drain, gnsh uncordon,
	// shutdown -c.
	HolderDrain = ""
	// HolderAgent: the node agent's bookkeeping, a read and a patch or
	// two (the uncordon after boot, the undo of a cordon that serves no
	// shutdown).
	HolderAgent = "agent"
	// HolderAgentDrain: the node agent's drain, for a shutdown under way
	// or ahead of a scheduled one: a wrapper waits for it and uses its
	// outcome (the record's drained) instead of draining a second time.
	HolderAgentDrain = "agent-drain"
)

// Holder is who holds the drain lock; it is written into the lock file so
// that a second invocation can say who is draining.
type Holder struct {
	PID    int       `json:"pid"`
	Action string    `json:"action"`
	User   string    `json:"user"`
	TTY    string    `json:"tty,omitempty"`
	Node   string    `json:"node"`
	Since  time.Time `json:"since"`
	Kind   string    `json:"kind,omitempty"` // HolderDrain, HolderAgent, HolderAgentDrain
	// Until is when the holder's own bound ends (its budget or request
	// timeouts): it releases the lock by then, whatever happens.
	Until time.Time `json:"until,omitzero"`
}

// agent reports whether the node agent holds the lock.
func (h *Holder) agent() bool {
	return h != nil && (h.Kind == HolderAgent || h.Kind == HolderAgentDrain)
}

func (h Holder) String() string {
	who := "pid"
	if h.agent() {
		who = "the node agent, pid"
	}
	s := fmt.Sprintf("%s %d, %s by %s", who, h.PID, h.Action, h.User)
	if h.TTY != "" {
		s += " on " + h.TTY
	}
	if !h.Since.IsZero() {
		s += ", since " + h.Since.Local().Format("15:04:05")
	}
	return s
}

// HeldError is returned when another gnsh holds the lock.
type HeldError struct{ Holder *Holder }

func (e *HeldError) Error() string {
	who := "another gnsh process"
	if e.Holder != nil && e.Holder.PID != 0 {
		who = e.Holder.String()
	}
	return fmt.Sprintf("another gnsh is draining this node (%s); wait for it to finish, or stop it", who)
}

// pid names the holder's process for a message: "pid 1234", or "it".
func (e *HeldError) pid() string {
	if e.Holder != nil && e.Holder.PID != 0 {
		return fmt.Sprintf("pid %d", e.Holder.PID)
	}
	return "it"
}

// lockError is a lock that cannot be taken for another reason than another
// gnsh holding it (no permission to create /run/gnsh as a non-root user, a
// read-only /run): gnsh cannot drain.
type lockError struct{ err error }

func (e *lockError) Error() string { return "cannot take the drain lock: " + e.err.Error() }
func (e *lockError) Unwrap() error { return e.err }

// lockUsable reports (a *lockError) a drain lock this process could never
// take: the lock directory or file cannot be made or opened (not root, a
// read-only /run). It takes no lock.
func (d *Drainer) lockUsable() error {
	dir := d.lockDir()
	if err := ensureLockDir(dir); err != nil {
		return &lockError{err}
	}
	path := filepath.Join(dir, DrainLockName)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, lockFileMode)
	if err != nil {
		return &lockError{&os.PathError{Op: "open", Path: path, Err: err}}
	}
	unix.Close(fd)
	return nil
}

// Lock is a held drain lock: an flock(2) on DIR/drain.flock, released when
// the process exits, however it exits.
type Lock struct{ f, legacy *os.File }

// Acquire takes the lock without waiting. The directory is root's alone
// (0700) and the file 0600, neither reached through a symlink (lockdir.go).
//
// The holder writes who it is right after taking the lock and empties the
// file right before releasing it: a lock found held with no readable
// holder is tried again for a moment (up to 100 ms), so that a holder
// caught in either instant is neither taken for unknown nor for held.
func Acquire(dir string, h Holder) (*Lock, error) {
	var f *os.File
	var err error
	for try := 0; ; try++ {
		f, err = lockFile(dir, DrainLockName, unix.LOCK_EX)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			break
		}
		held := readHolder(f)
		f.Close()
		if held != nil || try == 10 {
			return nil, &HeldError{Holder: held}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return nil, &lockError{err}
	}
	b, _ := json.Marshal(h)
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(b, '\n'), 0)
	}
	legacy, older := takeLegacy(dir, b)
	if older != nil {
		_ = f.Truncate(0)
		f.Close()
		return nil, &HeldError{Holder: older}
	}
	return &Lock{f: f, legacy: legacy}, nil
}

// legacyDrainLock is the drain lock of the gnsh before the lock files were
// named anew (0644, in a 0755 /run/gnsh). An older gnsh still running
// during an upgrade (a wrapper mid-drain, the agent until the package
// restarts it) takes it and knows no other: gnsh takes it too, so that an
// older one sees it held, and counts it as held by an older gnsh only if
// its content names a live holder. Another user may still have that file
// open and hold a flock on it, but cannot write it: such a hold is
// ignored, and the lock is then kept without it.
const legacyDrainLock = "drain.lock"

// takeLegacy takes the older gnsh's lock, if its file is there, writing
// holder into it (an older gnsh names whom it waits for); it returns the
// file held (nil if none), or the older gnsh holding it.
func takeLegacy(dir string, holder []byte) (*os.File, *Holder) {
	path := filepath.Join(dir, legacyDrainLock)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil // none (the usual case), or not a file to trust
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, nil
	}
	for try := 0; ; try++ {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			if f.Truncate(0) == nil {
				_, _ = f.WriteAt(append(holder, '\n'), 0)
			}
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			break
		}
		if h := readHolder(f); h != nil && h.PID > 0 && alive(h.PID) {
			f.Close()
			return nil, h
		}
		if try == 10 {
			break
		}
		time.Sleep(10 * time.Millisecond) // an older holder writing or emptying it
	}
	f.Close()
	return nil, nil
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func readHolder(f *os.File) *Holder {
	b := make([]byte, 4096)
	n, _ := f.ReadAt(b, 0)
	var h Holder
	if json.Unmarshal([]byte(strings.TrimSpace(string(b[:n]))), &h) != nil {
		return nil
	}
	return &h
}

// Release empties the file and drops the lock.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	if l.legacy != nil {
		_ = l.legacy.Truncate(0)
		_ = l.legacy.Close()
		l.legacy = nil
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close()
	l.f = nil
}
