// Package rig runs shutdown commands where they cannot hurt: in new PID and
// mount namespaces (unshare --pid --mount) with a private /run, so that
// reboot(2) only ends that namespace and no file of the host's /run is
// touched. It is shared by the integration and oracle tests. Start and
// Proc.Signal let a test signal a command while it runs; Spec.RunDir lets
// several commands share one /run.
package rig

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	Code   int    // exit status; 128+N when signal N ended the namespace (129/130 for reboot(2))
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
	// RunDir, if set, is bind-mounted at /run instead of a fresh tmpfs, so
	// that several commands share one /run (e.g. /run/gnsh/drain.flock).
	RunDir string
	// Hide lists directories (without spaces) to cover with an empty tmpfs
	// where they exist, e.g. /etc/kubernetes, so the command cannot see
	// the host's files there.
	Hide []string
	// BootID, if set, is what /proc/sys/kernel/random/boot_id reads in
	// the namespace: a command of "the next boot".
	BootID string
	// TTY, if set, is the command's stdin, stdout and stderr (a
	// pseudo-terminal's follower; the test reads its master): Result's
	// Stdout and Stderr stay empty.
	TTY *os.File
}

// script runs "$@" as a child of a PID-1 shell with a private /run (or
// GNSH_RIG_RUN bound there), hides GNSH_RIG_HIDE, marks
// the system as booted with systemd (/run/systemd/system) and copies the
// reboot parameter file out.
const script = `[ $$ = 1 ] || exit 99
R=${GNSH_RIG_ROOT:-}
if [ -n "$GNSH_RIG_RUN" ]; then mount --bind "$GNSH_RIG_RUN" "$R/run"; else mount -t tmpfs tmpfs "$R/run"; fi &&
  mkdir -p "$R/run/systemd/system" || exit 98
if [ -n "$R" ]; then
  mount -t proc proc "$R/proc" || exit 98
  if [ -n "$GNSH_RIG_LOCALBIN" ]; then mount --bind "$GNSH_RIG_LOCALBIN" "$R/usr/local/sbin" || exit 98; fi
  if [ -n "$GNSH_RIG_BUS" ]; then mkdir -p "$R/run/gnsh-bus" && mount --bind "$GNSH_RIG_BUS" "$R/run/gnsh-bus" || exit 98; fi
fi
if [ -n "$GNSH_RIG_BOOTID" ]; then
  printf '%s\n' "$GNSH_RIG_BOOTID" > "$R/run/.rig-boot_id" && mount --bind "$R/run/.rig-boot_id" "$R/proc/sys/kernel/random/boot_id" || exit 98
fi
for d in $GNSH_RIG_HIDE; do
  if [ -d "$R$d" ]; then mount -t tmpfs tmpfs "$R$d" || exit 98; fi
done
[ -n "$GNSH_RIG_PARAM" ] && printf '%s\n' "$GNSH_RIG_PARAM" > "$R/run/systemd/reboot-param"
if [ -n "$R" ]; then chroot "$R" "$@"; else "$@"; fi
rc=$?
if [ -e "$R/run/systemd/reboot-param" ]; then cat "$R/run/systemd/reboot-param" > "$GNSH_RIG_OUT"; else echo '<none>' > "$GNSH_RIG_OUT"; fi
exit $rc`

// Run runs spec and waits at most a minute.
func Run(t testing.TB, spec Spec) Result {
	t.Helper()
	return Start(t, spec).Wait()
}

// Proc is a command started with Start.
type Proc struct {
	t      testing.TB
	spec   Spec
	cmd    *exec.Cmd
	out    string
	so, se bytes.Buffer
	start  time.Time
	done   chan struct{} // closed when the command has exited
	err    error         // cmd.Wait's, once done is closed

	once sync.Once
	res  Result
}

