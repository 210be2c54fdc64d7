package handoff

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/legacy"
)

// fakeHost is a Host with settable facts that records reboot-param changes.
type fakeHost struct {
	euid, uid   int
	tty, chroot bool
	container   bool
	param       string
	paramErr    error
	sessions    []Session
	ops         []string
}

func (h *fakeHost) Euid() int                     { return h.euid }
func (h *fakeHost) UID() int                      { return h.uid }
func (h *fakeHost) OnTTY() bool                   { return h.tty }
func (h *fakeHost) InChroot() bool                { return h.chroot }
func (h *fakeHost) InContainer() bool             { return h.container }
func (h *fakeHost) RebootParam() string           { return h.param }
func (h *fakeHost) Sessions() []Session           { return h.sessions }
func (h *fakeHost) UserName(uid uint32) string    { return fmt.Sprintf("user%d", uid) }
func (h *fakeHost) ProcessComm(pid uint32) string { return "" }
func (h *fakeHost) WriteRebootParam(p string) error {
	h.ops = append(h.ops, "write "+p)
	if h.paramErr == nil {
		h.param = p
	}
	return h.paramErr
}
func (h *fakeHost) UnlinkRebootParam() error {
	h.ops = append(h.ops, "unlink")
	if h.paramErr == nil {
		h.param = ""
	}
	return h.paramErr
}

// fakeLogind answers from a method set and per-method errors, recording
// calls as "Method(args)".
type fakeLogind struct {
	methods   []string
	errs      map[string]error
	inhib     []Inhibitor
	calls     []string
	scheduled string
	when      uint64
}

func v252() []string {
	return []string{"PowerOff", "Reboot", "Halt", "PowerOffWithFlags", "RebootWithFlags", "HaltWithFlags",
		"ScheduleShutdown", "CancelScheduledShutdown", "SetWallMessage", "ListInhibitors"}
}

func (f *fakeLogind) rec(name string, args ...any) error {
	s := name + "("
	for i, a := range args {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%v", a)
	}
	f.calls = append(f.calls, s+")")
	return f.errs[name]
}

func (f *fakeLogind) Caps(context.Context) (Caps, error) {
	if err := f.rec("Introspect"); err != nil {
		return Caps{}, err
	}
	m := map[string]bool{}
	for _, n := range f.methods {
		m[n] = true
	}
	return Caps{Methods: m}, nil
}
func (f *fakeLogind) SetWallMessage(_ context.Context, msg string, en bool) error {
	return f.rec("SetWallMessage", fmt.Sprintf("%q", msg), en)
}
func (f *fakeLogind) ShutdownWithFlags(_ context.Context, m string, flags uint64) error {
	if err := f.errs[m+"WithFlags/"+fmt.Sprint(flags)]; err != nil {
		f.rec(m+"WithFlags", flags)
		return err
	}
	return f.rec(m+"WithFlags", flags)
}
func (f *fakeLogind) Shutdown(_ context.Context, m string, interactive bool) error {
	return f.rec(m, interactive)
}
func (f *fakeLogind) ScheduleShutdown(_ context.Context, typ string, usec uint64) error {
	if err := f.errs["ScheduleShutdown/"+typ]; err != nil {
		f.rec("ScheduleShutdown", typ, usec)
		return err
	}
	if err := f.rec("ScheduleShutdown", typ, usec); err != nil {
		return err
	}
	f.scheduled, f.when = strings.TrimPrefix(typ, "dry-"), usec
	return nil
}
func (f *fakeLogind) CancelScheduledShutdown(context.Context) (bool, error) {
	return f.scheduled != "", f.rec("CancelScheduledShutdown")
}
func (f *fakeLogind) ScheduledShutdown(context.Context) (string, uint64, error) {
	return f.scheduled, f.when, f.rec("GetScheduledShutdown")
}
func (f *fakeLogind) ListInhibitors(context.Context) ([]Inhibitor, error) {
	return f.inhib, f.rec("ListInhibitors")
}

type fakeSystemd struct {
	calls []string
	err   error
}

func (s *fakeSystemd) StartUnit(_ context.Context, name, mode string) error {
	s.calls = append(s.calls, "StartUnit("+name+","+mode+")")
	return s.err
}

type fakeKernel struct {
	calls []string
	err   error
}

func (k *fakeKernel) Sync() { k.calls = append(k.calls, "sync") }
func (k *fakeKernel) Reboot(cmd RebootCmd, arg string) error {
	k.calls = append(k.calls, strings.TrimSpace("reboot "+cmd.String()+" "+arg))
	if cmd == CmdEnableCAD {
		return nil
	}
	return k.err
}

type env struct {
	host    *fakeHost
	logind  *fakeLogind // nil = unreachable
	systemd *fakeSystemd
	kernel  *fakeKernel
	prep    Preparer
}

