package logindtest

import (
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

	// Inhibitors is returned by ListInhibitors. Block locks on
	// "shutdown" are also enforced as logind does for a root caller:
	// before v257 only with FlagRootCheckInhibitors and only for locks of
	// other users (UID != 0); from v257 every "block" lock and other
	// users' "block-weak" locks, unless FlagSkipInhibitors.
	Inhibitors []Inhibitor

	// InhibitDelayMax is the InhibitDelayMaxUSec property; zero means 5s.
	InhibitDelayMax time.Duration

	// KexecLoaded makes RebootWithFlags(FlagRebootViaKexec) act as kexec.
	KexecLoaded bool

	// WallMessage and EnableWallMessages are the initial property values.
	// (Real logind starts with EnableWallMessages false up to at least
	// v239 and true in recent versions.)
	WallMessage        string
	EnableWallMessages bool

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
	PreparingForShutdown bool   // an immediate PowerOff/Reboot/Halt was accepted
	Action               string // that action: poweroff, reboot, halt, kexec or soft-reboot
}

// Logind is a fake org.freedesktop.login1 manager.
type Logind struct {
	svc      *service
	version  int
	o        Options
	delayMax time.Duration

	st State // guarded by svc.mu
}

// NewLogind connects to the bus at address and serves a fake logind as
// org.freedesktop.login1 at /org/freedesktop/login1. Call Close to stop it.
func NewLogind(address string, o Options) (*Logind, error) {
	l := &Logind{version: o.Version, o: o, delayMax: o.InhibitDelayMax}
	if l.version == 0 {
		l.version = DefaultVersion
	}
	if l.delayMax == 0 {
		l.delayMax = defaultInhibitDelayMax
	}
	l.o.Inhibitors = slices.Clone(o.Inhibitors)
	l.st.WallMessage, l.st.EnableWallMessages = o.WallMessage, o.EnableWallMessages
	l.svc = newService(LogindName, o.Now, o.OnCall, o.Errors)
	l.svc.objects[LogindPath] = []*ifaceDef{l.manager()}
	if err := l.svc.start(address); err != nil {
		return nil, err
	}
	return l, nil
}

// Close releases the name and disconnects.
func (l *Logind) Close() error { return l.svc.close() }

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
	return l.st
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
		return []any{append([]Inhibitor{}, l.o.Inhibitors...)}, nil
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

		l.st.Action, l.st.PreparingForShutdown = typ, true
		if l.version >= versionScheduledOnImmediate {
			l.st.ScheduledType, l.st.ScheduledUSec, l.st.DryRun = typ, 0, false
		}
		if l.version >= versionPrepareWithMetadataSignal {
			l.svc.emit(LogindPath, LogindInterface, "PrepareForShutdownWithMetadata", true,
				map[string]dbus.Variant{"type": dbus.MakeVariant(typ)})
		}
		l.svc.emit(LogindPath, LogindInterface, "PrepareForShutdown", true)
		return nil, nil
	}
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
	for _, inh := range l.o.Inhibitors {
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
	return nil, nil
}

// inhibited returns the BlockInhibited or DelayInhibited value.
func (l *Logind) inhibited(mode string) string {
	var what []string
	for _, inh := range l.o.Inhibitors {
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
