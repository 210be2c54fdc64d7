package slots

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func node(name string, mods ...func(*NodeState)) NodeState {
	n := NodeState{Name: name, UID: types.UID("uid-" + name), Ready: true, Boot: "boot-" + name, Labels: map[string]string{}}
	for _, m := range mods {
		m(&n)
	}
	return n
}

func notReady(n *NodeState) { n.Ready = false }
func cordoned(n *NodeState) { n.Unschedulable = true }
func cp(n *NodeState)       { n.ControlPlane = true; n.Labels[ControlPlaneLabel] = "" }
func label(k, v string) func(*NodeState) {
	return func(n *NodeState) { n.Labels[k] = v }
}
func rebooted(n *NodeState) { n.Boot += "-2" }

func world(ns ...NodeState) World {
	w := World{Nodes: map[string]NodeState{}}
	for _, n := range ns {
		w.Nodes[n.Name] = n
	}
	return w
}

func ask(n string) Ask {
	return Ask{Entry: Entry{Node: n, UID: types.UID("uid-" + n), Boot: "boot-" + n, Action: "reboot", Who: "root", Renew: 10}}
}

func holder(n string, ticket int64) Entry {
	return Entry{Node: n, UID: types.UID("uid-" + n), Boot: "boot-" + n, Ticket: ticket, Phase: Draining, Renew: 10}
}

// still: nothing lasted (a process that just started).
type still struct{}

func (still) Silent(Entry) time.Duration  { return 0 }
func (still) Settled(Entry) time.Duration { return 0 }
func (still) Alive(Entry) time.Duration   { return 0 }

var one = Limits{Max: 1, Settle: 30 * time.Second}

func names(bs []Block) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.String())
	}
	return strings.Join(s, "; ")
}

func TestDecideFreeSlot(t *testing.T) {
	v := Decide(Record{}, world(node("a"), node("b")), one, still{}, ask("a"))
	if !v.Admitted || v.Already || !v.Changed || len(v.Record.Holders) != 1 || v.Record.Holders[0].Phase != Admitted || v.Record.Next != 1 {
		t.Fatalf("%+v", v)
	}
	// Asking again is the same slot, renewed at once (a sign of life).
	v2 := Decide(v.Record, world(node("a"), node("b")), one, still{}, ask("a"))
	if !v2.Admitted || !v2.Already || !v2.Changed || v2.Self.Beat != 1 || len(v2.Record.Holders) != 1 || v2.Record.Next != 1 {
		t.Fatalf("again: %+v", v2)
	}
}

func TestDecideCountsHoldersAndNodesOut(t *testing.T) {
	lim := Limits{Max: 2}
	rec := Record{Next: 5, Holders: []Entry{holder("a", 1)}}
	// a holds a slot and is cordoned (counted once); c is NotReady: b waits.
	v := Decide(rec, world(node("a", cordoned), node("b"), node("c", notReady)), lim, still{}, ask("b"))
	if v.Admitted || v.Place != 1 || !v.Changed || len(v.Record.Waiters) != 1 || v.Record.Waiters[0].Ticket != 5 {
		t.Fatalf("%+v", v)
	}
	if got := names(v.Blocks); !strings.Contains(got, "cluster limit 2: a (holds a slot") || !strings.Contains(got, "c (NotReady)") {
		t.Fatalf("blocks: %s", got)
	}
	// An admin's cordon counts too.
	v = Decide(Record{}, world(node("a", cordoned), node("b")), one, still{}, ask("b"))
	if v.Admitted || names(v.Blocks) != "cluster limit 1: a (cordoned)" {
		t.Fatalf("%+v", v)
	}
	// The asking node's own cordon does not count twice.
	v = Decide(Record{}, world(node("a"), node("b", cordoned)), one, still{}, ask("b"))
	if !v.Admitted {
		t.Fatalf("%+v", v)
	}
}