func newEnv() *env {
	return &env{host: &fakeHost{}, logind: &fakeLogind{methods: v252()}, systemd: &fakeSystemd{},
		kernel: &fakeKernel{err: syscall.EPERM}}
}

func (e *env) run(req *legacy.Request) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	r := &Runner{
		Stdout: &out, Stderr: &errb, Host: e.host, Kernel: e.kernel, Location: time.UTC, Preparer: e.prep,
		DialLogind: func(context.Context) (Logind, error) {
			if e.logind == nil {
				return nil, &UnreachableError{Op: "connect to bus", Err: syscall.ENOENT}
			}
			return e.logind, nil
		},
		DialSystemd: func(context.Context) (Systemd, error) { return e.systemd, nil },
	}
	err := r.Run(context.Background(), req)
	if err != nil {
		code = 1
		if msg := err.Error(); msg != "" {
			errb.WriteString(msg + "\n")
		}
	}
	return code, out.String(), errb.String()
}

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func req(a legacy.Action, mod ...func(*legacy.Request)) *legacy.Request {
	r := &legacy.Request{Command: "test", Action: a}
	for _, m := range mod {
		m(r)
	}
	return r
}

func at(m int) func(*legacy.Request) {
	return func(r *legacy.Request) { r.When = legacy.Usec(t0.Add(time.Duration(m) * time.Minute)) }
}
func wall(w ...string) func(*legacy.Request) { return func(r *legacy.Request) { r.Wall = w } }
func force(r *legacy.Request)                { r.Force = 2 }
func dry(r *legacy.Request)                  { r.DryRun = true }
func noWall(r *legacy.Request)               { r.NoWall = true }

var bypass = "gnsh: warning: "

// handoffCase is one run of the Runner against the fakes and what it must
// have done.
type handoffCase struct {
	name       string
	req        *legacy.Request
	setup      func(*env)
	code       int
	logind     []string
	systemd    []string
	kernel     []string
	stderrHas  []string
	stderrNone bool
}

func (tt handoffCase) check(t *testing.T) {
	e := newEnv()
	if tt.setup != nil {
		tt.setup(e)
	}
	code, _, stderr := e.run(tt.req)
	if code != tt.code {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
	}
	var lc []string
	if e.logind != nil {
		lc = e.logind.calls
	}
	if !reflect.DeepEqual(lc, tt.logind) {
		t.Errorf("logind calls %q, want %q", lc, tt.logind)
	}
	if !reflect.DeepEqual(e.systemd.calls, tt.systemd) {
		t.Errorf("systemd calls %q, want %q", e.systemd.calls, tt.systemd)
	}
	if !reflect.DeepEqual(e.kernel.calls, tt.kernel) {
		t.Errorf("kernel calls %q, want %q", e.kernel.calls, tt.kernel)
	}
	for _, s := range tt.stderrHas {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr)
		}
	}
	if tt.stderrNone && stderr != "" {
		t.Errorf("stderr = %q, want nothing", stderr)
	}
}

