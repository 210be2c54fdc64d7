package drainer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestDrainedShutdownWritesMarker(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	if err := d.handOff(t, reboot(), nil); err != nil {
		t.Fatalf("reboot: %v\n%s", err, d.stderr)
	}
	fi, err := os.Lstat(filepath.Join(d.LockDir, MarkerName))
	if err != nil {
		t.Fatalf("no marker: %v", err)
	}
	if fi.Mode() != 0o600 {
		t.Errorf("marker mode %v, want -rw-------", fi.Mode())
	}
	m, err := d.ReadMarker()
	if err != nil || m.BootID != "boot-1" || m.Action != "reboot" || time.Since(m.Time) > time.Minute {
		t.Fatalf("marker %+v, %v", m, err)
	}
	if _, ok := d.DrainedFor(10 * time.Minute); !ok {
		t.Error("fresh marker of this boot not honoured")
	}
	d.BootID = "boot-2"
	if _, ok := d.DrainedFor(10 * time.Minute); ok {
		t.Error("marker of another boot honoured")
	}
}

func TestFailedHandOffRemovesMarker(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	if err := d.handOff(t, reboot(), errors.New("logind said no")); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	if _, err := d.ReadMarker(); !os.IsNotExist(err) {
		t.Fatalf("marker after a refused hand-off: %v", err)
	}
}

func TestRefusedShutdownWritesNoMarker(t *testing.T) {
	f := newFakeNode(false, nil, "db-0")
	f.Protect("db-0")
	d := newDrainer(t, f, "drainTimeout: 2s\n")
	fastClock(t, d)
	if err := d.handOff(t, reboot(), nil); err == nil {
		t.Fatal("a blocked drain was not refused")
	}
	if _, err := d.ReadMarker(); !os.IsNotExist(err) {
		t.Fatalf("marker after a refused drain: %v", err)
	}
}

func TestMarkerNotFollowedThroughSymlink(t *testing.T) {
	d := newDrainer(t, nil, "")
	if err := os.MkdirAll(d.LockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Symlink(target, filepath.Join(d.LockDir, MarkerName)); err != nil {
		t.Fatal(err)
	}
	if err := d.writeMarker("reboot", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the symlink's target was written: %v", err)
	}
	if m, err := d.ReadMarker(); err != nil || m.Action != "reboot" {
		t.Errorf("marker %+v, %v", m, err)
	}
}

func TestDrainForShutdownReleasesLock(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	sd, err := d.DrainForShutdown(context.Background(), "poweroff", 20*time.Second)
	if err != nil {
		t.Fatalf("DrainForShutdown: %v\n%s", err, d.stderr)
	}
	if !sd.Cordoned() || !f.node(t).Spec.Unschedulable {
		t.Fatal("not cordoned")
	}
	l, err := d.AcquireLock("check", "node1", time.Time{})
	if err != nil {
		t.Fatalf("drain lock still held: %v", err)
	}
	l.Release()
	sd.Undo("cancelled")
	if f.node(t).Spec.Unschedulable {
		t.Error("Undo left the cordon")
	}
	if _, err := d.DrainForShutdown(context.Background(), "reboot", 0); err == nil {
		t.Error("a zero budget drained")
	}
}
