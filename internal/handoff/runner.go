// Package handoff carries out a parsed legacy command the way systemd ≥ 251
// does (halt_main in systemctl-compat-halt.c): through systemd-logind, so
// that every delay and block inhibitor is honoured, on every systemd
// version. Where logind cannot do it, it falls back to starting the target
// on PID 1 and, for root, to sync(2) and reboot(2), and says in one line on
// stderr that inhibitors were bypassed and why. A shutdown at a TIME that
// logind does not take is refused instead (exit 1), as systemd 252 refuses
// it: it never becomes an immediate one.
//
// The same Runner drives `gnsh plan`, with recorders in place of the bus and
// the kernel, so the plan cannot disagree with what the command does.
package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gnsh/gnsh/internal/legacy"
)

// Logind WithFlags flag bits (systemd's login-util.h).
const (
	FlagRootCheckInhibitors uint64 = 1 << 0
	FlagRebootViaKexec      uint64 = 1 << 1
)

// DefaultCallTimeout bounds every D-Bus call, as sd-bus's default method
// timeout does for systemctl.
const DefaultCallTimeout = 25 * time.Second

// Runner carries out legacy requests. Zero-value fields are not usable
// except Preparer (no preparation) and CallTimeout (DefaultCallTimeout).
type Runner struct {
	Stdout, Stderr io.Writer
	Host           Host
	Kernel         Kernel
	// DialLogind and DialSystemd connect lazily, so that --help, -f and
	// chroot runs never touch the bus.
	DialLogind  func(ctx context.Context) (Logind, error)
	DialSystemd func(ctx context.Context) (Systemd, error)
	Preparer    Preparer
	Location    *time.Location // for printed times; nil = time.Local
	CallTimeout time.Duration

	restoreParam func() // puts the reboot parameter back as it was

	logind     Logind
	logindErr  error
	caps       *Caps
	capsErr    error
	dialedOnce bool
}

// Run carries out req. It returns nil for exit status 0 and a
// *legacy.ExitError otherwise (its Msg may be empty when everything was
// already printed).
func (r *Runner) Run(ctx context.Context, req *legacy.Request) error {
	if req.Help != "" {
		fmt.Fprint(r.Stdout, req.Help)
		return nil
	}
	// systemd changes the reboot parameter while parsing, before the chroot
	// check and before any permission check. What was there before is kept
	// so that a refused drain can put it back: a reboot gnsh refused must
	// not leave a parameter behind for the next one.
	var prevParam string
	if req.ParamOp != legacy.ParamKeep {
		prevParam = r.Host.RebootParam()
	}
	switch req.ParamOp {
	case legacy.ParamWrite:
		if err := r.Host.WriteRebootParam(req.Param); err != nil {
			return legacy.Fail("Failed to write reboot parameter file: %s", Strerror(err))
		}
	case legacy.ParamUnlink:
		if err := r.Host.UnlinkRebootParam(); err != nil {
			return legacy.Fail("Failed to unlink reboot parameter file: %s", Strerror(err))
		}
	}
	r.restoreParam = func() {
		if req.ParamOp == legacy.ParamKeep || r.Host.RebootParam() == prevParam {
			return
		}
		var err error
		if prevParam == "" {
			err = r.Host.UnlinkRebootParam()
		} else {
			err = r.Host.WriteRebootParam(prevParam)
		}
		if err != nil {
			r.gnshWarn("cannot restore the reboot parameter file: %s", Strerror(err))
		}
	}
	if r.Host.InChroot() {
		r.say("Running in chroot, ignoring request.")
		return nil
	}
	switch req.Action {
	case legacy.Cancel:
		return r.cancel(ctx, req)
	case legacy.Show:
		return r.show(ctx)
	default:
		return r.halt(ctx, req)
	}
}