func TestImmediate(t *testing.T) {
	for _, tt := range []handoffCase{
		{name: "reboot", req: req(legacy.Reboot),
			logind: []string{"Introspect()", `SetWallMessage("",true)`, "RebootWithFlags(0)"}, stderrNone: true},
		{name: "poweroff --no-wall", req: req(legacy.PowerOff, noWall),
			logind: []string{"Introspect()", `SetWallMessage("",false)`, "PowerOffWithFlags(0)"}, stderrNone: true},
		{name: "halt with wall", req: req(legacy.Halt, wall("bye", "all")),
			logind: []string{"Introspect()", `SetWallMessage("bye all",true)`, "HaltWithFlags(0)"}, stderrNone: true},
		{name: "kexec uses the kexec flag", req: req(legacy.Kexec),
			logind: []string{"Introspect()", `SetWallMessage("",true)`, "RebootWithFlags(2)"}},
		{name: "kexec flag refused: plain reboot through logind", req: req(legacy.Kexec),
			setup: func(e *env) {
				e.logind.errs = map[string]error{"RebootWithFlags/2": &BusError{Name: ErrInvalidArgs, Message: "Invalid flags parameter"}}
			},
			logind:    []string{"Introspect()", `SetWallMessage("",true)`, "RebootWithFlags(2)", "RebootWithFlags(0)"},
			stderrHas: []string{bypass + "logind cannot reboot via kexec (Invalid flags parameter); rebooting normally"}},
		{name: "v239 logind: old method", req: req(legacy.Halt),
			setup: func(e *env) {
				e.logind.methods = []string{"PowerOff", "Reboot", "Halt", "SetWallMessage", "ScheduleShutdown"}
			},
			logind: []string{"Introspect()", `SetWallMessage("",true)`, "Halt(false)"}, stderrNone: true},
		{name: "WithFlags answers UnknownMethod: old method", req: req(legacy.Reboot),
			setup: func(e *env) {
				e.logind.errs = map[string]error{"RebootWithFlags": &BusError{Name: ErrUnknownMethod, Message: "Unknown method"}}
			},
			logind: []string{"Introspect()", `SetWallMessage("",true)`, "RebootWithFlags(0)", "Reboot(false)"}, stderrNone: true},
		{name: "v219 logind has no Halt: StartUnit, said so", req: req(legacy.Halt),
			setup:     func(e *env) { e.logind.methods = []string{"PowerOff", "Reboot"} },
			logind:    []string{"Introspect()"},
			systemd:   []string{"StartUnit(halt.target,replace-irreversibly)"},
			stderrHas: []string{bypass + "logind offers no HaltWithFlags or Halt method; inhibitors bypassed, starting halt.target directly"}},
		{name: "logind unreachable: StartUnit", req: req(legacy.Reboot),
			setup:     func(e *env) { e.logind = nil },
			systemd:   []string{"StartUnit(reboot.target,replace-irreversibly)"},
			stderrHas: []string{bypass + "cannot reach systemd-logind (connect to bus: no such file or directory); inhibitors bypassed, starting reboot.target directly"}},
		{name: "logind and systemd unreachable: root reboots with reboot(2)", req: req(legacy.Reboot),
			setup:   func(e *env) { e.logind = nil; e.systemd.err = errors.New("no systemd") },
			systemd: []string{"StartUnit(reboot.target,replace-irreversibly)"},
			kernel:  []string{"sync", "reboot CAD_ON", "reboot RESTART"}, code: 1,
			stderrHas: []string{"cannot start reboot.target (no systemd); syncing and calling reboot(2) directly",
				"Rebooting.", "Failed to reboot: Operation not permitted"}},
		{name: "non-root: no reboot(2) fallback", req: req(legacy.PowerOff),
			setup:   func(e *env) { e.host.euid = 1000; e.logind = nil; e.systemd.err = errors.New("Access denied") },
			systemd: []string{"StartUnit(poweroff.target,replace-irreversibly)"}, code: 1,
			stderrHas: []string{"Failed to start poweroff.target: Access denied"}},
		{name: "access denied is final", req: req(legacy.Reboot),
			setup: func(e *env) {
				e.host.euid = 1000
				e.logind.errs = map[string]error{"RebootWithFlags": &BusError{Name: ErrInteractiveAuth, Message: "Interactive authentication required."}}
			},
			logind: []string{"Introspect()", `SetWallMessage("",true)`, "RebootWithFlags(0)"}, code: 1,
			stderrHas: []string{"Call to Reboot failed: Interactive authentication required."}},
		{name: "operation in progress is final", req: req(legacy.Reboot),
			setup: func(e *env) {
				e.logind.errs = map[string]error{"RebootWithFlags": &BusError{Name: ErrOperationInProgress, Message: "There's already a shutdown or sleep operation in progress"}}
			},
			logind: []string{"Introspect()", `SetWallMessage("",true)`, "RebootWithFlags(0)"}, code: 1,
			stderrHas: []string{"Call to Reboot failed: There's already a shutdown or sleep operation in progress"}},
		{name: "other logind error: StartUnit", req: req(legacy.PowerOff),
			setup: func(e *env) {
				e.logind.errs = map[string]error{"PowerOffWithFlags": &BusError{Name: "org.freedesktop.DBus.Error.Failed", Message: "Unit poweroff.target is masked."}}
			},
			logind:  []string{"Introspect()", `SetWallMessage("",true)`, "PowerOffWithFlags(0)"},
			systemd: []string{"StartUnit(poweroff.target,replace-irreversibly)"},
			stderrHas: []string{"Call to PowerOff failed: Unit poweroff.target is masked.",
				bypass + "systemd-logind refused (Unit poweroff.target is masked.); inhibitors bypassed"}},
		{name: "SetWallMessage failure is only a warning", req: req(legacy.Reboot),
			setup: func(e *env) {
				e.logind.errs = map[string]error{"SetWallMessage": &BusError{Name: ErrAccessDenied, Message: "Access denied"}}
			},
			logind:    []string{"Introspect()", `SetWallMessage("",true)`, "RebootWithFlags(0)"},
			stderrHas: []string{"Failed to set wall message, ignoring: Access denied"}},
		{name: "-w: no call, exit 0", req: req(legacy.Halt, dry), stderrNone: true},
		{name: "-w without bus as root: exit 0", req: req(legacy.Halt, dry), setup: func(e *env) { e.logind = nil }, stderrNone: true},
		{name: "-w without bus as non-root", req: req(legacy.Halt, dry), code: 1,
			setup: func(e *env) { e.logind = nil; e.host.euid = 1000 }, stderrHas: []string{"Need to be root."}},
		{name: "-f: sync and reboot(2), never logind", req: req(legacy.PowerOff, force),
			kernel: []string{"sync", "reboot CAD_ON", "reboot POWER_OFF"}, code: 1,
			stderrHas: []string{"Powering off.", "Failed to poweroff: Operation not permitted"}},
		{name: "-f -n: no sync", req: req(legacy.Halt, force, func(r *legacy.Request) { r.NoSync = true }),
			kernel: []string{"reboot CAD_ON", "reboot HALT"}, code: 1, stderrHas: []string{"Halting."}},
		{name: "-f with reboot parameter", req: req(legacy.Reboot, force),
			setup:  func(e *env) { e.host.param = "recovery" },
			kernel: []string{"sync", "reboot CAD_ON", "reboot RESTART2 recovery", "reboot RESTART"}, code: 1,
			stderrHas: []string{"Rebooting with argument 'recovery'.",
				"Failed to reboot with parameter, retrying without: Operation not permitted", "Rebooting.",
				"Failed to reboot: Operation not permitted\nFailed to reboot: Operation not permitted"}},
		{name: "-f in a container ignores the parameter", req: req(legacy.Reboot, force),
			setup:  func(e *env) { e.host.param = "recovery"; e.host.container = true },
			kernel: []string{"sync", "reboot CAD_ON", "reboot RESTART"}, code: 1},
		{name: "-f as non-root", req: req(legacy.Reboot, force), setup: func(e *env) { e.host.euid = 1000 },
			code: 1, stderrHas: []string{"Need to be root."}},
		{name: "chroot: nothing", req: req(legacy.Reboot, force), setup: func(e *env) { e.host.chroot = true },
			stderrHas: []string{"Running in chroot, ignoring request."}},
	} {
		t.Run(tt.name, tt.check)
	}
}

