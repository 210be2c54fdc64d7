//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLogindAgentFoundation checks internal/logind against the real
// systemd-logind of each suite, through logindprobe (a static binary run as
// a unit inside the container): logind's default InhibitDelayMaxUSec, an
// Inhibit lock listed with the probe's who/why/UID/PID, a close-on-exec
// descriptor, PrepareForShutdown(true) delivered on `systemctl reboot`, and
// the container going down only once the probe has released its lock —
// after the 2 s it holds it and well before logind's 5 s limit. The probe
// also records how ScheduledShutdown reads and whether its changes are
// signalled.
//
// It shares the rig of TestE2E (boot, nsenter, teardown, artefacts) but not
// its setup: there is no other delay lock, and the rig's
// InhibitDelayMaxSec=3 drop-in is taken away again so that logind's own
// default shows.
func TestLogindAgentFoundation(t *testing.T) {
	suites := e2eSuites()
	probe, err := probeBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, suite := range suites {
		t.Run(suite, func(t *testing.T) {
			t.Parallel()
			probeCase(t, suite, probe)
		})
	}
}

const (
	probeHold       = 2 * time.Second
	defaultDelayMax = 5 * time.Second                       // logind's InhibitDelayMaxSec default
	probeWho        = "gnsh-e2e-probe"                      // logindprobe.Who
	probeWhy        = "e2e: hold the shutdown for a moment" // logindprobe.Why
	rigLogindConf   = "/etc/systemd/logind.conf.d/gnsh-e2e.conf"
)

var probeBuild struct {
	once sync.Once
	path string
	err  error
}

// probeBinary builds logindprobe once, static, into the results dir.
func probeBinary() (string, error) {
	probeBuild.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out := filepath.Join(resultsRoot, "logindprobe")
		cmd := exec.Command(goBin, "build", "-trimpath", "-o", out, "./logindprobe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			probeBuild.err = fmt.Errorf("build logindprobe: %v\n%s", err, b)
			return
		}
		if n := staticNote(out); n != "" {
			probeBuild.err = fmt.Errorf("logindprobe: %s", n)
			return
		}
		probeBuild.path = out
	})
	return probeBuild.path, probeBuild.err
}

// probeEvent is one line of the probe's log.
type probeEvent map[string]any

func (e probeEvent) time(t *testing.T) time.Time {
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e["t"]))
	if err != nil {
		t.Fatalf("probe event %v: %v", e, err)
	}
	return at
}

func readProbeLog(t *testing.T, path string) []probeEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var evs []probeEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e probeEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("probe log line %q: %v", sc.Text(), err)
		}
		evs = append(evs, e)
	}
	return evs
}

// event returns the first event named ev.
func event(evs []probeEvent, ev string) (probeEvent, bool) {
	for _, e := range evs {
		if e["ev"] == ev {
			return e, true
		}
	}
	return nil, false
}

