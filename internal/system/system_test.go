package system

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func newHost(t *testing.T) (*Host, string) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "run/systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Host{Root: root, Getenv: func(string) string { return "" }}, root
}

func TestRebootParam(t *testing.T) {
	h, root := newHost(t)
	old := syscall.Umask(0o077) // systemd writes 0644 whatever the umask
	defer syscall.Umask(old)
	if err := h.WriteRebootParam("recovery"); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "run/systemd/reboot-param")
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "recovery\n" {
		t.Fatalf("content %q, %v", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644", fi.Mode().Perm())
	}
	if got := h.RebootParam(); got != "recovery" {
		t.Fatalf("RebootParam = %q", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "run/systemd")); len(ents) != 1 {
		t.Fatalf("temporary files left behind: %v", ents)
	}
	if err := h.UnlinkRebootParam(); err != nil {
		t.Fatal(err)
	}
	if err := h.UnlinkRebootParam(); err != nil {
		t.Fatalf("unlinking a missing file must succeed: %v", err)
	}
	if h.RebootParam() != "" {
		t.Fatal("parameter still there")
	}
}

func TestRebootParamReplacesSymlinkWithoutFollowingIt(t *testing.T) {
	h, root := newHost(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "run/systemd/reboot-param")
	if err := os.Symlink(victim, p); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteRebootParam("x"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep\n" {
		t.Fatalf("symlink target written: %q", b)
	}
	if fi, _ := os.Lstat(p); fi.Mode()&os.ModeSymlink != 0 {
		t.Fatal("still a symlink")
	}
}

func TestRebootParamErrorIsErrno(t *testing.T) {
	h := &Host{Root: t.TempDir()} // no run/systemd directory
	err := h.WriteRebootParam("x")
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("err = %v, want ENOENT (printed as %%m)", err)
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) || err.Error() != "no such file or directory" {
		t.Fatalf("err %q is not a bare errno", err)
	}
}

func utmpRecord(typ int16, pid int32) []byte {
	b := make([]byte, 384)
	binary.LittleEndian.PutUint16(b, uint16(typ))
	binary.LittleEndian.PutUint32(b[4:], uint32(pid))
	return b
}

func TestRunlevel(t *testing.T) {
	h, root := newHost(t)
	if _, ok := h.Runlevel(); ok {
		t.Fatal("no utmp: no runlevel")
	}
	utmp := append(utmpRecord(2, 0), utmpRecord(1, int32('N')<<8|'6')...) // BOOT_TIME, then RUN_LVL 6
	if err := os.WriteFile(filepath.Join(root, "run/utmp"), utmp, 0o644); err != nil {
		t.Fatal(err)
	}
	if rl, ok := h.Runlevel(); !ok || rl != '6' {
		t.Fatalf("runlevel %q %v", rl, ok)
	}
	h.Getenv = func(k string) string { return map[string]string{"RUNLEVEL": "3"}[k] }
	if rl, ok := h.Runlevel(); !ok || rl != '3' {
		t.Fatalf("$RUNLEVEL takes precedence: %q %v", rl, ok)
	}
}

func TestSessionsAndFlags(t *testing.T) {
	h, root := newHost(t)
	dir := filepath.Join(root, "run/systemd/sessions")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "3"), []byte("# comment\nUID=1001\nUSER=ann\nCLASS=user\nTYPE=tty\nTTY=pts/2\n"), 0o644)
	os.WriteFile(filepath.Join(dir, ".hidden"), []byte("UID=1\n"), 0o644)
	syscall.Mkfifo(filepath.Join(dir, "3.ref"), 0o600)
	s := h.Sessions()
	if len(s) != 1 || s[0].UID != 1001 || s[0].Class != "user" || s[0].Type != "tty" || s[0].TTY != "pts/2" {
		t.Fatalf("sessions %+v", s)
	}
	os.MkdirAll(filepath.Join(root, "sys/kernel"), 0o755)
	os.WriteFile(filepath.Join(root, "sys/kernel/kexec_loaded"), []byte("1\n"), 0o644)
	if !h.KexecLoaded() {
		t.Fatal("kexec_loaded 1")
	}
	os.WriteFile(filepath.Join(root, "run/systemd/container"), []byte("systemd-nspawn\n"), 0o644)
	if !h.InContainer() {
		t.Fatal("container file")
	}
	if h.UserName(0) != "root" || h.UserName(4000000) != "4000000" {
		t.Fatalf("UserName: %q %q", h.UserName(0), h.UserName(4000000))
	}
}

func TestInChroot(t *testing.T) {
	h := &Host{Getenv: func(string) string { return "" }}
	if h.InChroot() {
		t.Skip("this test process itself runs in a chroot")
	}
	h.Getenv = func(k string) string { return map[string]string{"SYSTEMD_IGNORE_CHROOT": "1"}[k] }
	if h.InChroot() {
		t.Fatal("SYSTEMD_IGNORE_CHROOT=1 must turn the check off")
	}
}
