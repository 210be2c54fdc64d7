package slots

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func keeperRig(t *testing.T, holder Entry) (*Gate, *fake.Clientset) {
	t.Helper()
	c := fake.NewClientset()
	casLeases(c) // a compare-and-swap that refuses, as the API server's does
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema, Next: 1, Holders: []Entry{holder}}.Encode(l)
	if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Renew: 20 * time.Millisecond, APITimeout: time.Second}, c
}

func current(t *testing.T, g *Gate) Record {
	t.Helper()
	rec, _, err := g.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 5s: %s", what)
		}
	}
}

// After the reboot: Back, then freed only once Ready and uncordoned for
// the settle time without a break.
func TestKeeperFreesAfterBoot(t *testing.T) {
	h := Entry{Node: "node1", UID: "u1", Boot: "old", Phase: ShuttingDown, Renew: 1}
	g, _ := keeperRig(t, h)
	var cordoned atomic.Bool
	cordoned.Store(true)
	k := &Keeper{Gate: g, Node: "node1", Boot: "new", Settle: 200 * time.Millisecond,
		State: func(context.Context) (NodeState, []Member, bool, error) {
			n := node("node1", func(n *NodeState) { n.UID, n.Boot = "u1", "new" })
			n.Unschedulable = cordoned.Load()
			return n, nil, false, nil
		},
		Needed: func(context.Context, Entry, func() error) (bool, string, error) {
			t.Error("Needed asked after a boot")
			return true, "", nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	eventually(t, "phase back", func() bool { e, ok := current(t, g).Holder("node1"); return ok && e.Phase == Back })
	time.Sleep(400 * time.Millisecond)
	if _, ok := current(t, g).Holder("node1"); !ok {
		t.Fatal("freed while gnsh's cordon stands")
	}
	cordoned.Store(false)
	start := time.Now()
	eventually(t, "freed", func() bool { _, ok := current(t, g).Holder("node1"); return !ok })
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("freed %s after settling began", d)
	}
}

// In the boot that took it, no longer renewed by its taker: renewed while
// needed, freed when not.
func TestKeeperRenewsOrFreesThisBoot(t *testing.T) {
	h := Entry{Node: "node1", UID: "u1", Boot: "b", Phase: ShuttingDown, Renew: 1}
	g, _ := keeperRig(t, h)
	var needed atomic.Bool
	needed.Store(true)
	k := &Keeper{Gate: g, Node: "node1", Boot: "b", Settle: time.Second,
		Needed: func(_ context.Context, _ Entry, free func() error) (bool, string, error) {
			if needed.Load() {
				return true, "a shutdown is under way", nil
			}
			return false, "", free()
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	eventually(t, "renewed twice", func() bool { e, _ := current(t, g).Holder("node1"); return e.Beat >= 2 })
	needed.Store(false)
	eventually(t, "freed", func() bool { _, ok := current(t, g).Holder("node1"); return !ok })
}

// A holder held longer than warnAfter gets one GnshSlotHeldLong, whichever
// of the keepers watching sees it first; it keeps its slot.
func TestKeepersWarnOnce(t *testing.T) {
	h := Entry{Node: "down", UID: "u9", Boot: "b9", Phase: ShuttingDown, Renew: 1}
	g, c := keeperRig(t, h)
	var events atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range []string{"node1", "node2", "node3"} {
		kg := &Gate{C: c, Namespace: g.Namespace, Name: g.Name, Renew: 20 * time.Millisecond, APITimeout: time.Second,
			Event: func(_ context.Context, node, typ, reason, _ string) {
				if node == "down" && typ == "Warning" && reason == ReasonHeldLong {
					events.Add(1)
				}
			}}
		k := &Keeper{Gate: kg, Node: n, Boot: "b-" + n, Settle: time.Second, WarnAfter: 300 * time.Millisecond}
		go k.Run(ctx)
	}
	eventually(t, "warned", func() bool { e, _ := current(t, g).Holder("down"); return e.Warned })
	time.Sleep(300 * time.Millisecond)
	if n := events.Load(); n != 1 {
		t.Fatalf("%d GnshSlotHeldLong events, want 1", n)
	}
	if _, ok := current(t, g).Holder("down"); !ok {
		t.Fatal("the slot was freed")
	}
}

// The keeper's silence clock is per entry. An entry of this boot last seen at Beat 0 (its taker killed or
// interrupted before its first renewal) and freed; a later request's new
// entry (new ticket, Beat 0) is taken as silent since the old one was
// first seen, and Needed is asked at once.
func TestKeeperSilencePerEntry(t *testing.T) {
	a := Entry{Node: "node1", UID: "u1", Boot: "b1", Ticket: 0, Phase: Admitted, Renew: 1, Run: "run-a"}
	g, _ := keeperRig(t, a)
	g.Renew = 400 * time.Millisecond
	var mu sync.Mutex
	var asked []time.Time
	var asking []Entry
	k := &Keeper{Gate: g, Node: "node1", Boot: "b1", Settle: time.Second,
		Needed: func(_ context.Context, h Entry, free func() error) (bool, string, error) {
			mu.Lock()
			asked = append(asked, time.Now())
			asking = append(asking, h)
			mu.Unlock()
			return false, "", free() // nothing holds the drain lock yet
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	// A: its taker died before the first renewal; the keeper frees it.
	eventually(t, "A freed", func() bool { _, ok := current(t, g).Holder("node1"); return !ok })
	time.Sleep(2 * g.Renew)
	// A new request admitted: B, ticket 1, Beat 0, renewed by its taker
	// every period (its first renewal due 400 ms from now).
	if _, err := g.Update(ctx, func(r *Record) bool {
		r.Next = 2
		r.Holders = append(r.Holders, Entry{Node: "node1", UID: "u1", Boot: "b1", Ticket: 1, Phase: Admitted, Renew: 1, Run: "run-b"})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	admitted := time.Now()
	time.Sleep(g.Renew / 2)
	_, still := current(t, g).Holder("node1")
	mu.Lock()
	defer mu.Unlock()
	var afterB []time.Duration
	for _, at := range asked {
		if at.After(admitted) {
			afterB = append(afterB, at.Sub(admitted))
		}
	}
	t.Logf("Needed asked for B after %v; B still held after %v: %v", afterB, g.Renew/2, still)
	if !still {
		t.Errorf("B (Beat 0, admitted %v ago, its taker's first renewal not even due) was freed by the keeper", g.Renew/2)
	}
}