func TestDecidePools(t *testing.T) {
	lim := Limits{Max: 3, Pools: []Pool{{Name: "x", Selector: labels.SelectorFromSet(labels.Set{"pool": "x"}), Max: 2}}}
	x := label("pool", "x")
	y := label("pool", "y")
	w := world(node("x1", x), node("x2", x), node("x3", x), node("y1", y))
	var rec Record
	var admitted []string
	for _, n := range []string{"x1", "x2", "x3", "y1"} {
		v := Decide(rec, w, lim, still{}, ask(n))
		rec = v.Record
		if v.Admitted {
			admitted = append(admitted, n)
		} else if n != "x3" || !strings.Contains(names(v.Blocks), "pool x limit 2") {
			t.Fatalf("%s: %s", n, names(v.Blocks))
		}
	}
	if strings.Join(admitted, ",") != "x1,x2,y1" {
		t.Fatalf("admitted %v", admitted)
	}
}

func TestDecideFirstFitInArrivalOrder(t *testing.T) {
	lim := Limits{Max: 2, Pools: []Pool{{Name: "x", Selector: labels.SelectorFromSet(labels.Set{"pool": "x"}), Max: 1}}}
	x := label("pool", "x")
	w := world(node("x1", x), node("x2", x), node("y1"), node("y2"))
	rec := Record{Next: 3, Holders: []Entry{holder("x1", 0)}, Waiters: []Entry{{Node: "x2", UID: "uid-x2", Boot: "boot-x2", Ticket: 1, Renew: 10}, {Node: "y1", UID: "uid-y1", Boot: "boot-y1", Ticket: 2, Renew: 10}}}
	// x2 is held back by its pool; y1 (after it) fits and goes; y2, a newcomer,
	// does not pass y1, which is earlier and fits.
	v := Decide(rec, w, lim, still{}, ask("y2"))
	if v.Admitted || v.Place != 3 || names(v.Blocks) != "earlier in the queue: y1 (waiting since "+(time.Time{}).Local().Format("15:04:05")+")" {
		t.Fatalf("%+v: %s", v, names(v.Blocks))
	}
	v = Decide(v.Record, w, lim, still{}, ask("y1"))
	if !v.Admitted || v.Self.Ticket != 2 {
		t.Fatalf("%+v", v)
	}
}

func TestDecideControlPlaneAndQuorum(t *testing.T) {
	lim := Limits{Max: 3}
	etcd := func(ready ...bool) []Member {
		var ms []Member
		for i, r := range ready {
			n := string(rune('a' + i))
			ms = append(ms, Member{Pod: "etcd-" + n, Node: n, Ready: r})
		}
		return ms
	}
	w := world(node("a", cp), node("b", cp), node("c", cp))
	w.EtcdKnown = true
	w.Etcd = etcd(true, true, true)
	v := Decide(Record{}, w, lim, still{}, ask("a"))
	if !v.Admitted || v.QuorumWarning != "" {
		t.Fatalf("%+v", v)
	}
	// A second control-plane node waits for the first.
	v2 := Decide(v.Record, w, lim, still{}, ask("b"))
	if v2.Admitted || !strings.Contains(names(v2.Blocks), "control plane limit 1: a (holds a slot") {
		t.Fatalf("%s", names(v2.Blocks))
	}
	// An etcd member not Ready refuses a reboot of another control-plane node.
	w.Etcd = etcd(true, false, true)
	v = Decide(Record{}, w, lim, still{}, ask("a"))
	if v.Admitted || names(v.Blocks) != "etcd would lose its quorum: etcd-b (not Ready) (--force-quorum overrides)" {
		t.Fatalf("%s", names(v.Blocks))
	}
	a := ask("a")
	a.ForceQuorum = true
	if v = Decide(Record{}, w, lim, still{}, a); !v.Admitted {
		t.Fatalf("--force-quorum: %s", names(v.Blocks))
	}
	// The member that is not Ready is the asking node's own: the other two
	// keep the quorum.
	if v = Decide(Record{}, w, lim, still{}, ask("b")); !v.Admitted {
		t.Fatalf("%s", names(v.Blocks))
	}
	// One or two members: no majority can be kept; a warning, not a refusal.
	w = world(node("a", cp), node("b"))
	w.EtcdKnown, w.Etcd = true, etcd(true)
	if v = Decide(Record{}, w, lim, still{}, ask("a")); !v.Admitted || !strings.Contains(v.QuorumWarning, "1 member(s)") {
		t.Fatalf("%+v", v)
	}
}

// lasted: every entry silent, every node settled, for d.
type lasted time.Duration

func (l lasted) Silent(Entry) time.Duration  { return time.Duration(l) }
func (l lasted) Settled(Entry) time.Duration { return time.Duration(l) }
func (l lasted) Alive(Entry) time.Duration   { return time.Duration(l) }

