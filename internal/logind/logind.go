// Package logind is a small client for org.freedesktop.login1.Manager and
// org.freedesktop.systemd1.Manager on godbus. Unlike go-systemd's login1 it
// returns every error, speaks the WithFlags and ScheduleShutdown methods,
// bounds every step with a context, and needs no libc (EXTERNAL auth with a
// numeric uid), so it works in a static binary and in an initramfs.
package logind

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"

	"github.com/gnsh/gnsh/internal/handoff"
)

// D-Bus names.
const (
	Login1Service  = "org.freedesktop.login1"
	Login1Path     = "/org/freedesktop/login1"
	Login1Manager  = "org.freedesktop.login1.Manager"
	SystemdService = "org.freedesktop.systemd1"
	SystemdPath    = "/org/freedesktop/systemd1"
	SystemdManager = "org.freedesktop.systemd1.Manager"

	// DefaultSystemBus is where the system bus listens when
	// $DBUS_SYSTEM_BUS_ADDRESS is unset.
	DefaultSystemBus = "unix:path=/run/dbus/system_bus_socket"
	// SystemdPrivate is PID 1's own peer-to-peer socket, which works without
	// dbus-daemon (systemctl uses it as root).
	SystemdPrivate = "unix:path=/run/systemd/private"
)

// SystemBusAddress returns $DBUS_SYSTEM_BUS_ADDRESS or the default.
func SystemBusAddress(getenv func(string) string) string {
	if a := getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return DefaultSystemBus
}

// Conn is an authenticated D-Bus connection.
type Conn struct {
	conn *dbus.Conn
}

// Bus is the godbus connection under c, for callers that read other
// services' properties on the same bus (gnsh status). Closing c closes it.
func (c *Conn) Bus() *dbus.Conn { return c.conn }

// Dial connects to a D-Bus address (only unix:path= and unix:abstract=
// entries; the first that works wins), authenticates with EXTERNAL and, on a
// bus (not a peer-to-peer socket), says Hello. The whole handshake is bounded
// by ctx.
func Dial(ctx context.Context, address string, peerToPeer bool) (*Conn, error) {
	var errs []error
	for _, entry := range strings.Split(address, ";") {
		network, addr, err := parseUnixAddress(entry)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c, err := dialOne(ctx, network, addr, peerToPeer)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		errs = append(errs, fmt.Errorf("empty D-Bus address"))
	}
	return nil, &handoff.UnreachableError{Op: "connect to " + address, Err: joinErrors(errs)}
}

// joinErrors joins errors on one line: warnings must stay one line each.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	s := make([]string, len(errs))
	for i, e := range errs {
		s[i] = e.Error()
	}
	return errors.New(strings.Join(s, "; "))
}

func parseUnixAddress(entry string) (network, addr string, err error) {
	transport, params, ok := strings.Cut(entry, ":")
	if !ok || transport != "unix" {
		return "", "", fmt.Errorf("unsupported D-Bus address %q (only unix:path= and unix:abstract=)", entry)
	}
	for _, kv := range strings.Split(params, ",") {
		k, v, _ := strings.Cut(kv, "=")
		v = unescape(v)
		switch k {
		case "path":
			return "unix", v, nil
		case "abstract":
			return "unix", "@" + v, nil
		}
	}
	return "", "", fmt.Errorf("unsupported D-Bus address %q (only unix:path= and unix:abstract=)", entry)
}

// unescape decodes D-Bus address %xx escapes.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func dialOne(ctx context.Context, network, addr string, peerToPeer bool) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, unwrapNet(err)
	}
	uc := nc.(*net.UnixConn)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(handoff.DefaultCallTimeout)
	}
	_ = uc.SetDeadline(deadline)
	conn, err := dbus.DialUnix(uc)
	if err != nil {
		uc.Close()
		return nil, err
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("authenticate: %w", err)
	}
	if !peerToPeer {
		if err := conn.Hello(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("hello: %w", err)
		}
	}
	_ = uc.SetDeadline(time.Time{})
	return &Conn{conn: conn}, nil
}

func unwrapNet(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return se.Err
		}
		return oe.Err
	}
	return err
}

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }

// Done is closed when the connection is closed or lost (the bus daemon went
// away, or a read failed). A long-lived user such as the node agent selects
// on it to know when to dial again: godbus never reconnects by itself, and
// every match rule, watch and inhibitor lock taken over a lost connection
// must be taken again (a lock's fd stays valid, see Inhibit).
func (c *Conn) Done() <-chan struct{} { return c.conn.Context().Done() }

