package slots

// Scratch tests of a hostile review of 713672f (MaxWaiters, sense,
// crowdBackoff, nodeStates): each confirms or refutes one suspicion.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A drain ahead with under a second of budget (the agent's ctx) asks with
// wait 0; two routine renewals by another node land between its read and
// its write. Before 713672f each conflict cost 5-30 ms and it was
// admitted; crowdBackoff makes the first cost 250-750 ms and the second
// 500-1500 ms, past the budget: no slot with a slot free, and the agent
// cancels the admin's schedule (hole 4 again).
func TestConflictPausesStayShortWithoutWaitLeft(t *testing.T) {
	n1, n2 := readyNode("node1", ""), readyNode("node2", "")
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "node2", UID: n2.UID, Boot: "b-node2", Phase: Draining, Renew: 10}}}.Encode(l)
	c := fake.NewClientset(n1, n2, l)
	casLeases(c)
	var updates atomic.Int32
	c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if updates.Add(1) > 2 {
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
		cur.ResourceVersion = fmt.Sprint(90 + updates.Load())
		if err := c.Tracker().Update(leasesGVR, cur, "gnsh"); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), "reboot-slots", errors.New("the object has been modified"))
	})
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 2, Settle: time.Second},
		Renew: 10 * time.Second, APITimeout: 700 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond) // the agent's budget
	defer cancel()
	start := time.Now()
	s, _, err := g.Acquire(ctx, reqFor(n1, 10, 0))
	if err != nil {
		t.Fatalf("two conflicts with a slot free, wait 0, 700 ms of budget: %v after %s (%d writes)", err, time.Since(start).Round(time.Millisecond), updates.Load())
	}
	s.Halt()
}

// fullLease makes a Lease whose queue is full (MaxWaiters), a holder h
// holding the one slot, and the Nodes of all of them.
func fullLease(t *testing.T, extra ...*corev1.Node) *fake.Clientset {
	t.Helper()
	rec := Record{Version: Schema, Holders: []Entry{holder("h", 0)}, Next: 1}
	rec.Holders[0].UID, rec.Holders[0].Boot = "u-h", "b-h"
	objs := []runtime.Object{readyNode("h", "")}
	for i := range MaxWaiters {
		e := fleetAsk(i).Entry
		e.Ticket, e.Renew = rec.Next, 30
		rec.Waiters = append(rec.Waiters, e)
		rec.Next++
		n := readyNode(e.Node, "")
		n.UID, n.Status.NodeInfo.BootID = e.UID, e.Boot
		objs = append(objs, n)
	}
	for _, n := range extra {
		objs = append(objs, n)
	}
	c := fake.NewClientset(objs...)
	casLeases(c)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	rec.Encode(l)
	if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func freeFirstPlace(t *testing.T, admin *Gate) {
	t.Helper()
	if _, err := admin.Update(context.Background(), func(r *Record) bool {
		r.Waiters = r.Waiters[1:]
		return true
	}); err != nil {
		t.Fatal(err)
	}
}

func recorded(t *testing.T, admin *Gate, node string) bool {
	t.Helper()
	rec, _, err := admin.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, ok := rec.Waiter(node)
	return ok
}

// A node asking for the first time whose join would take the queue's last
// place pauses (senses) as the nodes beyond the full queue do, rather than
// writing at once: otherwise a stream of newcomers takes every freed place
// ahead of the nodes that waited beyond the queue (review 2, finding 2: on
// 713672f the three places freed went to the three newcomers). Its window
// here is ten hours, so within its 3 s wait it writes nothing.
func TestNewcomerSensesForTheLastPlace(t *testing.T) {
	newcomer := readyNode("new-0", "")
	c := fullLease(t, newcomer)
	admin := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second}
	freeFirstPlace(t, admin) // one place free: the last
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second,
		senseFirst: 10 * time.Hour}
	done := make(chan error, 1)
	go func() {
		_, _, err := g.Acquire(context.Background(), reqFor(newcomer, 10, 3*time.Second))
		done <- err
	}()
	// Watched while it waits (at the end of its wait it withdraws).
	for {
		select {
		case err := <-done:
			var we *WaitError
			if !errors.As(err, &we) {
				t.Fatalf("got %v, want a refusal at the end of its wait", err)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if recorded(t, admin, "new-0") {
			t.Fatal("a newcomer took the queue's last place at once, ahead of the nodes beyond the full queue")
		}
	}
}

// A node beyond the full queue in its sense pause (its window 60 s) is
// cancelled (SIGINT), or its wait ends: it returns at once, never after
// its pause.
func TestSensePauseEndsWithCtxAndWait(t *testing.T) {
	for _, cancelIt := range []bool{true, false} {
		me := readyNode("me", "")
		c := fullLease(t, me)
		admin := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		wait := time.Minute
		if !cancelIt {
			wait = 3 * time.Second
		}
		go func() {
			g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second,
				senseFirst: time.Hour}
			_, _, err := g.Acquire(ctx, reqFor(me, 10, wait))
			done <- err
		}()
		time.Sleep(1200 * time.Millisecond)
		freeFirstPlace(t, admin) // it senses now (up to an hour)
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		if cancelIt {
			cancel()
		}
		select {
		case err := <-done:
			var we *WaitError
			if cancelIt && !errors.Is(err, context.Canceled) || !cancelIt && !errors.As(err, &we) {
				t.Errorf("cancel %v: %v", cancelIt, err)
			}
			t.Logf("cancel %v: returned %v after %s", cancelIt, err, time.Since(start).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Errorf("cancel %v: still sensing 5 s later", cancelIt)
		}
		cancel()
	}
}

// The Nodes' states are cached (nodeStates) and built again only when the
// Node watch reports a change: an uncordon, and a holder's Node deleted,
// are still seen by a waiting node.
func TestCachedNodeStatesSeeChanges(t *testing.T) {
	me, h, x := readyNode("me", ""), readyNode("h", ""), readyNode("x", "")
	x.Spec.Unschedulable = true // an admin's forgotten cordon: counts as out
	c := fake.NewClientset(me, h, x)
	casLeases(c)
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		s   *Slot
		err error
	}
	done := make(chan res, 1)
	go func() {
		s, _, err := g.Acquire(ctx, reqFor(me, 10, 15*time.Second))
		done <- res{s, err}
	}()
	time.Sleep(1500 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("admitted while x is cordoned: %v", r.err)
	default:
	}
	x.Spec.Unschedulable = false
	if _, err := c.CoreV1().Nodes().Update(ctx, x, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.s.Halt()
	case <-time.After(5 * time.Second):
		t.Fatal("x uncordoned: not admitted within 5 s")
	}
}

