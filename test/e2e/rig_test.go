//go:build e2e

// Package e2e boots real systemd + systemd-logind + D-Bus in systemd-nspawn
// containers (Debian bullseye = systemd 247, bookworm = systemd 252), installs
// gnsh over reboot/poweroff/halt/shutdown inside them and checks that
// shutdown delay inhibitors are honoured. See README.md. Needs root.
package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Tunables (environment):
//
//	GNSH_BIN               gnsh binary (default ../../bin/gnsh)
//	GNSH_CACHE             rootfs cache root, passed to rootfs.sh (default /var/cache/gnsh)
//	GNSH_E2E_RESULTS       keep per-case artefacts here (default: a fresh temp dir,
//	                       removed when everything passed unless GNSH_E2E_KEEP=1)
//	GNSH_E2E_PARALLEL      containers in the fast lane at a time (default 2)
//	GNSH_E2E_SLOW_PARALLEL containers in the slow (mostly sleeping) lane (default 2)
//	GNSH_E2E_SUITES        comma list (default bullseye,bookworm)
//	GNSH_E2E_VIA_UNIT=1    run the case commands inside a transient unit
//	                       (systemd-run --wait --pipe) instead of directly via nsenter
//	GNSH_E2E_USE_STOCK=1   rig debugging only: run the gnsh cases with the stock
//	                       systemd commands (no gnsh installed); bullseye cases then fail
//	GNSH_E2E_AGENT_PARALLEL   TestAgentE2E's fast lane (default 3)
const (
	delaySec   = 3 // InhibitDelayMaxSec= bound into every container
	inhibitWho = "gnsh-e2e"
	monLog     = "mon.log" // in the per-case rig dir, /rig inside
	innerPath  = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

var (
	resultsRoot string
	keepResults bool
	anyFailed   bool
	failMu      sync.Mutex
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: skipped: must run as root (systemd-nspawn, nsenter)")
		os.Exit(0)
	}
	for _, tool := range []string{"nsenter", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Printf("e2e: %s not found: %v\n", tool, err)
			os.Exit(1)
		}
	}
	var err error
	if d := os.Getenv("GNSH_E2E_RESULTS"); d != "" {
		resultsRoot, keepResults = d, true
		err = os.MkdirAll(d, 0o755)
	} else {
		keepResults = os.Getenv("GNSH_E2E_KEEP") == "1"
		resultsRoot, err = os.MkdirTemp("", "gnsh-e2e-")
	}
	if err != nil {
		fmt.Println("e2e: results dir:", err)
		os.Exit(1)
	}
	code := m.Run()
	if code != 0 || anyFailed || keepResults {
		fmt.Printf("e2e: artefacts kept in %s\n", resultsRoot)
	} else {
		os.RemoveAll(resultsRoot)
	}
	os.Exit(code)
}

func markFailed() { failMu.Lock(); anyFailed = true; failMu.Unlock() }

// ---------------------------------------------------------------- rootfs

var (
	rootfsMu   sync.Mutex
	rootfsDone = map[string]*rootfsResult{}
)

type rootfsResult struct {
	once sync.Once
	path string
	err  error
	dur  time.Duration
}

// rootfsFor runs rootfs.sh SUITE once per process and returns the rootfs dir.
func rootfsFor(suite string) (string, time.Duration, error) { return rootfsFlavor(suite, "") }