// SupportsUnixFDs reports whether UNIX fd passing was negotiated during
// authentication. Dial negotiates it on every unix socket; without it
// logind's Inhibit reply cannot be delivered (see Inhibit).
func (c *Conn) SupportsUnixFDs() bool { return c.conn.SupportsUnixFDs() }

// Logind returns the login1 Manager on this connection.
func (c *Conn) Logind() *Logind {
	return &Logind{conn: c.conn, obj: c.conn.Object(Login1Service, Login1Path)}
}

// Systemd returns the systemd1 Manager on this connection.
func (c *Conn) Systemd() *Systemd {
	return &Systemd{obj: c.conn.Object(SystemdService, SystemdPath)}
}

// Logind implements handoff.Logind, and the inhibitor, property and signal
// calls the node agent needs (inhibit.go, watch.go).
type Logind struct {
	conn *dbus.Conn
	obj  dbus.BusObject
}

var _ handoff.Logind = (*Logind)(nil)

// Caps introspects /org/freedesktop/login1 and lists the Manager's methods.
func (l *Logind) Caps(ctx context.Context) (handoff.Caps, error) {
	var data string
	if err := l.call(ctx, "org.freedesktop.DBus.Introspectable.Introspect").Store(&data); err != nil {
		return handoff.Caps{}, convert(err)
	}
	return ParseCaps(data)
}

// ParseCaps reads the Manager interface out of introspection XML.
func ParseCaps(data string) (handoff.Caps, error) {
	var node introspect.Node
	if err := xml.Unmarshal([]byte(data), &node); err != nil {
		return handoff.Caps{}, fmt.Errorf("parse logind introspection data: %w", err)
	}
	caps := handoff.Caps{Methods: map[string]bool{}}
	found := false
	for _, iface := range node.Interfaces {
		if iface.Name != Login1Manager {
			continue
		}
		found = true
		for _, m := range iface.Methods {
			caps.Methods[m.Name] = true
		}
	}
	if !found {
		return caps, fmt.Errorf("logind's introspection data has no %s interface", Login1Manager)
	}
	return caps, nil
}

func (l *Logind) call(ctx context.Context, method string, args ...any) *dbus.Call {
	// Flags 0: no ALLOW_INTERACTIVE_AUTHORIZATION, as legacy commands.
	return l.obj.CallWithContext(ctx, method, 0, args...)
}

// SetWallMessage calls SetWallMessage(s, b).
func (l *Logind) SetWallMessage(ctx context.Context, msg string, enable bool) error {
	return convert(l.call(ctx, Login1Manager+".SetWallMessage", msg, enable).Err)
}

// ShutdownWithFlags calls PowerOffWithFlags/RebootWithFlags/HaltWithFlags(t).
func (l *Logind) ShutdownWithFlags(ctx context.Context, method string, flags uint64) error {
	return convert(l.call(ctx, Login1Manager+"."+method+"WithFlags", flags).Err)
}

// Shutdown calls PowerOff/Reboot/Halt(b).
func (l *Logind) Shutdown(ctx context.Context, method string, interactive bool) error {
	return convert(l.call(ctx, Login1Manager+"."+method, interactive).Err)
}

// ScheduleShutdown calls ScheduleShutdown(s, t).
func (l *Logind) ScheduleShutdown(ctx context.Context, typ string, usec uint64) error {
	return convert(l.call(ctx, Login1Manager+".ScheduleShutdown", typ, usec).Err)
}

// CancelScheduledShutdown calls CancelScheduledShutdown() → b.
func (l *Logind) CancelScheduledShutdown(ctx context.Context) (bool, error) {
	var ok bool
	err := l.call(ctx, Login1Manager+".CancelScheduledShutdown").Store(&ok)
	return ok, convert(err)
}

// ScheduledShutdown reads the ScheduledShutdown (st) property: the type
// without logind's "dry-" prefix and the time in CLOCK_REALTIME µs. Nothing
// scheduled reads ("", 0) on systemd 247 and ("", UINT64_MAX) on 252
// (both checked by the e2e test; the change lies in between), and from
// v251 an immediate PowerOff/Reboot/Halt reads (type, 0): ScheduledTime
// sorts these out. Neither 247 nor 252 sends PropertiesChanged for it
// (checked), so an agent that follows it polls it, or watches
// /run/systemd/shutdown/scheduled. v219 lacks the property: that is a
// *handoff.BusError named org.freedesktop.DBus.Error.UnknownProperty.
func (l *Logind) ScheduledShutdown(ctx context.Context) (string, uint64, error) {
	v, err := l.property(ctx, "ScheduledShutdown")
	if err != nil {
		return "", 0, err
	}
	var s struct {
		Type string
		Usec uint64
	}
	if err := dbus.Store([]any{v.Value()}, &s); err != nil {
		return "", 0, fmt.Errorf("ScheduledShutdown has signature %s, want (st)", v.Signature())
	}
	return s.Type, s.Usec, nil
}

