package slots

// A conflict with no wait left (issue 20, hole 4): a 409 says only that
// another node wrote first, never that there is no slot.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The agent's "too near" path and a drain ahead with under a second of
// budget ask with wait 0. Another node's routine renewal landing between
// the read and the write (a 409) must be followed by a fresh decision,
// which admits: a slot is free.
func TestConflictWithNoWaitLeftDecidesAgain(t *testing.T) {
	ready := corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "u1"}, Status: ready}
	n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2", UID: "u2"}, Status: ready}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	// node2 holds one of two slots, and renews it.
	Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "node2", UID: "u2", Boot: "b2", Phase: Draining, Renew: 10}}}.Encode(l)
	c := fake.NewClientset(n1, n2, l)
	casLeases(c)
	var updates atomic.Int32
	c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if updates.Add(1) > 1 {
			return false, nil, nil
		}
		// node2's renewal lands first.
		o, err := c.Tracker().Get(leasesGVR, "gnsh", "reboot-slots")
		if err != nil {
			return true, nil, err
		}
		cur := o.(*coordinationv1.Lease).DeepCopy()
		rec, err := Decode(cur)
		if err != nil {
			return true, nil, err
		}
		rec.Holders[0].Beat++
		rec.Encode(cur)
		cur.ResourceVersion = "99" // older than any casLeases writes next
		if err := c.Tracker().Update(leasesGVR, cur, "gnsh"); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), "reboot-slots", errors.New("the object has been modified"))
	})
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 2, Settle: time.Second},
		Renew: 10 * time.Second, APITimeout: 2 * time.Second}
	r := Request{Ask: Ask{Entry: Entry{Node: "node1", UID: "u1", Boot: "b1", Renew: 10}}, Self: StateOf(n1), Wait: 0}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, v, err := g.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("one conflict with a slot free and no wait left: %v (after %d writes)", err, updates.Load())
	}
	defer s.Halt()
	rec, _, err := g.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := rec.Holder("node1")
	if !v.Admitted || !ok || len(rec.Holders) != 2 || rec.Holders[0].Beat != 1 && rec.Holders[1].Beat != 1 {
		t.Fatalf("admitted %v, record %+v (node1 %+v): want node1 beside node2, node2's renewal kept", v.Admitted, rec, h)
	}
}

// A crowd that always writes first (a conflict on every write) still
// ends a request with no wait left: the fresh decisions after a conflict
// are bounded (conflictTries), and then it is refused, not admitted.
func TestConflictsWithNoWaitLeftAreBounded(t *testing.T) {
	g, c, r := gateRig(t)
	g.Limits.Max = 2
	r.Wait = 0
	var updates atomic.Int32
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		updates.Add(1)
		return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), "reboot-slots", errors.New("changed"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _, err := g.Acquire(ctx, r)
	var we *WaitError
	if !errors.As(err, &we) || !apierrors.IsConflict(we.Err) {
		t.Fatalf("got %v, want a WaitError after conflicts", err)
	}
	if n := updates.Load(); n < 2 || n > conflictTries+1 {
		t.Fatalf("%d writes: want a fresh decision after the first conflict, at most %d", n, conflictTries+1)
	}
}

// A node that must wait reads the Lease and the Nodes once: its watches go
// on from that read (no list again), and a conflict is resolved from the
// watch (no read of the Lease again), so that a queue of a hundred nodes
// does not multiply its requests by each write that lands.
func TestWaiterReadsOnce(t *testing.T) {
	g, c, r := gateRig(t)
	r.Wait = 1500 * time.Millisecond
	casLeases(c)
	var updates atomic.Int32
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if updates.Add(1) == 1 {
			// node2's renewal lands first (written after this reactor
			// returns: the fake clientset serialises its requests).
			go func() {
				o, err := c.Tracker().Get(leasesGVR, "gnsh", "reboot-slots")
				if err != nil {
					t.Error(err)
					return
				}
				l := o.(*coordinationv1.Lease).DeepCopy()
				rec, _ := Decode(l)
				rec.Holders[0].Beat++
				rec.Encode(l)
				if _, err := c.CoordinationV1().Leases("gnsh").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
					t.Error(err)
				}
			}()
			return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), "reboot-slots", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	_, _, err := g.Acquire(context.Background(), r)
	var we *WaitError
	if !errors.As(err, &we) {
		t.Fatalf("got %v, want a WaitError (node2 holds the only slot)", err)
	}
	n := map[string]int{}
	for _, a := range c.Actions() {
		n[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	// The Lease read twice: at first, and by its withdrawal at the end
	// of the wait (Update reads it).
	if n["get leases"] != 2 || n["list leases"] != 0 || n["list nodes"] != 1 || n["watch leases"] != 1 || n["watch nodes"] != 1 {
		t.Fatalf("requests %v: want the Lease read once (and once to withdraw), the Nodes listed once, each watched once", n)
	}
	if n["update leases"] < 3 {
		t.Fatalf("requests %v: want its join conflicting, node2's renewal, its join", n)
	}
}

// An API server that answers 429 Too Many Requests (its limit of requests
// in flight, as 1,000 nodes asking at once make it) is there and busy:
// the node waits it out and takes its slot, and is never told the gate is
// unavailable (which the optional gate goes past, without a slot).
func TestBusyAPIServerIsNotUnavailable(t *testing.T) {
	g, c, r := gateRig(t)
	l, _ := c.CoordinationV1().Leases("gnsh").Get(context.Background(), "reboot-slots", metav1.GetOptions{})
	Record{Version: Schema}.Encode(l) // the slot is free
	if _, err := c.CoordinationV1().Leases("gnsh").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.Wait = 30 * time.Second
	var gets atomic.Int32
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gets.Add(1) <= earlyTries+1 {
			return true, nil, apierrors.NewTooManyRequests("too many requests, please try again later", 1)
		}
		return false, nil, nil
	})
	s, _, err := g.Acquire(context.Background(), r)
	var ue *UnavailableError
	if errors.As(err, &ue) || err != nil {
		t.Fatalf("after %d reads answered 429: %v, want the slot", gets.Load(), err)
	}
	s.Halt()

	// With no wait left, a busy server refuses (a WaitError), never
	// "unavailable".
	g, c, r = gateRig(t)
	r.Wait = 0
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTooManyRequests("too many requests, please try again later", 1)
	})
	_, _, err = g.Acquire(context.Background(), r)
	var we *WaitError
	if !errors.As(err, &we) {
		t.Fatalf("busy, no wait left: %v, want a WaitError", err)
	}
}