func probeCase(t *testing.T, suite, probe string) {
	rootfs, _, err := rootfsFor(suite)
	if err != nil {
		t.Fatal(err)
	}
	dir := freshResults(t, "rig", suite, "logind_probe")
	if err := copyFile(probe, filepath.Join(dir, "rig", "logindprobe")); err != nil {
		t.Fatal(err)
	}
	c := boot(t, suite, rootfs, dir, bootOpts{})

	// logind's own default: drop the rig's drop-in (a bind mount on the
	// overlay) and restart logind.
	c.must("umount", rigLogindConf)
	c.must("rm", "-f", rigLogindConf)
	c.must("systemctl", "restart", "systemd-logind.service")
	want := fmt.Sprintf("t %d", defaultDelayMax.Microseconds())
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := c.in(5*time.Second, "busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
			"org.freedesktop.login1.Manager", "InhibitDelayMaxUSec")
		if strings.TrimSpace(r.stdout) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("InhibitDelayMaxUSec after restarting logind without the drop-in: %s", r)
		}
		time.Sleep(50 * time.Millisecond)
	}

	c.must("systemd-run", "--quiet", "--unit=gnsh-logindprobe",
		"-p", "StandardOutput=file:/rig/probe.out", "-p", "StandardError=file:/rig/probe.err",
		"/rig/logindprobe", "-log", "/rig/probe.log", "-hold", probeHold.String())
	logPath := filepath.Join(dir, "rig", "probe.log")
	deadline = time.Now().Add(20 * time.Second)
	var evs []probeEvent
	for {
		evs = readProbeLog(t, logPath)
		if _, ok := event(evs, "ready"); ok {
			break
		}
		if e, ok := event(evs, "error"); ok {
			t.Fatalf("probe failed: %v", e["err"])
		}
		if time.Now().After(deadline) {
			errText, _ := os.ReadFile(filepath.Join(dir, "rig", "probe.err"))
			t.Fatalf("probe not ready after 20 s; log %v; stderr %s", evs, errText)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, e := range evs {
		c.logf("probe: %v", e)
	}

	// What the probe saw before the reboot.
	start, _ := event(evs, "start")
	if e, _ := event(evs, "conn"); e["unix_fds"] != true {
		t.Errorf("UNIX fd passing not negotiated: %v", e)
	}
	props, _ := event(evs, "props")
	if props["inhibit_delay_max_us"] != float64(defaultDelayMax.Microseconds()) || props["preparing"] != false {
		t.Errorf("properties %v, want InhibitDelayMaxUSec 5 s and not preparing", props)
	}
	if e, _ := event(evs, "locked"); e["cloexec"] != true {
		t.Errorf("lock descriptor not close-on-exec: %v", e)
	}
	listed, ok := event(evs, "listed")
	if !ok || listed["who"] != probeWho || listed["why"] != probeWhy || listed["mode"] != "delay" ||
		listed["what"] != "shutdown" || listed["uid"] != float64(0) || listed["lpid"] != start["pid"] {
		t.Errorf("ListInhibitors entry %v; want who/why/mode, UID 0 and the probe's PID %v", listed, start["pid"])
	}
	// What logind.ScheduledShutdown documents: nothing scheduled reads
	// ("", 0) on 247 and ("", UINT64_MAX) on 252, and neither announces
	// changes (the agent must poll), while BlockInhibited changes are.
	none := map[string]string{"bullseye": "0", "bookworm": "18446744073709551615"}[suite]
	c.logf("ScheduledShutdown with nothing scheduled: (%q, %v)", props["scheduled_type"], props["scheduled_usec"])
	if props["scheduled_type"] != "" || props["scheduled_usec"] != none {
		t.Errorf("ScheduledShutdown with nothing scheduled = (%q, %v), want (\"\", %s)", props["scheduled_type"], props["scheduled_usec"], none)
	}
	sched, ok := event(evs, "schedule")
	c.logf("dry-run schedule: %v", sched)
	if !ok || sched["type"] != "poweroff" || sched["usec_matches"] != true || sched["after_cancel_type"] != "" ||
		sched["after_cancel_usec"] != none {
		t.Errorf("ScheduleShutdown/ScheduledShutdown/CancelScheduledShutdown round trip: %v", sched)
	}
	if sched["control_signalled"] != true {
		t.Errorf("no PropertiesChanged for BlockInhibited either: the signal check itself does not work (%v)", sched)
	} else if sched["signalled"] != false {
		t.Errorf("logind announced a ScheduledShutdown change; logind.ScheduledShutdown's doc says it does not (%v)", sched)
	}
	r := c.in(10*time.Second, "systemd-inhibit", "--list")
	c.logf("systemd-inhibit --list:\n%s", r.stdout)
	if r.rc != 0 || !strings.Contains(r.stdout, probeWho) || !strings.Contains(r.stdout, probeWhy) {
		t.Errorf("systemd-inhibit --list does not show the probe's lock: %s", r)
	}

	trigger := time.Now()
	if r := c.run(30*time.Second, "systemctl", "reboot"); r.rc != 0 {
		t.Fatalf("systemctl reboot: %s", r)
	}
	if !c.waitExit(30 * time.Second) {
		t.Fatal("container did not go down within 30 s")
	}
	if c.exitCode != 133 {
		t.Errorf("nspawn exit code %d, want 133 (reboot)", c.exitCode)
	}

	evs = readProbeLog(t, logPath)
	for _, e := range evs {
		c.logf("probe: %v", e)
	}
	pfs, ok := event(evs, "pfs")
	if !ok || pfs["start"] != true {
		t.Fatalf("probe saw no PrepareForShutdown(true): %v", evs)
	}
	rel, ok1 := event(evs, "release")
	done, ok2 := event(evs, "released")
	if !ok1 || !ok2 || done["err"] != "<nil>" {
		t.Fatalf("probe did not release its lock: %v", evs)
	}
	tPFS, tRel, tDone := pfs.time(t), rel.time(t), done.time(t)
	c.logf("timeline after `systemctl reboot`: PrepareForShutdown +%.3fs, release +%.3fs, released +%.3fs, nspawn exit +%.3fs",
		tPFS.Sub(trigger).Seconds(), tRel.Sub(trigger).Seconds(), tDone.Sub(trigger).Seconds(), c.exitAt.Sub(trigger).Seconds())
	switch {
	case tPFS.Before(trigger):
		t.Errorf("PrepareForShutdown before the reboot request")
	case !c.exitAt.After(tDone):
		t.Errorf("container exited (%v) before the lock was released (%v)", c.exitAt, tDone)
	case c.exitAt.Sub(tPFS) < probeHold:
		t.Errorf("container exited %.2f s after PrepareForShutdown, before the %v hold ended", c.exitAt.Sub(tPFS).Seconds(), probeHold)
	case c.exitAt.Sub(tPFS) > defaultDelayMax-time.Second:
		t.Errorf("container exited %.2f s after PrepareForShutdown: logind waited for its %v limit, not for the release",
			c.exitAt.Sub(tPFS).Seconds(), defaultDelayMax)
	}
	// logind logs this only when the limit ends the wait.
	if strings.Contains(c.consoleText(), "Delay lock is active") {
		t.Errorf("logind logged \"Delay lock is active … inhibitor timeout is reached\": the release did not end the wait")
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
