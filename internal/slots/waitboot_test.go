package slots

// A waiter's Node that shows another boot ID (review of issue 20,
// finding 3), and a waiter's bounds against its apiTimeout (finding 7).

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// w rebooted, and waits in its new boot while its Node still shows the
// last one (its kubelet has not posted the new boot ID). o, behind it,
// decides again and again through its Tracker: w keeps its place, nothing
// is written for it. Once the Node shows w's boot and then another one
// (w's node power-cycled while it waited), o drops it at once.
func TestStaleNodeBootKeepsLiveWaiter(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tr := &Tracker{Clock: clk}
	stale := world(node("h"), node("w"), node("o")) // w's Node: "boot-w"
	aw := ask("w")
	aw.Entry.Boot = "boot-w-new"
	rec := Record{Next: 1, Holders: []Entry{holder("h", 0)}}
	v := Decide(rec, stale, one, still{}, aw)
	rec = v.Record
	writes := 0
	for range 5 {
		tr.Observe(rec, stale)
		vo := Decide(rec, stale, one, tr, ask("o"))
		if len(vo.Dropped) != 0 {
			t.Fatalf("o dropped w, live in a boot its Node does not show yet: %+v", vo.Dropped)
		}
		if vo.Changed {
			writes++
			rec = vo.Record
		}
		clk.SetTime(clk.Now().Add(5 * time.Second)) // within w's period: it need not renew
	}
	if _, ok := rec.Waiter("w"); !ok || writes != 1 {
		t.Fatalf("w's place: %v, %d writes (o's join only, want 1)", rec.Waiters, writes)
	}
	// The Node catches up, then shows yet another boot: w's node went
	// down and came back while w waited.
	posted := world(node("h"), node("w", func(n *NodeState) { n.Boot = "boot-w-new" }), node("o"))
	tr.Observe(rec, posted)
	if vo := Decide(rec, posted, one, tr, ask("o")); len(vo.Dropped) != 0 {
		t.Fatalf("dropped on its own boot: %+v", vo.Dropped)
	}
	again := world(node("h"), node("w", func(n *NodeState) { n.Boot = "boot-w-3" }), node("o"))
	tr.Observe(rec, again)
	vo := Decide(rec, again, one, tr, ask("o"))
	if len(vo.Dropped) != 1 || !strings.Contains(vo.Dropped[0].Why, "another boot") {
		t.Fatalf("w's node up on a third boot: %+v", vo.Dropped)
	}
}

// An observer that first sees a waiter with its Node already on another
// boot cannot tell which is newer: it drops the waiter once it has missed
// a renewal (one period and a write), well before the silence bound.
func TestAnotherBootFromTheStartDroppedWhenLate(t *testing.T) {
	x := waiter("x", 1, 30) // this gnsh's default: every 30 s, apiTimeout within the bounds
	rec := Record{Next: 2, Holders: []Entry{holder("h", 0)}, Waiters: []Entry{x}}
	w := world(node("h"), node("x", rebooted), node("y"))
	late := 30*time.Second + 2*10*time.Second
	if v := Decide(rec, w, one, silentOnly(late-time.Second), ask("y")); len(v.Dropped) != 0 {
		t.Fatalf("dropped before a renewal was missed: %+v", v.Dropped)
	}
	v := Decide(rec, w, one, silentOnly(late), ask("y"))
	if len(v.Dropped) != 1 || !strings.Contains(v.Dropped[0].Why, "another boot") {
		t.Fatalf("silent %s on another boot: %+v", late, v.Dropped)
	}
	if late >= MaxWaiterSilence {
		t.Fatalf("no sooner than the silence bound")
	}
	// On its own boot, only the silence bound drops it.
	if v := Decide(rec, world(node("h"), node("x"), node("y")), one, silentOnly(late), ask("y")); len(v.Dropped) != 0 {
		t.Fatalf("dropped on its own boot: %+v", v.Dropped)
	}
}

