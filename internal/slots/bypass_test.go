package slots

// Hole 7 of issue 20: the node agent's drain for a shutdown that bypassed
// gnsh writes its node into the record before its cordon, and every
// admission counts it.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A holder written for a shutdown that bypassed gnsh counts as any holder
// does, even over the limit (two holders with a limit of 1), and the
// waiting line says what it is (its Who).
func TestDecideCountsBypass(t *testing.T) {
	b := holder("b", 2)
	b.Bypass, b.Action, b.Phase, b.Who = true, "reboot", Admitted, BypassWho
	rec := Record{Next: 3, Holders: []Entry{holder("a", 1), b}}
	v := Decide(rec, world(node("a"), node("b"), node("c")), one, still{}, ask("c"))
	if v.Admitted || len(v.Blocks) != 1 || len(v.Blocks[0].Out) != 2 {
		t.Fatalf("%+v", v)
	}
	if got := names(v.Blocks); !strings.Contains(got, "b (holds a slot: admitted; reboot by systemctl or logind (bypassed gnsh), asked at ") {
		t.Errorf("blocks %q", got)
	}
	// Alone, it still holds the only slot.
	v = Decide(Record{Next: 3, Holders: []Entry{b}}, world(node("b"), node("c")), one, still{}, ask("c"))
	if v.Admitted {
		t.Fatalf("admitted beside a bypass: %+v", v)
	}
}

// Bypass writes a holder whatever the limits; a holder of the node's
// boot stands for it (nothing written); one of an earlier boot gives way.
func TestBypassWrites(t *testing.T) {
	n1, n2 := readyNode("n1", ""), readyNode("n2", "")
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema, Next: 4, Holders: []Entry{{Node: "n2", UID: n2.UID, Boot: "b-n2", Ticket: 3, Phase: Draining, Renew: 10},
		{Node: "n1", UID: n1.UID, Boot: "earlier", Ticket: 1, Phase: Back, Renew: 10}}}.Encode(l)
	c := fake.NewClientset(n1, n2, l)
	casLeases(c)
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1}, Renew: time.Hour, APITimeout: time.Second}
	ctx := context.Background()
	e := Entry{Node: "n1", UID: n1.UID, Boot: "b-n1", Action: "poweroff", Renew: 10}
	s, err := g.Bypass(ctx, e)
	if err != nil || s == nil {
		t.Fatal(s, err)
	}
	s.Halt()
	rec, _, err := g.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := rec.Holder("n1")
	if !ok || !h.Bypass || h.Who != BypassWho || h.Boot != "b-n1" || h.Ticket != 4 || rec.Next != 5 || h.Phase != Admitted || len(rec.Holders) != 2 {
		t.Fatalf("record %+v", rec)
	}
	if s, err := g.Bypass(ctx, e); err != nil || s != nil {
		t.Fatalf("again: %v %v", s, err)
	}
	if again, _, _ := g.Read(ctx); !again.Equal(rec) {
		t.Fatalf("written again: %+v", again)
	}
}

// sharedCAS makes c and other one API server for Leases (one tracker,
// c's; numeric resourceVersions and the update precondition), so that a
// reactor of c's may wait for a write made through other.
func sharedCAS(c, other *fake.Clientset) {
	tr := c.Tracker()
	var mu sync.Mutex
	rv := 100
	for _, cs := range []*fake.Clientset{c, other} {
		cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			rv++
			l.ResourceVersion = strconv.Itoa(rv)
			if err := tr.Create(leasesGVR, l, l.Namespace); err != nil {
				return true, nil, err
			}
			return true, l, nil
		})
		cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			cur, err := tr.Get(leasesGVR, l.Namespace, l.Name)
			if err != nil {
				return true, nil, err
			}
			if cur.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
				return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), l.Name, errors.New("the object has been modified"))
			}
			rv++
			l.ResourceVersion = strconv.Itoa(rv)
			if err := tr.Update(leasesGVR, l, l.Namespace); err != nil {
				return true, nil, err
			}
			return true, l, nil
		})
	}
}

// A reboot through the wrapper on a (the only slot free) decides from a
// record without b, and its write comes just after b's agent wrote b in
// for a shutdown that bypassed gnsh (systemctl reboot, at the same
// instant): the write conflicts, the decision is made again, and a waits
// behind b. (Before the agent wrote anything, a was admitted while b
// cordoned: two nodes out with a limit of 1.)
func TestBypassRacesAnAdmission(t *testing.T) {
	na, nb := readyNode("a", ""), readyNode("b", "")
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema}.Encode(l)
	c := fake.NewClientset(na, nb, l)
	other := &fake.Clientset{}
	other.AddReactor("*", "*", k8stesting.ObjectReaction(c.Tracker()))
	other.AddWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace())
		return true, w, err
	})
	sharedCAS(c, other)
	ga := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1}, Renew: 10 * time.Second, APITimeout: time.Second}
	gb := &Gate{C: other, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1}, Renew: 10 * time.Second, APITimeout: time.Second}
	var once sync.Once
	var bypass *Slot
	var bypassErr error
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		// a's first write: b's agent writes first.
		once.Do(func() {
			bypass, bypassErr = gb.Bypass(context.Background(), Entry{Node: "b", UID: nb.UID, Boot: "b-b", Action: "reboot", Renew: 10})
		})
		return false, nil, nil
	})
	_, v, err := ga.Acquire(context.Background(), reqFor(na, 10, 1500*time.Millisecond))
	if bypassErr != nil || bypass == nil {
		t.Fatalf("bypass: %v %v", bypass, bypassErr)
	}
	bypass.Halt()
	var we *WaitError
	if !errors.As(err, &we) || v.Admitted || !strings.Contains(err.Error(), "cluster limit 1: b (holds a slot: admitted; reboot by systemctl or logind (bypassed gnsh), asked at ") {
		t.Fatalf("%v %+v", err, v)
	}
	rec, _, _ := ga.Read(context.Background())
	if _, ok := rec.Holder("a"); ok || len(rec.Holders) != 1 || !rec.Holders[0].Bypass {
		t.Fatalf("record %+v", rec)
	}
}

// After the boot the node agent frees a bypass holder as any holder of an
// earlier boot: back, then freed once settled.
func TestKeeperFreesBypassAfterBoot(t *testing.T) {
	h := Entry{Node: "node1", UID: "u1", Boot: "old", Phase: ShuttingDown, Action: "reboot", Renew: 1, Bypass: true}
	g, _ := keeperRig(t, h)
	k := &Keeper{Gate: g, Node: "node1", Boot: "new", Settle: 50 * time.Millisecond,
		State: func(context.Context) (NodeState, []Member, bool, error) {
			return node("node1", func(n *NodeState) { n.UID, n.Boot = "u1", "new" }), nil, false, nil
		},
		Needed: func(context.Context, Entry, func() error) (bool, string, error) {
			t.Error("Needed asked after a boot")
			return true, "", nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	eventually(t, "freed", func() bool { _, ok := current(t, g).Holder("node1"); return !ok })
}