// A node beyond the full queue was told to wait (status, GnshSlotWaiting)
// but never wrote (a.wrote stays false): when its join is then refused
// with a 403 (gnsh's RoleBinding removed meanwhile), the gate counts as
// unavailable, and the optional gate lets the shutdown go on without a
// slot, as a node never told to wait would. A recorded waiter in the same
// spot waits it out and is refused at the end of its wait.
func TestForbiddenAfterToldToWaitIsWaitedOut(t *testing.T) {
	me := readyNode("me", "")
	c := fullLease(t, me)
	admin := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second}
	var forbid atomic.Bool
	c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if forbid.Load() {
			return true, nil, apierrors.NewForbidden(leasesGVR.GroupResource(), "reboot-slots", errors.New("RBAC: access denied"))
		}
		return false, nil, nil
	})
	var told atomic.Bool
	done := make(chan error, 1)
	go func() {
		g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second,
			senseFirst: 10 * time.Millisecond, Status: func(string) { told.Store(true) }}
		_, _, err := g.Acquire(context.Background(), reqFor(me, 10, 4*time.Second))
		done <- err
	}()
	time.Sleep(1200 * time.Millisecond)
	if !told.Load() {
		t.Fatal("not told to wait")
	}
	freeFirstPlace(t, admin)
	forbid.Store(true)
	err := <-done
	var ue *UnavailableError
	if errors.As(err, &ue) {
		t.Fatalf("told to wait, then: %v (UnavailableError: the optional gate goes on without a slot)", err)
	}
	t.Logf("%v", err)
}

// The queue-full line names MaxWaiters' reason ("as many as it records")
// whatever made the queue full: a record written by an older gnsh with
// more than MaxWaiters waiters, or the byte bound reached by many holders
// with few waiters. Each says something false to the admin.
func TestQueueFullLineSaysWhichBound(t *testing.T) {
	ns := []NodeState{}
	for i := range 1000 {
		s := node(fleetName(i))
		s.UID, s.Boot = types.UID("uid-"+s.Name), "boot-"+s.Name
		ns = append(ns, s)
	}
	w := world(ns...)
	// An older gnsh's record: 40 waiters behind one holder.
	rec := Record{Version: Schema, Next: 1}
	h := fleetAsk(999).Entry
	h.Phase = Admitted
	rec.Holders = []Entry{h}
	for i := range 40 {
		e := fleetAsk(i).Entry
		e.Ticket, e.Renew = rec.Next, 30
		rec.Waiters = append(rec.Waiters, e)
		rec.Next++
	}
	v := Decide(rec, w, one, still{}, fleetAsk(500))
	if !v.Unrecorded {
		t.Fatal("not unrecorded")
	}
	if s := names(v.Blocks); strings.Contains(s, "40 nodes wait, as many as it records") {
		t.Errorf("older gnsh's record of 40 waiters: %q (it records 32)", s[strings.LastIndex(s, "; the queue")+2:])
	}
	// Many holders (maxUnavailable 900), 3 waiters: the byte bound.
	rec = Record{Version: Schema, Next: 1}
	k := 0
	for ; footprint(rec) < MaxRecordBytes-1024; k++ {
		e := fleetAsk(k).Entry
		e.Phase = Admitted
		rec.Holders = append(rec.Holders, e)
	}
	for i := range 3 {
		e := fleetAsk(k + i).Entry
		e.Ticket, e.Renew = rec.Next, 30
		rec.Waiters = append(rec.Waiters, e)
		rec.Next++
	}
	v = Decide(rec, w, Limits{Max: k}, still{}, fleetAsk(k+10))
	if !v.Unrecorded {
		t.Fatalf("not unrecorded: %s", names(v.Blocks))
	}
	if s := names(v.Blocks); strings.Contains(s, "3 nodes wait, as many as it records") {
		t.Errorf("byte bound with %d holders: %q (the byte bound, not the count, is why)", k, s[strings.LastIndex(s, "; the queue")+2:])
	}
}
