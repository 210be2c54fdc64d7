package handoff

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/gnsh/gnsh/internal/legacy"
)

// Call is one operation on the wire or in the kernel, as gnsh plan lists it.
type Call struct {
	Service   string `json:"service"` // org.freedesktop.login1, org.freedesktop.systemd1, kernel, file
	Interface string `json:"interface,omitempty"`
	Method    string `json:"method"`
	Signature string `json:"signature,omitempty"`
	Args      []any  `json:"args"`
}

const (
	login1Service  = "org.freedesktop.login1"
	login1Manager  = "org.freedesktop.login1.Manager"
	systemdService = "org.freedesktop.systemd1"
	systemdManager = "org.freedesktop.systemd1.Manager"
	rebootParam    = "/run/systemd/reboot-param"
)

// Recorder stands in for logind, systemd and the kernel: it answers like an
// idle systemd 252 (every method present, nothing scheduled, no inhibitors)
// and records every call. With Unreachable set, logind and systemd cannot be
// reached, which shows the fallback path.
type Recorder struct {
	Calls       []Call
	Unreachable bool
	scheduled   string
	when        uint64
}

var errRecorderUnreachable = errors.New("not reachable in this plan")

func (rec *Recorder) add(svc, iface, method, sig string, args ...any) {
	if args == nil {
		args = []any{}
	}
	rec.Calls = append(rec.Calls, Call{Service: svc, Interface: iface, Method: method, Signature: sig, Args: args})
}

// Caps records the introspection call and reports systemd 252's methods.
func (rec *Recorder) Caps(context.Context) (Caps, error) {
	rec.add(login1Service, "org.freedesktop.DBus.Introspectable", "Introspect", "")
	m := map[string]bool{}
	for _, n := range []string{"PowerOff", "Reboot", "Halt", "PowerOffWithFlags", "RebootWithFlags", "HaltWithFlags",
		"ScheduleShutdown", "CancelScheduledShutdown", "SetWallMessage", "ListInhibitors"} {
		m[n] = true
	}
	return Caps{Methods: m}, nil
}

// SetWallMessage records the call.
func (rec *Recorder) SetWallMessage(_ context.Context, msg string, enable bool) error {
	rec.add(login1Service, login1Manager, "SetWallMessage", "sb", msg, enable)
	return nil
}

// ShutdownWithFlags records the call.
func (rec *Recorder) ShutdownWithFlags(_ context.Context, method string, flags uint64) error {
	rec.add(login1Service, login1Manager, method+"WithFlags", "t", flags)
	return nil
}

// Shutdown records the call.
func (rec *Recorder) Shutdown(_ context.Context, method string, interactive bool) error {
	rec.add(login1Service, login1Manager, method, "b", interactive)
	return nil
}

// ScheduleShutdown records the call and remembers the schedule as logind
// does (without the dry- prefix).
func (rec *Recorder) ScheduleShutdown(_ context.Context, typ string, usec uint64) error {
	rec.add(login1Service, login1Manager, "ScheduleShutdown", "st", typ, usec)
	rec.scheduled, rec.when = typ, usec
	if len(typ) > 4 && typ[:4] == "dry-" {
		rec.scheduled = typ[4:]
	}
	return nil
}

// CancelScheduledShutdown records the call.
func (rec *Recorder) CancelScheduledShutdown(context.Context) (bool, error) {
	rec.add(login1Service, login1Manager, "CancelScheduledShutdown", "")
	had := rec.scheduled != ""
	rec.scheduled, rec.when = "", 0
	return had, nil
}

// ScheduledShutdown records the property read.
func (rec *Recorder) ScheduledShutdown(context.Context) (string, uint64, error) {
	rec.add(login1Service, "org.freedesktop.DBus.Properties", "Get", "ss", login1Manager, "ScheduledShutdown")
	return rec.scheduled, rec.when, nil
}

// ListInhibitors records the call; there are none.
func (rec *Recorder) ListInhibitors(context.Context) ([]Inhibitor, error) {
	rec.add(login1Service, login1Manager, "ListInhibitors", "")
	return nil, nil
}

// StartUnit records the call; it fails when Unreachable.
func (rec *Recorder) StartUnit(_ context.Context, name, mode string) error {
	rec.add(systemdService, systemdManager, "StartUnit", "ss", name, mode)
	if rec.Unreachable {
		return errRecorderUnreachable
	}
	return nil
}

// Sync records sync(2).
func (rec *Recorder) Sync() { rec.add("kernel", "", "sync", "") }

// Reboot records reboot(2).
func (rec *Recorder) Reboot(cmd RebootCmd, arg string) error {
	if cmd == CmdRestart2 {
		rec.add("kernel", "", "reboot", "", cmd.String(), arg)
	} else {
		rec.add("kernel", "", "reboot", "", cmd.String())
	}
	return nil
}

// planHost reads from the real host but records changes instead of making
// them, and answers later reads as if it had made them.
type planHost struct {
	Host
	rec     *Recorder
	param   string
	changed bool
}

func (h *planHost) WriteRebootParam(p string) error {
	h.rec.add("file", "", "write", "", rebootParam, p)
	h.param, h.changed = p, true
	return nil
}

func (h *planHost) UnlinkRebootParam() error {
	h.rec.add("file", "", "unlink", "", rebootParam)
	h.param, h.changed = "", true
	return nil
}

func (h *planHost) RebootParam() string {
	if h.changed {
		return h.param
	}
	return h.Host.RebootParam()
}

