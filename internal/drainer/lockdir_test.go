package drainer

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// asNobody starts flock(1) as user nobody on path: a shared lock, held
// until the test ends. It reports whether nobody got the lock, with what
// flock said.
func asNobody(t *testing.T, path string) (bool, string) {
	t.Helper()
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"flock", "--shared", "--nonblock", path, "-c", "echo held; exec cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) == "held" {
		return true, ""
	}
	stdin.Close()
	_ = cmd.Wait()
	return false, strings.TrimSpace(stderr.String())
}

func needNobody(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (setpriv to user nobody)")
	}
	for _, c := range []string{"setpriv", "flock"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s not installed", c)
		}
	}
}

// openDir is a directory every user may enter, so that only the lock
// directory's own mode keeps them out.
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir's parent is made 0700 too.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// No unprivileged process may take or hold a gnsh lock: flock(2) works on
// a read-only descriptor, so one that could open drain.flock or agent.flock
// could refuse root's reboot and keep the agent from starting.
func TestLocksAreRootsAlone(t *testing.T) {
	needNobody(t)
	dir := filepath.Join(openDir(t), "gnsh")
	l, err := Acquire(dir, Holder{PID: os.Getpid(), Action: "reboot"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	a, err := HoldAgentLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	d := &Drainer{LockDir: dir, BootID: "b"}
	if err := d.writeMarker("reboot", nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(dir); err != nil || fi.Mode() != os.ModeDir|0o700 {
		t.Fatalf("%s: %v, %v; want drwx------", dir, fi, err)
	}
	for _, name := range []string{DrainLockName, AgentLockName, MarkerName} {
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || fi.Mode() != 0o600 {
			t.Errorf("%s: %v, %v; want -rw-------", name, fi, err)
		}
		if held, why := asNobody(t, filepath.Join(dir, name)); held {
			t.Errorf("user nobody holds a lock on %s", name)
		} else if !strings.Contains(why, "Permission denied") {
			t.Errorf("nobody on %s: %q, want Permission denied", name, why)
		}
	}
}

// An older gnsh left /run/gnsh 0755 with its locks drain.lock and
// agent.lock 0644, and user nobody opened both and holds a shared lock on
// each. Root's drain and the agent still get their locks (named anew), the
// directory is narrowed to 0700, and nobody can open nothing in it again.
func TestLocksTakenBackFromAnOlderLayout(t *testing.T) {
	needNobody(t)
	dir := filepath.Join(openDir(t), "gnsh")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"drain.lock", "agent.lock"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if held, why := asNobody(t, filepath.Join(dir, name)); !held {
			t.Fatalf("setting up: nobody could not lock the 0644 %s: %s", name, why)
		}
	}
	l, err := Acquire(dir, Holder{PID: os.Getpid(), Action: "reboot", User: "root"})
	if err != nil {
		t.Fatalf("root's drain lock while nobody holds the old one: %v", err)
	}
	defer l.Release()
	a, err := HoldAgentLock(dir)
	if err != nil {
		t.Fatalf("the agent's lock while nobody holds the old one: %v", err)
	}
	defer a.Release()
	if fi, err := os.Lstat(dir); err != nil || fi.Mode() != os.ModeDir|0o700 {
		t.Fatalf("%s: %v, %v; want drwx------", dir, fi, err)
	}
	for _, name := range []string{DrainLockName, AgentLockName, "drain.lock"} {
		if held, _ := asNobody(t, filepath.Join(dir, name)); held {
			t.Errorf("user nobody holds a lock on %s", name)
		}
	}
	// The locks are real: a second taker is refused.
	if _, err := Acquire(dir, Holder{PID: 1}); !errors.As(err, new(*HeldError)) {
		t.Errorf("second drain lock: %v, want *HeldError", err)
	}
	if _, err := HoldAgentLock(dir); !errors.As(err, new(*AgentRunningError)) {
		t.Errorf("second agent: %v, want *AgentRunningError", err)
	}
}

// A lock file of root's that somehow has a wider mode is narrowed.
func TestLockFileNarrowed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gnsh")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DrainLockName), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, DrainLockName), 0o666); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(dir, Holder{PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if fi, err := os.Lstat(filepath.Join(dir, DrainLockName)); err != nil || fi.Mode() != 0o600 {
		t.Fatalf("%v, %v; want -rw-------", fi, err)
	}
}

// A lock directory that belongs to someone else is refused, not used.
func TestLockDirOfAnotherUser(t *testing.T) {
	needNobody(t)
	dir := filepath.Join(openDir(t), "gnsh")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := Acquire(dir, Holder{PID: 1})
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("Acquire in nobody's directory: %v", err)
	}
	if _, err := HoldAgentLock(dir); err == nil {
		t.Fatal("agent lock in nobody's directory")
	}
}
