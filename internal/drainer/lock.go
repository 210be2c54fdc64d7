package drainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultLockDir holds the lock that allows one drain per node at a time.
const DefaultLockDir = "/run/gnsh"

// DrainLockName is the drain lock's file in the lock directory.
const DrainLockName = "drain.flock"

// Holder is who holds the drain lock; it is written into the lock file so
// that a second invocation can say who is draining.
type Holder struct {
	PID    int       `json:"pid"`
	Action string    `json:"action"`
	User   string    `json:"user"`
	TTY    string    `json:"tty,omitempty"`
	Node   string    `json:"node"`
	Since  time.Time `json:"since"`
}

func (h Holder) String() string {
	s := fmt.Sprintf("pid %d, %s by %s", h.PID, h.Action, h.User)
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

// Lock is a held drain lock: an flock(2) on DIR/drain.flock, released when
// the process exits, however it exits.
type Lock struct{ f *os.File }

// Acquire takes the lock without waiting. The directory is root's alone
// (0700) and the file 0600, neither reached through a symlink (lockdir.go).
func Acquire(dir string, h Holder) (*Lock, error) {
	f, err := lockFile(dir, DrainLockName, unix.LOCK_EX)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		defer f.Close()
		return nil, &HeldError{Holder: readHolder(f)}
	}
	if err != nil {
		return nil, &lockError{err}
	}
	b, _ := json.Marshal(h)
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(b, '\n'), 0)
	}
	return &Lock{f: f}, nil
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
	_ = l.f.Truncate(0)
	_ = l.f.Close()
	l.f = nil
}
