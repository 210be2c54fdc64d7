// Package rig runs shutdown commands where they cannot hurt: in new PID and
// mount namespaces (unshare --pid --mount) with a private /run, so that
// reboot(2) only ends that namespace and no file of the host's /run is
// touched. It is shared by the integration and oracle tests.
package rig

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Need skips t unless this process can build the namespaces and the tools
// are there; with GNSH_REQUIRE_RIGS=1 (make test) it fails instead.
func Need(t testing.TB, tools ...string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, c := range append([]string{"unshare", "mount"}, tools...) {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
		t.Fatalf("test rig needs %s (GNSH_REQUIRE_RIGS=1)", strings.Join(missing, ", "))
	}
	t.Skipf("test rig needs %s", strings.Join(missing, ", "))
}

// Result is the outcome of one command.
type Result struct {
	Code   int    // exit status; 129/130 when reboot(2) ended the namespace
	Kernel string // "restart" (SIGHUP) or "halt/poweroff" (SIGINT) if reboot(2) ended the namespace
	Stdout string
	Stderr string
	Param  string // /run/systemd/reboot-param afterwards; "<none>" if absent, "" if unknown
}

// Spec says how to run a command.
type Spec struct {
	// Root, if set, is a root file system to chroot into (its /run and
	// /proc are mounted privately; the tree itself is not written to).
	Root string
	// PathDir is put first on PATH, so argv[0] can be a bare name.
	PathDir string
	// BusDir is bind-mounted at /run/gnsh-bus inside Root.
	BusDir string
	// LocalBin is bind-mounted over /usr/local/sbin inside Root, which then
	// comes first on PATH.
	LocalBin string
	Env      []string
	Argv     []string
	// Param, if set, is written to /run/systemd/reboot-param first.
	Param string
}

// script runs "$@" as a child of a PID-1 shell with a private /run, marks
// the system as booted with systemd (/run/systemd/system) and copies the
// reboot parameter file out.
const script = `[ $$ = 1 ] || exit 99
R=${GNSH_RIG_ROOT:-}
mount -t tmpfs tmpfs "$R/run" && mkdir -p "$R/run/systemd/system" || exit 98
if [ -n "$R" ]; then
  mount -t proc proc "$R/proc" || exit 98
  if [ -n "$GNSH_RIG_LOCALBIN" ]; then mount --bind "$GNSH_RIG_LOCALBIN" "$R/usr/local/sbin" || exit 98; fi
  if [ -n "$GNSH_RIG_BUS" ]; then mkdir -p "$R/run/gnsh-bus" && mount --bind "$GNSH_RIG_BUS" "$R/run/gnsh-bus" || exit 98; fi
fi
[ -n "$GNSH_RIG_PARAM" ] && printf '%s\n' "$GNSH_RIG_PARAM" > "$R/run/systemd/reboot-param"
if [ -n "$R" ]; then chroot "$R" "$@"; else "$@"; fi
rc=$?
if [ -e "$R/run/systemd/reboot-param" ]; then cat "$R/run/systemd/reboot-param" > "$GNSH_RIG_OUT"; else echo '<none>' > "$GNSH_RIG_OUT"; fi
exit $rc`

// Run runs spec and waits at most a minute.
func Run(t testing.TB, spec Spec) Result {
	t.Helper()
	out := filepath.Join(t.TempDir(), "param")
	args := append([]string{"--mount", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", script, "sh"}, spec.Argv...)
	cmd := exec.Command("unshare", args...)
	path := "/usr/sbin:/usr/bin:/sbin:/bin"
	if spec.PathDir != "" {
		path = spec.PathDir + ":" + path
	}
	if spec.LocalBin != "" {
		path = "/usr/local/sbin:" + path
	}
	cmd.Env = append([]string{"PATH=" + path, "GNSH_RIG_OUT=" + out, "GNSH_RIG_ROOT=" + spec.Root,
		"GNSH_RIG_BUS=" + spec.BusDir, "GNSH_RIG_PARAM=" + spec.Param, "GNSH_RIG_LOCALBIN=" + spec.LocalBin, "TZ=UTC"}, spec.Env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("%q did not finish within a minute", spec.Argv)
	}
	r := Result{Stdout: so.String(), Stderr: se.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		t.Fatal(err)
	}
	switch r.Code {
	case 98, 99:
		t.Fatalf("namespace setup failed (%d): %s", r.Code, r.Stderr)
	case 128 + int(syscall.SIGHUP):
		r.Kernel = "restart"
	case 128 + int(syscall.SIGINT):
		r.Kernel = "halt/poweroff"
	}
	if b, err := os.ReadFile(out); err == nil {
		r.Param = strings.TrimSuffix(string(b), "\n")
	}
	return r
}
