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

// Lock is a held drain lock: an flock(2) on DIR/drain.lock, released when
// the process exits, however it exits.
type Lock struct{ f *os.File }

// Acquire takes the lock without waiting. The directory is created 0755
// and must not be a symlink; the file is opened without following
// symlinks and created 0644.
func Acquire(dir string, h Holder) (*Lock, error) {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("lock: %s is not a directory", dir)
	}
	path := filepath.Join(dir, "drain.lock")
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &HeldError{Holder: readHolder(f)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
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
