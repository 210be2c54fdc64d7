//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type delayWant int

const (
	delayIgnore delayWant = iota
	delayHonoured
	delayBypassed
)

// A case boots one container. Either cmd is run (simple case) or steps is
// called; steps returns the moment the command that should end the
// container was issued. check, if set, runs after the container exited and
// the common checks were made.
type tcase struct {
	name     string
	gnsh     bool // install gnsh over reboot/poweroff/halt/shutdown
	slow     bool // expected to take > 60 s (runs in the slow lane)
	cmd      []string
	cmdRC    int // expected rc of cmd; -1000 = don't care (e.g. -f: the caller dies with the container)
	steps    func(c *container) time.Time
	check    func(c *container)
	wantExit int           // nspawn exit code: 0 poweroff/halt, 133 reboot
	wantPFS  bool          // PrepareForShutdown(true) seen
	minPFS   time.Duration // PrepareForShutdown no earlier than this after the trigger
	delay    delayWant     // delay inhibitor honoured or bypassed
	wantCall string        // regexp: a login1 method call that must be seen
	noCall   string        // regexp: login1 method calls that must not be seen
	timeout  time.Duration
	why      string
}

const anyRC = -1000

func casesFor(suite string) []tcase {
	immediate := func(name string, cmd []string, exit int, call string) tcase {
		return tcase{name: name, gnsh: true, cmd: cmd, wantExit: exit, wantPFS: true, delay: delayHonoured,
			wantCall: call, why: "gnsh hands off to logind: PrepareForShutdown and the delay lock are honoured"}
	}
	cs := []tcase{
		{name: "shutdown_schedule_cancel_+1", gnsh: true, slow: true, steps: scheduleCancelExpire,
			wantExit: 133, wantPFS: true, minPFS: 59 * time.Second, delay: delayHonoured, wantCall: `^ScheduleShutdown$`,
			timeout: 100 * time.Second,
			why:     "shutdown -r +5 schedules in logind, -c cancels, -r +1 expires through logind honouring the delay"},
		immediate("reboot", []string{"reboot"}, 133, `^Reboot(WithFlags)?$`),
		immediate("poweroff", []string{"poweroff"}, 0, `^PowerOff(WithFlags)?$`),
		immediate("halt", []string{"halt"}, 0, `^Halt(WithFlags)?$`),
		immediate("shutdown_now", []string{"shutdown", "now"}, 0, `^PowerOff(WithFlags)?$`),
		immediate("shutdown_-r_now", []string{"shutdown", "-r", "now"}, 133, `^Reboot(WithFlags)?$`),
		{name: "shutdown_-k", gnsh: true, steps: dryRun, wantExit: 0, wantPFS: false, delay: delayIgnore,
			wantCall: `^ScheduleShutdown$`, noCall: `^(PowerOff|Reboot|Halt)(WithFlags)?$`,
			why: "shutdown -k schedules a dry run in logind; at expiry nothing happens"},
		{name: "reboot_-f", gnsh: true, cmd: []string{"reboot", "-f"}, cmdRC: anyRC, wantExit: 133, wantPFS: false,
			delay: delayBypassed, noCall: `^((PowerOff|Reboot|Halt)(WithFlags)?|ScheduleShutdown)$`, why: "-f is reboot(2) directly: no logind, no delay"},
	}
	ctl := tcase{name: "control_stock_reboot", cmd: []string{"reboot"}, cmdRC: anyRC, wantExit: 133}
	switch suite {
	case "bullseye":
		ctl.wantPFS, ctl.delay = false, delayBypassed
		ctl.why = "systemd 247 legacy reboot as root starts reboot.target directly: the gap gnsh closes"
	default:
		ctl.wantPFS, ctl.delay = true, delayHonoured
		ctl.why = "systemd 252 legacy reboot goes through logind"
	}
	cs = append(cs, ctl)
	if os.Getenv("GNSH_E2E_DRAIN") != "0" {
		cs = append(cs, newDrainCase(suite).tcase())
	}
	return cs
}