// silentOnly: every entry silent for d, and no node's kubelet seen alive
// meanwhile (nodes going down, or heartbeats that cannot be read).
type silentOnly time.Duration

func (l silentOnly) Silent(Entry) time.Duration { return time.Duration(l) }
func (silentOnly) Settled(Entry) time.Duration  { return 0 }
func (silentOnly) Alive(Entry) time.Duration    { return 0 }

func TestDecideReclaims(t *testing.T) {
	rec := Record{Next: 2, Holders: []Entry{holder("a", 0)}, Waiters: []Entry{{Node: "c", UID: "uid-c", Boot: "boot-c", Ticket: 1, Renew: 10}}}
	for _, c := range []struct {
		name string
		a    NodeState
		obs  Observations
		why  string // "" = kept
	}{
		{"node gone", NodeState{}, still{}, WhyGone},
		{"node re-made", node("a", func(n *NodeState) { n.UID = "other" }), still{}, WhyGone},
		{"down a long time", node("a", notReady), lasted(24 * time.Hour), ""},
		{"down on a new boot", node("a", notReady, rebooted), lasted(24 * time.Hour), ""},
		{"back, not settled long enough", node("a", rebooted), lasted(49 * time.Second), ""},
		{"back and settled, its agent given two renewals", node("a", rebooted), lasted(50 * time.Second), "back on a new boot"},
		{"same boot, renewing", node("a"), lasted(29 * time.Second), ""},
		{"same boot, silent", node("a"), lasted(30 * time.Second), "given up"},
		{"same boot, silent, NotReady", node("a", notReady), lasted(time.Hour), ""},
		// Going down: still Ready (the node controller has not seen its
		// kubelet stop yet), but its heartbeat stopped with it.
		{"same boot, silent, Ready, no heartbeat", node("a"), silentOnly(time.Hour), ""},
	} {
		w := world(node("b"), node("c"))
		if c.a.Name != "" {
			w.Nodes["a"] = c.a
		}
		v := Decide(rec, w, Limits{Max: 1, Settle: 30 * time.Second}, c.obs, ask("b"))
		switch {
		case c.why == "" && (len(v.Reclaimed) != 0 || v.Admitted):
			t.Errorf("%s: freed %+v", c.name, v.Reclaimed)
		case c.why != "" && (len(v.Reclaimed) != 1 || !strings.Contains(v.Reclaimed[0].Why, c.why)):
			t.Errorf("%s: freed %+v, want %q", c.name, v.Reclaimed, c.why)
		case c.why != "" && c.obs == (still{}) && !v.Admitted:
			// the earlier waiter c is first in line once the slot is free
			if names(v.Blocks) != "earlier in the queue: c (waiting since "+(time.Time{}).Local().Format("15:04:05")+")" {
				t.Errorf("%s: %s", c.name, names(v.Blocks))
			}
		}
	}
	// A waiter silent for 3 of its periods is dropped.
	v := Decide(Record{Next: 2, Waiters: rec.Waiters}, world(node("b"), node("c")), one, lasted(30*time.Second), ask("b"))
	if !v.Admitted || len(v.Dropped) != 1 || v.Dropped[0].Entry.Node != "c" {
		t.Fatalf("%+v", v)
	}
}