// halt is systemd's halt_main() for halt, poweroff, reboot, kexec and
// scheduled shutdowns.
func (r *Runner) halt(ctx context.Context, req *legacy.Request) (result error) {
	var prepared Prepared
	defer func() {
		if prepared != nil {
			prepared.Finish(ctx, result)
		}
	}()
	if req.Force == 0 {
		var err error
		if req.When > 0 {
			if prepared, err = r.prepare(ctx, req); err != nil {
				return err
			}
			// A schedule logind does not take is refused, never made
			// immediate: systemd 252 does the same (test/oracle).
			if err = r.schedule(ctx, req); err != nil {
				return err
			}
		} else {
			if err := r.checkInhibitors(ctx, req); err != nil {
				return err
			}
			if prepared, err = r.prepare(ctx, req); err != nil {
				return err
			}
			err = r.logindShutdown(ctx, req)
		}
		if err == nil {
			if a, ok := r.Preparer.(AcceptNoter); ok && !req.DryRun {
				a.Accepted(req)
			}
			return nil
		}
		if final(err) {
			return &legacy.ExitError{Code: 1}
		}
		if !req.DryRun {
			return r.startTarget(ctx, req, err)
		}
	}
	if r.Host.Euid() != 0 {
		return legacy.Fail("Need to be root.")
	}
	if req.DryRun {
		return nil
	}
	if req.Force != 0 {
		var err error
		if prepared, err = r.prepare(ctx, req); err != nil {
			return err
		}
	}
	return r.haltNow(req)
}

// RebootParamKeeper is an error of a Preparer that did not refuse the
// request but took it over for later (a reboot queued for the node agent):
// when KeepRebootParam is true, the reboot parameter the command set
// stays, as for a request logind took, and the later hand-off leaves it
// alone (the node agent cannot write /run/systemd under gnsh.service).
type RebootParamKeeper interface {
	KeepRebootParam() bool
}

// prepare runs the Preparer (never for dry runs). When it refuses, the
// reboot parameter is put back as it was, unless the error keeps it
// (RebootParamKeeper).
func (r *Runner) prepare(ctx context.Context, req *legacy.Request) (Prepared, error) {
	if r.Preparer == nil || req.DryRun {
		return nil, nil
	}
	p, err := r.Preparer.Prepare(ctx, req)
	if err != nil {
		var k RebootParamKeeper
		if errors.As(err, &k) && k.KeepRebootParam() {
			return nil, err
		}
		if r.restoreParam != nil {
			r.restoreParam()
		}
		return nil, err
	}
	return p, nil
}

// dial connects to logind once and remembers the outcome.
func (r *Runner) dial(ctx context.Context) (Logind, error) {
	if !r.dialedOnce {
		r.dialedOnce = true
		if r.DialLogind == nil {
			r.logindErr = &UnreachableError{Op: "connect to bus", Err: errors.New("no system bus configured")}
		} else {
			r.logind, r.logindErr = r.DialLogind(ctx)
		}
	}
	return r.logind, r.logindErr
}

// capabilities introspects logind once.
func (r *Runner) capabilities(ctx context.Context, l Logind) (Caps, error) {
	if r.caps == nil && r.capsErr == nil {
		c, err := withTimeout(ctx, r.timeout(), func(ctx context.Context) (Caps, error) { return l.Caps(ctx) })
		if err != nil {
			r.capsErr = &UnreachableError{Op: "introspect logind", Err: err}
		} else {
			r.caps = &c
		}
	}
	if r.capsErr != nil {
		return Caps{}, r.capsErr
	}
	return *r.caps, nil
}

func (r *Runner) timeout() time.Duration {
	if r.CallTimeout > 0 {
		return r.CallTimeout
	}
	return DefaultCallTimeout
}

func withTimeout[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}