// rootfsFlavor runs rootfs.sh SUITE FLAVOR once per process ("" = the
// default rootfs; "ansible" adds sshd, python3 and sudo).
func rootfsFlavor(suite, flavor string) (string, time.Duration, error) {
	key := suite + "/" + flavor
	rootfsMu.Lock()
	r := rootfsDone[key]
	if r == nil {
		r = &rootfsResult{}
		rootfsDone[key] = r
	}
	rootfsMu.Unlock()
	r.once.Do(func() {
		start := time.Now()
		script, err := filepath.Abs("rootfs.sh")
		if err != nil {
			r.err = err
			return
		}
		var out, errb bytes.Buffer
		args := []string{script, suite}
		if flavor != "" {
			args = append(args, flavor)
		}
		cmd := exec.Command("sh", args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			tail := errb.String()
			if len(tail) > 3000 {
				tail = tail[len(tail)-3000:]
			}
			r.err = fmt.Errorf("rootfs.sh %s %s: %v\n%s", suite, flavor, err, tail)
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		r.path = strings.TrimSpace(lines[len(lines)-1])
		r.dur = time.Since(start)
		if st, err := os.Stat(r.path); err != nil || !st.IsDir() {
			r.err = fmt.Errorf("rootfs.sh %s printed %q, not a directory", suite, r.path)
		}
	})
	return r.path, r.dur, r.err
}

// ---------------------------------------------------------------- gnsh binary

// e2eSuites are the suites to run: GNSH_E2E_SUITES, else both.
func e2eSuites() []string {
	if s := os.Getenv("GNSH_E2E_SUITES"); s != "" {
		return strings.Split(s, ",")
	}
	return []string{"bullseye", "bookworm"}
}

// needGnsh returns the gnsh binary under test, or skips the test without
// one (fails it under GNSH_REQUIRE_RIGS=1).
func needGnsh(t *testing.T) string {
	t.Helper()
	gnsh, skip := gnshBinary()
	if gnsh == "" {
		if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
			t.Fatal(skip)
		}
		t.Skip("SKIP: " + skip)
	}
	return gnsh
}

// needRootfs builds (or reuses) the root filesystems of suites, all at
// once, and fails the test if one cannot be made.
func needRootfs(t *testing.T, suites []string) {
	t.Helper()
	var wg sync.WaitGroup
	for _, s := range suites {
		wg.Go(func() { rootfsFor(s) })
	}
	wg.Wait()
	for _, s := range suites {
		p, d, err := rootfsFor(s)
		if err != nil {
			t.Fatalf("rootfs %s: %v", s, err)
		}
		t.Logf("rootfs %s: %s (rootfs.sh took %v)", s, p, d.Round(time.Millisecond))
	}
}

// laneJob is one subtest for runInLanes.
type laneJob struct {
	name string // the subtest's name
	slow bool   // mostly waits (a minute or more): the slow lane
	run  func(t *testing.T)
}

// runInLanes runs the jobs as subtests of t, each from its own goroutine;
// the two lanes (semaphores of fast and slow places) bound how many
// containers run at once. Slow jobs start first, so that their waiting
// overlaps the fast ones; otherwise the jobs start in their order.
func runInLanes(t *testing.T, jobs []laneJob, fast, slow int) {
	lanes := map[bool]chan struct{}{false: make(chan struct{}, fast), true: make(chan struct{}, slow)}
	jobs = slices.Clone(jobs)
	slices.SortStableFunc(jobs, func(a, b laneJob) int {
		switch {
		case a.slow == b.slow:
			return 0
		case a.slow:
			return -1
		}
		return 1
	})
	var wg sync.WaitGroup
	for _, j := range jobs {
		lane := lanes[j.slow]
		wg.Go(func() {
			lane <- struct{}{}
			defer func() { <-lane }()
			t.Run(j.name, j.run)
		})
		time.Sleep(20 * time.Millisecond) // keep the start order roughly stable
	}
	wg.Wait()
}

func gnshBinary() (path string, skipReason string) {
	p := os.Getenv("GNSH_BIN")
	if p == "" {
		p = filepath.Join("..", "..", "bin", "gnsh")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err.Error()
	}
	st, err := os.Stat(abs)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Sprintf("gnsh binary %s not found or not executable (run `make build` or set GNSH_BIN)", abs)
	}
	if strings.ContainsAny(abs, ":,") {
		return "", fmt.Sprintf("gnsh path %q contains ':' or ',' which systemd-nspawn --bind-ro cannot take", abs)
	}
	return abs, ""
}

