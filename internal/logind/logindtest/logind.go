package logindtest

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
)

// Bus name, object path and interface of logind's manager.
const (
	LogindName      = "org.freedesktop.login1"
	LogindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	LogindInterface = "org.freedesktop.login1.Manager"
)

// Flag bits of PowerOffWithFlags, RebootWithFlags and HaltWithFlags
// (systemd-legacy-commands.md §5.3), with the version that introduced them.
const (
	FlagRootCheckInhibitors       uint64 = 1 << 0 // v248
	FlagRebootViaKexec            uint64 = 1 << 1 // v249
	FlagSoftReboot                uint64 = 1 << 2 // v254
	FlagSoftRebootIfNextrootSetUp uint64 = 1 << 3 // v255
	FlagSkipInhibitors            uint64 = 1 << 4 // v257

	flagInteractive uint64 = 1 << 63 // internal to logind; never valid on the wire
)

// DefaultVersion is the systemd version emulated when Options.Version is
// zero (Debian 12, RHEL 9).
const DefaultVersion = 252

const defaultInhibitDelayMax = 5 * time.Second

// First versions with a behaviour (systemd-legacy-commands.md §5).
const (
	versionSchedule                       = 220 // ScheduleShutdown, CancelScheduledShutdown, ScheduledShutdown, WallMessage
	versionSetWallMessage                 = 225
	versionHalt                           = 235 // Halt, CanHalt
	versionWithFlags                      = 248
	versionHandleRebootKey                = 251 // inhibitor "handle-reboot-key" (present in v251; may be a little older)
	versionScheduledOnImmediate           = 251 // ScheduledShutdown = (type, 0) on an immediate action
	versionKexecMessage                   = 254 // "Reboot via kexec option is only applicable…"
	versionPrepareWithMetadataSignal      = 255
	versionUnsupportedShutdownTypeWithArg = 255
	versionStrictInhibitors               = 257 // block locks apply to root too
	versionPrepareWithMetadataProperty    = 257
	versionBlockedByInhibitorLock         = 258
)

// Options configures a fake logind.
type Options struct {
	// Version is the systemd version to emulate (219, 239, 248, 252, 257,
	// …); zero means DefaultVersion. It selects the methods, properties
	// and signals (§5.1 of systemd-legacy-commands.md), the accepted
	// flag bits and ScheduleShutdown types, and error texts.
	Version int

	// Errors maps a method name to the error to reply instead of running
	// it, e.g. {"RebootWithFlags": AccessDenied}. A method the version
	// lacks still fails with UnknownMethod, and a wrong signature still
	// fails with InvalidArgs. See also Logind.SetError.
	Errors map[string]*dbus.Error

	// Inhibitors are locks held from the start, by nobody in particular:
	// ListInhibitors returns them before the locks taken with Inhibit, and
	// they are never released. Block locks on "shutdown" (these and those
	// taken with Inhibit) are enforced as logind does for a root caller:
	// before v257 only with FlagRootCheckInhibitors and only for locks of
	// other users (UID != 0); from v257 every "block" lock and other
	// users' "block-weak" locks, unless FlagSkipInhibitors. A "delay" lock
	// on "shutdown" here makes WaitForDelayLocks wait the whole
	// InhibitDelayMax.
	Inhibitors []Inhibitor

	// InhibitDelayMax is the InhibitDelayMaxUSec property; zero means 5s.
	// Logind.SetInhibitDelayMax changes it later.
	InhibitDelayMax time.Duration

	// WaitForDelayLocks makes shutdowns go on as logind's do. Without it
	// (the default) an accepted PowerOff/Reboot/Halt[WithFlags] stops at
	// PrepareForShutdown(true) and a scheduled shutdown never fires. With
	// it, an accepted request, and a scheduled shutdown when its time
	// comes (per Now and After), sends PrepareForShutdown(true), waits
	// until no "delay" lock on "shutdown" is left or InhibitDelayMax has
	// passed, and then records that the shutdown started
	// (State.ShutdownStarted; nothing real ever happens). While it waits
	// and afterwards, Inhibit refuses new "shutdown" locks with
	// OperationInProgress, as logind does. A scheduled dry run ("dry-"
	// type) fires by clearing the schedule, without PrepareForShutdown.
	// Logind.CancelShutdown plays a failed shutdown job.
	WaitForDelayLocks bool

	// After makes the timers of WaitForDelayLocks (InhibitDelayMax, and a
	// scheduled shutdown's time minus Now) so that tests can fire them
	// without waiting; nil means time.After. It is called without the
	// fake's lock held, on a goroutine of the fake, so it may block
	// (e.g. to tell the test what was armed).
	After func(time.Duration) <-chan time.Time

	// KexecLoaded makes RebootWithFlags(FlagRebootViaKexec) act as kexec.
	KexecLoaded bool

	// WallMessage and EnableWallMessages are the initial property values.
	// (Real logind starts with EnableWallMessages false up to at least
	// v239 and true in recent versions.)
	WallMessage        string
	EnableWallMessages bool

	// ScheduleFile, if set, is kept as logind keeps
	// /run/systemd/shutdown/scheduled: written (USEC=, WARN_WALL=, MODE=
	// without "dry-", mode 0644, through a rename) while a schedule stands,
	// removed when it is cancelled or reset. As in logind, a schedule
	// that fired stays (and so does its file).
	ScheduleFile string

	// Now stamps recorded calls; nil means time.Now.
	Now func() time.Time

	// OnCall, if set, is called after each call is handled, in arrival
	// order. It runs on the connection's read loop: it must not block or
	// make D-Bus calls to this fake.
	OnCall func(Call)
}

