package slots

// Dead waiters (issue 20, hole 5): a waiter killed with kill -9, or whose
// node was power-cycled while it waited, must not hold the queue.

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func waiter(n string, ticket int64, renew int64) Entry {
	return Entry{Node: n, UID: types.UID("uid-" + n), Boot: "boot-" + n, Ticket: ticket, Renew: renew}
}

// x waited; its node was power-cycled and is up on another boot: whoever
// saw its Node change boot while x waited drops it at once, and y, behind
// it, takes the free slot. (One that did not see the change cannot tell a
// Node on a newer boot from one not up to date yet: waitboot_test.go.)
func TestWaiterOnAnotherBootIsDropped(t *testing.T) {
	rec := Record{Next: 2, Waiters: []Entry{waiter("x", 1, 30)}}
	tr := &Tracker{}
	tr.Observe(rec, world(node("x"), node("y")))
	v := Decide(rec, world(node("x", rebooted), node("y")), one, tr, ask("y"))
	if !v.Admitted {
		t.Fatalf("y not admitted: %s", names(v.Blocks))
	}
	if len(v.Dropped) != 1 || v.Dropped[0].Entry.Node != "x" || !strings.Contains(v.Dropped[0].Why, "another boot") {
		t.Fatalf("x not dropped: %+v", v.Dropped)
	}
	if _, ok := v.Record.Waiter("x"); ok {
		t.Fatal("x still waits in the record")
	}
	// A Node that reports no boot ID (yet) is not on another boot.
	v = Decide(rec, world(node("x", func(n *NodeState) { n.Boot = "" }), node("y")), one, still{}, ask("y"))
	if v.Admitted || len(v.Dropped) != 0 {
		t.Fatalf("x dropped without a boot ID: %+v", v)
	}
}

// A waiter's silence is bounded in absolute terms: an entry renewing every
// 30 minutes (an older gnsh's, slots.renew: 10m) is dropped after
// MaxWaiterSilence all the same; and this gnsh's waiters renew at most
// every MaxWaiterRenew, whatever slots.renew.
func TestWaiterSilenceBounded(t *testing.T) {
	const maxSilence, maxRenew = 90 * time.Second, 30 * time.Second // as gnsh(8) says
	rec := Record{Next: 2, Waiters: []Entry{waiter("x", 1, 1800)}}
	w := world(node("x"), node("y"), node("h"))
	rec.Holders = []Entry{holder("h", 0)}
	v := Decide(rec, w, one, silentOnly(maxSilence-time.Second), ask("y"))
	if len(v.Dropped) != 0 {
		t.Fatalf("dropped before the bound: %+v", v.Dropped)
	}
	v = Decide(rec, w, one, silentOnly(maxSilence), ask("y"))
	if len(v.Dropped) != 1 || v.Dropped[0].Entry.Node != "x" {
		t.Fatalf("x silent for %s not dropped: %+v", maxSilence, v.Dropped)
	}
	a := ask("y")
	a.Entry.Renew = 600
	v = Decide(Record{Next: 1, Holders: []Entry{holder("h", 0)}}, w, one, still{}, a)
	if v.Admitted || time.Duration(v.Self.Renew)*time.Second != maxRenew {
		t.Fatalf("a waiter with slots.renew 10m renews every %ds, want %s", v.Self.Renew, maxRenew)
	}
	if 3*maxRenew > maxSilence {
		t.Fatalf("a live waiter (every %s) would be dropped after %s", maxRenew, maxSilence)
	}
}

// x is first in the queue and fits (the slot is free), but it was killed
// (kill -9) just before: it never takes the slot. y, behind it, is held
// back only for a short while (x's holder period), not until x's entry is
// dropped for its silence (3 waiter periods), nor refused at the end of
// its wait with "earlier in the queue: x".
func TestSilentHeadOfTheQueueDoesNotHoldTheOthers(t *testing.T) {
	c := fake.NewClientset(readyNode("x", ""), readyNode("y", ""))
	casLeases(c)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	// x renews as a waiter every 3 s (a holder period of 1 s): dropped
	// for its silence after 9 s.
	Record{Version: Schema, Next: 2, Waiters: []Entry{{Node: "x", UID: "u-x", Boot: "b-x", Ticket: 1, Renew: 3}}}.Encode(l)
	if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1, Settle: time.Second},
		Renew: time.Second, APITimeout: time.Second}
	s, v, err := g.Acquire(context.Background(), reqFor(readyNode("y", ""), 1, 4*time.Second))
	if err != nil {
		t.Fatalf("y: %v", err)
	}
	defer s.Halt()
	if _, ok := v.Record.Waiter("x"); !ok {
		t.Errorf("x was dropped: it keeps its place (it may be alive, only slow)")
	}
}

// The tracker measures how long a waiter has been seen fitting, afresh
// after a break.
func TestTrackerFitting(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tr := &Tracker{Clock: clk}
	x := waiter("x", 1, 3)
	tr.Fits([]Entry{x})
	clk.SetTime(clk.Now().Add(2 * time.Second))
	tr.Fits([]Entry{x})
	if d := tr.Fitting(x); d != 2*time.Second {
		t.Fatalf("fitting %s, want 2s", d)
	}
	tr.Fits(nil)
	tr.Fits([]Entry{x})
	if d := tr.Fitting(x); d != 0 {
		t.Fatalf("fitting %s after a break, want 0", d)
	}
}

// Stalled only where every limit of the waiter was checked: a worker that
// could not read the etcd members lets a control-plane waiter ahead keep
// its place, however long it has fitted (its own view may hold it back).
func TestStalledNeedsEveryLimitChecked(t *testing.T) {
	rec := Record{Next: 2, Waiters: []Entry{waiter("x", 1, 3)}}
	long := fitting(time.Hour)
	v := Decide(rec, world(node("x"), node("y")), one, long, ask("y"))
	if !v.Admitted || len(v.Fit) != 1 {
		t.Fatalf("behind a stalled worker: %s", names(v.Blocks))
	}
	w := world(node("x", cp), node("y"))
	v = Decide(rec, w, one, long, ask("y"))
	if v.Admitted || !strings.Contains(names(v.Blocks), "earlier in the queue: x") {
		t.Fatalf("behind a control-plane waiter, etcd unknown: %+v", v)
	}
	// Not stalled yet.
	v = Decide(rec, world(node("x"), node("y")), one, fitting(900*time.Millisecond), ask("y"))
	if v.Admitted {
		t.Fatal("admitted ahead of a waiter that fits and is not stalled")
	}
}

// fitting: every waiter has fitted this long; nothing else lasted.
type fitting time.Duration

func (fitting) Silent(Entry) time.Duration    { return 0 }
func (fitting) Settled(Entry) time.Duration   { return 0 }
func (fitting) Alive(Entry) time.Duration     { return 0 }
func (f fitting) Fitting(Entry) time.Duration { return time.Duration(f) }