// staticNote returns a warning if the binary has an ELF interpreter (i.e. is
// dynamically linked and may not run on the older bullseye libc).
func staticNote(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return "not an ELF file: " + err.Error()
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "gnsh is dynamically linked (has PT_INTERP); build with CGO_ENABLED=0"
		}
	}
	return ""
}

// ---------------------------------------------------------------- container

type container struct {
	t        *testing.T
	suite    string
	rootfs   string
	dir      string // per-case artefact dir on the host
	opts     bootOpts
	viaUnit  bool
	nspawn   *exec.Cmd
	console  *os.File
	pid1     int
	started  time.Time
	booted   time.Duration // nspawn start -> is-system-running
	exited   chan struct{}
	exitCode int
	exitAt   time.Time
	summary  *os.File
	setupAt  time.Time // end of setup: login1 calls before this are the rig's own
	cgroups  []string  // host cgroup dirs created for this container
}

type bootOpts struct {
	gnsh string // host path bound to /usr/local/sbin/gnsh ("" = none)
	// persist, if set, is a directory to boot from instead of rootfs,
	// without --volatile: a root that survives the container's reboot
	// (persistentRoot mounts one; bootAgain boots it again).
	persist string
	delay   int // InhibitDelayMaxSec bound into the container (0 = delaySec)
	// n numbers the boots of one case (0 and 1 are the first): boot n > 1
	// writes console-bootN.log and appends to commands.log.
	n int
	// logindName is the name of the logind.conf.d drop-in holding delay
	// ("" = gnsh-e2e.conf, which sorts after kubelet's 99-kubelet.conf: a
	// real kubelet needs one that sorts before it, or a delay at least its
	// shutdownGracePeriod).
	logindName string
	extra      []string // more systemd-nspawn arguments (e.g. --bind-ro=)
}

