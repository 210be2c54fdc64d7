package drainer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// The lock directory (/run/gnsh) and every file in it are root's alone:
// flock(2) works on a descriptor opened read-only, so any process that can
// open a lock file can hold it, and with it refuse root's reboot or keep
// the agent from starting. The directory is 0700, the files 0600, and
// nothing in it is reached through a symlink. The lock files are named
// anew (*.flock): an older gnsh made drain.lock and agent.lock 0644 in a
// 0755 /run/gnsh, and a descriptor some user opened on those then still
// holds them; gnsh no longer uses them.
const (
	lockDirMode  = 0o700
	lockFileMode = 0o600
)

// ensureLockDir makes dir (0700) if there is none. An existing directory
// must be this user's and not a symlink; one that others may enter (an
// older gnsh made it 0755) is narrowed to 0700.
func ensureLockDir(dir string) error {
	if err := os.Mkdir(dir, lockDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("%s is not a directory (a symlink?): remove it", dir)
		}
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if int(st.Uid) != os.Geteuid() {
		return &os.PathError{Op: "use", Path: dir, Err: fmt.Errorf("owned by uid %d, not %d: %w", st.Uid, os.Geteuid(), fs.ErrPermission)}
	}
	if st.Mode&0o7777 != lockDirMode {
		if err := unix.Fchmod(fd, lockDirMode); err != nil {
			return &os.PathError{Op: "chmod", Path: dir, Err: err}
		}
	}
	return nil
}

// private reports whether st is a regular file of this user's that no
// one else may open.
func private(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && int(st.Uid) == os.Geteuid() && st.Mode&0o077 == 0
}

// lockFile opens dir/name (made 0600 if missing, never through a
// symlink) and takes flock(how|LOCK_NB) on it. A file of this user's with
// a wider mode is narrowed to 0600 (the directory is root's alone, so no
// one else can have opened it); any other file there is refused, naming
// it.
//
// When another process holds the lock, lockFile returns the file, still
// open, with an error wrapping EWOULDBLOCK: the caller reads who holds it
// and closes it.
func lockFile(dir, name string, how int) (*os.File, error) {
	if err := ensureLockDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, lockFileMode)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s is a symlink: remove it", path)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if !private(&st) {
		if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
			f.Close()
			return nil, fmt.Errorf("%s is not a regular file of uid %d (mode %o, uid %d): remove it", path, os.Geteuid(), st.Mode, st.Uid)
		}
		if err := unix.Fchmod(fd, lockFileMode); err != nil {
			f.Close()
			return nil, &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	for {
		err = unix.Flock(fd, how|unix.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return f, &os.PathError{Op: "flock", Path: path, Err: err}
	case err != nil:
		f.Close()
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	return f, nil
}

// openRunFile opens dir/name read-only, never through a symlink, without
// creating anything.
func openRunFile(dir, name string) (*os.File, error) {
	path := filepath.Join(dir, name)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