func TestScheduled(t *testing.T) {
	when := legacy.Usec(t0.Add(5 * time.Minute))
	for _, tt := range []handoffCase{
		{name: "shutdown -r +5 msg", req: req(legacy.Reboot, at(5), wall("kernel", "update")),
			logind:    []string{"Introspect()", `SetWallMessage("kernel update",true)`, fmt.Sprintf("ScheduleShutdown(reboot,%d)", when), "GetScheduledShutdown()"},
			stderrHas: []string{"Reboot scheduled for Sat 2026-11-21 10:05:00 UTC, use 'shutdown -c' to cancel.\n"}},
		{name: "shutdown -H +5", req: req(legacy.Halt, at(5)),
			logind:    []string{"Introspect()", `SetWallMessage("",true)`, fmt.Sprintf("ScheduleShutdown(halt,%d)", when), "GetScheduledShutdown()"},
			stderrHas: []string{"Shutdown scheduled for Sat 2026-11-21 10:05:00 UTC"}},
		{name: "shutdown -k +5: dry type, no wall message", req: req(legacy.PowerOff, at(5), dry, wall("x")),
			logind:    []string{"Introspect()", fmt.Sprintf("ScheduleShutdown(dry-poweroff,%d)", when), "GetScheduledShutdown()"},
			stderrHas: []string{"Shutdown scheduled for"}},
		{name: "kexec schedule", req: req(legacy.Kexec, at(5)),
			logind:    []string{"Introspect()", `SetWallMessage("",true)`, fmt.Sprintf("ScheduleShutdown(kexec,%d)", when), "GetScheduledShutdown()"},
			stderrHas: []string{"Reboot via kexec scheduled for"}},
		{name: "kexec refused by older logind: reboot", req: req(legacy.Kexec, at(5)),
			setup: func(e *env) {
				e.logind.errs = map[string]error{"ScheduleShutdown/kexec": &BusError{Name: ErrInvalidArgs, Message: "Unsupported shutdown type"}}
			},
			logind: []string{"Introspect()", `SetWallMessage("",true)`, fmt.Sprintf("ScheduleShutdown(kexec,%d)", when),
				fmt.Sprintf("ScheduleShutdown(reboot,%d)", when), "GetScheduledShutdown()"},
			stderrHas: []string{"logind cannot schedule a kexec reboot (Unsupported shutdown type); scheduling a normal reboot"}},
		// A TIME logind does not take is refused, never made immediate:
		// systemd 252 does the same (test/oracle TestScheduleFails).
		{name: "no ScheduleShutdown (v219): refused, said so", req: req(legacy.Reboot, at(5)), code: 1,
			setup:  func(e *env) { e.logind.methods = []string{"PowerOff", "Reboot"} },
			logind: []string{"Introspect()"},
			stderrHas: []string{"Failed to schedule shutdown: logind offers no ScheduleShutdown method\n" +
				"gnsh: the reboot was not scheduled and nothing was shut down; to reboot at once, run 'reboot' (if logind cannot be used, it starts reboot.target directly)\n"}},
		{name: "schedule refused: exit 1, no fallback", req: req(legacy.PowerOff, at(5)), code: 1,
			setup: func(e *env) {
				e.logind.errs = map[string]error{"ScheduleShutdown": &BusError{Name: ErrInvalidArgs, Message: "Unsupported shutdown type"}}
			},
			logind: []string{"Introspect()", `SetWallMessage("",true)`, fmt.Sprintf("ScheduleShutdown(poweroff,%d)", when)},
			stderrHas: []string{"Failed to schedule shutdown: Unsupported shutdown type\n" +
				"gnsh: the power-off was not scheduled and nothing was shut down; to power off at once, run 'poweroff'"}},
		{name: "logind unreachable: refused, exit 1", req: req(legacy.Halt, at(5)), code: 1,
			setup: func(e *env) { e.logind = nil },
			stderrHas: []string{"Failed to connect to bus: No such file or directory\n" +
				"gnsh: the halt was not scheduled and nothing was shut down; to halt at once, run 'halt' (if logind cannot be used, it starts halt.target directly)\n"}},
		{name: "schedule access denied: exit 1", req: req(legacy.PowerOff, at(5)), code: 1,
			setup: func(e *env) {
				e.logind.errs = map[string]error{"ScheduleShutdown": &BusError{Name: ErrAccessDenied, Message: "Access denied"}}
			},
			logind:    []string{"Introspect()", `SetWallMessage("",true)`, fmt.Sprintf("ScheduleShutdown(poweroff,%d)", when)},
			stderrHas: []string{"Failed to schedule shutdown: Access denied\n"}},
		{name: "-k +5 without logind: exit 1", req: req(legacy.PowerOff, at(5), dry), code: 1,
			setup: func(e *env) { e.logind = nil }, stderrHas: []string{"Failed to connect to bus: No such file or directory\n"}},
	} {
		t.Run(tt.name, tt.check)
	}
}

