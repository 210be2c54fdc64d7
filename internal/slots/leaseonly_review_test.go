package slots

// Scratch tests of a hostile review (round 3) of 99fd12f and 54be2e1: the
// node beyond the full queue that reads the Lease alone (fullWithout,
// watch's lease-only path, watchNodes) and the given-up rule at the head
// only. Each confirms or refutes one suspicion.

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// 32 dead waiters (their nodes power-cycled, or their wrappers killed)
// fill the queue; a holder is alive and renews every 10 s (a long drain
// held up by a PDB, an agent renewing a slot a shutdown relies on).
// maxUnavailable 2: a slot is free. A node beyond the full queue reads the
// Lease alone and never decides over the Nodes, so it never drops a dead
// waiter; its only way out, the record unchanged for MaxWaiterSilence,
// never comes while the holder renews (every renewal is a new
// resourceVersion). Nobody in the queue is alive to drop them either.
func TestDeadQueueNotKeptFullByRenewingHolder(t *testing.T) {
	rec := Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "h", UID: "u-h", Boot: "b-h", Phase: Draining, Renew: 10}}}
	for i := range MaxWaiters {
		e := fleetAsk(i).Entry
		e.Ticket, e.Renew = rec.Next, 10
		rec.Waiters = append(rec.Waiters, e)
		rec.Next++
	}
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC))
	late := readyNode("late", "")
	a := &acquirer{g: &Gate{Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 2}, Clock: fc, APITimeout: time.Second},
		r: reqFor(late, 10, time.Hour), tr: &Tracker{Clock: fc}, start: fc.Now()}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh", ResourceVersion: "100"}}
	for step := range 360 { // an hour, one read per 10 s
		rec.Holders[0].Beat++ // the holder's renewal
		rec.Encode(l)
		l.ResourceVersion = strconv.Itoa(101 + step)
		snap := snapshot{lease: l}
		full, err := a.fullWithout(&snap)
		if err != nil {
			t.Fatal(err)
		}
		if !full {
			t.Logf("left the lease-only wait after %s", fc.Since(a.start))
			return
		}
		fc.Step(10 * time.Second)
	}
	t.Fatalf("a slot free, 32 dead waiters, one live holder renewing: still reading the Lease alone (queue full) after %s; MaxWaiterSilence is %s", fc.Since(a.start), MaxWaiterSilence)
}

// A node beyond the full queue sees a place free and starts its Node
// watch (watchNodes); the watch does not sync (the API server too slow to
// list the Nodes, as in the 1,000-node arrival). Each retry starts another
// Node informer and none of the failed ones is stopped: they all run,
// list and watch every Node, until the request ends.
func TestFailedNodeWatchIsStopped(t *testing.T) {
	late := readyNode("late", "")
	c := fullLease(t, late)
	var failing atomic.Bool
	failing.Store(true)
	c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("the server was unable to return a response in the time allotted")
		}
		return false, nil, nil
	})
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: 100 * time.Millisecond,
		senseFirst: 10 * time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := g.Acquire(ctx, reqFor(late, 10, time.Minute))
		done <- err
	}()
	time.Sleep(1200 * time.Millisecond)
	admin := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second}
	freeFirstPlace(t, admin)
	time.Sleep(6 * time.Second) // its Node watch fails to sync, again and again
	failing.Store(false)
	time.Sleep(4 * time.Second)
	watches := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "watch" && a.GetResource().Resource == "nodes" {
			watches++
		}
	}
	cancel()
	<-done
	if watches > 1 {
		t.Fatalf("%d watches of the Nodes by one waiting node (failed Node informers left running)", watches)
	}
}

