package install

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gnsh/gnsh/internal/nodefacts"
)

// target is the file system gnsh installs into: "/" or a mounted image
// (--root). Paths handed to its methods are absolute inside the target.
// Every directory on the way is resolved inside the target (an absolute
// link such as /sbin -> /usr/sbin starts again at the root, never on the
// host), while the last component is never followed: links are made,
// renamed and removed themselves, and files are created with O_NOFOLLOW.
// Each change to a directory's entries is followed by an fsync of that
// directory, so that it is on disk before the next one is made.
type target struct {
	root string
	// changed, in tests, is called after each change to the tree (and
	// between making a new file under its temporary name and renaming it).
	changed func(what string)
}

func (t target) done(what string) {
	if t.changed != nil {
		t.changed(what)
	}
}

// syncDir makes the changes to the entries of the host directory d durable.
func syncDir(d string) error {
	f, err := os.OpenFile(d, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", d, err)
	}
	return nil
}

// sameFile says whether a and b are names of the same inode (a link made
// by link, not yet replaced).
func (t target) sameFile(a, b string) bool {
	fa, err := t.lstat(a)
	if err != nil {
		return false
	}
	fb, err := t.lstat(b)
	return err == nil && os.SameFile(fa, fb)
}

// host returns the host path of p.
func (t target) host(p string) (string, error) {
	dir, err := nodefacts.ResolveIn(t.root, filepath.Dir(p))
	if err != nil {
		return "", err
	}
	return filepath.Join(t.root, dir, filepath.Base(p)), nil
}

func (t target) lstat(p string) (fs.FileInfo, error) {
	h, err := t.host(p)
	if err != nil {
		return nil, err
	}
	return os.Lstat(h)
}

func (t target) exists(p string) bool {
	_, err := t.lstat(p)
	return err == nil
}

// readlink returns the target of the link p ("" and no error when p is
// not a link).
func (t target) readlink(p string) (string, error) {
	fi, err := t.lstat(p)
	if err != nil {
		return "", err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return "", nil
	}
	h, err := t.host(p)
	if err != nil {
		return "", err
	}
	return os.Readlink(h)
}

// readFile reads p, refusing to follow a link in its last component.
func (t target) readFile(p string) ([]byte, error) {
	h, err := t.host(p)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(h, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// tmpName is the name beside p that a new p is made under before it is
// renamed into place.
func tmpName(p string) string { return p + ".gnsh-new" }

func (t target) removeTmp(h string) error {
	if err := os.Remove(h); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// symlink makes p a link to dest, atomically: the link is made beside p
// and renamed over it, so p never disappears.
func (t target) symlink(dest, p string) error {
	h, err := t.host(p)
	if err != nil {
		return err
	}
	return t.replace(h, func(tmp string) error { return os.Symlink(dest, tmp) })
}

// replace makes the host path h anew, atomically: create makes it under a
// temporary name beside h (and removes what it made if it fails), which
// is then renamed over h.
func (t target) replace(h string, create func(tmp string) error) error {
	tmp := tmpName(h)
	if err := t.removeTmp(tmp); err != nil {
		return err
	}
	if err := create(tmp); err != nil {
		return err
	}
	t.done("made " + tmp)
	if err := os.Rename(tmp, h); err != nil {
		os.Remove(tmp)
		return err
	}
	return t.synced(h)
}

// synced follows a change of the host path h: its directory is synced.
func (t target) synced(h string) error {
	if err := syncDir(filepath.Dir(h)); err != nil {
		return err
	}
	t.done(h)
	return nil
}

// link makes newp another name of oldp's inode (a link is linked itself,
// not followed), replacing newp atomically: the same file, mode, owner or
// link target. Nothing to do when newp is that name already (a rename
// between two names of one file would leave both).
func (t target) link(oldp, newp string) error {
	if t.sameFile(oldp, newp) {
		return nil
	}
	ho, err := t.host(oldp)
	if err != nil {
		return err
	}
	hn, err := t.host(newp)
	if err != nil {
		return err
	}
	return t.replace(hn, func(tmp string) error { return os.Link(ho, tmp) })
}

// rename renames oldp to newp, replacing newp atomically.
func (t target) rename(oldp, newp string) error {
	ho, err := t.host(oldp)
	if err != nil {
		return err
	}
	hn, err := t.host(newp)
	if err != nil {
		return err
	}
	if err := os.Rename(ho, hn); err != nil {
		return err
	}
	if filepath.Dir(ho) != filepath.Dir(hn) {
		if err := syncDir(filepath.Dir(ho)); err != nil {
			return err
		}
	}
	return t.synced(hn)
}

// restore puts the original kept at saved back at p: renamed over p, or,
// when saved is still the same file as p (kept, p not yet replaced),
// removed (a rename between two names of one file does nothing).
func (t target) restore(saved, p string) error {
	if t.sameFile(saved, p) {
		return t.remove(saved)
	}
	return t.rename(saved, p)
}

func (t target) remove(p string) error {
	h, err := t.host(p)
	if err != nil {
		return err
	}
	if err := os.Remove(h); err != nil {
		return err
	}
	return t.synced(h)
}

// writeFile writes data to p with mode perm: a new file (O_EXCL,
// O_NOFOLLOW) beside p, synced, then renamed over p.
func (t target) writeFile(p string, data []byte, perm fs.FileMode) error {
	h, err := t.host(p)
	if err != nil {
		return err
	}
	return t.replace(h, func(tmp string) error {
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Chmod(perm) // whatever the umask
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(tmp)
		}
		return err
	})
}

// missingDirs returns the directories of p, outermost first, that do
// not exist yet.
func (t target) missingDirs(p string) []string {
	var dirs []string
	for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := t.lstat(d); err == nil {
			break
		}
		dirs = append([]string{d}, dirs...)
	}
	return dirs
}

func (t target) mkdir(p string) error {
	h, err := t.host(p)
	if err != nil {
		return err
	}
	if err := os.Mkdir(h, 0o755); err != nil {
		return err
	}
	return t.synced(h)
}

// isGnshLink says whether p is a link to a file named gnsh (this or
// another installed gnsh).
func (t target) isGnshLink(p string) bool {
	l, err := t.readlink(p)
	return err == nil && l != "" && filepath.Base(l) == "gnsh"
}

func describe(t target, p string) string {
	fi, err := t.lstat(p)
	switch {
	case err != nil:
		return "missing"
	case fi.Mode()&fs.ModeSymlink != 0:
		l, _ := t.readlink(p)
		return "a link to " + l
	case fi.Mode().IsRegular():
		return "a file"
	}
	return strings.TrimSpace(fmt.Sprintf("a %v", fi.Mode().Type()))
}
