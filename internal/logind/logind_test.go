package logind

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

func TestParseUnixAddress(t *testing.T) {
	for in, want := range map[string]string{
		"unix:path=/run/dbus/system_bus_socket": "/run/dbus/system_bus_socket",
		"unix:path=/tmp/a%20b,guid=0123":        "/tmp/a b",
		"unix:guid=1,abstract=/tmp/dbus-x":      "@/tmp/dbus-x",
	} {
		if _, got, err := parseUnixAddress(in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"tcp:host=localhost,port=1", "unix:tmpdir=/tmp", "nonsense"} {
		if _, _, err := parseUnixAddress(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDialUnreachable(t *testing.T) {
	_, err := Dial(context.Background(), "unix:path=/nonexistent/a;unix:path=/nonexistent/b", false)
	var ue *handoff.UnreachableError
	if !errors.As(err, &ue) || ue.Err.Error() != "no such file or directory; no such file or directory" {
		t.Fatalf("err %v", err)
	}
}

func TestAgainstFakeLogind(t *testing.T) {
	for _, v := range []int{219, 239, 252} {
		bus := logindtest.StartBus(t)
		ld := bus.StartLogind(t, logindtest.Options{Version: v, Inhibitors: []logindtest.Inhibitor{
			{What: "shutdown", Who: "kubelet", Why: "drain", Mode: "delay", UID: 0, PID: 1}}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, bus.Address(), false)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l := c.Logind()
		caps, err := l.Caps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if caps.Has("RebootWithFlags") != (v >= 248) || caps.Has("Halt") != (v >= 235) ||
			caps.Has("ScheduleShutdown") != (v >= 220) || !caps.Has("Reboot") {
			t.Fatalf("v%d caps %v", v, caps.Methods)
		}
		in, err := l.ListInhibitors(ctx)
		if err != nil || len(in) != 1 || in[0].Who != "kubelet" || in[0].Mode != "delay" {
			t.Fatalf("v%d inhibitors %+v %v", v, in, err)
		}
		err = l.ShutdownWithFlags(ctx, "Reboot", 0)
		var be *handoff.BusError
		if v < 248 {
			if !errors.As(err, &be) || be.Name != handoff.ErrUnknownMethod {
				t.Fatalf("v%d RebootWithFlags: %v", v, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := l.ScheduleShutdown(ctx, "dry-halt", 1<<60); err != nil {
			t.Fatal(err)
		}
		typ, usec, err := l.ScheduledShutdown(ctx)
		if err != nil || typ != "halt" || usec != 1<<60 {
			t.Fatalf("ScheduledShutdown %q %d %v", typ, usec, err)
		}
		if ok, err := l.CancelScheduledShutdown(ctx); err != nil || !ok {
			t.Fatalf("cancel %v %v", ok, err)
		}
		err = l.ScheduleShutdown(ctx, "sleep", 1)
		if !errors.As(err, &be) || be.Name != handoff.ErrInvalidArgs || be.Message == "" {
			t.Fatalf("bad type: %v", err)
		}
		ld.SetError("PowerOffWithFlags", dbus.NewError(handoff.ErrAccessDenied, []any{"Access denied"}))
		if err := l.ShutdownWithFlags(ctx, "PowerOff", 0); !errors.As(err, &be) || be.Error() != "Access denied" {
			t.Fatalf("injected error: %v", err)
		}
	}
}

func TestServiceMissingIsUnreachable(t *testing.T) {
	bus := logindtest.StartBus(t) // no logind on it
	c, err := Dial(context.Background(), bus.Address(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Logind().Caps(context.Background())
	var ue *handoff.UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("err %T %v, want UnreachableError", err, err)
	}
}

func TestParseCaps(t *testing.T) {
	if _, err := ParseCaps(`<node><interface name="org.freedesktop.DBus.Peer"/></node>`); err == nil {
		t.Fatal("no Manager interface must be an error")
	}
	if _, err := ParseCaps(`<node`); err == nil {
		t.Fatal("bad XML must be an error")
	}
}