// Only the head follows a quiet holder's kubelet heartbeat (99fd12f), and
// the given-up rule needs the heartbeat seen going on for 3 of the
// holder's periods: each new head starts that count from nothing. Head a
// leaves at the end of its wait (3 s) before its count is done; b, in
// place 2 since the start, had seen the same heartbeat for as long on
// d945ca1 and freed the slot at once; now it needs 3 periods more from
// the moment it is head. With heads that leave (their waits end, SIGINT,
// dead heads dropped) the rule's clock restarts each time; with
// renew: 10m a head needs 30 min at the head.
func TestNewHeadKeepsGivenUpCount(t *testing.T) {
	na, nb, nh := readyNode("a", ""), readyNode("b", ""), readyNode("h", "")
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "h", UID: nh.UID, Boot: nh.Status.NodeInfo.BootID, Phase: Draining, Renew: 1}}}.Encode(l)
	c := fake.NewClientset(na, nb, nh, l)
	casLeases(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dur := int32(40)
	kl := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: NodeLeaseNamespace},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &dur}}
	kl, err := c.CoordinationV1().Leases(NodeLeaseNamespace).Create(ctx, kl, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() { // h's kubelet, on the same boot, heartbeating
		for ctx.Err() == nil {
			now := metav1.NewMicroTime(time.Now())
			kl.Spec.RenewTime = &now
			if nl, err := c.CoordinationV1().Leases(NodeLeaseNamespace).Update(ctx, kl, metav1.UpdateOptions{}); err == nil {
				kl = nl
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	gate := func() *Gate {
		return &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: time.Second, APITimeout: time.Second}
	}
	aDone := make(chan time.Time, 1)
	go func() {
		_, _, err := gate().Acquire(ctx, reqFor(na, 1, 3*time.Second))
		t.Logf("a: %v", err)
		aDone <- time.Now()
	}()
	time.Sleep(300 * time.Millisecond)
	s, v, err := gate().Acquire(ctx, reqFor(nb, 1, 20*time.Second))
	if err != nil {
		t.Fatalf("b: %v", err)
	}
	defer s.Halt()
	aLeft := <-aDone
	after := time.Since(aLeft)
	t.Logf("b admitted %s after a left (%v)", after.Round(100*time.Millisecond), v.Reclaimed)
	if after > 2*time.Second {
		t.Errorf("b, which saw h's heartbeat all along from place 2, freed h's given-up slot only %s after it became head: the count began again", after.Round(100*time.Millisecond))
	}
}

// gnsh(8): "nodes the limits would admit beyond a full queue are admitted"
// (Decide's first fit: waiters ahead that do not fit do not hold a node
// back). 32 nodes of pool gpu (maxUnavailable 1 there, held) wait; a
// worker of no pool asks, the cluster's limit 10 has 9 slots free. On
// d945ca1 it is admitted at its first decision; now it finds the queue
// full from the Lease alone, never decides while the record changes (or
// for 90 s), and is refused after its wait with 9 slots free.
func TestBeyondFullQueueAdmittedWhenItFits(t *testing.T) {
	rec := Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "h", UID: "u-h", Boot: "b-h", Phase: Draining, Renew: 10}}}
	h := readyNode("h", "")
	h.Labels = map[string]string{"gpu": "true"}
	objs := []runtime.Object{h}
	for i := range MaxWaiters {
		e := fleetAsk(i).Entry
		e.Ticket, e.Renew = rec.Next, 30
		rec.Waiters = append(rec.Waiters, e)
		rec.Next++
		n := readyNode(e.Node, "")
		n.UID, n.Status.NodeInfo.BootID, n.Labels = e.UID, e.Boot, map[string]string{"gpu": "true"}
		objs = append(objs, n)
	}
	w := readyNode("w", "")
	objs = append(objs, w)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	rec.Encode(l)
	c := fake.NewClientset(objs...)
	casLeases(c)
	if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel, err := labels.Parse("gpu=true")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 10, Settle: time.Second, Pools: []Pool{{Name: "gpu", Selector: sel, Max: 1}}},
		Renew: 10 * time.Second, APITimeout: time.Second}
	// Wait 0: the agent's "too near" path (refused, it cancels the
	// admin's schedule); 4 s: a wrapper.
	for _, wait := range []time.Duration{0, 4 * time.Second} {
		s, v, err := g.Acquire(context.Background(), reqFor(w, 10, wait))
		if err != nil {
			t.Errorf("wait %s: a worker of no pool, 9 of 10 slots free, 32 gpu nodes waiting for their pool: %v (unrecorded %v)", wait, err, v.Unrecorded)
			continue
		}
		if err := s.Release(context.Background(), "review"); err != nil {
			t.Fatal(err)
		}
	}
}

// SIGINT while a node waits beyond the full queue reading the Lease alone:
// it returns at once and writes nothing (it has no entry to withdraw).
func TestInterruptWhileWaitingBeyondFullQueue(t *testing.T) {
	late := readyNode("late", "")
	c := fullLease(t, late)
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second}
	before := len(c.Actions())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := g.Acquire(ctx, reqFor(late, 10, time.Minute))
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("SIGINT while waiting beyond the full queue: still waiting 3 s later")
	}
	for _, a := range c.Actions()[before:] {
		if a.GetVerb() == "update" || a.GetVerb() == "create" {
			t.Errorf("a node beyond the full queue wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// 54be2e1 keeps the nodes beyond the full queue from listing the Nodes at
// their arrival, but the first place freed sends every one of them to
// watchNodes at once (they all see the same record below 32), for the
// one place: the arrival's storm of Node lists, delayed to the moment the
// API server also takes their sense writes, and none goes back to the
// Lease alone once the queue is full again. Five nodes beyond the queue,
// one place freed: five lists and five Node watches.
func TestOnePlaceFreedFewListNodes(t *testing.T) {
	var late []*corev1.Node
	for i := range 5 {
		late = append(late, readyNode("late-"+strconv.Itoa(i), ""))
	}
	c := fullLease(t, late...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, len(late))
	for _, n := range late {
		go func() {
			g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second,
				senseFirst: 3 * time.Second}
			_, _, err := g.Acquire(ctx, reqFor(n, 10, time.Minute))
			done <- err
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	freeFirstPlace(t, &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second})
	time.Sleep(5 * time.Second)
	lists, watches := 0, 0
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "nodes" {
			switch a.GetVerb() {
			case "list":
				lists++
			case "watch":
				watches++
			}
		}
	}
	cancel()
	for range late {
		<-done
	}
	t.Logf("one place freed: %d lists and %d watches of the Nodes by %d nodes beyond the queue", lists, watches, len(late))
	// Two when a second pause ends while the first node lists and joins;
	// on a loaded machine the pauses end further apart and a third may
	// list. The fault this guards against is every node listing.
	if lists >= len(late) {
		t.Errorf("one place freed, %d nodes beyond the queue: %d lists of every Node (%d watches kept)", len(late), lists, watches)
	}
}