// A node back on a new boot asking again (its earlier slot still
// settling) is a new request: admitted only where a new node would be,
// its earlier entry replaced then, kept while it waits.
func TestDecideRebootedHolderAsksAgain(t *testing.T) {
	old := time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)
	rec := Record{Next: 1, Holders: []Entry{{Node: "a", UID: "uid-a", Boot: "old", Phase: Back, Beat: 7, Renew: 10, When: &old, Warned: true}}}
	v := Decide(rec, world(node("a"), node("b", cordoned)), one, still{}, ask("a"))
	if v.Admitted || names(v.Blocks) != "cluster limit 1: b (cordoned)" {
		t.Fatalf("admitted past the limit, or not naming b: %+v", v)
	}
	if h, ok := v.Record.Holder("a"); !ok || h.Boot != "old" {
		t.Fatalf("its earlier boot's slot is freed only once settled: %+v", v.Record)
	}
	v = Decide(v.Record, world(node("a"), node("b")), one, still{}, ask("a"))
	if !v.Admitted || v.Already || !v.Changed || v.Self.Boot != "boot-a" || v.Self.Phase != Admitted || v.Self.Beat != 0 ||
		v.Self.When != nil || v.Self.Warned || len(v.Record.Holders) != 1 || len(v.Record.Waiters) != 0 {
		t.Fatalf("%+v", v)
	}
	// A control-plane node back on a new boot is held by the quorum guard.
	cp := func(n *NodeState) { n.ControlPlane = true }
	w := world(node("a", cp), node("b", cp), node("c", cp))
	w.EtcdKnown = true
	w.Etcd = []Member{{"etcd-a", "a", true}, {"etcd-b", "b", false}, {"etcd-c", "c", true}}
	v = Decide(rec, w, one, still{}, ask("a"))
	if v.Admitted || !strings.Contains(names(v.Blocks), "etcd would lose its quorum: etcd-b (not Ready) (--force-quorum overrides)") {
		t.Fatalf("%+v", v)
	}
}

// The same request finding its own entry (the answer to its write was
// lost) holds the slot as its own; another request of the same node holds
// it as someone else's.
func TestDecideOwnRequest(t *testing.T) {
	a := ask("a")
	a.Entry.Run = "run-1"
	v := Decide(Record{}, world(node("a")), one, still{}, a)
	if !v.Admitted || v.Already {
		t.Fatalf("%+v", v)
	}
	again := Decide(v.Record, world(node("a")), one, still{}, a)
	if !again.Admitted || again.Already || again.Changed {
		t.Fatalf("its own entry: %+v", again)
	}
	b := a
	b.Entry.Run = "run-2"
	other := Decide(v.Record, world(node("a")), one, still{}, b)
	if !other.Admitted || !other.Already || other.Self.Run != "run-1" || other.Self.Beat != 1 {
		t.Fatalf("another request: %+v", other)
	}
}

// A waiter admitted is a new holder to every observer: the silence it
// had as a waiter (renewing 3 times less often) does not count against
// the slot it just took.
func TestTrackerAdmittedWaiterStartsAfresh(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	x := &Tracker{Clock: clk}
	w := world(node("h"), node("w"), node("x"))
	rec := Record{Next: 3, Holders: []Entry{holder("h", 0)}, Waiters: []Entry{
		{Node: "w", UID: "uid-w", Boot: "boot-w", Ticket: 1, Renew: 30},
		{Node: "x", UID: "uid-x", Boot: "boot-x", Ticket: 2, Renew: 30}}}
	x.Observe(rec, w)
	clk.SetTime(clk.Now().Add(29900 * time.Millisecond))
	rec.Holders = nil
	vw := Decide(rec, w, one, still{}, ask("w"))
	if !vw.Admitted {
		t.Fatalf("%+v", vw)
	}
	clk.SetTime(clk.Now().Add(200 * time.Millisecond))
	x.Observe(vw.Record, w)
	if d := x.Silent(vw.Self); d != 0 {
		t.Fatalf("w's slot silent for %s the moment it was taken", d)
	}
	vx := Decide(vw.Record, w, one, x, ask("x"))
	if vx.Admitted || len(vx.Reclaimed) != 0 {
		t.Fatalf("w's slot freed and x admitted beside it: %+v", vx)
	}
}

// Alive is the span of the kubelet's own heartbeat since the entry's Beat
// last changed, and nothing once the heartbeat is no longer seen going on.
func TestTrackerAlive(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	tr := &Tracker{Clock: clk}
	h := holder("a", 0)
	rec := Record{Holders: []Entry{h}}
	kubelet := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // its clock, years off
	w := world(node("a"))
	beat := func(d time.Duration) {
		clk.SetTime(clk.Now().Add(d))
		kubelet = kubelet.Add(d)
		w.Heartbeats = map[string]Heartbeat{"a": {Renewed: kubelet, Duration: 40 * time.Second}}
		tr.Observe(rec, w)
	}
	tr.Observe(rec, w) // no heartbeat seen yet
	if tr.Alive(h) != 0 {
		t.Fatal("alive without a heartbeat")
	}
	for range 4 {
		beat(10 * time.Second)
	}
	if got := tr.Alive(h); got != 30*time.Second {
		t.Fatalf("alive %s", got)
	}
	// The kubelet stops: a while later its last heartbeat says nothing.
	clk.SetTime(clk.Now().Add(21 * time.Second))
	tr.Observe(rec, w)
	if got := tr.Alive(h); got != 0 {
		t.Fatalf("alive %s after the heartbeat stopped", got)
	}
	// A renewal of the entry starts the span again.
	h.Beat++
	rec.Holders[0] = h
	beat(10 * time.Second)
	if got := tr.Alive(h); got != 0 {
		t.Fatalf("alive %s right after a renewal", got)
	}
}

