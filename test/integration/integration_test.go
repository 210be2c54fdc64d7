// Package integration runs the real gnsh binary, under each legacy name,
// against a fake systemd-logind and systemd1 on a private dbus-daemon, and
// asserts what arrives on the wire: method names, argument values and D-Bus
// signatures, header flags, and the fallbacks.
//
// Every command runs in a new PID and mount namespace with a private /run
// (unshare --pid --mount), so the reboot(2) fallback only ends that
// namespace and /run/systemd/reboot-param is never the host's. Those
// namespaces need root; without root, unshare or dbus-daemon the tests skip,
// unless GNSH_REQUIRE_RIGS=1 (set by make test), which turns skips into
// failures.
package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/test/internal/rig"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gnsh-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin := filepath.Join(dir, "gnsh")
	build := exec.Command("go", "build", "-o", bin, "github.com/gnsh/gnsh/cmd/gnsh")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build gnsh: %v\n%s", err, out)
		os.Exit(1)
	}
	for _, n := range []string{"shutdown", "poweroff", "reboot", "halt"} {
		if err := os.Symlink("gnsh", filepath.Join(dir, n)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func need(t *testing.T) { rig.Need(t, "dbus-daemon") }

func run(t *testing.T, bus string, env []string, name string, args ...string) rig.Result {
	t.Helper()
	return rig.Run(t, rig.Spec{Env: append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus}, env...),
		Argv: append([]string{filepath.Join(binDir, name)}, args...)})
}

// wire renders calls as Member(sig:args) for comparison.
func wire(calls []logindtest.Call) []string {
	var s []string
	for _, c := range calls {
		args := make([]string, len(c.Args))
		for i, a := range c.Args {
			args[i] = fmt.Sprintf("%#v", a)
		}
		s = append(s, fmt.Sprintf("%s(%s:%s)", c.Member, c.Signature, strings.Join(args, ",")))
	}
	return s
}

func noInteractive(t *testing.T, calls []logindtest.Call) {
	t.Helper()
	for _, c := range calls {
		if c.Flags&dbus.FlagAllowInteractiveAuthorization != 0 {
			t.Errorf("%s was sent with ALLOW_INTERACTIVE_AUTHORIZATION; legacy commands never are", c.Member)
		}
	}
}

