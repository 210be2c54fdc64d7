package slots

// The gate against lost answers, admissions seen by others, unreadable
// records and the requests a waiting node makes (first found by a review,
// each failing on the code before its fix).

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var leasesGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// casLeases makes the fake clientset behave as an API server for Leases:
// numeric resourceVersions and the update precondition (409).
func casLeases(c *fake.Clientset) { casLeasesLosing(c, func(string) bool { return false }) }

// casLeasesLosing: as casLeases; a write that lose(verb) picks lands, and
// its answer is lost (a timeout).
func casLeasesLosing(c *fake.Clientset, lose func(verb string) bool) {
	var mu sync.Mutex
	rv := 100
	c.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		rv++
		l.ResourceVersion = strconv.Itoa(rv)
		if err := c.Tracker().Create(leasesGVR, l, l.Namespace); err != nil {
			return true, nil, err
		}
		if lose("create") {
			return true, nil, apierrors.NewServerTimeout(leasesGVR.GroupResource(), "create", 1)
		}
		return true, l, nil
	})
	c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		cur, err := c.Tracker().Get(leasesGVR, l.Namespace, l.Name)
		if err != nil {
			return true, nil, err
		}
		if cur.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
			return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), l.Name, errors.New("the object has been modified"))
		}
		rv++
		l.ResourceVersion = strconv.Itoa(rv)
		if err := c.Tracker().Update(leasesGVR, l, l.Namespace); err != nil {
			return true, nil, err
		}
		if lose("update") {
			return true, nil, apierrors.NewTimeoutError("request timed out", 1)
		}
		return true, l, nil
	})
}

func readyNode(name, uid string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("u-" + uidOr(uid, name))},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "b-" + name},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func uidOr(u, n string) string {
	if u != "" {
		return u
	}
	return n
}

func reqFor(n *corev1.Node, renew int64, wait time.Duration) Request {
	return Request{Ask: Ask{Entry: Entry{Node: n.Name, UID: n.UID, Boot: n.Status.NodeInfo.BootID, Action: "reboot", Who: "root", Renew: renew}},
		Self: StateOf(n), Wait: wait}
}

// A waiter admitted just before its first renewal as a waiter was due
// (Beat 0, the same node, boot and ticket): a node waiting behind it,
// which has seen that entry silent for 3 holder periods, must not free
// the slot it just took, nor take it. Renew 1 s (a holder is stale after
// 3 s; waiters renew every 3 s), admitted at 2.9 and 3.05 s.
func TestAdmittedWaiterIsNotReclaimed(t *testing.T) {
	for _, at := range []time.Duration{2900 * time.Millisecond, 3050 * time.Millisecond} {
		t.Run(at.String(), func(t *testing.T) { reclaimsJustAdmitted(t, at) })
	}
}