func TestTrackerMeasuresLocally(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	tr := &Tracker{Clock: clk}
	h := holder("a", 0)
	rec := Record{Holders: []Entry{h}}
	w := world(node("a", rebooted))
	tr.Observe(rec, w)
	if tr.Silent(h) != 0 || tr.Settled(h) != 0 {
		t.Fatal("first sight lasted")
	}
	clk.SetTime(clk.Now().Add(20 * time.Second))
	tr.Observe(rec, w)
	if tr.Silent(h) != 20*time.Second || tr.Settled(h) != 20*time.Second {
		t.Fatalf("%s %s", tr.Silent(h), tr.Settled(h))
	}
	// A renewal restarts the silence; a cordon ends the settling.
	h.Beat++
	rec.Holders[0] = h
	w.Nodes["a"] = node("a", rebooted, cordoned)
	tr.Observe(rec, w)
	if tr.Silent(h) != 0 || tr.Settled(h) != 0 {
		t.Fatalf("%s %s", tr.Silent(h), tr.Settled(h))
	}
	// An entry's times are the entry's: a holder's record written with
	// another clock (its Since a day ahead) changes nothing here.
	h.Since = clk.Now().Add(24 * time.Hour)
	rec.Holders[0] = h
	tr.Observe(rec, w)
	if tr.HeldFor(h) != 20*time.Second {
		t.Fatalf("held for %s", tr.HeldFor(h))
	}
}

// Asked again in the same boot for another schedule (shutdown -r +9 after
// +8): the entry keeps the schedule that stands until the new one does
// (Slot.Keep writes it: when_test.go).
func TestDecideAskedAgainTakesTheNewSchedule(t *testing.T) {
	at8, at9 := time.Date(2026, 1, 1, 10, 8, 0, 0, time.UTC), time.Date(2026, 1, 1, 10, 9, 0, 0, time.UTC)
	rec := Record{Next: 1, Holders: []Entry{{Node: "a", UID: "uid-a", Boot: "boot-a", Phase: ShuttingDown, Renew: 10, When: &at8}}}
	a := ask("a")
	a.Entry.When = &at9
	v := Decide(rec, world(node("a")), one, still{}, a)
	if !v.Already || v.Self.When == nil || !v.Self.When.Equal(at8) {
		t.Fatalf("%+v", v.Self)
	}
	// Holders whose Node could not be read count in every pool.
	lim := Limits{Max: 5, Pools: []Pool{{Name: "x", Selector: labels.SelectorFromSet(labels.Set{"pool": "x"}), Max: 1}}}
	rec = Record{Next: 1, Holders: []Entry{holder("ghost", 0)}}
	ghost := NodeState{Name: "ghost", UID: "uid-ghost", Unknown: true}
	v = Decide(rec, world(node("x1", label("pool", "x")), ghost), lim, still{}, ask("x1"))
	if v.Admitted || !strings.Contains(names(v.Blocks), "pool x limit 1: ghost") {
		t.Fatalf("a holder with unknown labels: %s", names(v.Blocks))
	}
}

// N=1. a is back on a new boot, its earlier boot's slot still
// settling; b has waited for that slot since before. a asks again (a
// second reboot): served in arrival order, b goes first.
func TestDecideRebootedHolderKeepsTheQueue(t *testing.T) {
	rec := Record{Next: 6,
		Holders: []Entry{{Node: "a", UID: "uid-a", Boot: "old", Ticket: 0, Phase: Back, Beat: 7, Renew: 10}},
		Waiters: []Entry{{Node: "b", UID: "uid-b", Boot: "boot-b", Ticket: 5, Renew: 30}}}
	v := Decide(rec, world(node("a"), node("b")), one, still{}, ask("a"))
	t.Logf("a admitted %v (blocks %q); holders %+v; waiters %+v", v.Admitted, names(v.Blocks), v.Record.Holders, v.Record.Waiters)
	if v.Admitted {
		t.Errorf("a, asking after b, was admitted ahead of b (b waits for the slot a's earlier boot holds)")
	}
	// and b, deciding now, still waits
	vb := Decide(v.Record, world(node("a"), node("b")), one, still{}, Ask{Entry: rec.Waiters[0]})
	t.Logf("b then: admitted %v, blocks %q", vb.Admitted, names(vb.Blocks))
}

