package nodefacts

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The probe against a real flock: absent, free, held exclusively by
// another open file (as the agent holds it), free again once released;
// a shared lock held by someone else is not the agent's.
func TestProbeAgentLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.flock")
	probe := func(want string) {
		t.Helper()
		got, err := ProbeAgentLock(p)
		if got != want || err != nil {
			t.Fatalf("ProbeAgentLock = %q, %v; want %q", got, err, want)
		}
	}
	probe(LockAbsent)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	probe(LockFree)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	probe(LockHeld)
	probe(LockHeld) // the probe changed nothing
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	probe(LockFree)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	probe(LockFree)
	// The probe's own shared lock is gone: an exclusive one can be had.
	g, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if err := syscall.Flock(int(g.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("the probe left a lock behind: %v", err)
	}
}

func TestProbeAgentLockUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		// root opens any file: make the path a directory's child that
		// is not a directory instead.
		p := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ProbeAgentLock(filepath.Join(p, "agent.flock"))
		if got != "" || err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Fatalf("%q %v", got, err)
		}
		return
	}
	p := filepath.Join(t.TempDir(), "agent.flock")
	if err := os.WriteFile(p, nil, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := ProbeAgentLock(p); got != "" || err == nil {
		t.Fatalf("%q %v", got, err)
	}
}

// Gather probes the lock below Root and reads the agent as running from
// it when systemd cannot be asked.
func TestGatherAgentLock(t *testing.T) {
	root := tree(t, map[string]string{AgentLockPath: ""})
	f, err := os.Open(filepath.Join(root, AgentLockPath))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	s := &Sources{Root: root, Self: "/nonexistent", Getenv: envOf(map[string]string{"DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent"})}
	r := Gather(testCtx(t), s)
	if a := r.Agent; a.ActiveState != "unknown" || a.Lock != LockHeld || !a.Running || a.LockPath != AgentLockPath {
		t.Fatalf("agent %+v", a)
	}
	if c := CheckAgent(r); c.Verdict != Warn || !strings.Contains(c.Message, "cannot list logind's inhibitors") {
		t.Errorf("%+v", c)
	}
}
