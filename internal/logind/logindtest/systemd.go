package logindtest

import (
	"fmt"
	"strconv"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
)

// Bus name, object path and interface of systemd's manager (PID 1).
const (
	SystemdName      = "org.freedesktop.systemd1"
	SystemdPath      = dbus.ObjectPath("/org/freedesktop/systemd1")
	SystemdInterface = "org.freedesktop.systemd1.Manager"
)

// SystemdOptions configures a fake systemd1 manager.
type SystemdOptions struct {
	// Version is reported by the Version property; zero means DefaultVersion.
	Version int

	// Errors maps a method name to the error to reply instead, e.g.
	// {"StartUnit": dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", …)}.
	Errors map[string]*dbus.Error

	// Now and OnCall are as in Options.
	Now    func() time.Time
	OnCall func(Call)
}

// Systemd is a fake org.freedesktop.systemd1 manager with
// StartUnit(s name, s mode) → o job and the Version and SystemState
// properties. SystemState is "running" until a StartUnit of a target that
// shuts the system down (reboot.target, poweroff.target, halt.target,
// kexec.target, shutdown.target …), then "stopping", as systemd's is
// while shutdown.target is active or queued.
type Systemd struct {
	svc      *service
	jobs     int  // guarded by svc.mu
	stopping bool // guarded by svc.mu
}

// shutdownTargets are the targets whose start job queues shutdown.target.
var shutdownTargets = map[string]bool{"reboot.target": true, "poweroff.target": true, "halt.target": true,
	"kexec.target": true, "soft-reboot.target": true, "shutdown.target": true}

// NewSystemd connects to the bus at address and serves a fake systemd1
// manager at /org/freedesktop/systemd1. Call Close to stop it.
func NewSystemd(address string, o SystemdOptions) (*Systemd, error) {
	version := o.Version
	if version == 0 {
		version = DefaultVersion
	}
	s := &Systemd{svc: newService(SystemdName, o.Now, o.OnCall, o.Errors)}
	s.svc.objects[SystemdPath] = []*ifaceDef{{
		name: SystemdInterface,
		methods: []*methodDef{{
			name: "StartUnit",
			in:   []introspect.Arg{in("name", "s"), in("mode", "s")},
			out:  []introspect.Arg{out("job", "o")},
			fn: func(a []any) ([]any, *dbus.Error) {
				s.jobs++
				if name, _ := a[0].(string); shutdownTargets[name] {
					s.stopping = true
				}
				return []any{dbus.ObjectPath(fmt.Sprintf("%s/job/%d", SystemdPath, s.jobs))}, nil
			},
		}},
		props: []*propDef{{
			name: "Version", sig: "s",
			get: func() any { return strconv.Itoa(version) },
		}, {
			name: "SystemState", sig: "s",
			get: func() any {
				if s.stopping {
					return "stopping"
				}
				return "running"
			},
		}},
	}}
	if err := s.svc.start(address); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases the name and disconnects.
func (s *Systemd) Close() error { return s.svc.close() }

// Calls returns the method calls received so far, in order, except
// Introspect calls.
func (s *Systemd) Calls() []Call { return s.svc.callsWithoutIntrospection() }

// AllCalls returns every method call received so far, including Introspect.
func (s *Systemd) AllCalls() []Call { return s.svc.allCalls() }

// SetError makes member reply e from now on; a nil e removes the error.
func (s *Systemd) SetError(member string, e *dbus.Error) { s.svc.setError(member, e) }