func TestImmediateByVersion(t *testing.T) {
	need(t)
	for _, tt := range []struct {
		version int
		cmd     []string
		wire    []string
		systemd []string
		warn    string
		param   string
	}{
		{252, []string{"reboot"}, []string{`SetWallMessage(sb:"",true)`, `RebootWithFlags(t:0x0)`}, nil, "", "<none>"},
		{252, []string{"poweroff", "--no-wall"}, []string{`SetWallMessage(sb:"",false)`, `PowerOffWithFlags(t:0x0)`}, nil, "", ""},
		{252, []string{"halt"}, []string{`SetWallMessage(sb:"",true)`, `HaltWithFlags(t:0x0)`}, nil, "", ""},
		{252, []string{"shutdown", "now", "going", "down"}, []string{`SetWallMessage(sb:"going down",true)`, `PowerOffWithFlags(t:0x0)`}, nil, "", ""},
		{252, []string{"shutdown", "-r", "now"}, []string{`SetWallMessage(sb:"",true)`, `RebootWithFlags(t:0x0)`}, nil, "", ""},
		{252, []string{"reboot", "recovery"}, []string{`SetWallMessage(sb:"",true)`, `RebootWithFlags(t:0x0)`}, nil, "", "recovery"},
		{248, []string{"reboot"}, []string{`SetWallMessage(sb:"",true)`, `RebootWithFlags(t:0x0)`}, nil, "", ""},
		{239, []string{"reboot"}, []string{`SetWallMessage(sb:"",true)`, `Reboot(b:false)`}, nil, "", ""},
		{239, []string{"halt"}, []string{`SetWallMessage(sb:"",true)`, `Halt(b:false)`}, nil, "", ""},
		{219, []string{"poweroff"}, []string{`PowerOff(b:false)`}, nil, "", ""},
		{219, []string{"halt"}, nil, []string{`StartUnit(ss:"halt.target","replace-irreversibly")`},
			"gnsh: warning: logind offers no HaltWithFlags or Halt method; inhibitors bypassed, starting halt.target directly", ""},
		{257, []string{"reboot"}, []string{`SetWallMessage(sb:"",true)`, `RebootWithFlags(t:0x0)`}, nil, "", ""},
	} {
		t.Run(fmt.Sprintf("v%d %s", tt.version, strings.Join(tt.cmd, " ")), func(t *testing.T) {
			bus := logindtest.StartBus(t)
			ld := bus.StartLogind(t, logindtest.Options{Version: tt.version})
			sd := bus.StartSystemd(t, logindtest.SystemdOptions{})
			r := run(t, bus.Address(), nil, tt.cmd[0], tt.cmd[1:]...)
			if r.Code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
			}
			if got := wire(ld.Calls()); !reflect.DeepEqual(got, tt.wire) {
				t.Errorf("logind got %q\nwant %q", got, tt.wire)
			}
			if got := wire(sd.Calls()); !reflect.DeepEqual(got, tt.systemd) {
				t.Errorf("systemd got %q, want %q", got, tt.systemd)
			}
			noInteractive(t, ld.Calls())
			if tt.warn == "" && r.Stderr != "" {
				t.Errorf("unexpected stderr %q", r.Stderr)
			}
			if tt.warn != "" && !strings.Contains(r.Stderr, tt.warn+"\n") {
				t.Errorf("stderr lacks %q:\n%s", tt.warn, r.Stderr)
			}
			if tt.param != "" && r.Param != tt.param {
				t.Errorf("reboot-param %q, want %q", r.Param, tt.param)
			}
			if tt.systemd == nil && !ld.State().PreparingForShutdown {
				t.Errorf("logind did not start a shutdown")
			}
		})
	}
}

func TestScheduleCancelShow(t *testing.T) {
	need(t)
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 247})
	bus.StartSystemd(t, logindtest.SystemdOptions{})

	before := uint64(time.Now().UnixMicro())
	r := run(t, bus.Address(), nil, "shutdown", "-r", "+5", "kernel", "update")
	after := uint64(time.Now().UnixMicro())
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	calls := ld.Calls()
	if len(calls) != 3 || calls[0].Member != "SetWallMessage" || calls[1].Member != "ScheduleShutdown" || calls[2].Member != "Get" {
		t.Fatalf("calls %q", wire(calls))
	}
	if calls[1].Signature != "st" || calls[1].Args[0] != "reboot" {
		t.Fatalf("ScheduleShutdown %q", wire(calls[1:2]))
	}
	usec := calls[1].Args[1].(uint64)
	if usec < before+300_000_000 || usec > after+300_000_000 {
		t.Fatalf("scheduled for %d, want now+5min (%d..%d)", usec, before+300_000_000, after+300_000_000)
	}
	when := time.UnixMicro(int64(usec)).UTC().Format("Mon 2006-01-02 15:04:05 MST")
	if want := "Reboot scheduled for " + when + ", use 'shutdown -c' to cancel.\n"; r.Stderr != want {
		t.Fatalf("stderr %q, want %q", r.Stderr, want)
	}
	if st := ld.State(); st.ScheduledType != "reboot" || st.WallMessage != "kernel update" || !st.EnableWallMessages {
		t.Fatalf("logind state %+v", st)
	}

	r = run(t, bus.Address(), nil, "shutdown", "--show")
	if r.Code != 0 || !strings.HasPrefix(r.Stderr, "Reboot scheduled for "+when) {
		t.Fatalf("--show: %d %q", r.Code, r.Stderr)
	}

	r = run(t, bus.Address(), nil, "shutdown", "-c", "--no-wall", "never", "mind")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("-c: %d %q", r.Code, r.Stderr)
	}
	got := wire(ld.Calls()[4:])
	if want := []string{`SetWallMessage(sb:"never mind",false)`, `CancelScheduledShutdown(:)`}; !reflect.DeepEqual(got, want) {
		t.Fatalf("-c calls %q, want %q", got, want)
	}
	if typ, _ := ld.Scheduled(); typ != "" {
		t.Fatalf("still scheduled: %q", typ)
	}
	r = run(t, bus.Address(), nil, "shutdown", "--show")
	if r.Code != 1 || r.Stderr != "No scheduled shutdown.\n" {
		t.Fatalf("--show after -c: %d %q", r.Code, r.Stderr)
	}

	// -k: a dry-run schedule, and no wall message is sent.
	r = run(t, bus.Address(), nil, "shutdown", "-k", "+2", "ignored", "words")
	if r.Code != 0 || !strings.HasPrefix(r.Stderr, "Shutdown scheduled for ") {
		t.Fatalf("-k: %d %q", r.Code, r.Stderr)
	}
	last := ld.Calls()[len(ld.Calls())-2]
	if last.Member != "ScheduleShutdown" || last.Args[0] != "dry-poweroff" || !ld.State().DryRun {
		t.Fatalf("-k sent %q", wire([]logindtest.Call{last}))
	}
	// -k now: nothing at all.
	n := len(ld.Calls())
	if r = run(t, bus.Address(), nil, "shutdown", "-k", "now"); r.Code != 0 || len(ld.Calls()) != n {
		t.Fatalf("-k now: %d, calls %q", r.Code, wire(ld.Calls()[n:]))
	}
}

