package drainer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/slots"
)

// freeOthers frees every slot but node1's, as the holders' agents would.
func freeOthers(t *testing.T, f *fakeNode) {
	t.Helper()
	changeRecord(t, f, func(rec *slots.Record) {
		keep := rec.Holders[:0]
		for _, h := range rec.Holders {
			if h.Node == "node1" {
				keep = append(keep, h)
			}
		}
		rec.Holders = keep
	})
}

// changeRecord rewrites the slots record in the fake cluster.
func changeRecord(t *testing.T, f *fakeNode, change func(*slots.Record)) {
	t.Helper()
	ctx := context.Background()
	l, err := f.CoordinationV1().Leases("gnsh").Get(ctx, "reboot-slots", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := slots.Decode(l)
	if err != nil {
		t.Fatal(err)
	}
	change(&rec)
	rec.Encode(l)
	if _, err := f.CoordinationV1().Leases("gnsh").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// numberLeases gives the Lease numbered resourceVersions, as an API server
// does (the fake's are empty): a gate that read the Lease after a conflict
// tells the watch's newer version from it by them.
func numberLeases(f *fakeNode) {
	var rv atomic.Int64
	rv.Store(100)
	f.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var o runtime.Object
		switch a := a.(type) {
		case k8stesting.CreateAction:
			o = a.GetObject()
		case k8stesting.UpdateAction:
			o = a.GetObject()
		}
		if l, ok := o.(*coordinationv1.Lease); ok {
			l.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		}
		return false, nil, nil
	})
}

// waitFor waits until out says want (at most 20 s).
func waitFor(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), want); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never said %q:\n%s", want, out)
		}
	}
}

// A wrapper waiting for a reboot slot holds no drain lock: meanwhile the
// node agent's drain ahead of a schedule waits for its own slot (and gets
// a SlotRefusal, which cancels the schedule), and its shutdown guard
// cordons and drains for a shutdown under way. (The wrapper took the lock
// before its wait: the agent found it held, its drain ahead retried until
// the schedule was too near, and the guard could not cordon.) Once its
// slot comes, the wrapper reads the Node again under the lock: it sees
// gnsh's cordon of the guard, says so, and leaves it.
func TestWaitingWrapperHoldsNoLock(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	numberLeases(f)
	otherHolder(t, f)
	d := newDrainer(t, f, "slots:\n  wait: 1m\n")
	out := &syncBuffer{}
	d.Stderr = out
	type prepared struct {
		p   handoff.Prepared
		err error
	}
	wrapper := make(chan prepared, 1)
	go func() { p, err := d.Prepare(context.Background(), reboot()); wrapper <- prepared{p, err} }()
	waitFor(t, out, "waiting for a reboot slot")

	a := agentDrainer(t, f, d)
	_, err := a.DrainForSchedule(context.Background(), "reboot", time.Now().Add(30*time.Minute), 3*time.Second)
	if !IsSlotRefusal(err) {
		t.Fatalf("the agent's drain ahead of a schedule: %v (IsSlotRefusal=%v)\n%s", err, IsSlotRefusal(err), a.stderr)
	}
	if f.node(t).Spec.Unschedulable {
		t.Fatal("cordoned without a slot")
	}
	sd, err := a.DrainForShutdown(context.Background(), "reboot", 10*time.Second)
	if err != nil || !sd.Cordoned() || !f.node(t).Spec.Unschedulable || f.Evicted("web-1") != 1 {
		t.Fatalf("the guard's drain: %v, cordoned %v, web-1 evicted %d\n%s", err, sd.Cordoned(), f.Evicted("web-1"), a.stderr)
	}

	freeOthers(t, f) // node2 is back: the slot is free
	var w prepared
	select {
	case w = <-wrapper:
	case <-time.After(20 * time.Second):
		t.Fatalf("the wrapper did not go on once the slot was free:\n%s", out)
	}
	if w.err != nil || w.p == nil {
		t.Fatalf("wrapper: %v\n%s", w.err, out)
	}
	if !strings.Contains(out.String(), "node1 was already cordoned by gnsh (reboot requested by root at ") {
		t.Errorf("the wrapper did not read the Node again under the lock:\n%s", out)
	}
	w.p.Finish(context.Background(), errors.New("logind said no"))
	if !f.node(t).Spec.Unschedulable {
		t.Error("a refused hand-off lifted the guard's cordon")
	}
}