// Inhibitor is one entry of ListInhibitors, signature (ssssuu).
type Inhibitor struct {
	What, Who, Why, Mode string // What is a colon list ("shutdown:sleep"); Mode is block, delay or block-weak
	UID, PID             uint32
}

// State is a snapshot of a fake logind's state.
type State struct {
	ScheduledType        string // ScheduledShutdown type, without "dry-"; "" if none
	ScheduledUSec        uint64 // ScheduledShutdown time, µs since the epoch (CLOCK_REALTIME)
	DryRun               bool   // ScheduleShutdown was given a "dry-" type
	WallMessage          string
	EnableWallMessages   bool
	PreparingForShutdown bool   // an immediate PowerOff/Reboot/Halt was accepted (or SetPreparingForShutdown)
	Action               string // that action: poweroff, reboot, halt, kexec or soft-reboot

	// Inhibitors is what ListInhibitors returns now: Options.Inhibitors,
	// then the locks taken with Inhibit and not released, oldest first.
	Inhibitors []Inhibitor
	// Released lists the locks taken with Inhibit whose descriptor has
	// been closed everywhere, in the order the fake noticed it.
	Released []Inhibitor

	// With WaitForDelayLocks: the wait for delay locks is over and the
	// shutdown "started" at ShutdownStartedAt (from Options.Now);
	// DelayTimedOut tells whether InhibitDelayMax ran out first.
	ShutdownStarted   bool
	ShutdownStartedAt time.Time
	DelayTimedOut     bool
}

// Logind is a fake org.freedesktop.login1 manager.
type Logind struct {
	svc      *service
	version  int
	o        Options
	after    func(time.Duration) <-chan time.Time
	delayMax time.Duration // guarded by svc.mu

	// Guarded by svc.mu:
	st        State
	live      []*lock       // taken with Inhibit, not yet released
	changed   chan struct{} // closed and replaced on every change
	actionGen int           // bumped when an action starts or is cancelled
	schedGen  int           // bumped when the schedule changes
	schedFile string        // what Options.ScheduleFile holds ("" for none)
}

// lock is an inhibitor taken with Inhibit: the fake keeps the read end of
// a pipe whose write end went to the caller, as logind keeps a FIFO.
type lock struct {
	Inhibitor
	r *os.File
}