// Start starts spec in its namespaces and returns at once; Wait collects
// the result. The command is given a minute from Start.
func Start(t testing.TB, spec Spec) *Proc {
	t.Helper()
	p := &Proc{t: t, spec: spec, out: filepath.Join(t.TempDir(), "param"), done: make(chan struct{})}
	args := append([]string{"--mount", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", script, "sh"}, spec.Argv...)
	p.cmd = exec.Command("unshare", args...)
	path := "/usr/sbin:/usr/bin:/sbin:/bin"
	if spec.PathDir != "" {
		path = spec.PathDir + ":" + path
	}
	if spec.LocalBin != "" {
		path = "/usr/local/sbin:" + path
	}
	p.cmd.Env = append([]string{"PATH=" + path, "GNSH_RIG_OUT=" + p.out, "GNSH_RIG_ROOT=" + spec.Root,
		"GNSH_RIG_BUS=" + spec.BusDir, "GNSH_RIG_PARAM=" + spec.Param, "GNSH_RIG_LOCALBIN=" + spec.LocalBin,
		"GNSH_RIG_RUN=" + spec.RunDir, "GNSH_RIG_HIDE=" + strings.Join(spec.Hide, " "), "GNSH_RIG_BOOTID=" + spec.BootID, "TZ=UTC"}, spec.Env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.so, &p.se
	if spec.TTY != nil {
		p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = spec.TTY, spec.TTY, spec.TTY
	}
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default: // never waited for: --kill-child takes the namespace down
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Signal sends sig to the command (spec.Argv) inside the namespace, as a
// terminal or a service manager would, waiting up to five seconds for it
// to have started.
func (p *Proc) Signal(sig syscall.Signal) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if pid := p.commandPID(); pid > 0 {
			return syscall.Kill(pid, sig)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%q: no such process in the namespace", p.spec.Argv)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// commandPID finds the command: the child of the namespace's init (the
// child of unshare) whose argv[0] is spec.Argv[0]; 0 if there is none.
func (p *Proc) commandPID() int {
	for _, init := range children(p.cmd.Process.Pid) {
		for _, c := range children(init) {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
			if err != nil {
				continue
			}
			if argv0, _, _ := strings.Cut(string(b), "\x00"); argv0 == p.spec.Argv[0] {
				return c
			}
		}
	}
	return 0
}

// children lists the processes whose parent is pid, from /proc/*/stat.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 {
				if pp, _ := strconv.Atoi(f[1]); pp == pid {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// Wait waits for the command, at most a minute after Start, and returns
// its result. It may be called more than once.
// Done is closed when the command has ended; Wait then returns at once.
func (p *Proc) Done() <-chan struct{} { return p.done }

func (p *Proc) Wait() Result {
	p.t.Helper()
	p.once.Do(func() { p.res = p.wait() })
	return p.res
}

func (p *Proc) wait() Result {
	t := p.t
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Until(p.start.Add(time.Minute))):
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done: // what it said, for the failure
			t.Fatalf("%q did not finish within a minute; it said:\n%s", p.spec.Argv, p.se.String())
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("%q did not finish within a minute", p.spec.Argv)
	}
	err := p.err
	r := Result{Stdout: p.so.String(), Stderr: p.se.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.Code = ee.ExitCode()
		// Only reboot(2) kills the namespace's init; unshare then dies of
		// the same signal. A command's own exit status 129 or 130 is not
		// a reboot.
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Code = 128 + int(ws.Signal())
			switch ws.Signal() {
			case syscall.SIGHUP:
				r.Kernel = "restart"
			case syscall.SIGINT:
				r.Kernel = "halt/poweroff"
			}
		}
	} else if err != nil {
		t.Fatal(err)
	}
	if r.Code == 98 || r.Code == 99 {
		t.Fatalf("namespace setup failed (%d): %s", r.Code, r.Stderr)
	}
	if b, err := os.ReadFile(p.out); err == nil {
		r.Param = strings.TrimSuffix(string(b), "\n")
	}
	return r
}