// scheduleCancelExpire: shutdown -r +5 test / check / shutdown -c / check /
// shutdown -r +1 and let it expire.
func scheduleCancelExpire(c *container) time.Time {
	t := c.t
	before := time.Now()
	r := c.run(30*time.Second, "shutdown", "-r", "+5", "test")
	if r.rc != 0 {
		t.Fatalf("shutdown -r +5: %s", r)
	}
	typ, at := c.scheduled()
	c.logf("ScheduledShutdown after +5: %q %v", typ, at)
	if typ != "reboot" || at.Before(before.Add(5*time.Minute-5*time.Second)) || at.After(time.Now().Add(5*time.Minute+5*time.Second)) {
		t.Errorf("ScheduledShutdown = %q at %v, want reboot about 5 min from now", typ, at)
	}
	if f := c.scheduledFile(); !strings.Contains(f, "MODE=reboot") {
		t.Errorf("/run/systemd/shutdown/scheduled = %q, want MODE=reboot", f)
	}
	if w := c.prop("WallMessage"); w != `s "test"` {
		t.Errorf("WallMessage = %s, want \"test\" (SetWallMessage before ScheduleShutdown)", w)
	}
	if _, ok := c.pfs(); ok {
		t.Errorf("PrepareForShutdown already after scheduling +5")
	}

	r = c.run(30*time.Second, "shutdown", "-c")
	if r.rc != 0 {
		t.Fatalf("shutdown -c: %s", r)
	}
	typ, at = c.scheduled()
	c.logf("ScheduledShutdown after -c: %q %v", typ, at)
	if typ != "" || !at.IsZero() {
		t.Errorf("ScheduledShutdown after shutdown -c = %q %v, want cleared", typ, at)
	}
	if f := c.scheduledFile(); f != "" {
		t.Errorf("/run/systemd/shutdown/scheduled still present after -c: %q", f)
	}
	if !hasCall(c, `^CancelScheduledShutdown$`) {
		t.Errorf("no CancelScheduledShutdown call seen; calls: %s", callNames(c.calls()))
	}
	if c.hasExited() {
		t.Fatalf("container exited after shutdown -c")
	}

	trigger := time.Now()
	r = c.run(30*time.Second, "shutdown", "-r", "+1")
	if r.rc != 0 {
		t.Fatalf("shutdown -r +1: %s", r)
	}
	typ, at = c.scheduled()
	c.logf("ScheduledShutdown after +1: %q %v", typ, at)
	if typ != "reboot" || at.Before(trigger.Add(55*time.Second)) || at.After(time.Now().Add(65*time.Second)) {
		t.Errorf("ScheduledShutdown = %q at %v, want reboot about 60 s from now", typ, at)
	}
	time.Sleep(5 * time.Second)
	if c.hasExited() {
		t.Fatalf("container exited within 5 s of shutdown -r +1")
	}
	if _, ok := c.pfs(); ok {
		t.Errorf("PrepareForShutdown within 5 s of shutdown -r +1")
	}
	return trigger
}

