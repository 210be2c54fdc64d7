package logindtest_test

import (
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

func TestSystemdStartUnit(t *testing.T) {
	bus := logindtest.StartBus(t)
	sd := bus.StartSystemd(t, logindtest.SystemdOptions{Version: 239})
	obj := bus.Connect(t).Object(logindtest.SystemdName, logindtest.SystemdPath)

	var job dbus.ObjectPath
	if err := obj.Call(logindtest.SystemdInterface+".StartUnit", 0, "poweroff.target", "replace-irreversibly").Store(&job); err != nil {
		t.Fatal(err)
	}
	if job != "/org/freedesktop/systemd1/job/1" {
		t.Errorf("job = %q", job)
	}
	calls := sd.Calls()
	if len(calls) != 1 || calls[0].Member != "StartUnit" || calls[0].Signature != "ss" ||
		calls[0].Args[0] != "poweroff.target" || calls[0].Args[1] != "replace-irreversibly" {
		t.Fatalf("calls = %+v", calls)
	}
	v, err := obj.GetProperty(logindtest.SystemdInterface + ".Version")
	if err != nil || v.Value() != "239" {
		t.Errorf("Version = %v, %v", v, err)
	}

	// PID 1 failing.
	sd.SetError("StartUnit", dbus.NewError("org.freedesktop.systemd1.TransactionIsDestructive", []any{"Transaction is destructive."}))
	err = obj.Call(logindtest.SystemdInterface+".StartUnit", 0, "reboot.target", "replace-irreversibly").Err
	wantErr(t, err, "org.freedesktop.systemd1.TransactionIsDestructive", "Transaction is destructive.")
	err = obj.Call(logindtest.SystemdInterface+".StartUnit", 0, "reboot.target").Err
	wantErr(t, err, logindtest.ErrorInvalidArgs, "")
	err = obj.Call(logindtest.SystemdInterface+".StopUnit", 0, "reboot.target", "replace").Err
	wantErr(t, err, logindtest.ErrorUnknownMethod, "")
	if got := len(sd.Calls()); got != 5 {
		t.Errorf("recorded %d calls, want 5", got)
	}
}

func TestLogindAndSystemdTogether(t *testing.T) {
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 219})
	sd := bus.StartSystemd(t, logindtest.SystemdOptions{})
	conn := bus.Connect(t)
	if err := conn.Object(logindtest.LogindName, logindtest.LogindPath).Call(logindtest.LogindInterface+".Reboot", 0, false).Err; err != nil {
		t.Fatal(err)
	}
	if err := conn.Object(logindtest.SystemdName, logindtest.SystemdPath).Call(logindtest.SystemdInterface+".StartUnit", 0, "halt.target", "replace-irreversibly").Err; err != nil {
		t.Fatal(err)
	}
	if len(ld.Calls()) != 1 || len(sd.Calls()) != 1 {
		t.Errorf("logind %v, systemd %v", ld.Calls(), sd.Calls())
	}
}
