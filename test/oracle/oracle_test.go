// Package oracle compares gnsh with systemd 252 itself. For every command
// line of the spec's tables it runs Debian bookworm's real systemctl (as
// shutdown, poweroff, reboot and halt, chrooted into the cached rootfs) and
// then gnsh, each against a fresh fake logind and systemd1 on a private
// bus, and requires the same exit status, stdout, stderr, calls on the wire
// (names, signatures, values) and reboot parameter file. Commands with -f
// must end the (private) PID namespace the same way.
//
// The rootfs comes from test/e2e/rootfs.sh (cached outside the repo). The
// test skips without root, unshare, dbus-daemon or the rootfs unless
// GNSH_REQUIRE_RIGS=1.
package oracle

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/test/internal/rig"
)

var cases = [][]string{
	// shutdown: options and their order rules
	{"shutdown"}, {"shutdown", "now"}, {"shutdown", "-H", "now"}, {"shutdown", "--halt", "now"},
	{"shutdown", "-P", "now"}, {"shutdown", "--poweroff", "now"}, {"shutdown", "-r", "now"},
	{"shutdown", "--reboot", "now"}, {"shutdown", "-K", "now"}, {"shutdown", "--kexec", "now"},
	{"shutdown", "-h", "now"}, {"shutdown", "-r", "-h", "now"}, {"shutdown", "-h", "-r", "now"},
	{"shutdown", "-H", "-h", "now"}, {"shutdown", "now", "-r"}, {"shutdown", "-rh", "now"},
	{"shutdown", "--no-wall", "now"}, {"shutdown", "--no-w", "now"}, {"shutdown", "--rebo", "now"},
	{"shutdown", "-a", "-f", "-F", "-t", "5", "now"}, {"shutdown", "-t5", "now"},
	{"shutdown", "now", "going", "down", "now"}, {"shutdown", "--", "now", "-r"},
	// TIME
	{"shutdown", "+5"}, {"shutdown", "-r", "+5", "kernel", "update"}, {"shutdown", "5"}, {"shutdown", "+0"},
	{"shutdown", "0"}, {"shutdown", "-H", "+1"}, {"shutdown", "0x10"}, {"shutdown", "010"}, {"shutdown", "0b11"},
	{"shutdown", "0o7"}, {"shutdown", "-0"}, {"shutdown", " 3"}, {"shutdown", "23:59"}, {"shutdown", "0:00"},
	{"shutdown", "-r", "0:00", "msg"}, {"shutdown", "11:"},
	{"shutdown", "08"}, {"shutdown", "-1"}, {"shutdown", "+5m"}, {"shutdown", "tomorrow"}, {"shutdown", "24:00"},
	{"shutdown", "12:60"}, {"shutdown", "1:2:3"}, {"shutdown", "x:30"}, {"shutdown", "NOW"}, {"shutdown", ""},
	{"shutdown", "18446744073709551616"},
	// Huge TIMEs: systemd computes now + 60e6·m µs in uint64. Past the year
	// 9999 it prints a placeholder; above INT64_MAX µs; near UINT64_MAX;
	// the sum wrapping around 2^64 to 49.5 s ago; the product wrapping to
	// 10.4 s ahead; m = UINT64_MAX (the product is -1 min).
	{"shutdown", "10000000000"}, {"shutdown", "-r", "160000000000", "far", "away"}, {"shutdown", "-k", "160000000000"},
	{"shutdown", "0x2400000000"}, {"shutdown", "307400000000"}, {"shutdown", "-r", "307445734561"},
	{"shutdown", "307445734562"}, {"shutdown", "18446744073709551615"},
	// -k, -c, --show
	{"shutdown", "-k"}, {"shutdown", "-k", "+3", "test", "only"}, {"shutdown", "-k", "now"}, {"shutdown", "-k", "-r", "now"},
	{"shutdown", "-c"}, {"shutdown", "-c", "now", "never", "mind"}, {"shutdown", "-c", "--no-wall"}, {"shutdown", "--show"},
	// errors and help
	{"shutdown", "-n"}, {"shutdown", "-i"}, {"shutdown", "-x", "now"}, {"shutdown", "--foo"}, {"shutdown", "--foo=bar"},
	{"shutdown", "-t"}, {"shutdown", "--reboot=yes"}, {"shutdown", "--h"}, {"shutdown", "--help"},
	{"shutdown", "-r", "--help", "-x"}, {"shutdown", "-x", "--help"},
	// halt, poweroff, reboot
	{"reboot"}, {"poweroff"}, {"halt"}, {"reboot", "recovery"}, {"reboot", ""}, {"reboot", "a", "b"},
	{"halt", "now"}, {"poweroff", "x"}, {"halt", "-p"}, {"halt", "--poweroff"}, {"reboot", "-p"},
	{"halt", "--reboot"}, {"halt", "--reboot", "arg"}, {"halt", "--reboot", "-p"}, {"halt", "--halt", "-p"},
	{"poweroff", "--halt"}, {"poweroff", "--reboot", "x"}, {"reboot", "--halt"}, {"reboot", "--no-wall"},
	{"reboot", "-w"}, {"halt", "-w"}, {"halt", "--wtmp-only"}, {"halt", "-d"}, {"poweroff", "--no-wtmp"},
	{"halt", "-i", "-h"}, {"reboot", "-k"}, {"halt", "-r"}, {"halt", "--no-w"}, {"halt", "--no-wa"},
	{"halt", "--forc=1"}, {"halt", "--show"}, {"reboot", strings.Repeat("x", 256)}, {"reboot", strings.Repeat("y", 255)},
	{"reboot", "caf\u00e9"}, {"reboot", "--", "-f"}, {"reboot", "--help"}, {"poweroff", "--help"}, {"halt", "--help"},
	{"reboot", "--help", "-x"}, {"poweroff", "-p-help"}, {"halt", "-p-no-wall"}, {"shutdown", "-r-help", "now"},
	// -f: sync and reboot(2), no bus
	{"reboot", "-f"}, {"reboot", "-f", "fw"}, {"poweroff", "-f"}, {"poweroff", "-f", "-n"}, {"halt", "-ff"},
	{"reboot", "--force", "--no-sync"},
}

