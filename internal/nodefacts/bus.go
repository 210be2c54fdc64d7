package nodefacts

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/logind"
)

// dialLogind connects to logind on the system bus (or the injected one).
func (s *Sources) dialLogind(ctx context.Context) (Logind, func(), error) {
	if s.DialLogind != nil {
		return s.DialLogind(ctx)
	}
	addr := logind.SystemBusAddress(s.getenv)
	c, err := logind.Dial(ctx, addr, false)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return c.Logind(), func() { _ = c.Close() }, nil
}

// dialSystemd connects to PID 1's manager: on the system bus, else (root
// only) on PID 1's private socket, which works without dbus-daemon.
func (s *Sources) dialSystemd(ctx context.Context) (Systemd, func(), error) {
	if s.DialSystemd != nil {
		return s.DialSystemd(ctx)
	}
	c, errBus := DialBus(ctx, logind.SystemBusAddress(s.getenv), false)
	if errBus == nil {
		sd := &BusSystemd{Conn: c}
		// A bus without systemd on it (a container's own dbus-daemon)
		// answers ServiceUnknown: try the private socket then.
		if _, errBus = sd.Version(ctx); errBus == nil {
			return sd, func() { _ = c.Close() }, nil
		}
		_ = c.Close()
	}
	if s.getenv("DBUS_SYSTEM_BUS_ADDRESS") == "" {
		if p, err := DialBus(ctx, logind.SystemdPrivate, true); err == nil {
			return &BusSystemd{Conn: p}, func() { _ = p.Close() }, nil
		}
	}
	return nil, nil, errBus
}

// DialBus connects to a unix: D-Bus address with logind.Dial (EXTERNAL
// with the numeric uid: no libc), saying Hello
// unless peerToPeer. ctx bounds the whole handshake.
func DialBus(ctx context.Context, address string, peerToPeer bool) (*dbus.Conn, error) {
	c, err := logind.Dial(ctx, address, peerToPeer)
	if err != nil {
		var ue *handoff.UnreachableError
		if errors.As(err, &ue) {
			return nil, fmt.Errorf("%s: %w", ue.Op, ue.Err)
		}
		return nil, err
	}
	return c.Bus(), nil
}

// BusSystemd reads org.freedesktop.systemd1 over a connection: the
// Manager's Version, and a unit's states (GetUnit, then the unit's
// properties). It never calls a method that changes anything.
type BusSystemd struct {
	Conn    *dbus.Conn
	version string // read once
}

var _ Systemd = (*BusSystemd)(nil)

func (b *BusSystemd) get(ctx context.Context, path dbus.ObjectPath, iface, prop string) (dbus.Variant, error) {
	var v dbus.Variant
	err := b.Conn.Object(logind.SystemdService, path).
		CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, iface, prop).Store(&v)
	return v, err
}

// Version reads the Manager's Version property.
func (b *BusSystemd) Version(ctx context.Context) (string, error) {
	if b.version != "" {
		return b.version, nil
	}
	v, err := b.get(ctx, logind.SystemdPath, logind.SystemdManager, "Version")
	if err != nil {
		return "", err
	}
	s, ok := v.Value().(string)
	if !ok {
		return "", fmt.Errorf("Version has signature %s, want s", v.Signature())
	}
	b.version = s
	return s, nil
}

// Unit reads name's LoadState and ActiveState. A unit systemd has not
// loaded (NoSuchUnit) reads ("not-found", "inactive"), as systemctl shows it.
func (b *BusSystemd) Unit(ctx context.Context, name string) (string, string, error) {
	var path dbus.ObjectPath
	err := b.Conn.Object(logind.SystemdService, logind.SystemdPath).
		CallWithContext(ctx, logind.SystemdManager+".GetUnit", 0, name).Store(&path)
	if err != nil {
		var de dbus.Error
		if errors.As(err, &de) && de.Name == "org.freedesktop.systemd1.NoSuchUnit" {
			return "not-found", "inactive", nil
		}
		return "", "", err
	}
	var states [2]string
	for i, p := range []string{"LoadState", "ActiveState"} {
		v, err := b.get(ctx, path, "org.freedesktop.systemd1.Unit", p)
		if err != nil {
			return "", "", err
		}
		s, ok := v.Value().(string)
		if !ok {
			return "", "", fmt.Errorf("%s has signature %s, want s", p, v.Signature())
		}
		states[i] = s
	}
	return states[0], states[1], nil
}

