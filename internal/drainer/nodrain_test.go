package drainer

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/signals"
)

func noDrainReboot() *legacy.Request {
	r := reboot()
	r.Drain.Skip = true
	return r
}

// A reboot --no-drain killed between its mark and the hand-off (kill -9,
// an OOM kill, a Ctrl-C on a hung bus call) never reaches Finish: its mark
// must not keep the node agent from draining a later systemctl reboot.
func TestNoDrainMarkLeftBehindExpires(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	clk := clocktesting.NewFakeClock(time.Now())
	d.Clock = clk
	if _, err := d.prepare(t, noDrainReboot()); err != nil { // killed: no Finish
		t.Fatal(err)
	}
	clk.Step(NoDrainInFlight - time.Second)
	if m, ok := d.DrainedFor(10 * time.Minute); !ok || !m.NoDrain {
		t.Fatalf("the reboot --no-drain under way is drained: %+v %v", m, ok)
	}
	clk.Step(2 * time.Second)
	if m, ok := d.DrainedFor(10 * time.Minute); ok {
		t.Fatalf("a systemctl reboot %s after a killed reboot --no-drain is not drained: %+v", NoDrainInFlight+time.Second, m)
	}
}

// The hand-off of a marked reboot --no-drain is held against SIGINT and
// SIGTERM, as a drained one's is: cut in half, it leaves the mark.
func TestNoDrainHandOffHeld(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	p, err := d.prepare(t, noDrainReboot())
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	if m := d.Signal.Mode(); m != signals.Hold {
		t.Fatalf("the hand-off of a marked reboot --no-drain is in signal mode %v, not Hold", m)
	}
	p.Finish(context.Background(), errors.New("logind said no"))
	if m := d.Signal.Mode(); m != signals.Default {
		t.Fatalf("after Finish: mode %v", m)
	}
}

// A reboot --no-drain logind refuses leaves the marker of a drain ahead
// of a schedule as it was.
func TestRefusedNoDrainKeepsScheduleMarker(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	at := time.Now().Add(3 * time.Minute).UTC().Truncate(time.Second)
	if err := d.writeMarker("reboot", &at); err != nil {
		t.Fatal(err)
	}
	if err := d.handOff(t, noDrainReboot(), errors.New("logind said no")); err != nil {
		t.Fatal(err)
	}
	if !d.ScheduleDrained(at) {
		t.Fatal("a refused reboot --no-drain took away the marker of the drain ahead of the schedule")
	}
}

// shutdown -r --no-drain +5 that logind refuses (or that is killed during
// its call) leaves its note: a systemctl reboot at that time must still be
// drained.
func TestRefusedNoDrainScheduleNotDue(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	clk := clocktesting.NewFakeClock(time.Now())
	d.Clock = clk
	at := clk.Now().Add(5 * time.Minute).Truncate(time.Microsecond)
	d.NoteNoDrain(legacy.Usec(at)) // then logind refuses: no Accepted
	clk.Step(6 * time.Minute)
	if got, ok := d.NoDrainDue(10 * time.Minute); ok {
		t.Fatalf("a refused --no-drain schedule for %v makes a systemctl reboot a minute after undrained", got)
	}
	// Accepted, it is due at its time.
	d.Accepted(&legacy.Request{Command: "shutdown", Action: legacy.Reboot, When: legacy.Usec(at), Drain: legacy.DrainFlags{Skip: true}})
	if got, ok := d.NoDrainDue(10 * time.Minute); !ok || !got.Equal(at) {
		t.Fatalf("the accepted --no-drain schedule for %v is not due: %v %v", at, got, ok)
	}
	// One asked for now (shutdown -r --no-drain +0) is due while its
	// request is in flight, before logind's answer reaches the command.
	now := clk.Now()
	d.forgetDryRun()
	d.NoteNoDrain(legacy.Usec(now))
	if got, ok := d.NoDrainDue(10 * time.Minute); !ok || !got.Equal(now.Truncate(time.Microsecond)) {
		t.Fatalf("a --no-drain schedule for now, in flight: %v %v", got, ok)
	}
}