// ListInhibitors calls ListInhibitors() → a(ssssuu): every lock logind
// holds, each with What (a colon list such as "shutdown:sleep"), Who and Why
// as the holder gave them, Mode ("block", "delay", "block-weak" from v257),
// and the holder's effective UID and PID as logind saw them (a PID in
// logind's PID namespace). FindInhibitors answers "is kubelet's lock
// there? gnsh's?" from it.
func (l *Logind) ListInhibitors(ctx context.Context) ([]handoff.Inhibitor, error) {
	var raw []struct {
		What, Who, Why, Mode string
		UID, PID             uint32
	}
	if err := l.call(ctx, Login1Manager+".ListInhibitors").Store(&raw); err != nil {
		return nil, convert(err)
	}
	out := make([]handoff.Inhibitor, len(raw))
	for i, x := range raw {
		out[i] = handoff.Inhibitor{What: x.What, Who: x.Who, Why: x.Why, Mode: x.Mode, UID: x.UID, PID: x.PID}
	}
	return out, nil
}

// Systemd implements handoff.Systemd.
type Systemd struct{ obj dbus.BusObject }

var _ handoff.Systemd = (*Systemd)(nil)

// StartUnit calls StartUnit(s name, s mode) → o job.
func (s *Systemd) StartUnit(ctx context.Context, name, mode string) error {
	var job dbus.ObjectPath
	return convert(s.obj.CallWithContext(ctx, SystemdManager+".StartUnit", 0, name, mode).Store(&job))
}

// SystemState reads the manager's SystemState: "running", "degraded",
// "starting", "stopping" (shutdown.target is active or queued: the system
// is going down, whoever asked), …
//
// ErrNoService (wrapped) means no systemd1 service is on the bus at all
// (not systemd as PID 1: a test bus, a container without it).
func (s *Systemd) SystemState(ctx context.Context) (string, error) {
	var v dbus.Variant
	if err := s.obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, SystemdManager, "SystemState").Store(&v); err != nil {
		if name, _, ok := dbusError(err); ok && (name == "org.freedesktop.DBus.Error.ServiceUnknown" || name == "org.freedesktop.DBus.Error.NameHasNoOwner") {
			return "", fmt.Errorf("%w: %s", ErrNoService, SystemdService)
		}
		return "", convert(err)
	}
	st, ok := v.Value().(string)
	if !ok {
		return "", fmt.Errorf("SystemState has signature %s, want s", v.Signature())
	}
	return st, nil
}

// ErrNoService means the service asked for is not on the bus.
var ErrNoService = errors.New("no such service on the bus")

// unreachableNames are error replies meaning "nobody is there to ask".
var unreachableNames = map[string]bool{
	"org.freedesktop.DBus.Error.ServiceUnknown": true,
	"org.freedesktop.DBus.Error.NameHasNoOwner": true,
	"org.freedesktop.DBus.Error.NoReply":        true,
	"org.freedesktop.DBus.Error.Timeout":        true,
	"org.freedesktop.DBus.Error.TimedOut":       true,
	"org.freedesktop.DBus.Error.Disconnected":   true,
	"org.freedesktop.DBus.Error.NoServer":       true,
	"org.freedesktop.DBus.Error.Spawn.Failed":   true,
}

// convert maps godbus errors onto handoff's error types.
func convert(err error) error {
	if err == nil {
		return nil
	}
	name, msg, ok := dbusError(err)
	switch {
	case ok && (unreachableNames[name] || strings.HasPrefix(name, "org.freedesktop.DBus.Error.Spawn.")):
		return &handoff.UnreachableError{Op: "call", Err: errors.New(msg)}
	case ok:
		return &handoff.BusError{Name: name, Message: msg}
	case errors.Is(err, context.DeadlineExceeded):
		return &handoff.UnreachableError{Op: "call", Err: errors.New("timed out")}
	default:
		return &handoff.UnreachableError{Op: "call", Err: err}
	}
}

func dbusError(err error) (name, msg string, ok bool) {
	var v dbus.Error
	var p *dbus.Error
	switch {
	case errors.As(err, &v):
	case errors.As(err, &p):
		v = *p
	default:
		return "", "", false
	}
	msg = v.Name
	if len(v.Body) > 0 {
		if s, isStr := v.Body[0].(string); isStr {
			msg = s
		}
	}
	return v.Name, msg, true
}