func reclaimsJustAdmitted(t *testing.T, at time.Duration) {
	nh, nw, nx := readyNode("h", ""), readyNode("w", ""), readyNode("x", "")
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh", ResourceVersion: "1"}}
	rw := reqFor(nw, 1, time.Minute)
	rec := Record{Version: Schema, Next: 2,
		Holders: []Entry{{Node: "h", UID: nh.UID, Boot: "b-h", Ticket: 0, Phase: Draining, Renew: 1}},
		Waiters: []Entry{{Node: "w", UID: nw.UID, Boot: "b-w", Ticket: 1, Action: "reboot", Who: "root", Renew: 3}}}
	rec.Encode(l)
	c := fake.NewClientset(nh, nw, nx, l)
	casLeases(c)
	var reclaimed atomic.Value
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1, Settle: time.Second},
		Renew: time.Second, APITimeout: time.Second,
		Event: func(_ context.Context, node, typ, reason, msg string) {
			if reason == ReasonReclaimed {
				reclaimed.Store(msg)
			}
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// h renews its slot every 0.5 s until 2.9 s, then frees it (drain refused).
	hEntry := rec.Holders[0]
	go func() {
		for i := 0; i < 5; i++ {
			time.Sleep(500 * time.Millisecond)
			_, _, _, _ = g.changeHolder(ctx, hEntry, func(e *Entry) bool { e.Beat++; return true })
		}
	}()
	type res struct {
		s   *Slot
		err error
	}
	xDone := make(chan res, 1)
	go func() {
		s, _, err := g.Acquire(ctx, reqFor(nx, 1, 10*time.Second))
		xDone <- res{s, err}
	}()
	time.Sleep(at)
	// w's gate: h's slot freed and w admitted in one decision, as Decide makes it.
	var wEntry Entry
	_, err := g.Update(ctx, func(r *Record) bool {
		r.Holders = without(r.Holders, "h")
		v := Decide(*r, World{Nodes: map[string]NodeState{"h": StateOf(nh), "w": StateOf(nw), "x": StateOf(nx)}}, g.Limits, still{}, rw.Ask)
		if !v.Admitted {
			t.Errorf("w not admitted: %+v", v.Blocks)
		}
		wEntry = v.Self
		*r = v.Record
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	admittedAt := time.Now()
	t.Logf("w admitted: %+v", wEntry)
	// w cordons its node 20 ms after its admission (its GnshSlotTaken Event, then the cordon).
	go func() {
		time.Sleep(20 * time.Millisecond)
		n := nw.DeepCopy()
		n.Spec.Unschedulable = true
		_, _ = c.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	}()
	// w's own Slot would renew 1 s later; x decides every second or on a change.
	var xr res
	select {
	case xr = <-xDone:
	case <-time.After(1 * time.Second):
		cur, _, _ := g.Read(context.Background())
		t.Logf("x still waiting 1 s after w's admission; holders now %v; event: %v", cur.Holders, reclaimed.Load())
		if _, ok := cur.Holder("w"); !ok {
			t.Errorf("w's slot, taken 1 s ago by a live process, was freed")
		}
		cancel()
		return
	}
	cur, _, _ := g.Read(context.Background())
	t.Logf("x returned after %s: err=%v; holders now %v; event: %v", time.Since(admittedAt).Round(time.Millisecond), xr.err, cur.Holders, reclaimed.Load())
	if xr.err == nil && xr.s != nil {
		_, wStill := cur.Holder("w")
		t.Errorf("x admitted %s after w took the only slot; w's entry still there: %v",
			time.Since(admittedAt).Round(time.Millisecond), wStill)
		xr.s.Halt()
	}
}

// The answer to a waiter's first write is lost (a timeout; the write
// landed): its entry is still renewed, and a SIGINT withdraws it.
func TestLostAnswerToWaiterEntry(t *testing.T) {
	g, c, r := gateRig(t)
	var first atomic.Bool
	casLeasesLosing(c, func(string) bool { return first.CompareAndSwap(false, true) })
	g.Renew = 100 * time.Millisecond // waiters renew every 300 ms
	r.Wait = 10 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, _, err := g.Acquire(ctx, r); done <- err }()
	time.Sleep(3 * time.Second) // 10 waiter periods
	rec, _, _ := g.Read(context.Background())
	wt, ok := rec.Waiter("node1")
	t.Logf("after 3 s (waiter period 300 ms): waiter entry %v beat %d", ok, wt.Beat)
	if !ok || wt.Beat == 0 {
		t.Errorf("the waiter never renewed its entry (Beat 0 after 10 periods)")
	}
	cancel() // SIGINT
	t.Logf("Acquire: %v", <-done)
	rec, _, _ = g.Read(context.Background())
	if _, ok := rec.Waiter("node1"); ok {
		t.Errorf("SIGINT did not withdraw the waiter entry: %+v", rec.Waiters)
	}
}

// The answer to the admission write is lost: the retry finds its own
// holder entry (its Run) and holds it as its own, not as a slot held
// before it asked (Slot.Before, which the drainer never frees).
func TestLostAnswerToAdmission(t *testing.T) {
	ready := corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "u1"}, Status: ready}
	c := fake.NewClientset(n1)
	var first atomic.Bool
	casLeasesLosing(c, func(string) bool { return first.CompareAndSwap(false, true) })
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1, Settle: time.Second},
		Renew: 10 * time.Second, APITimeout: time.Second}
	r := Request{Ask: Ask{Entry: Entry{Node: "node1", UID: "u1", Boot: "b1", Renew: 10}}, Self: StateOf(n1), Wait: 5 * time.Second}
	s, v, err := g.Acquire(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Halt()
	t.Logf("Already=%v Before=%v", v.Already, s.Before)
	if s.Before {
		t.Errorf("the slot this very call took is reported as held before it asked")
	}
}