// NewLogind connects to the bus at address and serves a fake logind as
// org.freedesktop.login1 at /org/freedesktop/login1. Call Close to stop it.
func NewLogind(address string, o Options) (*Logind, error) {
	l := &Logind{version: o.Version, o: o, delayMax: o.InhibitDelayMax, after: o.After, changed: make(chan struct{})}
	if l.version == 0 {
		l.version = DefaultVersion
	}
	if l.delayMax == 0 {
		l.delayMax = defaultInhibitDelayMax
	}
	if l.after == nil {
		l.after = time.After
	}
	l.o.Inhibitors = slices.Clone(o.Inhibitors)
	l.st.WallMessage, l.st.EnableWallMessages = o.WallMessage, o.EnableWallMessages
	l.svc = newService(LogindName, o.Now, o.OnCall, o.Errors)
	l.svc.onChange = l.notify
	l.svc.objects[LogindPath] = []*ifaceDef{l.manager()}
	if err := l.svc.start(address); err != nil {
		return nil, err
	}
	return l, nil
}

// Close releases the name and disconnects. Locks taken with Inhibit are
// forgotten (their holders' descriptors stay open but mean nothing).
func (l *Logind) Close() error {
	err := l.svc.close()
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	for _, lk := range l.live {
		_ = lk.r.Close()
	}
	return err
}

// Version returns the emulated systemd version.
func (l *Logind) Version() int { return l.version }

// Calls returns the method calls received so far, in order, except
// Introspect calls.
func (l *Logind) Calls() []Call { return l.svc.callsWithoutIntrospection() }

// AllCalls returns every method call received so far, including
// Introspect. (godbus answers org.freedesktop.DBus.Peer itself; those
// calls are not recorded.)
func (l *Logind) AllCalls() []Call { return l.svc.allCalls() }

// SetError makes member reply e from now on; a nil e removes the error.
func (l *Logind) SetError(member string, e *dbus.Error) { l.svc.setError(member, e) }

// Scheduled returns the ScheduledShutdown property: the type without
// "dry-" and the time in µs since the epoch; ("", 0) if none.
func (l *Logind) Scheduled() (typ string, usec uint64) {
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	return l.st.ScheduledType, l.st.ScheduledUSec
}

// State returns a snapshot of the fake's state.
func (l *Logind) State() State {
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	return l.snapshot()
}

// snapshot copies the state; svc.mu must be held.
func (l *Logind) snapshot() State {
	st := l.st
	st.Inhibitors = l.inhibitors()
	st.Released = slices.Clone(l.st.Released)
	return st
}