func TestKexecScheduleOnOldLogind(t *testing.T) {
	need(t)
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 247})
	// shutdown -K +5: v247 rejects "kexec"; gnsh schedules a reboot.
	r := run(t, bus.Address(), nil, "shutdown", "-K", "+5")
	if r.Code != 0 || !strings.Contains(r.Stderr, "logind cannot schedule a kexec reboot") {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if typ, _ := ld.Scheduled(); typ != "reboot" {
		t.Fatalf("scheduled %q", typ)
	}
}

func TestFallbacks(t *testing.T) {
	need(t)
	t.Run("logind absent: StartUnit on systemd1", func(t *testing.T) {
		bus := logindtest.StartBus(t)
		sd := bus.StartSystemd(t, logindtest.SystemdOptions{})
		r := run(t, bus.Address(), nil, "reboot")
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		if got := wire(sd.Calls()); !reflect.DeepEqual(got, []string{`StartUnit(ss:"reboot.target","replace-irreversibly")`}) {
			t.Fatalf("systemd got %q", got)
		}
		if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); len(lines) != 1 ||
			!strings.HasPrefix(lines[0], "gnsh: warning: cannot reach systemd-logind (") ||
			!strings.HasSuffix(lines[0], "inhibitors bypassed, starting reboot.target directly") {
			t.Fatalf("want one bypass line, got %q", r.Stderr)
		}
	})
	t.Run("no bus at all: reboot(2) for root", func(t *testing.T) {
		r := run(t, "unix:path=/nonexistent/bus", nil, "reboot")
		if r.Kernel != "restart" {
			t.Fatalf("want reboot(2) RESTART, got exit %d: %s", r.Code, r.Stderr)
		}
		if !strings.Contains(r.Stderr, "syncing and calling reboot(2) directly") {
			t.Fatalf("stderr %q", r.Stderr)
		}
	})
	t.Run("no bus: a scheduled shutdown is refused, not made immediate", func(t *testing.T) {
		// As systemd 252 (test/oracle TestScheduleFails): exit 1, nothing
		// started, and gnsh's line says how to power off at once.
		r := run(t, "unix:path=/nonexistent/bus", nil, "shutdown", "-h", "+5")
		if r.Kernel != "" || r.Code != 1 || !strings.HasPrefix(r.Stderr, "Failed to connect to bus: ") ||
			!strings.Contains(r.Stderr, "\ngnsh: the power-off was not scheduled and nothing was shut down; to power off at once, run 'poweroff'") {
			t.Fatalf("exit %d, kernel %q: %s", r.Code, r.Kernel, r.Stderr)
		}
	})
	t.Run("access denied is final", func(t *testing.T) {
		bus := logindtest.StartBus(t)
		ld := bus.StartLogind(t, logindtest.Options{Errors: map[string]*dbus.Error{
			"RebootWithFlags": dbus.NewError("org.freedesktop.DBus.Error.AccessDenied", []any{"Access denied"})}})
		sd := bus.StartSystemd(t, logindtest.SystemdOptions{})
		r := run(t, bus.Address(), nil, "reboot")
		if r.Code != 1 || r.Stderr != "Call to Reboot failed: Access denied\n" || len(sd.Calls()) != 0 {
			t.Fatalf("exit %d %q, systemd %q", r.Code, r.Stderr, wire(sd.Calls()))
		}
		if got := ld.Calls(); len(got) != 2 {
			t.Fatalf("calls %q", wire(got))
		}
	})
	t.Run("-f never talks to the bus", func(t *testing.T) {
		bus := logindtest.StartBus(t)
		ld := bus.StartLogind(t, logindtest.Options{})
		r := rig.Run(t, rig.Spec{Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, Param: "fw",
			Argv: []string{filepath.Join(binDir, "reboot"), "-f"}})
		if r.Kernel != "restart" || len(ld.AllCalls()) != 0 {
			t.Fatalf("exit %d %q, calls %q", r.Code, r.Stderr, wire(ld.AllCalls()))
		}
		// plain reboot -f unlinks the parameter at parse time, so there is
		// none to pass to the kernel.
		if r.Stderr != "Rebooting.\n" {
			t.Fatalf("stderr %q", r.Stderr)
		}
		r = run(t, bus.Address(), nil, "reboot", "-f", "fw")
		if r.Kernel != "restart" || !strings.Contains(r.Stderr, "Rebooting with argument 'fw'.") {
			t.Fatalf("reboot -f fw: exit %d %q", r.Code, r.Stderr)
		}
		r = run(t, bus.Address(), nil, "halt", "-f", "-n")
		if r.Kernel != "halt/poweroff" || r.Stderr != "Halting.\n" {
			t.Fatalf("halt -f -n: exit %d %q", r.Code, r.Stderr)
		}
	})
}