// A dry run at +0 has already expired and been reset when systemd reads
// the schedule back: it prints "No scheduled shutdown." and still exits 0.
type expiringLogind struct{ *fakeLogind }

func (f expiringLogind) ScheduledShutdown(ctx context.Context) (string, uint64, error) {
	f.scheduled = ""
	return f.fakeLogind.ScheduledShutdown(ctx)
}

func TestScheduleReadBackEmpty(t *testing.T) {
	var errb bytes.Buffer
	fl := &fakeLogind{methods: v252()}
	r := &Runner{Stdout: io.Discard, Stderr: &errb, Host: &fakeHost{}, Kernel: &fakeKernel{},
		DialLogind: func(context.Context) (Logind, error) { return expiringLogind{fl}, nil }}
	if err := r.Run(context.Background(), req(legacy.PowerOff, at(0), dry)); err != nil || errb.String() != "No scheduled shutdown.\n" {
		t.Fatalf("err %v, stderr %q", err, errb.String())
	}
}

func TestCancelAndShow(t *testing.T) {
	e := newEnv()
	if code, _, stderr := e.run(req(legacy.Show)); code != 1 || stderr != "No scheduled shutdown.\n" {
		t.Fatalf("--show with nothing: %d %q", code, stderr)
	}
	e.logind.scheduled, e.logind.when = "poweroff", legacy.Usec(t0)
	if code, _, stderr := e.run(req(legacy.Show)); code != 0 ||
		stderr != "Shutdown scheduled for Sat 2026-11-21 10:00:00 UTC, use 'shutdown -c' to cancel.\n" {
		t.Fatalf("--show: %d %q", code, stderr)
	}
	e = newEnv()
	code, _, stderr := e.run(req(legacy.Cancel, wall("never", "mind"), noWall))
	want := []string{"Introspect()", `SetWallMessage("never mind",false)`, "CancelScheduledShutdown()"}
	if code != 0 || stderr != "" || !reflect.DeepEqual(e.logind.calls, want) {
		t.Fatalf("-c: %d %q %q", code, stderr, e.logind.calls)
	}
	e.logind = nil
	if code, _, stderr := e.run(req(legacy.Cancel)); code != 1 || !strings.HasPrefix(stderr, "Failed to connect to bus: ") {
		t.Fatalf("-c without bus: %d %q", code, stderr)
	}
	e = newEnv()
	e.logind.errs = map[string]error{"CancelScheduledShutdown": &BusError{Name: ErrAccessDenied, Message: "Access denied"}}
	if code, _, stderr := e.run(req(legacy.Cancel)); code != 1 ||
		stderr != "Failed to talk to logind, shutdown hasn't been cancelled: Access denied\n" {
		t.Fatalf("-c refused: %d %q", code, stderr)
	}
	e = newEnv()
	e.logind.methods = []string{"PowerOff", "Reboot"}
	if code, _, stderr := e.run(req(legacy.Cancel)); code != 1 ||
		stderr != "Failed to talk to logind, shutdown hasn't been cancelled: logind offers no CancelScheduledShutdown method\n" {
		t.Fatalf("-c on v219: %d %q", code, stderr)
	}
}