// Plan is what `gnsh plan` prints: what a command line would do, with
// nothing done.
type Plan struct {
	Command     string    `json:"command"`
	Args        []string  `json:"args"`
	Action      string    `json:"action"`
	Force       int       `json:"force"`
	DryRun      bool      `json:"dry_run"`
	Immediate   bool      `json:"immediate"`
	Scheduled   *Schedule `json:"scheduled,omitempty"`
	Wall        *Wall     `json:"wall,omitempty"`
	RebootParam *Param    `json:"reboot_param,omitempty"`
	NoSync      bool      `json:"no_sync"`
	Help        bool      `json:"help,omitempty"`
	// Calls is the ordered list of operations when logind answers like an
	// idle systemd 252.
	Calls []Call `json:"calls"`
	// Fallback is what happens instead when logind cannot be reached;
	// none for a shutdown at a TIME, which is then refused (exit 1).
	Fallback []Call `json:"fallback,omitempty"`
	// Drain says what gnsh's drain does before the calls, decided from
	// the options, the config file and the kubeconfig found, without
	// asking the cluster. Calls, exit code and output assume it lets the
	// hand-off go on, but where it refuses before asking the cluster (an
	// invalid config file, a kubeconfig named that cannot be used): they
	// are then the refusal's (exit code 1, its message on stderr).
	Drain    string `json:"drain,omitempty"`
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// Schedule is a scheduled shutdown time.
type Schedule struct {
	// RFC3339 is the time in the plan's zone. It is absent for a time after
	// the year 9999, which RFC 3339 cannot write.
	RFC3339 string `json:"rfc3339,omitempty"`
	// Usec is the value sent to logind, CLOCK_REALTIME µs. "shutdown m"
	// computes it in uint64 as systemd does, so a huge m may wrap around
	// 2^64 to a time in the past, which logind carries out at once.
	Usec uint64 `json:"usec"`
	// Note is set for a time too far ahead for systemd to print.
	Note string `json:"note,omitempty"`
}

// schedule describes usec for the plan. Values above math.MaxInt64 µs are
// not turned into dates through int64 (which would put them before 1970).
func schedule(usec uint64, loc *time.Location) *Schedule {
	s := &Schedule{Usec: usec}
	if t := legacy.FromUsec(usec).In(loc); t.Year() <= 9999 {
		s.RFC3339 = t.Format(time.RFC3339)
	}
	if usec > usecTimestampFormattableMax {
		s.Note = "at the end of year 9999 or later: systemd prints it as --- XXXX-XX-XX XX:XX:XX; logind keeps it pending, in effect for ever"
	}
	return s
}

// Wall is the wall message sent to logind.
type Wall struct {
	Message string `json:"message"`
	Enabled bool   `json:"enabled"`
}

// Param is the change to /run/systemd/reboot-param.
type Param struct {
	Op    string `json:"op"`
	Value string `json:"value,omitempty"`
}

// MakePlan runs req through a Runner whose bus and kernel are recorders.
// host supplies read-only facts (euid, tty, chroot, kexec); loc is the zone
// used for printed times; status maps the command's error to its exit
// status (dispatch.ExitStatus: dispatch is the only place that does). pre,
// if not nil, runs where the command's drain would, and may refuse as it
// would; it must change nothing.
func MakePlan(ctx context.Context, req *legacy.Request, host Host, loc *time.Location, status func(error) int, pre Preparer) *Plan {
	p := &Plan{
		Command: req.Command, Args: req.Args, Action: req.Action.String(), Force: req.Force,
		DryRun: req.DryRun, Immediate: req.Immediate(), NoSync: req.NoSync, Help: req.Help != "",
	}
	if p.Args == nil {
		p.Args = []string{}
	}
	if !req.Immediate() && req.Action.IsShutdown() {
		p.Scheduled = schedule(req.When, loc)
	}
	if req.Action.IsShutdown() || req.Action == legacy.Cancel {
		p.Wall = &Wall{Message: req.WallMessage(), Enabled: !req.NoWall}
	}
	if req.ParamOp != legacy.ParamKeep {
		p.RebootParam = &Param{Op: req.ParamOp.String(), Value: req.Param}
	}
	run := func(unreachable bool) ([]Call, int, string, string) {
		rec := &Recorder{Unreachable: unreachable}
		var out, errb bytes.Buffer
		r := &Runner{
			Stdout: &out, Stderr: &errb, Host: &planHost{Host: host, rec: rec}, Kernel: rec, Location: loc,
			DialLogind: func(context.Context) (Logind, error) {
				if unreachable {
					return nil, &UnreachableError{Op: "connect to bus", Err: errRecorderUnreachable}
				}
				return rec, nil
			},
			DialSystemd: func(context.Context) (Systemd, error) { return rec, nil },
			Preparer:    pre,
		}
		err := r.Run(ctx, req)
		code := status(err)
		if err != nil {
			if msg := err.Error(); msg != "" {
				errb.WriteString(msg + "\n")
			}
		}
		if rec.Calls == nil {
			rec.Calls = []Call{}
		}
		return rec.Calls, code, out.String(), errb.String()
	}
	p.Calls, p.ExitCode, p.Stdout, p.Stderr = run(false)
	if usesLogind(p.Calls) {
		fb, _, _, _ := run(true)
		p.Fallback = fb
	}
	return p
}

func usesLogind(calls []Call) bool {
	for _, c := range calls {
		if c.Service == login1Service {
			return true
		}
	}
	return false
}