// timeRE matches systemd's pretty timestamps, which depend on when a run
// happened.
var timeRE = regexp.MustCompile(`[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`)

type outcome struct {
	Code           int
	Kernel         string
	Stdout, Stderr string
	Param          string
	Logind         []string
	Systemd        []string
}

func rootfs(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GNSH_BOOKWORM_ROOTFS"); p != "" {
		return p
	}
	out, err := exec.Command("sh", "../e2e/rootfs.sh", "bookworm").Output()
	if err != nil {
		if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
			t.Fatalf("rootfs.sh bookworm: %v", err)
		}
		t.Skipf("no bookworm rootfs: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func TestAgainstSystemd252(t *testing.T) {
	rig.Need(t, "dbus-daemon", "chroot")
	root := rootfs(t)
	localBin := buildGnsh(t)
	for _, argv := range cases {
		t.Run(strings.Join(argv, " "), func(t *testing.T) {
			t0 := time.Now()
			want := withHelpLine(runOne(t, root, "", argv, t0, nil))
			got := runOne(t, root, localBin, argv, t0, nil)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("gnsh differs from systemd 252\n gnsh:    %+v\n systemd: %+v", got, want)
			}
			plan := planOne(t, filepath.Join(localBin, "gnsh"), argv, t0)
			want.Systemd = nil // the plan's calls list logind's answer path only
			if !reflect.DeepEqual(plan, want) {
				t.Errorf("gnsh plan differs from systemd 252\n plan:    %+v\n systemd: %+v", plan, want)
			}
		})
	}
}