// N=1, no holder. A control-plane node (c) waits since before
// (ticket 1; its etcd is healthy: it fits). A worker (w) asks: a worker
// never lists the etcd pods (EtcdKnown false), so in its first-fit
// simulation c "does not fit" (quorum unknown) and w takes the slot
// ahead of c.
func TestDecideWorkerKeepsControlPlanePlace(t *testing.T) {
	cpn := node("c", cp)
	rec := Record{Next: 2, Waiters: []Entry{{Node: "c", UID: "uid-c", Boot: "boot-c", Ticket: 1, Renew: 30}}}
	// As the worker sees it: no etcd members listed.
	vw := Decide(rec, world(cpn, node("w")), one, still{}, ask("w"))
	t.Logf("worker: admitted %v blocks %q", vw.Admitted, names(vw.Blocks))
	// As c sees it (its etcd members listed, all Ready, 3 of them).
	wc := world(cpn, node("w"), node("c2", cp), node("c3", cp))
	wc.EtcdKnown = true
	wc.Etcd = []Member{{"etcd-c", "c", true}, {"etcd-c2", "c2", true}, {"etcd-c3", "c3", true}}
	vc := Decide(rec, wc, one, still{}, Ask{Entry: rec.Waiters[0]})
	t.Logf("c (before w decides): admitted %v blocks %q", vc.Admitted, names(vc.Blocks))
	if vw.Admitted && vc.Admitted {
		t.Errorf("w (ticket 2) admitted ahead of c (ticket 1), which fits")
	}
}

// A gap in the kubelet's heartbeat (a fast reboot whose new boot ID is
// not reported yet) starts the span again: the last heartbeat of the old
// boot and the first of the new one do not make the node alive between.
func TestTrackerAliveGap(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	tr := &Tracker{Clock: clk}
	h := holder("a", 0)
	rec := Record{Holders: []Entry{h}}
	kubelet := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	w := world(node("a"))
	beat := func(d time.Duration) {
		clk.SetTime(clk.Now().Add(d))
		kubelet = kubelet.Add(d)
		w.Heartbeats = map[string]Heartbeat{"a": {Renewed: kubelet, Duration: 40 * time.Second}}
		tr.Observe(rec, w)
	}
	beat(0)
	beat(25 * time.Second) // down and back: no heartbeat for 25 s
	beat(10 * time.Second)
	if got := tr.Alive(h); got != 10*time.Second {
		t.Fatalf("alive %s across a 25 s gap, want 10s", got)
	}
}

// A control-plane node whose own reboot keeps etcd's quorum does not wait
// behind an earlier control-plane node that the quorum holds back: both
// read the members, so the earlier one's quorum counts in the later one's
// first-fit (c2, whose member is the one not Ready, may go: c1 and c3
// keep 2 of 3).
func TestDecideQuorumHeldWaiterDoesNotHoldBackTheSickMember(t *testing.T) {
	lim := Limits{Max: 3}
	w := world(node("c1", cp), node("c2", cp), node("c3", cp))
	w.EtcdKnown = true
	w.Etcd = []Member{{"etcd-c1", "c1", true}, {"etcd-c2", "c2", false}, {"etcd-c3", "c3", true}}
	rec := Record{Next: 2, Waiters: []Entry{{Node: "c1", UID: "uid-c1", Boot: "boot-c1", Ticket: 1, Renew: 30}}}
	if v := Decide(rec, w, lim, still{}, Ask{Entry: rec.Waiters[0]}); v.Admitted {
		t.Fatalf("c1 admitted with etcd-c2 not Ready: %+v", v)
	}
	if v := Decide(rec, w, lim, still{}, ask("c2")); !v.Admitted {
		t.Fatalf("c2 held back behind c1: %s", names(v.Blocks))
	}
}