// Wait blocks until cond holds and returns the state it last saw, or
// returns ctx's error. cond gets a snapshot of the state and is evaluated
// again after every change (a call handled, a lock taken or released, a
// timer fired, a test control used). Tests use it instead of sleeping,
// e.g. until State.Released shows that the code under test closed its lock.
func (l *Logind) Wait(ctx context.Context, cond func(State) bool) (State, error) {
	for {
		l.svc.mu.Lock()
		st := l.snapshot()
		ch := l.changed
		l.svc.mu.Unlock()
		if cond(st) {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// notify wakes Wait and the delay wait, and brings Options.ScheduleFile
// up to date; svc.mu must be held.
func (l *Logind) notify() {
	l.syncScheduleFile()
	close(l.changed)
	l.changed = make(chan struct{})
}

// syncScheduleFile writes or removes Options.ScheduleFile after a change
// of the schedule; svc.mu must be held. From v251 an immediate action
// reads (type, 0): logind reset the schedule, and the file is gone.
func (l *Logind) syncScheduleFile() {
	path := l.o.ScheduleFile
	if path == "" {
		return
	}
	want := ""
	if l.st.ScheduledType != "" && l.st.ScheduledUSec != 0 {
		warn := 0
		if l.st.EnableWallMessages {
			warn = 1
		}
		want = fmt.Sprintf("USEC=%d\nWARN_WALL=%d\nMODE=%s\n", l.st.ScheduledUSec, warn, l.st.ScheduledType)
	}
	if want == l.schedFile {
		return
	}
	l.schedFile = want
	if want == "" {
		_ = os.Remove(path)
		return
	}
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(want), 0o644); err == nil {
		_ = os.Rename(tmp, path)
	}
}

// HoldReplies holds the replies to member (e.g. "Inhibit") until release
// is called: the call is carried out at once (an Inhibit lock is granted
// and listed) but its caller hears nothing, as when a reply comes late.
func (l *Logind) HoldReplies(member string) (release func()) { return l.svc.hold(member) }

// EmitPrepareForShutdown sends PrepareForShutdown(start) (preceded, from
// v255, by PrepareForShutdownWithMetadata) and changes nothing else: a
// test of code that reacts to the signal alone. CancelShutdown plays
// logind's own PrepareForShutdown(false).
func (l *Logind) EmitPrepareForShutdown(start bool) {
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	l.emitPrepare(start)
}

// SetPreparingForShutdown sets the PreparingForShutdown property.
func (l *Logind) SetPreparingForShutdown(b bool) {
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	l.st.PreparingForShutdown = b
	l.notify()
}

// SetInhibitDelayMax sets InhibitDelayMaxUSec, as a logind.conf change and
// a reload would. A wait for delay locks already under way keeps its timer.
func (l *Logind) SetInhibitDelayMax(d time.Duration) {
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	l.delayMax = d
	l.notify()
}

// CancelShutdown ends the shutdown in progress the way logind does when the
// shutdown job fails or is cancelled: PrepareForShutdown(false), the
// action and PreparingForShutdown cleared, and "shutdown" locks may be
// taken again. It reports whether a shutdown was in progress.
func (l *Logind) CancelShutdown() bool {
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	if l.st.Action == "" {
		return false
	}
	if l.version >= versionScheduledOnImmediate && l.st.ScheduledType == l.st.Action && l.st.ScheduledUSec == 0 {
		l.st.ScheduledType = ""
	}
	l.actionGen++
	l.st.Action, l.st.PreparingForShutdown = "", false
	l.st.ShutdownStarted, l.st.ShutdownStartedAt, l.st.DelayTimedOut = false, time.Time{}, false
	l.emitPrepare(false)
	l.notify()
	return true
}

// emitPrepare sends the PrepareForShutdown signals; svc.mu must be held.
func (l *Logind) emitPrepare(start bool) {
	if l.version >= versionPrepareWithMetadataSignal {
		md := map[string]dbus.Variant{}
		if l.st.Action != "" {
			md["type"] = dbus.MakeVariant(l.st.Action)
		}
		l.svc.emit(LogindPath, LogindInterface, "PrepareForShutdownWithMetadata", start, md)
	}
	l.svc.emit(LogindPath, LogindInterface, "PrepareForShutdown", start)
}

// manager builds the org.freedesktop.login1.Manager interface of the
// emulated version.
func (l *Logind) manager() *ifaceDef {
	v := l.version
	i := &ifaceDef{name: LogindInterface}
	method := func(since int, name string, args []introspect.Arg, fn func([]any) ([]any, *dbus.Error)) {
		if v < since {
			return
		}
		m := &methodDef{name: name, fn: fn}
		for _, a := range args {
			if a.Direction == "in" {
				m.in = append(m.in, a)
			} else {
				m.out = append(m.out, a)
			}
		}
		i.methods = append(i.methods, m)
	}
	can := func([]any) ([]any, *dbus.Error) { return []any{"yes"}, nil }

	method(0, "ListInhibitors", []introspect.Arg{out("inhibitors", "a(ssssuu)")}, func([]any) ([]any, *dbus.Error) {
		return []any{append([]Inhibitor{}, l.inhibitors()...)}, nil
	})
	i.methods = append(i.methods, &methodDef{
		name:  "Inhibit",
		in:    []introspect.Arg{in("what", "s"), in("who", "s"), in("why", "s"), in("mode", "s")},
		out:   []introspect.Arg{out("pipe_fd", "h")},
		later: l.inhibit,
	})
	method(0, "PowerOff", []introspect.Arg{in("interactive", "b")}, l.action("poweroff", false))
	method(0, "Reboot", []introspect.Arg{in("interactive", "b")}, l.action("reboot", false))
	method(versionHalt, "Halt", []introspect.Arg{in("interactive", "b")}, l.action("halt", false))
	method(versionWithFlags, "PowerOffWithFlags", []introspect.Arg{in("flags", "t")}, l.action("poweroff", true))
	method(versionWithFlags, "RebootWithFlags", []introspect.Arg{in("flags", "t")}, l.action("reboot", true))
	method(versionWithFlags, "HaltWithFlags", []introspect.Arg{in("flags", "t")}, l.action("halt", true))
	method(0, "CanPowerOff", []introspect.Arg{out("result", "s")}, can)
	method(0, "CanReboot", []introspect.Arg{out("result", "s")}, can)
	method(versionHalt, "CanHalt", []introspect.Arg{out("result", "s")}, can)
	method(versionSchedule, "ScheduleShutdown", []introspect.Arg{in("type", "s"), in("usec", "t")}, l.schedule)
	method(versionSchedule, "CancelScheduledShutdown", []introspect.Arg{out("cancelled", "b")}, func([]any) ([]any, *dbus.Error) {
		cancelled := l.st.ScheduledType != ""
		l.schedGen++
		l.st.ScheduledType, l.st.ScheduledUSec, l.st.DryRun = "", 0, false
		return []any{cancelled}, nil
	})
	method(versionSetWallMessage, "SetWallMessage", []introspect.Arg{in("wall_message", "s"), in("enable", "b")}, func(a []any) ([]any, *dbus.Error) {
		l.st.WallMessage, l.st.EnableWallMessages = a[0].(string), a[1].(bool)
		return nil, nil
	})

	prop := func(since int, name, sig string, get func() any, set func(any) *dbus.Error) {
		if v >= since {
			i.props = append(i.props, &propDef{name: name, sig: sig, get: get, set: set})
		}
	}
	prop(0, "BlockInhibited", "s", func() any { return l.inhibited("block") }, nil)
	prop(0, "DelayInhibited", "s", func() any { return l.inhibited("delay") }, nil)
	prop(0, "InhibitDelayMaxUSec", "t", func() any { return uint64(l.delayMax / time.Microsecond) }, nil)
	prop(0, "PreparingForShutdown", "b", func() any { return l.st.PreparingForShutdown }, nil)
	prop(versionPrepareWithMetadataProperty, "PreparingForShutdownWithMetadata", "a{sv}", func() any {
		md := map[string]dbus.Variant{}
		if l.st.PreparingForShutdown {
			md["type"] = dbus.MakeVariant(l.st.Action)
		}
		return md
	}, nil)
	prop(versionSchedule, "ScheduledShutdown", "(st)", func() any {
		return scheduledShutdown{l.st.ScheduledType, l.st.ScheduledUSec}
	}, nil)
	prop(versionSchedule, "WallMessage", "s", func() any { return l.st.WallMessage }, func(x any) *dbus.Error {
		l.st.WallMessage = x.(string)
		return nil
	})
	prop(versionSchedule, "EnableWallMessages", "b", func() any { return l.st.EnableWallMessages }, func(x any) *dbus.Error {
		l.st.EnableWallMessages = x.(bool)
		return nil
	})

	i.signals = append(i.signals, &signalDef{name: "PrepareForShutdown", args: []introspect.Arg{{Name: "start", Type: "b"}}})
	if v >= versionPrepareWithMetadataSignal {
		i.signals = append(i.signals, &signalDef{name: "PrepareForShutdownWithMetadata", args: []introspect.Arg{
			{Name: "start", Type: "b"}, {Name: "metadata", Type: "a{sv}"},
		}})
	}
	return i
}

// scheduledShutdown is the (st) value of the ScheduledShutdown property.
type scheduledShutdown struct {
	Type string
	USec uint64
}

// publicFlags returns the flag bits the version accepts.
func (l *Logind) publicFlags() uint64 {
	var f uint64
	for _, b := range []struct {
		since int
		bit   uint64
	}{
		{versionWithFlags, FlagRootCheckInhibitors},
		{249, FlagRebootViaKexec},
		{254, FlagSoftReboot},
		{255, FlagSoftRebootIfNextrootSetUp},
		{257, FlagSkipInhibitors},
	} {
		if l.version >= b.since {
			f |= b.bit
		}
	}
	return f
}

// action implements PowerOff/Reboot/Halt(b) and their WithFlags(t)
// variants like method_do_shutdown_or_sleep, minus polkit (the caller is
// treated as root) and minus starting the target unit.
func (l *Logind) action(kind string, withFlags bool) func([]any) ([]any, *dbus.Error) {
	return func(a []any) ([]any, *dbus.Error) {
		var flags uint64
		if withFlags {
			flags = a[0].(uint64)
			if err := l.checkFlags(kind, flags); err != nil {
				return nil, err
			}
		} else if a[0].(bool) {
			flags = flagInteractive
		}

		typ := kind
		if kind == "reboot" {
			switch {
			case flags&FlagSoftReboot != 0:
				typ = "soft-reboot"
			case flags&FlagRebootViaKexec != 0 && l.o.KexecLoaded:
				typ = "kexec"
			}
		}
		if l.st.Action != "" {
			return nil, newError(ErrorOperationInProgress, "There's already a shutdown or sleep operation in progress")
		}
		if err := l.checkInhibitors(flags); err != nil {
			return nil, err
		}

		if l.version >= versionScheduledOnImmediate {
			l.schedGen++
			l.st.ScheduledType, l.st.ScheduledUSec, l.st.DryRun = typ, 0, false
		}
		l.start(typ)
		return nil, nil
	}
}

// start begins a shutdown of type typ; svc.mu must be held. It sends
// PrepareForShutdown(true) and, with WaitForDelayLocks, waits for delay
// locks (bus_manager_shutdown_or_sleep_now_or_later).
func (l *Logind) start(typ string) {
	l.st.Action, l.st.PreparingForShutdown = typ, true
	l.emitPrepare(true)
	if !l.o.WaitForDelayLocks {
		return
	}
	l.actionGen++
	gen := l.actionGen
	if l.delayMax <= 0 || !l.delayLocked() {
		l.shutdownStarted(false)
		return
	}
	delay := l.delayMax
	go func() {
		timeout := l.after(delay)
		for {
			l.svc.mu.Lock()
			if gen != l.actionGen {
				l.svc.mu.Unlock()
				return
			}
			if !l.delayLocked() {
				l.shutdownStarted(false)
				l.svc.mu.Unlock()
				return
			}
			changed := l.changed
			l.svc.mu.Unlock()
			select {
			case <-changed:
			case <-timeout:
				l.svc.mu.Lock()
				if gen == l.actionGen {
					l.shutdownStarted(true)
				}
				l.svc.mu.Unlock()
				return
			case <-l.svc.done:
				return
			}
		}
	}()
}

// shutdownStarted records the end of the wait; svc.mu must be held.
func (l *Logind) shutdownStarted(timedOut bool) {
	l.actionGen++ // the wait is over
	l.st.ShutdownStarted, l.st.ShutdownStartedAt, l.st.DelayTimedOut = true, l.svc.now(), timedOut
	l.notify()
}

// delayLocked reports whether a delay lock on shutdown is held; svc.mu
// must be held.
func (l *Logind) delayLocked() bool {
	for _, inh := range l.inhibitors() {
		if inh.Mode == "delay" && slices.Contains(strings.Split(inh.What, ":"), "shutdown") {
			return true
		}
	}
	return false
}

// inhibitors returns every lock, static ones first; svc.mu must be held.
func (l *Logind) inhibitors() []Inhibitor {
	all := slices.Clone(l.o.Inhibitors)
	for _, lk := range l.live {
		all = append(all, lk.Inhibitor)
	}
	return all
}

// inhibitWhats are the lock types logind knows (inhibit_what_from_string).
var inhibitWhats = []string{"shutdown", "sleep", "idle", "handle-power-key", "handle-suspend-key",
	"handle-hibernate-key", "handle-lid-switch"}

// inhibit implements Inhibit(s what, s who, s why, s mode) → h like
// method_inhibit, minus polkit: it checks the arguments on the read loop,
// then asks the bus for the caller's EUID and PID, registers the lock and
// replies with the write end of a pipe, whose closing it notices.
func (l *Logind) inhibit(c Call) (func(*dbus.Message), *dbus.Error) {
	what, who, why, mode := c.Args[0].(string), c.Args[1].(string), c.Args[2].(string), c.Args[3].(string)
	if err := l.checkInhibit(what, mode); err != nil {
		return nil, err
	}
	return func(msg *dbus.Message) {
		uid, pid, err := l.svc.credentials(c.Sender)
		if err != nil {
			l.svc.replyError(c, msg, newError("org.freedesktop.DBus.Error.Failed", "%v", err))
			return
		}
		r, w, err := os.Pipe()
		if err != nil {
			l.svc.replyError(c, msg, newError("org.freedesktop.DBus.Error.Failed", "%v", err))
			return
		}
		defer w.Close() // after the reply has been written: the caller's copy is then the only one
		l.svc.mu.Lock()
		if err := l.checkInhibit(what, mode); err != nil { // a shutdown may have begun meanwhile
			l.svc.mu.Unlock()
			_ = r.Close()
			l.svc.replyError(c, msg, err)
			return
		}
		lk := &lock{Inhibitor: Inhibitor{What: what, Who: who, Why: why, Mode: mode, UID: uid, PID: pid}, r: r}
		l.live = append(l.live, lk)
		l.notify()
		l.svc.mu.Unlock()
		go l.watch(lk)
		l.svc.reply(c, msg, dbus.UnixFD(w.Fd()))
	}, nil
}

// checkInhibit validates Inhibit's arguments; it reads state, so svc.mu
// must be held.
func (l *Logind) checkInhibit(what, mode string) *dbus.Error {
	whats := inhibitWhats
	if l.version >= versionHandleRebootKey {
		whats = append(slices.Clone(whats), "handle-reboot-key")
	}
	words := strings.Split(what, ":")
	for _, w := range words {
		if !slices.Contains(whats, w) {
			return newError(ErrorInvalidArgs, "Invalid what specification %s", what)
		}
	}
	modes := []string{"block", "delay"}
	if l.version >= versionStrictInhibitors {
		modes = append(modes, "block-weak")
	}
	if !slices.Contains(modes, mode) {
		return newError(ErrorInvalidArgs, "Invalid mode specification %s", mode)
	}
	if mode == "delay" {
		for _, w := range words {
			if w != "shutdown" && w != "sleep" {
				return newError(ErrorInvalidArgs, "Delay inhibitors only supported for shutdown and sleep")
			}
		}
	}
	if l.st.Action != "" && slices.Contains(words, "shutdown") {
		return newError(ErrorOperationInProgress, "The operation inhibition has been requested for is already running")
	}
	return nil
}

// watch waits until every copy of lk's write end is closed, then releases
// the lock (logind sees EOF on its FIFO).
func (l *Logind) watch(lk *lock) {
	_, _ = io.Copy(io.Discard, lk.r)
	select {
	case <-l.svc.done:
		return // Close closed the read end
	default:
	}
	_ = lk.r.Close()
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	l.live = slices.DeleteFunc(l.live, func(x *lock) bool { return x == lk })
	l.st.Released = append(l.st.Released, lk.Inhibitor)
	l.notify()
}

func (l *Logind) checkFlags(kind string, flags uint64) *dbus.Error {
	if flags&^l.publicFlags() != 0 {
		return newError(ErrorInvalidArgs, "Invalid flags parameter")
	}
	if flags&FlagRebootViaKexec != 0 && flags&FlagSoftReboot != 0 {
		return newError(ErrorInvalidArgs, "Both reboot via kexec and soft reboot selected, which is not supported")
	}
	if kind == "reboot" {
		return nil
	}
	if flags&FlagRebootViaKexec != 0 {
		if l.version < versionKexecMessage {
			return newError(ErrorInvalidArgs, "Reboot via kexec is only applicable with reboot operations")
		}
		return newError(ErrorInvalidArgs, "Reboot via kexec option is only applicable with reboot operations")
	}
	if flags&(FlagSoftReboot|FlagSoftRebootIfNextrootSetUp) != 0 {
		return newError(ErrorInvalidArgs, "Soft reboot option is only applicable with reboot operations")
	}
	return nil
}

// checkInhibitors applies block locks on "shutdown" for a root caller.
func (l *Logind) checkInhibitors(flags uint64) *dbus.Error {
	strict := l.version >= versionStrictInhibitors
	if strict && flags&FlagSkipInhibitors != 0 || !strict && flags&FlagRootCheckInhibitors == 0 {
		return nil
	}
	for _, inh := range l.inhibitors() {
		if !slices.Contains(strings.Split(inh.What, ":"), "shutdown") {
			continue
		}
		blocks := inh.Mode == "block" && (strict || inh.UID != 0) ||
			inh.Mode == "block-weak" && strict && inh.UID != 0
		if !blocks {
			continue
		}
		switch {
		case !strict:
			return newError(ErrorAccessDenied, "Access denied to root due to active block inhibitor")
		case l.version >= versionBlockedByInhibitorLock:
			return newError(ErrorBlockedByInhibitorLock, "Operation denied due to active block inhibitor")
		default:
			return newError(ErrorAccessDenied, "Access denied due to active block inhibitor")
		}
	}
	return nil
}

// schedule implements ScheduleShutdown(s type, t usec).
func (l *Logind) schedule(a []any) ([]any, *dbus.Error) {
	typ, usec := a[0].(string), a[1].(uint64)
	typ, dry := strings.CutPrefix(typ, "dry-")
	types := []string{"poweroff", "reboot", "halt"}
	if l.version >= 249 {
		types = append(types, "kexec")
	}
	if l.version >= 254 {
		types = append(types, "soft-reboot")
	}
	if !slices.Contains(types, typ) {
		if l.version >= versionUnsupportedShutdownTypeWithArg {
			return nil, newError(ErrorInvalidArgs, "Unsupported shutdown type: %s", typ)
		}
		return nil, newError(ErrorInvalidArgs, "Unsupported shutdown type")
	}
	if err := l.checkInhibitors(0); err != nil {
		return nil, err
	}
	l.st.ScheduledType, l.st.ScheduledUSec, l.st.DryRun = typ, usec, dry
	l.schedGen++
	if l.o.WaitForDelayLocks && usec <= math.MaxInt64 { // later than that: never
		gen, wait := l.schedGen, time.UnixMicro(int64(usec)).Sub(l.svc.now())
		go func() {
			select {
			case <-l.after(max(wait, 0)):
				l.fire(gen)
			case <-l.svc.done:
			}
		}()
	}
	return nil, nil
}

// fire is a scheduled shutdown's time coming
// (manager_scheduled_shutdown_handler).
func (l *Logind) fire(gen int) {
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	if gen != l.schedGen || l.st.ScheduledType == "" {
		return // cancelled or replaced
	}
	typ, dry := l.st.ScheduledType, l.st.DryRun
	if dry || l.st.Action != "" { // dry run, or another shutdown under way: only the schedule goes
		l.schedGen++
		l.st.ScheduledType, l.st.ScheduledUSec, l.st.DryRun = "", 0, false
		l.notify()
		return
	}
	l.start(typ)
	l.notify()
}

// inhibited returns the BlockInhibited or DelayInhibited value.
func (l *Logind) inhibited(mode string) string {
	var what []string
	for _, inh := range l.inhibitors() {
		if inh.Mode != mode {
			continue
		}
		for _, w := range strings.Split(inh.What, ":") {
			if w != "" && !slices.Contains(what, w) {
				what = append(what, w)
			}
		}
	}
	return strings.Join(what, ":")
}