// withHelpLine is systemd's outcome as gnsh's should be: systemd's --help
// text followed by legacy.HelpLine, the one line gnsh adds (its own
// options); everything else the same.
func withHelpLine(o outcome) outcome {
	if strings.HasSuffix(o.Stdout, " man page for details.\n") {
		o.Stdout += legacy.HelpLine
	}
	return o
}

// buildGnsh builds gnsh into a temporary directory with the four command
// names linked to it, to be mounted over /usr/local/sbin in the chroot.
func buildGnsh(t *testing.T) string {
	t.Helper()
	localBin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(localBin, "gnsh"), "github.com/gnsh/gnsh/cmd/gnsh")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, n := range []string{"shutdown", "poweroff", "reboot", "halt"} {
		if err := os.Symlink("gnsh", filepath.Join(localBin, n)); err != nil {
			t.Fatal(err)
		}
	}
	return localBin
}

// TestShowUnprintable compares "shutdown --show" when logind holds a
// schedule that systemd cannot print as a date: 0 and UINT64_MAX (unset to
// format_timestamp_style, which returns NULL for them) and a time past the
// year 9999. Another client put it there; the test schedules it over the
// bus first.
func TestShowUnprintable(t *testing.T) {
	rig.Need(t, "dbus-daemon", "chroot")
	root := rootfs(t)
	localBin := buildGnsh(t)
	for _, usec := range []uint64{0, math.MaxUint64, math.MaxInt64 + 1, 253402214399000000, 253402214399000001} {
		t.Run(strconv.FormatUint(usec, 10), func(t *testing.T) {
			schedule := func(bus *logindtest.Bus) {
				err := bus.Connect(t).Object("org.freedesktop.login1", "/org/freedesktop/login1").
					Call("org.freedesktop.login1.Manager.ScheduleShutdown", 0, "reboot", usec).Err
				if err != nil {
					t.Fatalf("ScheduleShutdown(reboot, %d): %v", usec, err)
				}
			}
			t0 := time.Now()
			argv := []string{"shutdown", "--show"}
			want := runOne(t, root, "", argv, t0, schedule)
			got := runOne(t, root, localBin, argv, t0, schedule)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("gnsh differs from systemd 252\n gnsh:    %+v\n systemd: %+v", got, want)
			}
		})
	}
}