func TestInhibitorCheck(t *testing.T) {
	e := newEnv()
	e.host.euid, e.host.uid, e.host.tty = 1000, 1000, true
	e.logind.inhib = []Inhibitor{
		{What: "shutdown:sleep", Who: "backup", Why: "copying", Mode: "block", UID: 0, PID: 42},
		{What: "shutdown", Who: "kubelet", Why: "Kubelet needs time", Mode: "delay", UID: 0, PID: 7},
		{What: "sleep", Who: "x", Why: "y", Mode: "block", UID: 0, PID: 8},
	}
	e.host.sessions = []Session{
		{ID: "1", UID: 1000, Class: "user", Type: "tty", TTY: "tty1"},      // caller: ignored
		{ID: "2", UID: 1001, Class: "user", Type: "tty", TTY: "pts/3"},     // counted
		{ID: "3", UID: 1002, Class: "user", Type: "unspecified"},           // ssh without pty type: ignored
		{ID: "4", UID: 1003, Class: "greeter", Type: "x11", Seat: "seat0"}, // not class user
		{ID: "5", UID: 1004, Class: "user", Type: "wayland", Seat: "seat0"},
	}
	code, _, stderr := e.run(req(legacy.Reboot))
	want := "Operation inhibited by \"backup\" (PID 42 \"n/a\", user user0), reason is \"copying\".\n" +
		"User user1001 is logged in on pts/3.\n" +
		"User user1004 is logged in on seat0.\n" +
		"Please retry operation after closing inhibitors and logging out other users.\n" +
		"Alternatively, ignore inhibitors and users with 'systemctl reboot -i'.\n"
	if code != 1 || stderr != want {
		t.Fatalf("exit %d, stderr:\n%s\nwant:\n%s", code, stderr, want)
	}
	if !reflect.DeepEqual(e.logind.calls, []string{"ListInhibitors()"}) {
		t.Fatalf("calls %q", e.logind.calls)
	}
	// Root, or no terminal: not checked at all.
	for _, mod := range []func(*env){func(e *env) { e.host.euid = 0 }, func(e *env) { e.host.tty = false }} {
		e2 := newEnv()
		e2.host.euid, e2.host.tty = 1000, true
		e2.logind.inhib = e.logind.inhib
		mod(e2)
		if code, _, _ := e2.run(req(legacy.Reboot)); code != 0 || e2.logind.calls[0] != "Introspect()" {
			t.Fatalf("unchecked run: %d %q", code, e2.logind.calls)
		}
	}
}

func TestRebootParam(t *testing.T) {
	e := newEnv()
	r := req(legacy.Reboot, func(r *legacy.Request) { r.ParamOp, r.Param = legacy.ParamWrite, "fw" })
	e.host.chroot = true // the parameter is written even in a chroot, as systemd does
	if code, _, _ := e.run(r); code != 0 || !reflect.DeepEqual(e.host.ops, []string{"write fw"}) {
		t.Fatalf("write: %d %q", code, e.host.ops)
	}
	e = newEnv()
	e.host.paramErr = syscall.EACCES
	r = req(legacy.Reboot, func(r *legacy.Request) { r.ParamOp = legacy.ParamUnlink })
	code, _, stderr := e.run(r)
	if code != 1 || stderr != "Failed to unlink reboot parameter file: Permission denied\n" || len(e.logind.calls) != 0 {
		t.Fatalf("unlink failure: %d %q %q", code, stderr, e.logind.calls)
	}
}

type prepFunc func(context.Context, *legacy.Request) error

func (f prepFunc) Prepare(ctx context.Context, r *legacy.Request) (Prepared, error) {
	return nil, f(ctx, r)
}

// finishRecorder prepares nothing and records what Finish hears.
type finishRecorder struct{ got []string }

type finishOne struct {
	f   *finishRecorder
	req *legacy.Request
}

func (f *finishRecorder) Prepare(_ context.Context, r *legacy.Request) (Prepared, error) {
	return finishOne{f, r}, nil
}
func (o finishOne) Finish(_ context.Context, err error) {
	o.f.got = append(o.f.got, fmt.Sprintf("%s: %v", o.req.Action, err != nil))
}

func TestPreparerHearsTheOutcome(t *testing.T) {
	for _, c := range []struct {
		name string
		req  *legacy.Request
		errs map[string]error
		want []string
	}{
		{"accepted", req(legacy.Reboot), nil, []string{"reboot: false"}},
		{"refused", req(legacy.Reboot), map[string]error{"RebootWithFlags/0": &BusError{Name: ErrAccessDenied}}, []string{"reboot: true"}},
		{"scheduled", req(legacy.PowerOff, at(5)), nil, []string{"poweroff: false"}},
		{"cancelled", req(legacy.Cancel), nil, []string{"cancel: false"}},
		{"cancel refused", req(legacy.Cancel), map[string]error{"CancelScheduledShutdown": &BusError{Name: ErrAccessDenied}}, []string{"cancel: true"}},
		{"dry run", req(legacy.PowerOff, dry), nil, nil},
	} {
		e := newEnv()
		e.logind.errs = c.errs
		f := &finishRecorder{}
		e.prep = f
		e.run(c.req)
		if !reflect.DeepEqual(f.got, c.want) {
			t.Errorf("%s: Finish heard %q, want %q", c.name, f.got, c.want)
		}
	}
}

