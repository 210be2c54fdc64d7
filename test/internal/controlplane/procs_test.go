package controlplane

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// procs runs script in sh with test/k8s/procs.sh sourced, R and D set to
// dir, and returns what it printed.
func procs(t *testing.T, dir, script string) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	lib := filepath.Join(filepath.Dir(self), "..", "..", "k8s", "procs.sh")
	cmd := exec.Command("sh", "-euc", `. "$1"; `+script, "sh", lib)
	cmd.Env = append(os.Environ(), "R="+dir, "D="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// A process is the control plane's by its recorded PID and start time, not
// by its argv: during execve(2) /proc/PID/cmdline reads empty for a moment,
// and a starting kube-controller-manager was taken for a dead one (make
// demo failed on a fresh machine). perl's `$0 = ""` blanks the cmdline for
// good, standing in for that moment.
func TestProcessIdentity(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("perl not installed")
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	procs(t, dir, `spawn blank perl -e '$0 = ""; sleep 60'`)
	pid := strings.TrimSpace(readFile(t, filepath.Join(dir, "blank.pid")))
	t.Cleanup(func() { _ = exec.Command("kill", "-KILL", pid).Run() })
	// Wait until perl has blanked its cmdline: then it reads like nothing.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + pid + "/cmdline")
		if err == nil && strings.Trim(string(b), "\x00") == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %s: cmdline %q, not blanked within 10 s", pid, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := procs(t, dir, `if ours blank; then echo yes; else echo no; fi`); got != "yes" {
		t.Fatalf("a live process spawned as blank, with an empty cmdline: ours says %q, want yes", got)
	}
	// The same PID with another start time (a reused PID) is not ours.
	if err := os.WriteFile(filepath.Join(dir, "blank.start"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := procs(t, dir, `if ours blank; then echo yes; else echo no; fi`); got != "no" {
		t.Fatalf("pid %s with another start time: ours says %q, want no", pid, got)
	}
	// Ended (killed, reaped by init once its parent sh is gone): not ours.
	procs(t, dir, `record blank `+pid+`; kill -KILL `+pid)
	deadline = time.Now().Add(10 * time.Second)
	for procs(t, dir, `if ours blank; then echo yes; else echo no; fi`) != "no" {
		if time.Now().After(deadline) {
			t.Fatalf("pid %s killed: still ours after 10 s", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