// boot starts a container for the case and waits until logind and the
// service manager are up. All teardown is registered with t.Cleanup.
func boot(t *testing.T, suite, rootfs, dir string, o bootOpts) *container {
	t.Helper()
	for _, sub := range []string{"rig", "journal"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logindConf := filepath.Join(dir, "logind.conf")
	journaldConf := filepath.Join(dir, "journald.conf")
	delay := o.delay
	if delay == 0 {
		delay = delaySec
	}
	mustWrite(t, logindConf, fmt.Sprintf("[Login]\nInhibitDelayMaxSec=%d\n", delay))
	// Forward the journal to the console so console.log has every log line
	// (the journal itself is also kept, see journal/).
	mustWrite(t, journaldConf, "[Journal]\nForwardToConsole=yes\nMaxLevelConsole=info\n")

	c := &container{t: t, suite: suite, rootfs: rootfs, dir: dir, opts: o, exited: make(chan struct{}),
		viaUnit: os.Getenv("GNSH_E2E_VIA_UNIT") == "1"}
	var err error
	consoleName := "console.log"
	if o.n <= 1 {
		c.summary, err = os.Create(filepath.Join(dir, "commands.log"))
	} else {
		consoleName = fmt.Sprintf("console-boot%d.log", o.n)
		c.summary, err = os.OpenFile(filepath.Join(dir, "commands.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c.console, err = os.Create(filepath.Join(dir, consoleName)); err != nil {
		t.Fatal(err)
	}
	root := []string{"-D", rootfs, "--volatile=overlay"}
	if o.persist != "" {
		root = []string{"-D", o.persist}
	}
	args := append(root, "-b", "--register=no", "--keep-unit",
		"--machine="+sanitizeMachine(suite+"-"+filepath.Base(dir)),
		"--setenv=SYSTEMD_COLORS=0",
		"--bind-ro="+logindConf+":/etc/systemd/logind.conf.d/"+cmp.Or(o.logindName, "gnsh-e2e.conf"),
		"--bind-ro="+journaldConf+":/etc/systemd/journald.conf.d/gnsh-e2e.conf",
		"--bind="+filepath.Join(dir, "rig")+":/rig",
		"--bind="+filepath.Join(dir, "journal")+":/var/log/journal",
	)
	if o.gnsh != "" {
		args = append(args, "--bind-ro="+o.gnsh+":/usr/local/sbin/gnsh")
	}
	args = append(args, o.extra...)
	// Each container gets its own host cgroup (see ownCgroups): a small sh
	// wrapper moves itself there and execs nspawn, keeping the PID.
	c.cgroups = newCgroups(t, filepath.Base(filepath.Dir(dir))+"-"+filepath.Base(dir))
	if len(c.cgroups) > 0 {
		wrapper := []string{"-ec", `while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs"; shift; done; shift; exec systemd-nspawn "$@"`, "sh"}
		wrapper = append(append(append(wrapper, c.cgroups...), "--"), args...)
		c.nspawn = exec.Command("sh", wrapper...)
	} else {
		c.nspawn = exec.Command("systemd-nspawn", args...)
	}
	// Pure cgroup2 inside the container (fewer cgroup v1 warnings on a
	// hybrid host). SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=0 in the environment
	// (legacy) also passes.
	c.nspawn.Env = os.Environ()
	if os.Getenv("SYSTEMD_NSPAWN_UNIFIED_HIERARCHY") == "" {
		c.nspawn.Env = append(c.nspawn.Env, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1")
	}
	c.nspawn.Stdin = nil // /dev/null -> nspawn uses --console=read-only
	c.nspawn.Stdout, c.nspawn.Stderr = c.console, c.console
	// If the test binary dies, halt the container (SIGTERM = clean halt).
	c.nspawn.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	c.logf("systemd-nspawn %s", strings.Join(args, " "))
	c.started = time.Now()
	if err := c.nspawn.Start(); err != nil {
		t.Fatalf("start systemd-nspawn: %v", err)
	}
	go func() {
		err := c.nspawn.Wait()
		c.exitAt = time.Now()
		c.exitCode = c.nspawn.ProcessState.ExitCode()
		if err != nil && c.exitCode < 0 {
			c.exitCode = -1
		}
		close(c.exited)
	}()
	t.Cleanup(c.teardown)

	// Container PID 1: a direct child of nspawn with "NSpid: <host> 1".
	deadline := time.Now().Add(15 * time.Second)
	for c.pid1 == 0 {
		if c.hasExited() {
			t.Fatalf("systemd-nspawn exited (rc %d) before PID 1 appeared; see %s", c.exitCode, c.console.Name())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no container PID 1 below nspawn %d after 15 s", c.nspawn.Process.Pid)
		}
		c.pid1 = findPID1(c.nspawn.Process.Pid)
		if c.pid1 == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Safety: never nsenter into our own PID namespace (that would be the host).
	self, _ := os.Readlink("/proc/self/ns/pid")
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c.pid1))
	if err != nil || theirs == self {
		t.Fatalf("PID %d is not in a separate PID namespace (%q vs %q, %v)", c.pid1, theirs, self, err)
	}

	// logind answering ListInhibitors.
	deadline = time.Now().Add(30 * time.Second)
	for {
		r := c.in(5*time.Second, "busctl", "call", "org.freedesktop.login1", "/org/freedesktop/login1",
			"org.freedesktop.login1.Manager", "ListInhibitors")
		if r.rc == 0 {
			break
		}
		if c.hasExited() {
			t.Fatalf("container exited during boot (rc %d); see %s", c.exitCode, c.console.Name())
		}
		if time.Now().After(deadline) {
			t.Fatalf("logind did not answer within 30 s: %s", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := c.in(60*time.Second, "systemctl", "is-system-running", "--wait")
	state := strings.TrimSpace(r.stdout)
	c.booted = time.Since(c.started)
	c.logf("booted in %v, system state %q", c.booted.Round(time.Millisecond), state)
	if state != "running" {
		f := c.in(10*time.Second, "systemctl", "--failed", "--no-pager")
		t.Fatalf("system state %q (want running); failed units:\n%s", state, f.stdout)
	}
	return c
}

// persistentRoot mounts an overlay on the host for a case whose container
// reboots: the cached rootfs is the read-only lower layer, the upper and
// work dirs live in the case dir (root/upper, root/work), and root/merged
// is what nspawn boots (bootOpts.persist, without --volatile), as many
// times as the case likes. The cached rootfs is never written. The mount
// is taken away when the test ends, after every container of the case
// (lazily if something still holds it).
func persistentRoot(t *testing.T, rootfs, dir string) string {
	t.Helper()
	base := filepath.Join(dir, "root")
	upper, work, merged := filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if strings.ContainsAny(rootfs+upper+work, ",:") {
		t.Fatalf("overlay paths must not contain ',' or ':' (%s, %s)", rootfs, base)
	}
	data := "lowerdir=" + rootfs + ",upperdir=" + upper + ",workdir=" + work
	if err := syscall.Mount("overlay", merged, "overlay", 0, data); err != nil {
		t.Fatalf("mount overlay %s on %s: %v", data, merged, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(merged, 0); err != nil {
			t.Logf("umount %s: %v; detaching it (MNT_DETACH)", merged, err)
			if err := syscall.Unmount(merged, syscall.MNT_DETACH); err != nil {
				t.Errorf("umount -l %s: %v", merged, err)
			}
		}
		_ = os.RemoveAll(work) // root-owned overlay work files; upper stays with the artefacts
	})
	return merged
}

// bootAgain boots the case's persistent root once more after the container
// went down (a reboot: nspawn exited 133; it does not restart by itself).
// The new boot has its own boot ID, console-bootN.log and cleanup.
func (c *container) bootAgain(t *testing.T) *container {
	t.Helper()
	if c.opts.persist == "" {
		t.Fatal("bootAgain: the container has no persistent root (bootOpts.persist)")
	}
	if !c.hasExited() {
		t.Fatal("bootAgain: the container is still running")
	}
	o := c.opts
	o.n = max(o.n, 1) + 1
	return boot(t, c.suite, c.rootfs, c.dir, o)
}

func sanitizeMachine(s string) string {
	s = regexp.MustCompile(`[^A-Za-z0-9-]+`).ReplaceAllString(s, "-")
	if len(s) > 60 {
		s = s[:60]
	}
	return strings.Trim(s, "-")
}

func findPID1(nspawnPID int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", nspawnPID, nspawnPID))
	var kids []string
	if err == nil {
		kids = strings.Fields(string(data))
	} else { // fall back to scanning /proc for PPid
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			st, err := os.ReadFile("/proc/" + e.Name() + "/status")
			if err == nil && regexp.MustCompile(`(?m)^PPid:\s+`+strconv.Itoa(nspawnPID)+`$`).Match(st) {
				kids = append(kids, e.Name())
			}
		}
	}
	for _, k := range kids {
		st, err := os.ReadFile("/proc/" + k + "/status")
		if err != nil {
			continue
		}
		if regexp.MustCompile(`(?m)^NSpid:.*\s1$`).Match(st) {
			pid, _ := strconv.Atoi(k)
			return pid
		}
	}
	return 0
}

func (c *container) hasExited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// waitExit waits for nspawn to exit; on timeout it halts the container
// (SIGTERM, then SIGKILL after 10 s) and returns false.
func (c *container) waitExit(timeout time.Duration) bool {
	select {
	case <-c.exited:
		c.logf("systemd-nspawn exited rc=%d", c.exitCode)
		return true
	case <-time.After(timeout):
	}
	c.logf("container still running after %v: sending SIGTERM", timeout)
	c.kill()
	return false
}

// terminate asks the container to halt cleanly (SIGTERM to nspawn).
func (c *container) terminate() {
	if !c.hasExited() {
		c.logf("SIGTERM to systemd-nspawn (clean halt)")
		_ = c.nspawn.Process.Signal(syscall.SIGTERM)
	}
}

func (c *container) kill() {
	if c.hasExited() {
		return
	}
	_ = c.nspawn.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return
	case <-time.After(10 * time.Second):
	}
	c.logf("SIGKILL to systemd-nspawn")
	_ = c.nspawn.Process.Kill()
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		c.logf("systemd-nspawn did not die after SIGKILL")
	}
}

func (c *container) teardown() {
	c.kill()
	c.console.Close()
	for _, d := range c.cgroups {
		if err := rmdirTree(d); err != nil {
			c.t.Logf("cannot remove cgroup %s: %v", d, err)
		}
	}
	// Export the journal as text when the host can read it.
	if jc, err := exec.LookPath("journalctl"); err == nil {
		out, _ := exec.Command(jc, "-D", filepath.Join(c.dir, "journal"), "-o", "short-precise", "--no-pager").CombinedOutput()
		_ = os.WriteFile(filepath.Join(c.dir, "journal.txt"), out, 0o644)
	}
	if c.t.Failed() {
		markFailed()
		c.t.Logf("artefacts: %s (console.log, rig/%s, commands.log, journal.txt)", c.dir, monLog)
	}
	c.summary.Close()
}

func (c *container) logf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	fmt.Fprintf(c.summary, "%s %s\n", time.Now().Format("15:04:05.000"), msg)
	c.t.Log(msg)
}

type result struct {
	argv           []string
	rc             int
	stdout, stderr string
	start          time.Time
	dur            time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("%q rc=%d (%v) stdout=%q stderr=%q", strings.Join(r.argv, " "), r.rc,
		r.dur.Round(time.Millisecond), strings.TrimSpace(r.stdout), strings.TrimSpace(r.stderr))
}

// in runs argv inside the container's namespaces (nsenter -t PID1 -a) with a
// clean environment. It never runs anything on the host itself.
func (c *container) in(timeout time.Duration, argv ...string) result {
	if c.pid1 <= 1 {
		panic("container PID 1 unknown: refusing to run " + strings.Join(argv, " "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := append([]string{"-t", strconv.Itoa(c.pid1), "-a", "--", "env", "-i", innerPath, "LANG=C.UTF-8", "SYSTEMD_COLORS=0", "SYSTEMD_PAGER="}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	r := result{argv: argv, start: time.Now()}
	err := cmd.Run()
	r.dur = time.Since(r.start)
	r.stdout, r.stderr = out.String(), errb.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.rc = ee.ExitCode() // -1 when killed by a signal
	default:
		r.rc = -2
		r.stderr += err.Error()
	}
	if ctx.Err() != nil {
		r.stderr += " [timed out]"
	}
	return r
}

// run runs a case command (optionally inside a transient unit) and logs it.
func (c *container) run(timeout time.Duration, argv ...string) result {
	cmd := argv
	if c.viaUnit {
		cmd = append([]string{"systemd-run", "--quiet", "--wait", "--pipe", "-p", "StandardInput=null"}, argv...)
	}
	r := c.in(timeout, cmd...)
	r.argv = argv
	c.logf("run %s", r)
	return r
}

// must runs a rig helper command and fails the test unless it exits 0.
func (c *container) must(argv ...string) result {
	c.t.Helper()
	r := c.in(30*time.Second, argv...)
	fmt.Fprintf(c.summary, "%s rig %s\n", time.Now().Format("15:04:05.000"), r)
	if r.rc != 0 {
		c.t.Fatalf("rig command failed: %s", r)
	}
	return r
}

// setup starts the D-Bus monitor and the delay inhibitor and, if asked,
// installs gnsh over the legacy commands (inside the overlay only).
func (c *container) setup(installGnsh bool) {
	t := c.t
	t.Helper()
	c.must("systemd-run", "--quiet", "--unit=rig-mon",
		"-p", "StandardOutput=file:/rig/"+monLog, "-p", "StandardError=journal",
		"dbus-monitor", "--system",
		"type='signal',interface='org.freedesktop.login1.Manager'",
		"type='method_call',destination='org.freedesktop.login1'")
	// Sentinel: wait until the monitor sees a method call to login1.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.in(5*time.Second, "busctl", "call", "org.freedesktop.login1", "/org/freedesktop/login1",
			"org.freedesktop.DBus.Peer", "Ping")
		if b, _ := os.ReadFile(filepath.Join(c.dir, "rig", monLog)); bytes.Contains(b, []byte("member=Ping")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dbus-monitor not capturing after 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.must("systemd-run", "--quiet", "--unit=rig-inhibit",
		"systemd-inhibit", "--what=shutdown", "--mode=delay", "--who="+inhibitWho, "--why=e2e delay lock",
		"sleep", "infinity")
	deadline = time.Now().Add(10 * time.Second)
	for {
		r := c.in(5*time.Second, "busctl", "call", "org.freedesktop.login1", "/org/freedesktop/login1",
			"org.freedesktop.login1.Manager", "ListInhibitors")
		if strings.Contains(r.stdout, `"`+inhibitWho+`"`) && strings.Contains(r.stdout, `"delay"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delay inhibitor not registered: %s", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v := c.prop("InhibitDelayMaxUSec"); v != fmt.Sprintf("t %d", delaySec*1000000) {
		t.Fatalf("InhibitDelayMaxUSec = %q, want %d s (logind.conf.d drop-in not applied?)", v, delaySec)
	}
	if installGnsh {
		c.must("sh", "-ec", `for c in reboot poweroff halt shutdown; do
			p=$(command -v "$c"); ln -sfn /usr/local/sbin/gnsh "$p"
			[ "$(readlink "$p")" = /usr/local/sbin/gnsh ] || { echo "$p not replaced" >&2; exit 1; }
		done
		/usr/local/sbin/gnsh --help >/dev/null 2>&1 || true`)
	}
	c.setupAt = time.Now()
}

// prop returns busctl's rendering of a login1.Manager property, e.g. `(st) "reboot" 1700000000000000`.
func (c *container) prop(name string) string {
	r := c.in(10*time.Second, "busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
		"org.freedesktop.login1.Manager", name)
	if r.rc != 0 {
		c.t.Errorf("get-property %s: %s", name, r)
	}
	return strings.TrimSpace(r.stdout)
}

var schedRE = regexp.MustCompile(`^\(st\) "([^"]*)" (\d+)$`)

// scheduled returns logind's ScheduledShutdown property (zero time if none).
func (c *container) scheduled() (typ string, at time.Time) {
	v := c.prop("ScheduledShutdown")
	m := schedRE.FindStringSubmatch(v)
	if m == nil {
		c.t.Fatalf("cannot parse ScheduledShutdown %q", v)
	}
	usec, _ := strconv.ParseUint(m[2], 10, 64)
	// Nothing scheduled: ("", 0) on systemd 247, ("", UINT64_MAX) on 252.
	if usec == 0 || usec == math.MaxUint64 {
		return m[1], time.Time{}
	}
	return m[1], time.UnixMicro(int64(usec))
}

// scheduledFile returns /run/systemd/shutdown/scheduled inside ("" if absent).
func (c *container) scheduledFile() string {
	r := c.in(10*time.Second, "cat", "/run/systemd/shutdown/scheduled")
	if r.rc != 0 {
		return ""
	}
	return r.stdout
}

func (c *container) consoleText() string {
	b, _ := os.ReadFile(c.console.Name())
	return string(b)
}

// ---------------------------------------------------------------- dbus-monitor log

type busMsg struct {
	kind   string // "signal", "method call", ...
	at     time.Time
	iface  string
	member string
	body   string
}

var monHeadRE = regexp.MustCompile(`^(signal|method call|method return|error) time=(\d+)\.(\d+) .*?(?:interface=([^;\s]+); )?member=(\S+)`)

func (c *container) messages() []busMsg {
	f, err := os.Open(filepath.Join(c.dir, "rig", monLog))
	if err != nil {
		return nil
	}
	defer f.Close()
	var msgs []busMsg
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := monHeadRE.FindStringSubmatch(line); m != nil {
			sec, _ := strconv.ParseInt(m[2], 10, 64)
			frac := (m[3] + "000000")[:6]
			usec, _ := strconv.ParseInt(frac, 10, 64)
			msgs = append(msgs, busMsg{kind: m[1], at: time.Unix(sec, usec*1000), iface: m[4], member: m[5]})
			continue
		}
		if len(msgs) > 0 && strings.HasPrefix(line, " ") {
			msgs[len(msgs)-1].body += strings.TrimSpace(line) + "\n"
		}
	}
	return msgs
}

// pfs returns the time of the first PrepareForShutdown(true) signal.
func (c *container) pfs() (time.Time, bool) {
	for _, m := range c.messages() {
		if m.kind == "signal" && m.member == "PrepareForShutdown" && strings.Contains(m.body, "boolean true") {
			return m.at, true
		}
	}
	return time.Time{}, false
}

// calls returns the login1 method calls (member and body) seen since setup.
func (c *container) calls() []busMsg {
	var out []busMsg
	for _, m := range c.messages() {
		if m.kind == "method call" && m.at.After(c.setupAt) && strings.HasPrefix(m.iface, "org.freedesktop.login1") {
			out = append(out, m)
		}
	}
	return out
}

func callNames(ms []busMsg) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.member+"("+strings.ReplaceAll(strings.TrimSpace(m.body), "\n", ", ")+")")
	}
	return strings.Join(s, " ")
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------- cgroups

// With --keep-unit, systemd-nspawn puts the container below its own cgroup
// ("payload"/"supervisor" children of it). Containers started from the same
// process therefore share one cgroup subtree and their systemd instances
// create and remove each other's /system.slice/... cgroups: units then fail
// with "Failed to attach to cgroup … No such device" (status=219/CGROUP) and
// the boot ends "degraded". So every container gets a fresh child of our own
// cgroup in the cgroup2 hierarchy and in the v1 name=systemd hierarchy.

var cgSeq struct {
	sync.Mutex
	n int
}

// ownCgroups returns the directories of this process's cgroup in the cgroup2
// hierarchy and in the v1 name=systemd hierarchy, where those are mounted.
func ownCgroups() []string {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	paths := map[string]string{} // "" = cgroup2, "name=systemd" = v1
	for _, l := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			paths[""] = f[2]
		} else if f[1] == "name=systemd" {
			paths["name=systemd"] = f[2]
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var dirs []string
	seen := map[string]bool{}
	for _, l := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || pf[3] != "/" {
			continue
		}
		key := "?"
		switch {
		case qf[0] == "cgroup2":
			key = ""
		case qf[0] == "cgroup" && strings.Contains(","+qf[2]+",", ",name=systemd,"):
			key = "name=systemd"
		}
		p, ok := paths[key]
		if !ok || seen[key] {
			continue
		}
		seen[key] = true
		dirs = append(dirs, filepath.Join(pf[4], p))
	}
	return dirs
}

// newCgroups creates a fresh child of each of our cgroups for one container.
func newCgroups(t *testing.T, name string) []string {
	cgSeq.Lock()
	cgSeq.n++
	n := cgSeq.n
	cgSeq.Unlock()
	leaf := sanitizeMachine(fmt.Sprintf("gnsh-e2e-%d-%d-%s", os.Getpid(), n, name))
	var out []string
	for _, parent := range ownCgroups() {
		d := filepath.Join(parent, leaf)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Logf("cannot create cgroup %s (%v); containers may share a cgroup", d, err)
			continue
		}
		out = append(out, d)
	}
	return out
}

// rmdirTree removes an (empty) cgroup directory tree, deepest first.
func rmdirTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	var lastErr error
	for i := 0; i < 50; i++ { // the kernel may need a moment after the last process exits
		if lastErr = syscall.Rmdir(dir); lastErr == nil || errors.Is(lastErr, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return lastErr
}

// freshResults empties the directory of artefacts resultsRoot/elem... and
// makes it again, with the subdirectory sub ("" for none); it returns the
// directory.
func freshResults(t *testing.T, sub string, elem ...string) string {
	dir := filepath.Join(append([]string{resultsRoot}, elem...)...)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
