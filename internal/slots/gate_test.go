package slots

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// gateRig: node1 asks, node2 holds the only slot.
func gateRig(t *testing.T) (*Gate, *fake.Clientset, Request) {
	t.Helper()
	ready := corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "u1"}, Status: ready}
	n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2", UID: "u2"}, Status: ready}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "node2", UID: "u2", Boot: "b2", Phase: Draining, Renew: 10}}}.Encode(l)
	c := fake.NewClientset(n1, n2, l)
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1, Settle: time.Second},
		Renew: 10 * time.Second, APITimeout: time.Second}
	r := Request{Ask: Ask{Entry: Entry{Node: "node1", UID: "u1", Boot: "b1", Renew: 10}}, Self: StateOf(n1), Wait: 2 * time.Second}
	return g, c, r
}

// A node told to wait never goes on because an answer was then lost: a
// failure of the API server after the gate answered is waited out, and
// the wait ends in a refusal, not in "the gate is unavailable".
func TestTransientFailureWhileWaitingRefuses(t *testing.T) {
	g, c, r := gateRig(t)
	var writes atomic.Int32
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if writes.Add(1) == 1 {
			return false, nil, nil // its waiter entry
		}
		return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	})
	c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if writes.Load() >= 1 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	start := time.Now()
	_, _, err := g.Acquire(context.Background(), r)
	var we *WaitError
	var ue *UnavailableError
	if !errors.As(err, &we) || errors.As(err, &ue) {
		t.Fatalf("got %v, want a WaitError", err)
	}
	if d := time.Since(start); d < r.Wait {
		t.Fatalf("gave up after %s, before the wait (%s)", d, r.Wait)
	}
}

// A gate that never answered is unavailable (the shutdown may go on, as
// slots.gate says) after earlyTries reads; one that fails once at first
// (a 5xx while etcd changes leader) and then answers is not: the node
// waits for the slot node2 holds.
func TestGateDownAtFirstIsUnavailable(t *testing.T) {
	g, c, r := gateRig(t)
	var gets atomic.Int32
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	_, _, err := g.Acquire(context.Background(), r)
	var ue *UnavailableError
	if !errors.As(err, &ue) || gets.Load() != earlyTries {
		t.Fatalf("got %v after %d reads, want an UnavailableError after %d", err, gets.Load(), earlyTries)
	}

	g, c, r = gateRig(t)
	gets.Store(0)
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gets.Add(1) == 1 {
			return true, nil, apierrors.NewServiceUnavailable("etcdserver: leader changed")
		}
		return false, nil, nil
	})
	_, _, err = g.Acquire(context.Background(), r)
	var we *WaitError
	if !errors.As(err, &we) {
		t.Fatalf("one failure at first: got %v, want a WaitError (node2 holds the only slot)", err)
	}
}

// Conflicts forever (another writer always first) still end at the wait.
func TestConflictsForeverEndAtTheWait(t *testing.T) {
	g, c, r := gateRig(t)
	r.Wait = 500 * time.Millisecond
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "reboot-slots", errors.New("changed"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err := g.Acquire(ctx, r)
	var we *WaitError
	if !errors.As(err, &we) || time.Since(start) > 5*time.Second {
		t.Fatalf("after %s: %v", time.Since(start), err)
	}
}

// etcd members that cannot be read hold a control-plane node back.
func TestUnknownEtcdHoldsControlPlaneBack(t *testing.T) {
	w := world(node("a", cp), node("b", cp), node("c", cp))
	w.EtcdKnown = false
	v := Decide(Record{}, w, Limits{Max: 3}, still{}, ask("a"))
	if v.Admitted || len(v.Blocks) != 1 || v.Blocks[0].Limit != LimitQuorum {
		t.Fatalf("%+v", v)
	}
	a := ask("a")
	a.ForceQuorum = true
	if v := Decide(Record{}, w, Limits{Max: 3}, still{}, a); !v.Admitted {
		t.Fatalf("--force-quorum: %+v", v)
	}
	// No etcd pods at all (an external etcd): nothing to keep.
	w.EtcdKnown = true
	if v := Decide(Record{}, w, Limits{Max: 3}, still{}, ask("a")); !v.Admitted {
		t.Fatalf("external etcd: %+v", v)
	}
}

// The Lease deleted while a node waits (the reset the README names): the
// next write makes it again; the node is not told the gate is unavailable.
func TestLeaseDeletedWhileWaiting(t *testing.T) {
	g, c, r := gateRig(t)
	r.Wait = 3 * time.Second
	g.Renew = 100 * time.Millisecond // waiters renew every 300 ms
	var updates atomic.Int32
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if updates.Add(1) == 2 {
			// Its waiter entry is written, and renewed once while it
			// watches; then the Lease goes.
			go func() {
				time.Sleep(100 * time.Millisecond)
				_ = c.CoordinationV1().Leases("gnsh").Delete(context.Background(), "reboot-slots", metav1.DeleteOptions{})
			}()
		}
		return false, nil, nil
	})
	s, _, err := g.Acquire(context.Background(), r)
	var ue *UnavailableError
	if errors.As(err, &ue) {
		t.Fatalf("told the gate is unavailable: %v", err)
	}
	// With node2's slot gone with the Lease, node1 takes a slot in a new
	// Lease.
	if err != nil || s == nil {
		t.Fatalf("%v", err)
	}
	rec, _, _ := g.Read(context.Background())
	if h, ok := rec.Holder("node1"); !ok || len(rec.Holders) != 1 {
		t.Fatalf("record %+v (%+v)", rec, h)
	}
	s.Halt()
}