// A run that took its slot and then cannot get the drain lock (another
// wrapper drains) is refused, and leaves the slot held: the other gnsh may
// rely on it (the node agent frees it once nothing does).
func TestSlotLeftWhenTheLockIsHeld(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "debug: true\n")
	other := newDrainer(t, f, "")
	other.LockDir = d.LockDir
	l, err := other.lock("reboot", "node1", true, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	refusal(t, d.handOff(t, reboot(), nil), "another gnsh is draining this node (pid ")
	if _, ok := slotRecord(t, f).Holder("node1"); !ok {
		t.Fatalf("slot not taken before the lock, or freed: %+v", slotRecord(t, f))
	}
	if !strings.Contains(d.stderr.String(), "gnsh: debug: the reboot slot of node1 is left held, no longer renewed") {
		t.Errorf("stderr %q", d.stderr)
	}
	if f.node(t).Spec.Unschedulable {
		t.Error("cordoned")
	}
}

// A run that shares the node's slot (the node held it when it asked) and
// finds it freed once it has the lock (its taker freed it while this run
// waited for the node agent) asks for one again.
func TestSharedSlotFreedMeanwhile(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	if err := d.handOff(t, scheduledReboot(time.Minute), nil); err != nil { // node1 holds a slot for it
		t.Fatal(err)
	}
	before, _ := slotRecord(t, f).Holder("node1")
	out := &syncBuffer{}
	d.Stderr = out
	a := agentDrainer(t, f, d)
	l, err := a.AcquireLock("uncordon after boot", "node1", time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.handOff(t, reboot(), nil) }()
	waitFor(t, out, "waiting for the node agent")
	changeRecord(t, f, func(rec *slots.Record) { rec.Holders = nil }) // freed by its taker
	l.Release()
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "the reboot slot of node1 in gnsh/reboot-slots was freed meanwhile by the gnsh that took it; asking for one again") {
		t.Errorf("stderr:\n%s", out)
	}
	if h, ok := slotRecord(t, f).Holder("node1"); !ok || h.Ticket == before.Ticket || h.Phase != slots.ShuttingDown {
		t.Errorf("no slot of its own: %+v (before %+v)", h, before)
	}
}

// A slot of its own freed by someone else (gnsh slots release, a node that
// found it stale) while the run waited for the drain lock: it does not
// cordon on it, it asks again.
func TestOwnSlotFreedBeforeTheCordon(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	out := &syncBuffer{}
	d.Stderr = out
	a := agentDrainer(t, f, d)
	l, err := a.AcquireLock("uncordon after boot", "node1", time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.handOff(t, reboot(), nil) }()
	waitFor(t, out, "waiting for the node agent")
	before, ok := slotRecord(t, f).Holder("node1")
	if !ok {
		t.Fatalf("no slot taken before the lock: %+v", slotRecord(t, f))
	}
	changeRecord(t, f, func(rec *slots.Record) { rec.Holders = nil }) // gnsh slots release
	l.Release()
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "was freed by someone else before the cordon") {
		t.Errorf("stderr:\n%s", out)
	}
	if h, ok := slotRecord(t, f).Holder("node1"); !ok || h.Ticket == before.Ticket || h.Phase != slots.ShuttingDown {
		t.Errorf("no new slot: %+v (before %+v)", h, before)
	}
}

// The node agent's drain ahead of a schedule that waits for its reboot
// slot holds no drain lock either: the shutdown guard's drain for a
// shutdown under way cordons and drains meanwhile, without preempting it.
// (Preempt stays for a drain ahead that drains: that one holds the lock.)
func TestGuardDrainsWhileTheDrainAheadWaits(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	numberLeases(f)
	otherHolder(t, f)
	d := newDrainer(t, f, "")
	d.Agent = true
	ahead := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := d.DrainForSchedule(ctx, "reboot", time.Now().Add(time.Hour), 30*time.Second)
		ahead <- err
	}()
	for deadline := time.Now().Add(20 * time.Second); len(slotRecord(t, f).Waiters) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the drain ahead does not wait:\n%s", d.stderr)
		}
	}
	g := agentDrainer(t, f, d)
	sd, err := g.DrainForShutdown(context.Background(), "reboot", 10*time.Second)
	if err != nil || !sd.Cordoned() || f.Evicted("web-1") != 1 {
		t.Fatalf("the guard's drain: %v, cordoned %v, evicted %d\n%s", err, sd.Cordoned(), f.Evicted("web-1"), g.stderr)
	}
	cancel()
	select {
	case <-ahead:
	case <-time.After(20 * time.Second):
		t.Fatal("the drain ahead did not end with its context")
	}
	if rec := slotRecord(t, f); len(rec.Waiters) != 0 {
		t.Errorf("its place was not withdrawn: %+v", rec)
	}
}