func (r *Runner) call(ctx context.Context, f func(context.Context) error) error {
	_, err := withTimeout(ctx, r.timeout(), func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}

// setWall is logind_set_wall_message(): failures are only a warning.
func (r *Runner) setWall(ctx context.Context, l Logind, caps Caps, req *legacy.Request) {
	if req.DryRun || !caps.Has("SetWallMessage") {
		return
	}
	err := r.call(ctx, func(ctx context.Context) error { return l.SetWallMessage(ctx, req.WallMessage(), !req.NoWall) })
	if err != nil {
		r.say("Failed to set wall message, ignoring: %s", err)
	}
}

// missingMethod is returned when logind lacks every method for a step.
type missingMethod struct{ what string }

func (e *missingMethod) Error() string { return "logind offers no " + e.what + " method" }

// logindShutdown is logind_reboot(): WithFlags(t 0) first, then the old
// (b interactive=false) method when WithFlags is not there.
func (r *Runner) logindShutdown(ctx context.Context, req *legacy.Request) error {
	l, err := r.dial(ctx)
	if err != nil {
		return err
	}
	if req.DryRun {
		return nil
	}
	caps, err := r.capabilities(ctx, l)
	if err != nil {
		return err
	}
	r.setWall(ctx, l, caps, req)
	method := req.Action.Method()
	if caps.Has(method + "WithFlags") {
		var flags uint64
		if req.Action == legacy.Kexec {
			flags = FlagRebootViaKexec
		}
		err := r.call(ctx, func(ctx context.Context) error { return l.ShutdownWithFlags(ctx, method, flags) })
		if err != nil && flags != 0 && busErrorName(err) == ErrInvalidArgs {
			r.gnshWarn("logind cannot reboot via kexec (%s); rebooting normally through logind", err)
			err = r.call(ctx, func(ctx context.Context) error { return l.ShutdownWithFlags(ctx, method, 0) })
		}
		if err == nil || busErrorName(err) != ErrUnknownMethod {
			if err != nil {
				r.say("Call to %s failed: %s", method, err)
			}
			return err
		}
	}
	if caps.Has(method) {
		err := r.call(ctx, func(ctx context.Context) error { return l.Shutdown(ctx, method, false) })
		if err != nil {
			r.say("Call to %s failed: %s", method, err)
		}
		return err
	}
	return &missingMethod{method + "WithFlags or " + method}
}

// schedule is logind_schedule_shutdown(). When logind does not take the
// schedule it returns a *legacy.ExitError (exit 1, everything said): as
// systemd 252, whose halt_main() returns that failure for a TIME and never
// falls back to an immediate shutdown, whatever the reason (logind
// refusing, not on the bus, no bus at all: each case is in test/oracle).
func (r *Runner) schedule(ctx context.Context, req *legacy.Request) error {
	l, err := r.dial(ctx)
	if err != nil {
		r.say("Failed to connect to bus: %s", busMessage(err))
		return r.notScheduled(req, err)
	}
	caps, err := r.capabilities(ctx, l)
	if err != nil {
		// No logind on the bus (or it does not answer): systemd's calls,
		// SetWallMessage (but for a dry run) and ScheduleShutdown, each
		// fail with the bus's answer.
		if !req.DryRun {
			r.say("Failed to set wall message, ignoring: %s", busMessage(err))
		}
		r.say("Failed to schedule shutdown: %s", busMessage(err))
		return r.notScheduled(req, err)
	}
	if !caps.Has("ScheduleShutdown") {
		r.setWall(ctx, l, caps, req)
		err := &missingMethod{"ScheduleShutdown"}
		r.say("Failed to schedule shutdown: %s", err)
		return r.notScheduled(req, err)
	}
	typ := req.Action.String()
	prefix := ""
	if req.DryRun {
		prefix = "dry-"
	}
	r.setWall(ctx, l, caps, req)
	if n, ok := r.Preparer.(NoDrainNoter); ok && req.Drain.Skip && !req.DryRun {
		// Before logind writes its schedule file, which the node agent
		// follows: it must never see the schedule without the note. The
		// note of the schedule that stands stays beside it until logind
		// accepts (AcceptNoter); a request logind refuses leaves a note of
		// a time that never stands.
		n.NoteNoDrain(req.When)
	}
	err = r.call(ctx, func(ctx context.Context) error { return l.ScheduleShutdown(ctx, prefix+typ, req.When) })
	if err != nil && req.Action == legacy.Kexec && busErrorName(err) == ErrInvalidArgs {
		r.gnshWarn("logind cannot schedule a kexec reboot (%s); scheduling a normal reboot", err)
		err = r.call(ctx, func(ctx context.Context) error { return l.ScheduleShutdown(ctx, prefix+"reboot", req.When) })
	}
	if err != nil {
		r.say("Failed to schedule shutdown: %s", err)
		return r.notScheduled(req, err)
	}
	if n, ok := r.Preparer.(DryRunNoter); ok && req.DryRun {
		n.NoteDryRun(req.When)
	}
	// Like systemd, report what logind now has scheduled; a failure to read
	// it back is printed but does not fail the command.
	if err := r.showWith(ctx, l); err != nil {
		r.say("%s", err)
	}
	return nil
}

// notScheduled ends a shutdown whose TIME logind did not take (why): exit
// 1, systemd's message already said. Unless logind said no for good
// (access denied and the like, which an immediate shutdown would get too)
// or it was a dry run, one line of gnsh's says that nothing happened and
// how to shut down at once: before systemd 251, and in gnsh before it
// followed 252 here, such a TIME silently became "now".
func (r *Runner) notScheduled(req *legacy.Request, why error) error {
	if !final(why) && !req.DryRun {
		w, ok := nowWords[req.Action]
		if !ok {
			w = nowWords[legacy.PowerOff]
		}
		fmt.Fprintf(r.Stderr, "gnsh: the %s was not scheduled and nothing was shut down; to %s at once, run '%s' "+
			"(if logind cannot be used, it starts %s directly)\n", w[0], w[1], w[2], req.Action.Target())
	}
	return &legacy.ExitError{Code: 1}
}

// nowWords names an action for notScheduled: the noun, the verb, the
// command that does it at once.
var nowWords = map[legacy.Action][3]string{
	legacy.Reboot:   {"reboot", "reboot", "reboot"},
	legacy.Kexec:    {"kexec reboot", "reboot", "reboot"},
	legacy.PowerOff: {"power-off", "power off", "poweroff"},
	legacy.Halt:     {"halt", "halt", "halt"},
}

// busMessage is a bus failure as systemd prints it: the D-Bus error's
// message, or the errno's text for a connection that failed.
func busMessage(err error) string {
	var ue *UnreachableError
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return Strerror(err)
}

// cancel is logind_cancel_shutdown(); the Preparer hears how it went (a
// CancelReporter also whether logind cancelled a schedule). A preparation
// that fails does not stop the cancel: cancelling a shutdown must always be
// possible.
func (r *Runner) cancel(ctx context.Context, req *legacy.Request) error {
	var p Prepared
	if r.Preparer != nil {
		p, _ = r.Preparer.Prepare(ctx, req)
	}
	cancelled, err := r.cancelShutdown(ctx, req)
	if cr, ok := p.(CancelReporter); ok {
		cr.FinishCancel(ctx, cancelled, err)
	} else if p != nil {
		p.Finish(ctx, err)
	}
	return err
}

// cancelShutdown calls CancelScheduledShutdown; cancelled is its answer
// (false: no schedule stood). systemd's shutdown -c prints nothing of it.
func (r *Runner) cancelShutdown(ctx context.Context, req *legacy.Request) (cancelled bool, err error) {
	l, err := r.dial(ctx)
	if err != nil {
		return false, legacy.Fail("Failed to connect to bus: %s", err)
	}
	caps, err := r.capabilities(ctx, l)
	if err != nil {
		return false, legacy.Fail("Failed to talk to logind, shutdown hasn't been cancelled: %s", err)
	}
	r.setWall(ctx, l, caps, req)
	if !caps.Has("CancelScheduledShutdown") {
		return false, legacy.Fail("Failed to talk to logind, shutdown hasn't been cancelled: %s", &missingMethod{"CancelScheduledShutdown"})
	}
	err = r.call(ctx, func(ctx context.Context) error {
		var err error
		cancelled, err = l.CancelScheduledShutdown(ctx)
		return err
	})
	if err != nil {
		return false, legacy.Fail("Failed to talk to logind, shutdown hasn't been cancelled: %s", err)
	}
	return cancelled, nil
}

// show is logind_show_shutdown() for shutdown --show.
func (r *Runner) show(ctx context.Context) error {
	// gnsh's queued reboot, which logind knows nothing of, comes first.
	queued := ""
	if qs, ok := r.Preparer.(QueueShower); ok {
		queued = qs.QueuedLine()
	}
	if queued != "" {
		fmt.Fprintln(r.Stdout, queued)
	}
	l, err := r.dial(ctx)
	if err != nil {
		return legacy.Fail("Failed to connect to bus: %s", err)
	}
	err = r.showWith(ctx, l)
	if e := (*legacy.ExitError)(nil); queued != "" && errors.As(err, &e) && e.Msg == "No scheduled shutdown." {
		return nil // the queued one is
	}
	return err
}

func (r *Runner) showWith(ctx context.Context, l Logind) error {
	var typ string
	var usec uint64
	err := r.call(ctx, func(ctx context.Context) error {
		var err error
		typ, usec, err = l.ScheduledShutdown(ctx)
		return err
	})
	if err != nil {
		return legacy.Fail("Failed to query scheduled shutdown: %s", err)
	}
	if typ == "" {
		return legacy.Fail("No scheduled shutdown.")
	}
	switch typ {
	case "halt", "poweroff", "exit":
		typ = "Shutdown"
	case "kexec":
		typ = "Reboot via kexec"
	case "reboot":
		typ = "Reboot"
	}
	r.say("%s scheduled for %s, use 'shutdown -c' to cancel.", typ, r.formatTimestamp(usec))
	return nil
}

// usecTimestampFormattableMax is systemd's USEC_TIMESTAMP_FORMATTABLE_MAX
// for a 64-bit time_t: Thu 9999-12-30 23:59:59 UTC, a day short of the end
// of year 9999 so that no time zone reaches a five-digit year.
const usecTimestampFormattableMax = 253402214399000000

// formatTimestamp is systemd 252's FORMAT_TIMESTAMP_STYLE(usec,
// TIMESTAMP_PRETTY) as logind_show_shutdown() passes it to "%s".
//
// A TIME of many minutes is computed in uint64 and may lie far beyond the
// year 9999; systemd then prints a fixed placeholder rather than a date.
// For 0 and USEC_INFINITY format_timestamp_style() returns NULL, which
// glibc's printf writes as "(null)"; logind reports such values only when
// a client scheduled them itself.
func (r *Runner) formatTimestamp(usec uint64) string {
	switch {
	case usec == 0 || usec == ^uint64(0):
		return "(null)"
	case usec > usecTimestampFormattableMax:
		return "--- XXXX-XX-XX XX:XX:XX"
	}
	loc := r.Location
	if loc == nil {
		loc = time.Local
	}
	return legacy.FromUsec(usec).In(loc).Format("Mon 2006-01-02 15:04:05 MST")
}

// checkInhibitors is logind_check_inhibitors() for the legacy commands:
// only a non-root caller whose stdout and stderr are terminals is checked.
func (r *Runner) checkInhibitors(ctx context.Context, req *legacy.Request) error {
	if r.Host.Euid() == 0 || !r.Host.OnTTY() {
		return nil
	}
	l, err := r.dial(ctx)
	if err != nil {
		return legacy.Fail("Failed to connect to bus: %s", err)
	}
	var list []Inhibitor
	err = r.call(ctx, func(ctx context.Context) error {
		var err error
		list, err = l.ListInhibitors(ctx)
		return err
	})
	if err != nil {
		return nil // if logind is not around, there are no inhibitors
	}
	c := 0
	for _, in := range list {
		if in.Mode != "block" || !containsWord(in.What, "shutdown") {
			continue
		}
		r.say("Operation inhibited by \"%s\" (PID %d \"%s\", user %s), reason is \"%s\".",
			in.Who, in.PID, strna(r.Host.ProcessComm(in.PID)), strna(r.Host.UserName(in.UID)), in.Why)
		c++
	}
	uid := uint32(r.Host.UID())
	for _, s := range r.Host.Sessions() {
		if s.UID == uid || s.Class != "user" {
			continue
		}
		switch s.Type {
		case "x11", "wayland", "tty", "mir":
		default:
			continue
		}
		where := s.TTY
		if where == "" {
			where = s.Seat
		}
		if where == "" {
			where = strna(s.Service)
		}
		r.say("User %s is logged in on %s.", strna(r.Host.UserName(s.UID)), where)
		c++
	}
	if c == 0 {
		return nil
	}
	return legacy.Fail("Please retry operation after closing inhibitors and logging out other users.\n"+
		"Alternatively, ignore inhibitors and users with 'systemctl %s -i'.", req.Action)
}

// startTarget is start_with_fallback(), reached when logind could not be
// used: it bypasses every inhibitor, so it says so. For root, gnsh goes on
// to sync(2) and reboot(2) if PID 1 cannot be reached either.
func (r *Runner) startTarget(ctx context.Context, req *legacy.Request, why error) error {
	target := req.Action.Target()
	r.gnshWarn("%s; inhibitors bypassed, starting %s directly", describe(why), target)
	var err error
	if r.DialSystemd == nil {
		err = errors.New("no connection to systemd configured")
	} else {
		var s Systemd
		if s, err = r.DialSystemd(ctx); err == nil {
			err = r.call(ctx, func(ctx context.Context) error { return s.StartUnit(ctx, target, "replace-irreversibly") })
		}
	}
	if err == nil {
		return nil
	}
	if r.Host.Euid() != 0 {
		return legacy.Fail("Failed to start %s: %s", target, err)
	}
	r.gnshWarn("cannot start %s (%s); syncing and calling reboot(2) directly", target, err)
	return r.haltNow(req)
}

// describe turns the reason logind could not be used into the first half of
// the bypass warning.
func describe(err error) string {
	var ue *UnreachableError
	var mm *missingMethod
	switch {
	case errors.As(err, &ue):
		return fmt.Sprintf("cannot reach systemd-logind (%s: %s)", ue.Op, ue.Err)
	case errors.As(err, &mm):
		return mm.Error()
	default:
		return fmt.Sprintf("systemd-logind refused (%s)", err)
	}
}

// haltNow is systemd's halt_now(): sync, enable Ctrl-Alt-Del, reboot(2).
func (r *Runner) haltNow(req *legacy.Request) error {
	if !req.NoSync {
		r.Kernel.Sync()
	}
	_ = r.Kernel.Reboot(CmdEnableCAD, "")
	var err error
	switch req.Action {
	case legacy.Halt:
		r.say("Halting.")
		err = r.Kernel.Reboot(CmdHalt, "")
	case legacy.PowerOff:
		r.say("Powering off.")
		err = r.Kernel.Reboot(CmdPowerOff, "")
	default:
		if !r.Host.InContainer() {
			if p := r.Host.RebootParam(); p != "" {
				r.say("Rebooting with argument '%s'.", p)
				err := r.Kernel.Reboot(CmdRestart2, p)
				if err == nil {
					return nil // only a recorder returns
				}
				r.say("Failed to reboot with parameter, retrying without: %s", Strerror(err))
			}
		}
		r.say("Rebooting.")
		if err = r.Kernel.Reboot(CmdRestart, ""); err != nil {
			r.say("Failed to reboot: %s", Strerror(err))
		}
	}
	if err == nil {
		return nil // only a recorder returns
	}
	return legacy.Fail("Failed to %s: %s", req.Action, Strerror(err))
}

// say prints one of systemd's own messages. systemctl sends info, warning
// and error lines alike to stderr, without a prefix.
func (r *Runner) say(format string, args ...any) { fmt.Fprintf(r.Stderr, format+"\n", args...) }

// gnshWarn prints one of gnsh's own warnings (systemd has no such line).
func (r *Runner) gnshWarn(format string, args ...any) {
	fmt.Fprintf(r.Stderr, "gnsh: warning: "+format+"\n", args...)
}

func strna(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

func containsWord(colonList, w string) bool {
	for _, x := range strings.Split(colonList, ":") {
		if x == w {
			return true
		}
	}
	return false
}