// Permission taken away while a node waits (its RoleBinding removed, its
// namespace gone): it keeps waiting and is refused at the end of the
// wait, never told the gate is unavailable (which optional goes past).
func TestForbiddenWhileWaitingRefuses(t *testing.T) {
	g, c, r := gateRig(t)
	var writes atomic.Int32
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "reboot-slots", errors.New("RBAC: role gnsh:slots not found"))
	c.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "update" && writes.Add(1) == 1 {
			return false, nil, nil // its waiter entry
		}
		if writes.Load() >= 1 {
			return true, nil, forbidden
		}
		return false, nil, nil
	})
	_, _, err := g.Acquire(context.Background(), r)
	var we *WaitError
	var ue *UnavailableError
	if !errors.As(err, &we) || errors.As(err, &ue) {
		t.Fatalf("got %v, want a WaitError", err)
	}
}

// A holder that stopped renewing is freed as given up only while its
// node's kubelet is seen heartbeating (its Lease in kube-node-lease): a
// node going down is silent too, and stays Ready for the node
// controller's grace period after its kubelet stops.
func TestGivenUpNeedsAHeartbeat(t *testing.T) {
	for _, beating := range []bool{false, true} {
		g, c, r := gateRig(t)
		g.Renew = time.Second
		r.Wait = 8 * time.Second
		l, _ := c.CoordinationV1().Leases("gnsh").Get(context.Background(), "reboot-slots", metav1.GetOptions{})
		Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "node2", UID: "u2", Boot: "", Phase: ShuttingDown, Renew: 1}}}.Encode(l)
		if _, err := c.CoordinationV1().Leases("gnsh").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if beating {
			dur := int32(40)
			kl := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node2", Namespace: NodeLeaseNamespace},
				Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &dur}}
			if _, err := c.CoordinationV1().Leases(NodeLeaseNamespace).Create(ctx, kl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			go func() {
				for ctx.Err() == nil {
					now := metav1.NewMicroTime(time.Now())
					kl.Spec.RenewTime = &now
					_, _ = c.CoordinationV1().Leases(NodeLeaseNamespace).Update(ctx, kl, metav1.UpdateOptions{})
					time.Sleep(200 * time.Millisecond)
				}
			}()
		}
		s, v, err := g.Acquire(ctx, r)
		cancel()
		switch {
		case beating && err != nil:
			t.Errorf("node2 silent, its kubelet heartbeating: not freed: %v", err)
		case beating && (len(v.Reclaimed) != 1 || !strings.Contains(v.Reclaimed[0].Why, "given up")):
			t.Errorf("admitted, but not by freeing node2's slot: %+v", v)
		case !beating && err == nil:
			t.Errorf("node2 silent and no heartbeat (going down): its slot freed: %+v", v.Reclaimed)
		}
		if s != nil {
			s.Halt()
		}
	}
}

// Credentials that may read the Lease but not write it (a partial RBAC):
// the gate is unavailable at once (slots.gate decides), not waited out
// until slots.wait as if the node had been told to wait.
func TestForbiddenFirstWriteIsUnavailable(t *testing.T) {
	g, c, r := gateRig(t)
	r.Wait = time.Minute
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "reboot-slots", errors.New("no update"))
	})
	start := time.Now()
	_, _, err := g.Acquire(context.Background(), r)
	var ue *UnavailableError
	if !errors.As(err, &ue) || time.Since(start) > 10*time.Second {
		t.Fatalf("after %s: %v, want an UnavailableError at once", time.Since(start), err)
	}
}