// TestPlanMatchesWire checks that gnsh plan lists exactly the calls the
// command then makes against a systemd 252 logind.
func TestPlanMatchesWire(t *testing.T) {
	need(t)
	for _, cmd := range [][]string{
		{"reboot"}, {"poweroff", "--no-wall"}, {"halt"}, {"shutdown", "now", "bye"}, {"shutdown", "-r", "+5", "msg"},
		{"shutdown", "-k", "+3"}, {"shutdown", "-c", "x"}, {"shutdown", "-H", "10:30"}, {"reboot", "-w"},
	} {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			bus := logindtest.StartBus(t)
			ld := bus.StartLogind(t, logindtest.Options{Version: 252})
			out, err := exec.Command(filepath.Join(binDir, "gnsh"), append([]string{"plan", "-o", "json"}, cmd...)...).Output()
			if err != nil {
				t.Fatalf("gnsh plan: %v", err)
			}
			var plan struct {
				Calls []struct {
					Service, Interface, Method, Signature string
					Args                                  []any
				}
			}
			if err := json.Unmarshal(out, &plan); err != nil {
				t.Fatal(err)
			}
			r := run(t, bus.Address(), nil, cmd[0], cmd[1:]...)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			var want []string
			for _, c := range plan.Calls {
				if c.Method != "Introspect" && c.Service == "org.freedesktop.login1" {
					want = append(want, c.Method+"("+c.Signature+")")
				}
			}
			var got []string
			for _, c := range ld.Calls() {
				got = append(got, c.Member+"("+c.Signature+")")
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("wire %q, plan %q", got, want)
			}
		})
	}
}
