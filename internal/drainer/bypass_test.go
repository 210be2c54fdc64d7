package drainer

import (
	"context"
	"strings"
	"testing"
	"time"

	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/slots"
)

// Hole 7 (issue 20): the node agent's drain for a shutdown that bypassed
// gnsh (systemctl reboot) takes no slot, but writes its node into the
// record before its cordon, as a holder that counts even over the limit
// (node2 holds the only slot): an admission on another node at the same
// instant conflicts with that write and is decided again seeing it. It
// used to cordon with nothing in the record: two nodes out with a limit
// of 1 for as long as that admission's drain and this one overlapped.
// The entry is kept, shutting-down, after the drain; a cancelled shutdown
// frees it with the cordon.
func TestAgentBypassRecordedBeforeCordon(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d := newDrainer(t, f, "")
	d.Agent, d.Who = true, Requester{User: "root"}
	f.ClearActions()
	sd, err := d.DrainForShutdown(context.Background(), "reboot", 10*time.Second)
	if err != nil || !sd.Cordoned() {
		t.Fatalf("%v\n%s", err, d.stderr)
	}
	var order []string
	for _, a := range f.Actions() {
		switch {
		case a.GetResource().Resource == "leases" && (a.GetVerb() == "update" || a.GetVerb() == "create"):
			order = append(order, "lease")
		case a.GetResource().Resource == "nodes" && a.GetVerb() == "patch":
			if p, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), "unschedulable") {
				order = append(order, "cordon")
			}
		}
	}
	if len(order) < 2 || order[0] != "lease" || !strings.Contains(strings.Join(order, " "), "cordon") {
		t.Fatalf("writes in order %v: the record was not written before the cordon", order)
	}
	rec := slotRecord(t, f)
	h, ok := rec.Holder("node1")
	if !ok || !h.Bypass || h.Who != slots.BypassWho || h.Boot != "boot-1" || h.Phase != slots.ShuttingDown || len(rec.Holders) != 2 {
		t.Fatalf("record %+v", rec)
	}
	if !strings.Contains(d.stderr.String(), "gnsh: recorded node1 as out in the reboot slots of gnsh/reboot-slots before its cordon") {
		t.Errorf("stderr %q", d.stderr)
	}

	// The shutdown is cancelled (PrepareForShutdown(false)): the cordon
	// and the entry go.
	sd.Undo("the shutdown was cancelled")
	if _, ok := slotRecord(t, f).Holder("node1"); ok || f.node(t).Spec.Unschedulable {
		t.Fatalf("after the cancel: %+v, cordoned %v", slotRecord(t, f), f.node(t).Spec.Unschedulable)
	}
}

// A node that already holds a slot of this boot (a schedule's, kept by
// its agent) writes nothing more; a gate the agent cannot use costs a
// warning, never the drain; the gate off writes nothing.
func TestAgentBypassBestEffort(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	forbidLeases(f, "someone")
	d := newDrainer(t, f, "apiTimeout: 1s\n")
	d.Agent = true
	if sd, err := d.DrainForShutdown(context.Background(), "reboot", 10*time.Second); err != nil || !sd.Cordoned() {
		t.Fatalf("%v\n%s", err, d.stderr)
	}
	if !strings.Contains(d.stderr.String(), "gnsh: warning: this reboot (it bypassed gnsh) is not recorded in the reboot slots of gnsh/reboot-slots (") {
		t.Errorf("stderr %q", d.stderr)
	}

	f = newFakeNode(false, nil, "web-1")
	d = newDrainer(t, f, "slots:\n  gate: off\n")
	d.Agent = true
	if _, err := d.DrainForShutdown(context.Background(), "reboot", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.Actions() {
		if a.GetResource().Resource == "leases" && a.GetNamespace() == "gnsh" {
			t.Fatalf("gate off: %s leases", a.GetVerb())
		}
	}

	f = newFakeNode(false, nil, "web-1")
	d = newDrainer(t, f, "")
	d.Agent = true
	at := time.Now().Add(30 * time.Minute).Truncate(time.Microsecond)
	if _, err := d.DrainForSchedule(context.Background(), "reboot", at, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	before, _ := slotRecord(t, f).Holder("node1")
	sd, err := d.DrainForShutdown(context.Background(), "reboot", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := slotRecord(t, f).Holder("node1")
	if after.Bypass || after.Ticket != before.Ticket || after.When == nil {
		t.Fatalf("the schedule's slot was replaced: %+v", after)
	}
	sd.Undo("the shutdown was cancelled")
	if _, ok := slotRecord(t, f).Holder("node1"); !ok {
		t.Fatal("the schedule's slot was freed by the bypass's undo")
	}
}

// The write before the cordon takes at most a quarter of what is left of
// the drain's budget (3 s of drain with logind's default delay), and the
// API timeout.
func TestBypassBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if got := bypassBound(ctx, 5*time.Second); got > time.Second || got <= 0 {
		t.Errorf("4 s left: %s", got)
	}
	if got := bypassBound(context.Background(), 5*time.Second); got != 5*time.Second {
		t.Errorf("no deadline: %s", got)
	}
}