// A waiter never drops its own entry: asking now, it is alive in the boot
// it asked in, whatever its Node shows and however late its renewals.
func TestWaiterKeepsItsOwnEntry(t *testing.T) {
	aw := ask("w")
	aw.Entry.Boot = "boot-w-new"
	e := Entry{Node: "w", UID: "uid-w", Boot: "boot-w-new", Ticket: 1, Renew: 30, Beat: 4, Since: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	rec := Record{Next: 3, Holders: []Entry{holder("h", 0)}, Waiters: []Entry{e, waiter("o", 2, 30)}}
	w := world(node("h"), node("w"), node("o"))
	for _, obs := range []Observations{silentOnly(time.Hour), still{}} {
		v := Decide(rec, w, one, obs, aw)
		got, ok := v.Record.Waiter("w")
		if !ok || !got.same(e) || got.Beat != 4 || v.Place != 1 {
			t.Fatalf("w's own decision: %+v (dropped %+v)", got, v.Dropped)
		}
		for _, d := range v.Dropped {
			if d.Entry.Node == "w" {
				t.Fatalf("w dropped itself: %+v", d)
			}
		}
	}
}

// A waiter's entry says its apiTimeout only where the bounds do not cover
// it already; a holder's never does.
func TestWaiterEntrySaysItsAPITimeout(t *testing.T) {
	for _, c := range []struct {
		renew, api int64
		written    bool
	}{{10, 5, false}, {1, 1, true}, {600, 120, true}, {30, 9, false}, {30, 10, true}} {
		a := ask("w")
		a.Entry.Renew, a.Entry.APITimeout = c.renew, c.api
		v := Decide(Record{Next: 1, Holders: []Entry{holder("h", 0)}}, world(node("h"), node("w")), one, still{}, a)
		e, ok := v.Record.Waiter("w")
		if !ok || (e.APITimeout != 0) != c.written || c.written && e.APITimeout != c.api {
			t.Errorf("renew %ds, apiTimeout %ds: waiter entry %+v, want apiTimeout written: %v", c.renew, c.api, e, c.written)
			continue
		}
		api := time.Duration(c.api) * time.Second
		if p := e.renewPeriod(); waiterSilence(e) < p+2*api || stallAfter(e) < api || waiterLate(e) < p+2*api {
			t.Errorf("renew %ds, apiTimeout %ds: silence %s, late %s, stalled after %s", c.renew, c.api, waiterSilence(e), waiterLate(e), stallAfter(e))
		}
		v = Decide(Record{Next: 1}, world(node("h"), node("w")), one, still{}, a)
		if h, ok := v.Record.Holder("w"); !ok || h.APITimeout != 0 {
			t.Errorf("holder %+v", h)
		}
	}
	// Credit for an apiTimeout is bounded: a dead waiter keeps no place
	// for hours whatever its entry says.
	if d := waiterSilence(Entry{Renew: 30, APITimeout: 86400}); d > 30*time.Second+20*time.Minute {
		t.Errorf("a waiter of apiTimeout 1 day is dropped after %s", d)
	}
}

// Through the gate: the waiter entry a node writes carries its gate's
// apiTimeout where it matters.
func TestAcquireWritesItsAPITimeout(t *testing.T) {
	c := fake.NewClientset(readyNode("h", ""), readyNode("w", ""))
	casLeases(c)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "h", UID: "u-h", Boot: "b-h", Phase: Draining, Renew: 600}}}.Encode(l)
	if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []Entry
	c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rec, err := Decode(a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease))
		if err == nil {
			mu.Lock()
			seen = append(seen, rec.Waiters...)
			mu.Unlock()
		}
		return false, nil, nil
	})
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Minute, APITimeout: 90 * time.Second}
	_, _, err := g.Acquire(context.Background(), reqFor(readyNode("w", ""), 600, 300*time.Millisecond))
	if err == nil {
		t.Fatal("admitted beside h")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || seen[0].Node != "w" || seen[0].APITimeout != 90 {
		t.Fatalf("waiter entries written: %+v", seen)
	}
}
