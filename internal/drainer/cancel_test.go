package drainer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/slots"
)

// shutdown -c after shutdown -r +1 and then a reboot at once handed off:
// logind cancels the schedule, but the reboot is under way, so the slot
// and the cordon stay for it (they used to be freed and lifted while the
// node went down); nor do they go when logind cancelled nothing. One line
// says so each time.
func TestCancelLeavesCordonAndSlotForAShutdownUnderWay(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	if err := d.handOff(t, scheduledReboot(time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.handOff(t, reboot(), nil); err != nil {
		t.Fatal(err)
	}
	d.Relies = func(context.Context, *drain.Ownership, time.Duration) (string, error) {
		return "systemd-logind is preparing for shutdown", nil
	}
	kept := func(what string) {
		t.Helper()
		if h, ok := slotRecord(t, f).Holder("node1"); !ok || h.Phase != slots.ShuttingDown {
			t.Errorf("%s: slot freed: %+v", what, slotRecord(t, f))
		}
		if !f.node(t).Spec.Unschedulable {
			t.Errorf("%s: uncordoned", what)
		}
		if _, err := d.ReadMarker(); err != nil {
			t.Errorf("%s: marker removed: %v", what, err)
		}
	}
	p, _ := d.prepare(t, cancelReq())
	p.(handoff.CancelReporter).FinishCancel(context.Background(), true, nil)
	kept("shutdown under way")
	if !strings.Contains(d.stderr.String(), "gnsh: the scheduled reboot was cancelled, but systemd-logind is preparing for shutdown: gnsh's cordon of node1 and its reboot slot are left to the node agent") {
		t.Errorf("stderr %q", d.stderr)
	}
	d.Relies = nil
	d.stderr.Reset()
	p, _ = d.prepare(t, cancelReq())
	p.(handoff.CancelReporter).FinishCancel(context.Background(), false, nil)
	kept("nothing cancelled")
	if !strings.Contains(d.stderr.String(), "gnsh: no scheduled shutdown was cancelled (none stood): gnsh's cordon of node1 for the reboot scheduled for ") {
		t.Errorf("stderr %q", d.stderr)
	}
	// Cancelled, nothing under way: both go.
	p, _ = d.prepare(t, cancelReq())
	p.(handoff.CancelReporter).FinishCancel(context.Background(), true, nil)
	if _, ok := slotRecord(t, f).Holder("node1"); ok || f.node(t).Spec.Unschedulable {
		t.Errorf("cancelled: slot %v, cordoned %v", ok, f.node(t).Spec.Unschedulable)
	}
}

// shutdown -c on a machine that is not a Kubernetes node asks logind
// nothing more than systemd's does (whether a shutdown is under way is
// asked only to decide about a marker of gnsh's, or a cordon).
func TestCancelOnANonNodeAsksNothing(t *testing.T) {
	d := newDrainer(t, nil, "")
	asked := 0
	d.Relies = func(context.Context, *drain.Ownership, time.Duration) (string, error) { asked++; return "", nil }
	p, err := d.prepare(t, cancelReq())
	if err != nil {
		t.Fatal(err)
	}
	p.(handoff.CancelReporter).FinishCancel(context.Background(), true, nil)
	if asked != 0 || d.stderr.Len() != 0 {
		t.Errorf("asked %d times; stderr %q", asked, d.stderr)
	}
}