// TestScheduleFails compares a scheduled shutdown that logind does not
// take: refused, logind not on the bus, no bus at all. systemd 252 says
// why ("Failed to schedule shutdown: …", "Failed to connect to bus: …")
// and exits 1: it never falls back to an immediate shutdown for a TIME.
// gnsh must say systemd's lines as systemd does and start nothing; its own
// line ("gnsh: …", left out of the comparison) says, but for a refusal
// for good (access denied) and a dry run, that nothing was scheduled and
// how to shut down at once.
func TestScheduleFails(t *testing.T) {
	rig.Need(t, "dbus-daemon", "chroot")
	root := rootfs(t)
	localBin := buildGnsh(t)
	failed := &dbus.Error{Name: "org.freedesktop.DBus.Error.Failed", Body: []any{"logind is busy"}}
	denied := &dbus.Error{Name: logindtest.ErrorAccessDenied, Body: []any{"Access denied"}}
	timeout := &dbus.Error{Name: "org.freedesktop.DBus.Error.NoReply", Body: []any{"Connection timed out"}}
	refuse := func(e *dbus.Error) *logindtest.Options {
		return &logindtest.Options{Version: 252, Errors: map[string]*dbus.Error{"ScheduleShutdown": e}}
	}
	for _, c := range []struct {
		name  string
		argv  []string
		lo    *logindtest.Options // nil: no logind on the bus
		noBus bool                // no bus at all
		told  bool                // gnsh's own line says nothing was scheduled
	}{
		{"refused", []string{"shutdown", "-r", "+5"}, refuse(failed), false, true},
		{"refused, poweroff at a time", []string{"shutdown", "23:59", "bye"}, refuse(failed), false, true},
		{"no answer", []string{"shutdown", "-H", "+1"}, refuse(timeout), false, true},
		{"access denied", []string{"shutdown", "-r", "+5"}, refuse(denied), false, false},
		{"dry run refused", []string{"shutdown", "-k", "+5"}, refuse(failed), false, false},
		{"no logind", []string{"shutdown", "-r", "+5"}, nil, false, true},
		{"no logind, halt", []string{"shutdown", "-H", "+1", "maintenance"}, nil, false, true},
		{"no logind, dry run", []string{"shutdown", "-k", "+5"}, nil, false, false},
		{"no bus", []string{"shutdown", "-r", "+5"}, nil, true, true},
		{"no bus, dry run", []string{"shutdown", "-k"}, nil, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t0 := time.Now()
			run := func(localBin string) outcome {
				if c.noBus {
					r := rig.Run(t, rig.Spec{Root: root, LocalBin: localBin, Param: "old", Argv: c.argv,
						Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/nonexistent", "SYSTEMD_IGNORE_CHROOT=1"}})
					return outcome{Code: r.Code, Kernel: r.Kernel, Stdout: r.Stdout, Stderr: r.Stderr, Param: r.Param}
				}
				return runWith(t, root, localBin, c.argv, t0, nil, c.lo)
			}
			want := run("")
			got := run(localBin)
			var own, theirs []string
			for _, l := range strings.SplitAfter(got.Stderr, "\n") {
				if strings.HasPrefix(l, "gnsh: ") {
					own = append(own, l)
				} else {
					theirs = append(theirs, l)
				}
			}
			got.Stderr = strings.Join(theirs, "")
			if !reflect.DeepEqual(got, want) {
				t.Errorf("gnsh differs from systemd 252 (its own lines left out)\n gnsh:    %+v\n systemd: %+v", got, want)
			}
			if want.Code != 1 || len(want.Systemd) != 0 || want.Kernel != "" {
				t.Errorf("systemd 252 itself: %+v, want exit 1 and nothing started", want)
			}
			says := strings.Join(own, "")
			if told := strings.Contains(says, " was not scheduled and nothing was shut down; "); told != c.told || len(own) > 1 {
				t.Errorf("gnsh's own lines %q; want one saying nothing was scheduled: %v", says, c.told)
			}
		})
	}
}

// planOne runs gnsh plan -o json on the host and turns its JSON into the outcome
// the command itself would have in the oracle's chroot.
func planOne(t *testing.T, gnsh string, argv []string, t0 time.Time) outcome {
	cmd := exec.Command(gnsh, append([]string{"plan", "-o", "json"}, argv...)...)
	cmd.Env = []string{"TZ=UTC", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("gnsh plan: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	dec.UseNumber()
	var p struct {
		Calls []struct {
			Service, Interface, Method, Signature string
			Args                                  []any
		}
		RebootParam *struct{ Op, Value string } `json:"reboot_param"`
		ExitCode    int                         `json:"exit_code"`
		Stdout      string
		Stderr      string
	}
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("gnsh plan output: %v\n%s", err, out)
	}
	if cmd.ProcessState.ExitCode() != p.ExitCode || stderr.String() != p.Stderr {
		t.Fatalf("gnsh plan exited %d with stderr %q; its JSON says %d, %q", cmd.ProcessState.ExitCode(), stderr.String(), p.ExitCode, p.Stderr)
	}
	o := outcome{Code: p.ExitCode, Stdout: p.Stdout, Stderr: timeRE.ReplaceAllString(p.Stderr, "<time>"), Param: "old"}
	if p.RebootParam != nil {
		o.Param = map[string]string{"write": p.RebootParam.Value, "unlink": "<none>"}[p.RebootParam.Op]
	}
	for _, c := range p.Calls {
		switch {
		case c.Service == "org.freedesktop.login1" && c.Method != "Introspect":
			args := make([]any, len(c.Args))
			for i, a := range c.Args {
				args[i] = a
				if n, ok := a.(json.Number); ok {
					u, err := strconv.ParseUint(n.String(), 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					args[i] = u
				}
			}
			o.Logind = append(o.Logind, render(logindtest.Call{Member: c.Method, Signature: c.Signature, Args: args}, t0))
		case c.Service == "kernel" && c.Method == "reboot" && len(c.Args) > 0:
			// The recorder returns from reboot(2); the real command ends the
			// namespace with SIGHUP (restart) or SIGINT (halt, power-off).
			switch c.Args[0] {
			case "RESTART", "RESTART2":
				o.Kernel, o.Code, o.Param = "restart", 129, ""
			case "POWER_OFF", "HALT":
				o.Kernel, o.Code, o.Param = "halt/poweroff", 130, ""
			}
		}
	}
	return o
}

// runOne runs argv in the bookworm chroot against a fresh fake logind;
// localBin = "" runs systemd's own commands. before, if set, runs once the
// fake services are up.
func runOne(t *testing.T, root, localBin string, argv []string, t0 time.Time, before func(*logindtest.Bus)) outcome {
	return runWith(t, root, localBin, argv, t0, before, &logindtest.Options{Version: 252})
}

// runWith is runOne with the fake logind's options; nil runs no logind on
// the bus at all (its name has no owner).
func runWith(t *testing.T, root, localBin string, argv []string, t0 time.Time, before func(*logindtest.Bus), lo *logindtest.Options) outcome {
	bus := logindtest.StartBus(t)
	var ld *logindtest.Logind
	if lo != nil {
		ld = bus.StartLogind(t, *lo)
	}
	sd := bus.StartSystemd(t, logindtest.SystemdOptions{})
	if before != nil {
		before(bus)
	}
	sock := strings.TrimPrefix(bus.Address(), "unix:path=")
	sock, _, _ = strings.Cut(sock, ",")
	r := rig.Run(t, rig.Spec{
		Root: root, BusDir: filepath.Dir(sock), LocalBin: localBin, Param: "old",
		Env:  []string{"DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/gnsh-bus/" + filepath.Base(sock), "SYSTEMD_IGNORE_CHROOT=1"},
		Argv: argv,
	})
	o := outcome{Code: r.Code, Kernel: r.Kernel, Stdout: r.Stdout, Stderr: timeRE.ReplaceAllString(r.Stderr, "<time>"), Param: r.Param}
	if ld != nil {
		for _, c := range ld.Calls() {
			o.Logind = append(o.Logind, render(c, t0))
		}
	}
	for _, c := range sd.Calls() {
		o.Systemd = append(o.Systemd, render(c, t0))
	}
	return o
}

// render prints a call; ScheduleShutdown's time becomes minutes from t0, or
// the absolute time for hh:mm, which does not depend on t0.
func render(c logindtest.Call, t0 time.Time) string {
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = fmt.Sprintf("%#v", a)
		if u, ok := a.(uint64); ok && c.Member == "ScheduleShutdown" {
			args[i] = renderWhen(u, t0)
		}
	}
	return fmt.Sprintf("%s(%s:%s)", c.Member, c.Signature, strings.Join(args, ","))
}

const usecPerMinute = 60_000_000

// renderWhen prints a ScheduleShutdown time. hh:mm is a whole minute within
// a day of t0, printed as is. Anything else is now + m minutes, computed in
// uint64 by both programs (wrapping around 2^64 for a huge m): the offset
// from t0 modulo 2^64, rounded to minutes, gives m back whatever the
// wrap-around did.
func renderWhen(u uint64, t0 time.Time) string {
	t0u := uint64(t0.UnixMicro())
	if u%usecPerMinute == 0 && u > t0u && u-t0u <= 24*60*usecPerMinute {
		return time.UnixMicro(int64(u)).UTC().Format(time.RFC3339)
	}
	d := u - t0u // modulo 2^64
	m := d / usecPerMinute
	if d%usecPerMinute >= usecPerMinute/2 {
		m++
	}
	return fmt.Sprintf("now+%dmin", m)
}