// Both contenders real: w's first write (its waiter entry) lands but its
// answer is lost; h frees its slot 5 s later; w is admitted and cordons
// 20 ms later; x, which has watched w's entry for more than 3 holder
// periods, must not free w's slot and take it.
func TestLostAnswerThenAdmittedIsNotReclaimed(t *testing.T) {
	nh, nw, nx := readyNode("h", ""), readyNode("w", ""), readyNode("x", "")
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh", ResourceVersion: "1"}}
	rec := Record{Version: Schema, Next: 1,
		Holders: []Entry{{Node: "h", UID: nh.UID, Boot: "b-h", Ticket: 0, Phase: Draining, Renew: 1}}}
	rec.Encode(l)
	c := fake.NewClientset(nh, nw, nx, l)
	var lost atomic.Int32
	casLeasesLosing(c, func(verb string) bool { return verb == "update" && lost.Add(1) == 1 }) // w's first write
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1, Settle: time.Second},
		Renew: time.Second, APITimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hEntry := rec.Holders[0]
	hDone := make(chan struct{})
	go func() { // h renews, then frees its slot at 5 s
		defer close(hDone)
		for i := 0; i < 10; i++ {
			time.Sleep(500 * time.Millisecond)
			_, _, _, _ = g.changeHolder(ctx, hEntry, func(e *Entry) bool { e.Beat++; return true })
		}
		_, _ = g.Free(ctx, hEntry.same)
	}()
	type res struct {
		s   *Slot
		err error
		at  time.Time
	}
	wDone, xDone := make(chan res, 1), make(chan res, 1)
	go func() {
		s, _, err := g.Acquire(ctx, reqFor(nw, 1, 15*time.Second))
		r := res{s, err, time.Now()}
		if err == nil { // w's drain: cordon
			time.Sleep(20 * time.Millisecond)
			n := nw.DeepCopy()
			n.Spec.Unschedulable = true
			_, _ = c.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		}
		wDone <- r
	}()
	time.Sleep(200 * time.Millisecond)
	go func() { s, _, err := g.Acquire(ctx, reqFor(nx, 1, 15*time.Second)); xDone <- res{s, err, time.Now()} }()
	w := <-wDone
	if w.err != nil {
		t.Fatalf("w: %v", w.err)
	}
	t.Logf("w admitted at %s", w.at.Format("15:04:05.000"))
	select {
	case x := <-xDone:
		cur, _, _ := g.Read(context.Background())
		t.Logf("x: err=%v at %s; holders %v", x.err, x.at.Format("15:04:05.000"), cur.Holders)
		if x.err == nil {
			t.Errorf("w and x both admitted with maxUnavailable 1 (x %s after w)", x.at.Sub(w.at).Round(time.Millisecond))
			x.s.Halt()
		}
	case <-time.After(2 * time.Second):
		t.Logf("x still waiting 2 s after w's admission")
	}
	w.s.Halt()
	cancel()
	<-hDone
}

// A record the gate cannot read (malformed, or of a newer schema) is a
// refusal, not "the gate is unavailable" (which the default optional gate
// goes past: every node of the fleet ungated).
func TestUnreadableRecordRefuses(t *testing.T) {
	for _, ann := range []string{`{"version":1,"holders":[{"node":"node2"`, `{"version":2,"next":1,"holders":[{"node":"node2","uid":"u2","boot":"b2","phase":"draining"}]}`} {
		g, c, r := gateRig(t)
		l, _ := c.CoordinationV1().Leases("gnsh").Get(context.Background(), "reboot-slots", metav1.GetOptions{})
		l.Annotations[Annotation] = ann
		_, _ = c.CoordinationV1().Leases("gnsh").Update(context.Background(), l, metav1.UpdateOptions{})
		_, _, err := g.Acquire(context.Background(), r)
		var we *WaitError
		t.Logf("%.40s...: %v", ann, err)
		if !errors.As(err, &we) || !strings.HasPrefix(err.Error(), "no reboot slot: ") {
			t.Errorf("want a refusal, got %v", err)
		}
	}
}