// UnitFileState asks the manager (GetUnitFileState, as systemctl
// is-enabled does; the unit need not be loaded) whether name is enabled,
// disabled, masked, …; a unit with no unit file reads "".
func (b *BusSystemd) UnitFileState(ctx context.Context, name string) (string, error) {
	var state string
	err := b.Conn.Object(logind.SystemdService, logind.SystemdPath).
		CallWithContext(ctx, logind.SystemdManager+".GetUnitFileState", 0, name).Store(&state)
	if err != nil {
		var de dbus.Error
		if errors.As(err, &de) && (de.Name == "org.freedesktop.systemd1.NoSuchUnit" || de.Name == "org.freedesktop.DBus.Error.FileNotFound") {
			return "", nil
		}
		return "", err
	}
	return state, nil
}

var leadingNumber = regexp.MustCompile(`^\s*v?(\d+)`)

// ParseVersion returns the leading number of systemd's Version property
// ("252.39-1~deb12u1" → 252, "239 (239-78.el8)" → 239) and whether it is
// a RHEL 8 build.
func ParseVersion(v string) (major int, rhel8 bool) {
	if m := leadingNumber.FindStringSubmatch(v); m != nil {
		major, _ = strconv.Atoi(m[1])
	}
	return major, strings.Contains(v, ".el8")
}

func gatherSystemd(ctx context.Context, s *Sources, r *Report) {
	f := &r.Systemd
	if _, err := os.Stat(s.path("/run/systemd/system")); err == nil {
		f.Booted = true
	}
	f.NewShutdownEnv = s.getenv("SYSTEMD_NEW_SHUTDOWN")
	r.Agent.Unit = AgentUnit
	r.Agent.ActiveState = "unknown"

	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	sd, closeFn, err := s.dialSystemd(ctx)
	if err != nil {
		f.Error = errString(err)
		r.Agent.Error = "systemd not reachable: " + errString(err)
		return
	}
	defer closeFn()
	if f.Version, err = sd.Version(ctx); err != nil {
		f.Error = errString(err)
	} else {
		f.Major, f.RHEL8 = ParseVersion(f.Version)
	}
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout())
	defer ucancel()
	load, active, err := sd.Unit(uctx, AgentUnit)
	if err != nil {
		r.Agent.Error = errString(err)
		return
	}
	r.Agent.LoadState, r.Agent.ActiveState = load, active
	if fs, err := sd.UnitFileState(uctx, AgentUnit); err == nil {
		r.Agent.UnitFileState = fs
		if fs != "" && load == "not-found" {
			r.Agent.LoadState = "" // there is a unit file: not loaded, as a disabled, stopped unit often is
		}
	}
}

func gatherLogind(ctx context.Context, s *Sources, f *LogindFacts) {
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, s.timeout()) }
	dctx, cancel := step()
	l, closeFn, err := s.dialLogind(dctx)
	cancel()
	if err != nil {
		f.Error = errString(err)
		return
	}
	defer closeFn()

	cctx, cancel := step()
	d, err := l.InhibitDelayMax(cctx)
	cancel()
	if err != nil {
		f.InhibitDelayMaxError = errString(err)
	} else {
		f.Reachable = true
		if d == math.MaxInt64 {
			f.InhibitDelayMax, f.InhibitDelayMaxSec = "infinity", -1
		} else {
			f.InhibitDelayMax, f.InhibitDelayMaxSec = d.String(), d.Seconds()
		}
	}

	cctx, cancel = step()
	list, err := l.ListInhibitors(cctx)
	cancel()
	if err != nil {
		f.InhibitorsError = errString(err)
	} else {
		f.Reachable = true
		for _, in := range list {
			f.Inhibitors = append(f.Inhibitors, Lock{What: in.What, Who: in.Who, Why: in.Why, Mode: in.Mode, UID: in.UID, PID: in.PID})
		}
		f.KubeletLock = len(logind.FindInhibitors(list, "shutdown", "delay", logind.KubeletWho)) > 0
		f.GnshLock = len(logind.FindInhibitors(list, "shutdown", "delay", "gnsh")) > 0
	}

	cctx, cancel = step()
	typ, usec, err := l.ScheduledShutdown(cctx)
	cancel()
	switch {
	case err != nil:
		f.ScheduledError = errString(err)
	case typ != "":
		f.Reachable = true
		sc := &Scheduled{Type: typ, USec: usec}
		if at, ok := logind.ScheduledTime(usec); ok {
			sc.Time = at.UTC().Format(time.RFC3339)
		}
		f.Scheduled = sc
	default:
		f.Reachable = true
	}
	if !f.Reachable {
		f.Error = f.InhibitDelayMaxError
	}
}