// dryRun: shutdown -k (dry run, +1 min) / check / shutdown -c / check /
// shutdown -k +0 (dry run expiring at once) / nothing happens / SIGTERM.
func dryRun(c *container) time.Time {
	t := c.t
	before := time.Now()
	r := c.run(30*time.Second, "shutdown", "-k")
	if r.rc != 0 {
		t.Fatalf("shutdown -k: %s", r)
	}
	typ, at := c.scheduled()
	c.logf("ScheduledShutdown after -k: %q %v", typ, at)
	if typ != "poweroff" || at.Before(before.Add(55*time.Second)) || at.After(time.Now().Add(65*time.Second)) {
		t.Errorf("ScheduledShutdown = %q at %v, want poweroff about 60 s from now", typ, at)
	}
	if f := c.scheduledFile(); !strings.Contains(f, "MODE=poweroff") {
		t.Errorf("/run/systemd/shutdown/scheduled = %q, want MODE=poweroff", f)
	}
	if !hasCallBody(c, `^ScheduleShutdown$`, `"dry-poweroff"`) {
		t.Errorf(`no ScheduleShutdown("dry-poweroff", …) seen; calls: %s`, callNames(c.calls()))
	}

	r = c.run(30*time.Second, "shutdown", "-c")
	if r.rc != 0 {
		t.Fatalf("shutdown -c: %s", r)
	}
	if typ, at := c.scheduled(); typ != "" || !at.IsZero() {
		t.Errorf("ScheduledShutdown after -c = %q %v, want cleared", typ, at)
	}

	// +0 is "now+0": the scheduling path, so logind's dry-run timer fires at once.
	r = c.run(30*time.Second, "shutdown", "-k", "+0")
	if r.rc != 0 {
		t.Fatalf("shutdown -k +0: %s", r)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.consoleText(), "Running in dry run, suppressing action") {
		if time.Now().After(deadline) {
			t.Errorf("logind never logged \"Running in dry run, suppressing action.\" after shutdown -k +0")
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(delaySec*time.Second + time.Second)
	if c.hasExited() {
		t.Fatalf("container went down after a dry-run shutdown (rc %d)", c.exitCode)
	}
	if typ, at := c.scheduled(); typ != "" || !at.IsZero() {
		t.Errorf("ScheduledShutdown after dry-run expiry = %q %v, want cleared", typ, at)
	}
	if _, ok := c.pfs(); ok {
		t.Errorf("PrepareForShutdown after a dry run")
	}
	trigger := time.Now()
	c.terminate()
	return trigger
}

func hasCall(c *container, member string) bool { return hasCallBody(c, member, "") }

func hasCallBody(c *container, member, body string) bool {
	re := regexp.MustCompile(member)
	for _, m := range c.calls() {
		if re.MatchString(m.member) && strings.Contains(m.body, body) {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------- runner

type row struct {
	suite, name, result        string
	boot, cmdToExit, pfsToExit time.Duration
	pfs                        string
	exit                       int
	total                      time.Duration
}

var (
	rowsMu sync.Mutex
	rows   []row
)

func TestE2E(t *testing.T) {
	suites := e2eSuites()
	needRootfs(t, suites) // first, concurrently

	cpShared.parent = t // drain cases share one control plane, stopped when TestE2E ends
	gnsh, skip := gnshBinary()
	useStock := os.Getenv("GNSH_E2E_USE_STOCK") == "1"
	if gnsh != "" {
		t.Logf("gnsh binary: %s", gnsh)
		if n := staticNote(gnsh); n != "" {
			t.Logf("WARNING: %s", n)
		}
	}

	fast, slow := envInt("GNSH_E2E_PARALLEL", 2), envInt("GNSH_E2E_SLOW_PARALLEL", 2)
	start := time.Now()
	var jobs []laneJob
	for _, suite := range suites {
		for _, tc := range casesFor(suite) {
			jobs = append(jobs, laneJob{name: suite + "/" + tc.name, slow: tc.slow, run: func(t *testing.T) {
				if tc.gnsh && gnsh == "" && !useStock {
					t.Skipf("SKIP: %s", skip)
				}
				runCase(t, suite, tc, gnsh, useStock)
			}})
		}
	}
	runInLanes(t, jobs, fast, slow)

	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %-28s %-6s %6s %5s %-9s %9s %9s %7s\n", "suite", "case", "result", "boot", "exit", "PFS", "cmd→exit", "PFS→exit", "total")
	rowsMu.Lock()
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].suite != rows[j].suite {
			return rows[i].suite > rows[j].suite
		}
		return rows[i].name < rows[j].name
	})
	for _, r := range rows {
		fmt.Fprintf(&b, "%-9s %-28s %-6s %6s %5d %-9s %9s %9s %7s\n", r.suite, r.name, r.result, secs(r.boot), r.exit, r.pfs,
			secs(r.cmdToExit), secs(r.pfsToExit), secs(r.total))
	}
	rowsMu.Unlock()
	fmt.Fprintf(&b, "wall time for all cases: %v (fast lane %d, slow lane %d)\n", time.Since(start).Round(100*time.Millisecond), fast, slow)
	_ = os.WriteFile(filepath.Join(resultsRoot, "summary.txt"), []byte(b.String()), 0o644)
	t.Logf("summary (also in %s):\n%s", filepath.Join(resultsRoot, "summary.txt"), b.String())
}

func secs(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func runCase(t *testing.T, suite string, tc tcase, gnsh string, useStock bool) {
	caseStart := time.Now()
	rootfs, _, err := rootfsFor(suite)
	if err != nil {
		t.Fatal(err)
	}
	dir := freshResults(t, "", suite, tc.name)
	t.Logf("expectation: %s", tc.why)
	rw := row{suite: suite, name: tc.name, result: "FAIL", exit: -1}
	defer func() {
		rw.total = time.Since(caseStart)
		if !t.Failed() {
			rw.result = "ok"
		}
		rowsMu.Lock()
		rows = append(rows, rw)
		rowsMu.Unlock()
	}()

	install := tc.gnsh && !useStock
	o := bootOpts{}
	if install {
		o.gnsh = gnsh
	}
	c := boot(t, suite, rootfs, dir, o)
	rw.boot = c.booted
	c.setup(install)

	var trigger time.Time
	if tc.steps != nil {
		trigger = tc.steps(c)
	} else {
		trigger = time.Now()
		r := c.run(30*time.Second, tc.cmd...)
		if tc.cmdRC != anyRC && r.rc != tc.cmdRC {
			t.Errorf("%s: rc %d, want %d", strings.Join(tc.cmd, " "), r.rc, tc.cmdRC)
		}
	}
	timeout := tc.timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if !c.waitExit(timeout - time.Since(trigger)) {
		t.Errorf("container did not exit within %v of the command", timeout)
	}
	rw.exit = c.exitCode
	rw.cmdToExit = c.exitAt.Sub(trigger)

	if c.exitCode != tc.wantExit {
		t.Errorf("nspawn exit code %d, want %d", c.exitCode, tc.wantExit)
	}
	pfsAt, pfs := c.pfs()
	rw.pfs = "no"
	if pfs {
		rw.pfs = fmt.Sprintf("+%.1fs", pfsAt.Sub(trigger).Seconds())
		rw.pfsToExit = c.exitAt.Sub(pfsAt)
	}
	if pfs != tc.wantPFS {
		t.Errorf("PrepareForShutdown(true) seen = %v, want %v", pfs, tc.wantPFS)
	}
	if pfs && pfsAt.Sub(trigger) < tc.minPFS {
		t.Errorf("PrepareForShutdown %.1f s after the command, want ≥ %v", pfsAt.Sub(trigger).Seconds(), tc.minPFS)
	}
	delayLine := strings.Contains(c.consoleText(), "Delay lock is active")
	c.logf("command→exit %.2f s, PFS %s, PFS→exit %.2f s, \"Delay lock is active\" logged: %v, login1 calls: %s",
		rw.cmdToExit.Seconds(), rw.pfs, rw.pfsToExit.Seconds(), delayLine, callNames(c.calls()))
	switch tc.delay {
	case delayHonoured:
		if !pfs || rw.pfsToExit < delaySec*time.Second-300*time.Millisecond {
			t.Errorf("delay not honoured: PrepareForShutdown→exit %.2f s, want ≥ %d s", rw.pfsToExit.Seconds(), delaySec)
		}
		if !delayLine {
			t.Errorf("logind did not log \"Delay lock is active … inhibitor timeout is reached\"")
		}
	case delayBypassed:
		if rw.cmdToExit > delaySec*time.Second-500*time.Millisecond {
			t.Errorf("command→exit %.2f s: expected a fast exit that ignores the %d s delay lock", rw.cmdToExit.Seconds(), delaySec)
		}
		if delayLine {
			t.Errorf("logind logged \"Delay lock is active\" although the delay should be bypassed")
		}
	}
	if tc.delay == delayIgnore && !tc.wantPFS && delayLine {
		t.Errorf("logind logged \"Delay lock is active\" unexpectedly")
	}
	if tc.wantCall != "" && !useStock && !hasCall(c, tc.wantCall) {
		t.Errorf("no login1 method call matching %s; calls: %s", tc.wantCall, callNames(c.calls()))
	}
	if tc.check != nil && !useStock {
		tc.check(c)
	}
	if tc.noCall != "" && !useStock {
		re := regexp.MustCompile(tc.noCall)
		for _, m := range c.calls() {
			if re.MatchString(m.member) {
				t.Errorf("unexpected login1 method call %s", m.member)
			}
		}
	}
}