// dryNoter records the dry runs and --no-drain schedules it hears of.
type dryNoter struct {
	finishRecorder
	dry, noDrain []uint64
}

func (d *dryNoter) NoteDryRun(usec uint64)  { d.dry = append(d.dry, usec) }
func (d *dryNoter) NoteNoDrain(usec uint64) { d.noDrain = append(d.noDrain, usec) }

func TestNoDrainNoted(t *testing.T) {
	noDrain := func(r *legacy.Request) *legacy.Request { r.Drain.Skip = true; return r }
	for _, c := range []struct {
		name string
		req  *legacy.Request
		want []uint64
	}{
		{"scheduled with --no-drain", noDrain(req(legacy.Reboot, at(5))), []uint64{legacy.Usec(t0.Add(5 * time.Minute))}},
		{"scheduled", req(legacy.Reboot, at(5)), nil},
		{"a dry run with --no-drain", noDrain(req(legacy.Reboot, at(5), dry)), nil},
	} {
		e := newEnv()
		e.host.euid = 0
		d := &dryNoter{}
		e.prep = d
		e.run(c.req)
		if !reflect.DeepEqual(d.noDrain, c.want) {
			t.Errorf("%s: noted %v, want %v", c.name, d.noDrain, c.want)
		}
	}
}

func TestDryRunNoted(t *testing.T) {
	for _, c := range []struct {
		name string
		req  *legacy.Request
		errs map[string]error
		want []uint64
	}{
		{"scheduled dry run", req(legacy.Reboot, at(5), dry), nil, []uint64{legacy.Usec(t0.Add(5 * time.Minute))}},
		{"refused", req(legacy.Reboot, at(5), dry), map[string]error{"ScheduleShutdown": &BusError{Name: ErrAccessDenied}}, nil},
		{"real schedule", req(legacy.Reboot, at(5)), nil, nil},
		{"immediate dry run", req(legacy.Reboot, dry), nil, nil},
	} {
		e := newEnv()
		e.host.euid = 0
		e.logind.errs = c.errs
		d := &dryNoter{}
		e.prep = d
		e.run(c.req)
		if !reflect.DeepEqual(d.dry, c.want) {
			t.Errorf("%s: noted %v, want %v", c.name, d.dry, c.want)
		}
	}
}

func TestPreparerRunsBeforeHandoff(t *testing.T) {
	e := newEnv()
	var order []string
	e.prep = prepFunc(func(context.Context, *legacy.Request) error {
		order = append(order, fmt.Sprintf("prepare after %d logind calls", len(e.logind.calls)))
		return nil
	})
	if code, _, _ := e.run(req(legacy.Reboot)); code != 0 || !reflect.DeepEqual(order, []string{"prepare after 0 logind calls"}) {
		t.Fatalf("order %q", order)
	}
	e = newEnv()
	e.prep = prepFunc(func(context.Context, *legacy.Request) error { return legacy.Fail("drain blocked") })
	code, _, stderr := e.run(req(legacy.Reboot, at(5)))
	if code != 1 || stderr != "drain blocked\n" || len(e.logind.calls) != 0 {
		t.Fatalf("refusal: %d %q %q", code, stderr, e.logind.calls)
	}
	e = newEnv()
	e.prep = prepFunc(func(context.Context, *legacy.Request) error { t.Fatal("dry runs are not prepared"); return nil })
	e.run(req(legacy.PowerOff, dry))
}

// A refused preparation puts the reboot parameter back as it was: the
// refused reboot must not leave its parameter for the next one.
func TestRefusalRestoresRebootParam(t *testing.T) {
	refuse := prepFunc(func(context.Context, *legacy.Request) error { return legacy.Fail("drain blocked") })
	for _, c := range []struct {
		name, before string
		op           legacy.ParamOp
		param        string
	}{
		{"written over nothing", "", legacy.ParamWrite, "firmware"},
		{"written over another", "recovery", legacy.ParamWrite, "firmware"},
		{"unlinked", "recovery", legacy.ParamUnlink, ""},
	} {
		e := newEnv()
		e.host.param = c.before
		e.prep = refuse
		code, _, _ := e.run(req(legacy.Reboot, func(r *legacy.Request) { r.ParamOp, r.Param = c.op, c.param }))
		if code != 1 || e.host.param != c.before {
			t.Errorf("%s: exit %d, param %q, want %q", c.name, code, e.host.param, c.before)
		}
		// Accepted: the parameter is what the command line said.
		e = newEnv()
		e.host.param = c.before
		e.run(req(legacy.Reboot, func(r *legacy.Request) { r.ParamOp, r.Param = c.op, c.param }))
		if e.host.param != c.param {
			t.Errorf("%s accepted: param %q, want %q", c.name, e.host.param, c.param)
		}
	}
}