// A worker waiting behind a control-plane holder never lists the etcd
// members: only a control-plane node's decision needs them. It lists once
// the pods of kube-system on its own node (does it host an etcd member?
// its labels may not say so), and no more while it waits.
func TestWorkerDoesNotListKubeSystem(t *testing.T) {
	g, c, r := gateRig(t)
	n2, _ := c.CoreV1().Nodes().Get(context.Background(), "node2", metav1.GetOptions{})
	n2.Labels = map[string]string{ControlPlaneLabel: ""}
	_, _ = c.CoreV1().Nodes().Update(context.Background(), n2, metav1.UpdateOptions{})
	var lists atomic.Int32
	var sel atomic.Value
	c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		sel.Store(a.(k8stesting.ListAction).GetListRestrictions().Labels.String() + "|" + a.(k8stesting.ListAction).GetListRestrictions().Fields.String())
		return false, nil, nil
	})
	r.Wait = 4 * time.Second
	_, _, err := g.Acquire(context.Background(), r)
	if lists.Load() != 1 || sel.Load() != "|spec.nodeName=node1" {
		t.Errorf("worker node1 (not control plane) waited 4 s: %d lists of kube-system pods, the last with selectors %q; %v; want one, of its own node's", lists.Load(), sel.Load(), err)
	}
}

// The node agent renewing a slot for its taker beats well within the 3
// periods after which others may free it.
func TestKeeperCadence(t *testing.T) {
	h := Entry{Node: "node1", UID: "u1", Boot: "b1", Phase: ShuttingDown, Renew: 1}
	g, _ := keeperRig(t, h)
	g.Renew = time.Second
	k := &Keeper{Gate: g, Node: "node1", Boot: "b1",
		State: func(context.Context) (NodeState, []Member, bool, error) { return NodeState{}, nil, false, nil },
		Needed: func(context.Context, Entry, func() error) (bool, string, error) {
			return true, "a shutdown is under way", nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	go func() { _ = k.Run(ctx) }()
	obs := &Tracker{}
	w := world(node("node1", func(n *NodeState) { n.UID, n.Boot = "u1", "b1" }))
	var maxSilent time.Duration
	for ctx.Err() == nil {
		rec := current(t, g)
		obs.Observe(rec, w)
		if hh, ok := rec.Holder("node1"); ok {
			maxSilent = max(maxSilent, obs.Silent(hh))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("max silence seen %s", maxSilent)
	if maxSilent >= 3*g.Renew {
		t.Errorf("silent for %s: others free a slot silent for 3 periods (%s)", maxSilent, 3*g.Renew)
	}
}

// SIGINT (ctx cancelled) while the admitting write is on its
// way: the write lands, the answer is lost to the cancel. Acquire says
// "interrupted" and withdraws its waiter entry; the holder entry it
// wrote goes with it.
func TestInterruptDuringAdmissionWrite(t *testing.T) {
	n1 := readyNode("node1", "")
	c := fake.NewClientset(n1)
	ctx, cancel := context.WithCancel(context.Background())
	casLeasesLosing(c, func(string) bool { return ctx.Err() != nil })
	c.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cancel() // the signal comes while the write is under way
		return false, nil, nil
	})
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1, Settle: time.Second}, Renew: time.Second, APITimeout: time.Second}
	s, _, err := g.Acquire(ctx, reqFor(n1, 1, time.Minute))
	rec := current(t, g)
	t.Logf("Acquire: slot=%v err=%v; holders %+v waiters %+v", s != nil, err, rec.Holders, rec.Waiters)
	if s == nil {
		if _, ok := rec.Holder("node1"); ok {
			t.Errorf("interrupted (nothing taken, says the caller), but node1's holder entry stands, renewed by nobody")
		}
	}
}
