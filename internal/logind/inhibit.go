package logind

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/handoff"
)

// What kubelet's Graceful Node Shutdown manager passes to Inhibit
// (pkg/kubelet/nodeshutdown/systemd, v1.37), so that gnsh status can tell
// its lock from others.
const (
	KubeletWho = "kubelet"
	KubeletWhy = "Kubelet needs time to handle node shutdown"
)

// ErrNoUnixFDs is returned by Inhibit on a connection that did not
// negotiate UNIX fd passing.
var ErrNoUnixFDs = errors.New("this D-Bus connection cannot pass file descriptors (UNIX fd passing not negotiated), so it cannot hold an inhibitor lock")

// Inhibit calls Inhibit(s what, s who, s why, s mode) → h and returns the
// lock's file descriptor. The lock lasts while the descriptor is open
// anywhere: Close releases it, and so does the death of the process.
//
// Keep the *os.File reachable for as long as the lock must hold: the Go
// runtime closes an unreachable *os.File from a finalizer, which would drop
// the lock at a random moment. The descriptor is close-on-exec (godbus
// reads with MSG_CMSG_CLOEXEC), so commands the agent runs do not inherit
// it and cannot keep the lock alive after the agent has released it.
//
// ctx bounds the wait for the reply, but a reply that arrives after ctx has
// ended still carries a granted lock. godbus would drop such a reply
// together with its descriptor, leaking a lock that then delays every
// shutdown by InhibitDelayMaxSec with nobody left to release it. So the
// call is not tied to ctx: when ctx ends first, a goroutine stays behind
// until the reply (or the connection's end, or dbus-daemon's own reply
// timeout) and closes whatever descriptor it brings.
//
// logind refuses a lock on an operation it is already carrying out
// ("shutdown" while it waits for delay locks or while the shutdown job
// runs) with org.freedesktop.login1.OperationInProgress, a *handoff.BusError.
func (l *Logind) Inhibit(ctx context.Context, what, who, why, mode string) (*os.File, error) {
	if l.conn == nil || !l.conn.SupportsUnixFDs() {
		return nil, ErrNoUnixFDs
	}
	if err := ctx.Err(); err != nil {
		return nil, convert(err)
	}
	ch := make(chan *dbus.Call, 1)
	l.obj.Go(Login1Manager+".Inhibit", 0, ch, what, who, why, mode)
	select {
	case call := <-ch:
		return inhibitReply(call)
	case <-ctx.Done():
		go func() { closeFDs((<-ch).Body) }()
		return nil, convert(ctx.Err())
	}
}

// inhibitReply turns Inhibit's reply into a file, closing any descriptor it
// does not return.
func inhibitReply(call *dbus.Call) (*os.File, error) {
	if call.Err != nil {
		return nil, convert(call.Err)
	}
	if len(call.Body) == 1 {
		if fd, ok := call.Body[0].(dbus.UnixFD); ok && fd >= 0 {
			return os.NewFile(uintptr(fd), "logind-inhibitor"), nil
		}
	}
	closeFDs(call.Body)
	return nil, fmt.Errorf("logind's Inhibit reply has signature %s, want h", dbus.SignatureOf(call.Body...))
}

// closeFDs closes the descriptors in a message body.
func closeFDs(body []any) {
	for _, v := range body {
		switch fd := v.(type) {
		case dbus.UnixFD:
			_ = closeFD(int(fd))
		case []dbus.UnixFD:
			for _, f := range fd {
				_ = closeFD(int(f))
			}
		}
	}
}

func closeFD(fd int) error { return os.NewFile(uintptr(fd), "").Close() }

// property reads one org.freedesktop.login1.Manager property.
func (l *Logind) property(ctx context.Context, name string) (dbus.Variant, error) {
	var v dbus.Variant
	if err := l.call(ctx, "org.freedesktop.DBus.Properties.Get", Login1Manager, name).Store(&v); err != nil {
		return dbus.Variant{}, convert(err)
	}
	return v, nil
}

// InhibitDelayMax reads InhibitDelayMaxUSec (t): how long logind waits for
// delay locks after PrepareForShutdown(true) before it goes on anyway (5 s
// unless logind.conf says otherwise). All holders share that one window.
// logind reads it at start and on reload only. "infinity" (UINT64_MAX) and
// anything beyond time.Duration's range read as math.MaxInt64.
func (l *Logind) InhibitDelayMax(ctx context.Context) (time.Duration, error) {
	v, err := l.property(ctx, "InhibitDelayMaxUSec")
	if err != nil {
		return 0, err
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec has signature %s, want t", v.Signature())
	}
	if usec > math.MaxInt64/uint64(time.Microsecond) {
		return math.MaxInt64, nil
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// PreparingForShutdown reads PreparingForShutdown (b): true from
// PrepareForShutdown(true) until logind gives up the shutdown. logind sends
// no PropertiesChanged for it; it is what an agent that (re)connects late
// reads to learn that the signal has already gone out.
func (l *Logind) PreparingForShutdown(ctx context.Context) (bool, error) {
	v, err := l.property(ctx, "PreparingForShutdown")
	if err != nil {
		return false, err
	}
	b, ok := v.Value().(bool)
	if !ok {
		return false, fmt.Errorf("PreparingForShutdown has signature %s, want b", v.Signature())
	}
	return b, nil
}

// ScheduledTime interprets the usec of ScheduledShutdown. ok is false when
// it names no moment: 0 (nothing scheduled on v247; an immediate action
// from v251), UINT64_MAX (nothing scheduled on v252), or anything past
// math.MaxInt64 µs (year 294247: logind waits for ever).
func ScheduledTime(usec uint64) (at time.Time, ok bool) {
	if usec == 0 || usec > math.MaxInt64 {
		return time.Time{}, false
	}
	return time.UnixMicro(int64(usec)), true
}

// FindInhibitors returns the locks in list that inhibit what (one word of
// their colon-separated What) in mode, held by who; an empty mode or who
// matches any. What must be matched word by word: kubelet's lock reads
// "shutdown", but a lock on "shutdown:sleep" holds shutdown as well.
func FindInhibitors(list []handoff.Inhibitor, what, mode, who string) []handoff.Inhibitor {
	var out []handoff.Inhibitor
	for _, in := range list {
		if slices.Contains(strings.Split(in.What, ":"), what) &&
			(mode == "" || in.Mode == mode) && (who == "" || in.Who == who) {
			out = append(out, in)
		}
	}
	return out
}