// acceptRecorder records the requests logind accepted, and what a cancel
// hears.
type acceptRecorder struct {
	finishRecorder
	accepted []string
}

func (a *acceptRecorder) Accepted(r *legacy.Request) {
	a.accepted = append(a.accepted, fmt.Sprintf("%s@%d", r.Action, r.When))
}

// The Preparer hears that logind accepted a request only once it did: a
// refused one leaves the notes of the schedule that stands. Dry runs are
// noted by NoteDryRun instead.
func TestAcceptedOnlyOnceLogindTookIt(t *testing.T) {
	for _, c := range []struct {
		name string
		req  *legacy.Request
		errs map[string]error
		want []string
	}{
		{"immediate", req(legacy.Reboot), nil, []string{"reboot@0"}},
		{"scheduled", req(legacy.Reboot, at(5)), nil, []string{fmt.Sprintf("reboot@%d", legacy.Usec(t0.Add(5*time.Minute)))}},
		{"refused", req(legacy.Reboot), map[string]error{"RebootWithFlags/0": &BusError{Name: ErrAccessDenied}}, nil},
		{"schedule refused", req(legacy.Reboot, at(5)), map[string]error{"ScheduleShutdown": &BusError{Name: ErrAccessDenied}}, nil},
		{"dry run", req(legacy.Reboot, at(5), dry), nil, nil},
	} {
		e := newEnv()
		e.host.euid = 0
		e.logind.errs = c.errs
		a := &acceptRecorder{}
		e.prep = a
		e.run(c.req)
		if !reflect.DeepEqual(a.accepted, c.want) {
			t.Errorf("%s: accepted %q, want %q", c.name, a.accepted, c.want)
		}
	}
}

// cancelReporter records what a CancelReporter hears.
type cancelReporter struct{ got []string }

func (c *cancelReporter) Prepare(context.Context, *legacy.Request) (Prepared, error) { return c, nil }
func (c *cancelReporter) Finish(context.Context, error)                              { c.got = append(c.got, "Finish") }
func (c *cancelReporter) FinishCancel(_ context.Context, cancelled bool, err error) {
	c.got = append(c.got, fmt.Sprintf("cancelled %v, failed %v", cancelled, err != nil))
}

// shutdown -c passes logind's answer (whether a schedule was cancelled) to
// a CancelReporter, in place of Finish.
func TestCancelReportsLogindsAnswer(t *testing.T) {
	for _, c := range []struct {
		name      string
		scheduled string
		errs      map[string]error
		want      string
	}{
		{"a schedule stood", "reboot", nil, "cancelled true, failed false"},
		{"none stood", "", nil, "cancelled false, failed false"},
		{"refused", "reboot", map[string]error{"CancelScheduledShutdown": &BusError{Name: ErrAccessDenied}}, "cancelled false, failed true"},
	} {
		e := newEnv()
		e.logind.scheduled, e.logind.errs = c.scheduled, c.errs
		cr := &cancelReporter{}
		e.prep = cr
		e.run(req(legacy.Cancel))
		if !reflect.DeepEqual(cr.got, []string{c.want}) {
			t.Errorf("%s: heard %q, want %q", c.name, cr.got, c.want)
		}
	}
}

// keptError is a Preparer's error that takes the request over for later
// (as drainer.QueuedError does for a queued reboot).
type keptError struct{}

func (keptError) Error() string         { return "queued" }
func (keptError) ExitCode() int         { return 0 }
func (keptError) KeepRebootParam() bool { return true }

// A request the Preparer took over for later (queued for the node agent)
// keeps the reboot parameter the command set: the agent's later hand-off
// does not write it (it cannot under gnsh.service), so the parameter must
// be in place already.
func TestQueuedKeepsRebootParam(t *testing.T) {
	keep := prepFunc(func(context.Context, *legacy.Request) error { return fmt.Errorf("wrapped: %w", keptError{}) })
	for _, c := range []struct {
		name, before string
		op           legacy.ParamOp
		param        string
	}{
		{"written over nothing", "", legacy.ParamWrite, "firmware"},
		{"written over another", "recovery", legacy.ParamWrite, "firmware"},
		{"unlinked", "recovery", legacy.ParamUnlink, ""},
	} {
		e := newEnv()
		e.host.param = c.before
		e.prep = keep
		e.run(req(legacy.Reboot, func(r *legacy.Request) { r.ParamOp, r.Param = c.op, c.param }))
		if e.host.param != c.param {
			t.Errorf("%s: param %q, want %q as the command set it (ops %q)", c.name, e.host.param, c.param, e.host.ops)
		}
	}
}
