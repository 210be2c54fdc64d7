package drainer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/slots"
)

// slotRecord reads the slots record from the fake cluster.
func slotRecord(t *testing.T, f *fakeNode) slots.Record {
	t.Helper()
	l, err := f.CoordinationV1().Leases("gnsh").Get(context.Background(), "reboot-slots", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return slots.Record{}
	}
	if err != nil {
		t.Fatal(err)
	}
	rec, err := slots.Decode(l)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// otherHolder makes node2, holding the only slot.
func otherHolder(t *testing.T, f *fakeNode) {
	t.Helper()
	ctx := context.Background()
	n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2", UID: "uid-2"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if _, err := f.CoreV1().Nodes().Create(ctx, n2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	slots.Record{Version: slots.Schema, Next: 1, Holders: []slots.Entry{{Node: "node2", UID: "uid-2", Boot: "b2", Phase: slots.Draining,
		Action: "reboot", Who: "bob@pts/1", Renew: 10}}}.Encode(l)
	if _, err := f.CoordinationV1().Leases("gnsh").Create(ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The slot is taken before the cordon, kept (shutting-down) after a
// hand-off, and freed when the hand-off is refused.
func TestSlotTakenKeptAndFreed(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	p, err := d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	rec := slotRecord(t, f)
	if h, ok := rec.Holder("node1"); !ok || h.Boot != "boot-1" || h.Who != "alice on pts/3" || h.Action != "reboot" {
		t.Fatalf("record %+v", rec)
	}
	// The Lease was written before the Node's cordon.
	var order []string
	for _, a := range f.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "leases" || a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			order = append(order, a.GetResource().Resource)
		}
	}
	if len(order) < 2 || order[0] != "leases" {
		t.Fatalf("writes %v", order)
	}
	p.Finish(context.Background(), nil)
	if h, ok := slotRecord(t, f).Holder("node1"); !ok || h.Phase != slots.ShuttingDown {
		t.Fatalf("after the hand-off: %+v", slotRecord(t, f))
	}

	f = newFakeNode(false, nil, "web-1")
	d = newDrainer(t, f, "")
	p, err = d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	p.Finish(context.Background(), errors.New("logind said no"))
	if rec := slotRecord(t, f); len(rec.Holders) != 0 {
		t.Fatalf("after a refused hand-off: %+v", rec)
	}
	if got := strings.Join(f.reasons(), " "); !strings.HasSuffix(got, "GnshSlotReleased") {
		t.Fatalf("events %q", got)
	}
}

// With the only slot held by another node, the reboot waits slots.wait,
// then is refused naming the holder and the ways round, nothing cordoned,
// its place in the queue withdrawn.
func TestNoSlotRefuses(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d := newDrainer(t, f, "slots:\n  wait: 2s\n")
	p, err := d.prepare(t, reboot())
	var ref *Refusal
	if !errors.As(err, &ref) || p != nil {
		t.Fatalf("%v %v", p, err)
	}
	for _, want := range []string{"no reboot slot within 2s: cluster limit 1: node2 (holds a slot: draining; reboot by bob@pts/1, asked at",
		"gnsh slots release --node NODE", "--no-drain or -f"} {
		if !strings.Contains(ref.Msg, want) {
			t.Errorf("refusal %q lacks %q", ref.Msg, want)
		}
	}
	if !strings.Contains(d.stderr.String(), "waiting for a reboot slot (place 1 in the queue of gnsh/reboot-slots)") {
		t.Errorf("stderr %q", d.stderr)
	}
	if f.node(t).Spec.Unschedulable {
		t.Error("cordoned")
	}
	if rec := slotRecord(t, f); len(rec.Waiters) != 0 || len(rec.Holders) != 1 {
		t.Errorf("record %+v", rec)
	}
	// The refusal is an Event too (issue 21): Events outlive the command.
	if got := strings.Join(f.reasons(), " "); got != "GnshSlotWaiting GnshShutdownRefused" {
		t.Errorf("events %q", got)
	}
}

func forbidLeases(f *fakeNode, user string) {
	f.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "reboot-slots",
			errors.New(`User "`+user+`" cannot get resource "leases"`))
	})
}

// A gate that cannot be used: optional goes on (a warning, or for the
// kubelet's own credentials one plain line naming the fix: it used to be a
// debug line, silent by default), required refuses.
func TestGateUnavailable(t *testing.T) {
	for _, c := range []struct {
		config, user string
		refused      bool
		warning      string
	}{
		{"", "system:node:node1", false, "gnsh: reboot slots not checked: the kubelet's credentials may not use the gate (Node authorizer); " +
			"it needs gnsh's own identity (gnsh's rbac.yaml applied and its ServiceAccount's kubeconfig in /etc/gnsh/kubeconfig, " +
			"which the Ansible role does when given an admin kubeconfig, gnsh_kubectl_kubeconfig; 'gnsh doctor' says how on this node); " +
			"going on without a slot (slots.gate: optional)\n"},
		{"", "someone", false, "gnsh: warning: reboot slots not checked: these credentials may not use the Lease gnsh/reboot-slots"},
		{"slots:\n  gate: required\n", "system:node:node1", true, ""},
		{"slots:\n  gate: off\n", "someone", false, ""},
	} {
		f := newFakeNode(false, nil, "web-1")
		forbidLeases(f, c.user)
		d := newDrainer(t, f, c.config)
		p, err := d.prepare(t, reboot())
		if c.refused {
			var ref *Refusal
			if !errors.As(err, &ref) || !strings.Contains(ref.Msg, "reboot refused (slots.gate: required in ") || f.node(t).Spec.Unschedulable {
				t.Errorf("%q %s: %v", c.config, c.user, err)
			}
			continue
		}
		if err != nil || p == nil {
			t.Errorf("%q %s: %v", c.config, c.user, err)
			continue
		}
		p.Finish(context.Background(), nil)
		got := d.stderr.String()
		if c.warning != "" && !strings.Contains(got, c.warning) || c.warning == "" && strings.Contains(got, "slot") {
			t.Errorf("%q %s: stderr %q", c.config, c.user, got)
		}
		if c.user == "system:node:node1" && (strings.Contains(got, "warning") || strings.Count(got, "slot") != strings.Count(c.warning, "slot")) {
			t.Errorf("the kubelet's credentials: not one plain line: %q", got)
		}
	}
}

// The kubelet's line is said once the run goes on (it holds the drain
// lock): a run refused for the lock says only why.
func TestKubeletGateLineOnlyWhenGoingOn(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	forbidLeases(f, "system:node:node1")
	d := newDrainer(t, f, "")
	other := newDrainer(t, f, "")
	other.LockDir = d.LockDir
	l, err := other.lock("reboot", "node1", true, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	refusal(t, d.handOff(t, reboot(), nil), "another gnsh is draining this node")
	if strings.Contains(d.stderr.String(), "slot") {
		t.Errorf("stderr %q", d.stderr)
	}
}

// SIGINT while waiting withdraws the place and refuses as interrupted.
func TestSlotWaitInterrupted(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d := newDrainer(t, f, "slots:\n  wait: 1m\n")
	var once sync.Once
	f.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		// Its waiter entry is being written: SIGINT a moment later.
		once.Do(func() { time.AfterFunc(100*time.Millisecond, func() { d.Signal.Deliver(syscall.SIGINT) }) })
		return false, nil, nil
	})
	_, err := d.prepare(t, reboot())
	var intr *Interrupted
	if !errors.As(err, &intr) {
		t.Fatalf("%v", err)
	}
	if rec := slotRecord(t, f); len(rec.Waiters) != 0 {
		t.Errorf("place not withdrawn: %+v", rec)
	}
}

// shutdown -r +1 drains at once and keeps its slot for the schedule;
// shutdown -c frees it with the cordon.
func TestCancelFreesTheSlot(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	req := scheduledReboot(time.Minute)
	if err := d.handOff(t, req, nil); err != nil {
		t.Fatal(err)
	}
	if h, ok := slotRecord(t, f).Holder("node1"); !ok || h.Phase != slots.ShuttingDown {
		t.Fatalf("scheduled: %+v", slotRecord(t, f))
	}
	if err := d.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	if rec := slotRecord(t, f); len(rec.Holders) != 0 {
		t.Fatalf("after shutdown -c: %+v", rec)
	}
	if !strings.Contains(d.stderr.String(), "the reboot slot of node1 in gnsh/reboot-slots is freed") {
		t.Fatalf("stderr %q", d.stderr)
	}
}

// A second run that finds the node's slot already held (shutdown -r +1
// kept it) and then does not shut down leaves that slot to its taker; and
// shutdown -c does not free the slot of a drain still running.
func TestSlotHeldBeforeIsNotFreed(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	req := scheduledReboot(time.Minute)
	if err := d.handOff(t, req, nil); err != nil {
		t.Fatal(err)
	}
	p, err := d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	p.Finish(context.Background(), errors.New("logind said no"))
	if _, ok := slotRecord(t, f).Holder("node1"); !ok {
		t.Fatalf("the schedule's slot was freed by a later reboot that did not happen: %+v", slotRecord(t, f))
	}

	// A wrapper draining (it holds the drain lock) while shutdown -c runs.
	l, err := d.AcquireLock("reboot", "node1", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := slotRecord(t, f).Holder("node1"); !ok {
		t.Fatalf("shutdown -c freed the slot under a running drain")
	}
	l.Release()
	if err := d.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := slotRecord(t, f).Holder("node1"); ok {
		t.Fatalf("shutdown -c with no drain running left the slot")
	}
}

// The node agent's drain ahead of a schedule takes a slot (the entry names
// the schedule's time) and keeps it, shutting-down, for that schedule;
// with the only slot held by another node it waits within its budget,
// then returns a SlotRefusal with nothing cordoned and its place
// withdrawn. Its drain for a shutdown under way takes none.
func TestAgentDrainAheadTakesASlot(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	d.Agent = true
	at := time.Now().Add(30 * time.Minute).Truncate(time.Microsecond)
	if _, err := d.DrainForSchedule(context.Background(), "reboot", at, 20*time.Second); err != nil {
		t.Fatalf("DrainForSchedule: %v\n%s", err, d.stderr)
	}
	h, ok := slotRecord(t, f).Holder("node1")
	if !ok || h.Phase != slots.ShuttingDown || h.When == nil || !h.When.Equal(at) || h.Boot != "boot-1" {
		t.Fatalf("holder %+v %v", h, ok)
	}

	f = newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d = newDrainer(t, f, "")
	d.Agent = true
	start := time.Now()
	_, err := d.DrainForSchedule(context.Background(), "reboot", at, 3*time.Second)
	var sr *SlotRefusal
	if !errors.As(err, &sr) || sr.Required || !IsSlotRefusal(err) || !strings.Contains(err.Error(), "no reboot slot within 2s: cluster limit 1: node2") {
		t.Fatalf("%v\n%s", err, d.stderr)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("waited %s, past its budget", el)
	}
	if f.node(t).Spec.Unschedulable {
		t.Error("cordoned")
	}
	// Its place is kept (slots.queue is not never): the node agent
	// queues the reboot it defers, and asks on in that place.
	if rec := slotRecord(t, f); len(rec.Waiters) != 1 || rec.Waiters[0].Node != "node1" || len(rec.Holders) != 1 {
		t.Errorf("record %+v", rec)
	}

	// A slow API server: the budget ends before the wait for a slot does;
	// a refusal still (the schedule is cancelled), not a failed drain.
	f.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		time.Sleep(700 * time.Millisecond)
		return false, nil, nil
	})
	_, err = d.DrainForSchedule(context.Background(), "reboot", at, 2*time.Second)
	if !IsSlotRefusal(err) {
		t.Fatalf("slow API server: %v\n%s", err, d.stderr)
	}
	f.ReactionChain = f.ReactionChain[1:]

	// A shutdown under way (systemctl reboot): no slot asked (nothing
	// waited for, nothing refused), drained; its node is written in as
	// out, over the limit (issue 20, hole 7: TestAgentBypassRecordedBeforeCordon).
	if _, err := d.DrainForShutdown(context.Background(), "reboot", 10*time.Second); err != nil {
		t.Fatalf("DrainForShutdown: %v\n%s", err, d.stderr)
	}
	if rec := slotRecord(t, f); len(rec.Holders) != 2 || len(rec.Waiters) != 1 || !rec.Holders[1].Bypass {
		t.Errorf("the guard's drain asked for a slot: %+v", rec)
	}

	// slots.queue: never: nothing is deferred, its place is withdrawn.
	f = newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d = newDrainer(t, f, "slots: {queue: never}\n")
	d.Agent = true
	if _, err := d.DrainForSchedule(context.Background(), "reboot", at, 3*time.Second); !IsSlotRefusal(err) {
		t.Fatalf("%v\n%s", err, d.stderr)
	}
	if rec := slotRecord(t, f); len(rec.Waiters) != 0 {
		t.Errorf("queue: never, yet its place was kept: %+v", rec)
	}
}

// With slots.gate: required, a gate the agent cannot use refuses its
// drain ahead of a schedule; optional goes on without a slot.
func TestAgentDrainAheadGateUnavailable(t *testing.T) {
	at := time.Now().Add(30 * time.Minute).Truncate(time.Microsecond)
	for _, required := range []bool{false, true} {
		f := newFakeNode(false, nil, "web-1")
		forbidLeases(f, "someone")
		conf := ""
		if required {
			conf = "slots:\n  gate: required\n"
		}
		d := newDrainer(t, f, conf)
		d.Agent = true
		_, err := d.DrainForSchedule(context.Background(), "reboot", at, 10*time.Second)
		var sr *SlotRefusal
		switch {
		case required && (!errors.As(err, &sr) || !sr.Required || f.node(t).Spec.Unschedulable):
			t.Errorf("required: %v", err)
		case !required && (err != nil || !f.node(t).Spec.Unschedulable):
			t.Errorf("optional: %v\n%s", err, d.stderr)
		}
	}
}

// CancelSchedule cancels, even while a wrapper holds the drain lock (it
// may wait for a slot past the schedule's time) or the API server does
// not answer, and posts the Event only when the schedule was cancelled.
func TestCancelSchedule(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	d.Agent = true
	at := time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC)
	calls := 0
	yes := func(context.Context) (bool, error) { calls++; return true, nil }
	no := func(context.Context) (bool, error) { calls++; return false, nil }
	l, err := d.AcquireLock("reboot", "node1", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := d.CancelSchedule(context.Background(), "reboot", at, "no slot", false, no); ok || err != nil || calls != 1 || len(f.reasons()) != 0 {
		t.Fatalf("schedule changed, under a wrapper's lock: %v %v, %d calls, events %v", ok, err, calls, f.reasons())
	}
	l.Release()
	// The API server does not answer: cancelled all the same, at once.
	down := newDrainer(t, f, "")
	down.Connect = func(ctx context.Context) (kubernetes.Interface, string, error) {
		<-ctx.Done()
		return nil, "", ctx.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var when time.Duration
	start := time.Now()
	if ok, err := down.CancelSchedule(ctx, "reboot", at, "no slot", false, func(ctx context.Context) (bool, error) {
		when = time.Since(start)
		return true, ctx.Err()
	}); !ok || err != nil || when > time.Second {
		t.Fatalf("API server down: %v %v, cancelled after %s", ok, err, when)
	}
	if ok, err := d.CancelSchedule(context.Background(), "reboot", at, "no reboot slot within 5m", false, yes); !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
	if got := strings.Join(f.reasons(), " "); got != ReasonScheduleCancelled {
		t.Fatalf("events %q", got)
	}
	var msg string
	for _, a := range f.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
			msg = a.(k8stesting.CreateAction).GetObject().(*corev1.Event).Message
		}
	}
	if msg != "The reboot scheduled for 2026-11-25T02:00:00Z was cancelled by the node agent: no reboot slot within 5m" {
		t.Errorf("event %q", msg)
	}
}

// A schedule that could not be cancelled in time gets a Warning Event.
func TestScheduleUncancelledEvent(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	d.ScheduleUncancelled(context.Background(), "reboot", time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC), "no reboot slot within 5m")
	if got := strings.Join(f.reasons(), " "); got != ReasonScheduleUncancelled {
		t.Fatalf("events %q", got)
	}
}

// SlotForSchedule (the follower's last word on a schedule its drain could
// not serve in time) asks once, without waiting: a free slot is taken and
// kept for the schedule, none is a SlotRefusal, nothing is cordoned.
func TestSlotForSchedule(t *testing.T) {
	at := time.Now().Add(3 * time.Second).Truncate(time.Microsecond)
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	d.Agent = true
	if err := d.SlotForSchedule(context.Background(), "reboot", at); err != nil {
		t.Fatalf("%v\n%s", err, d.stderr)
	}
	if h, ok := slotRecord(t, f).Holder("node1"); !ok || h.When == nil || !h.When.Equal(at) || h.Phase != slots.ShuttingDown {
		t.Fatalf("holder %+v", slotRecord(t, f))
	}

	f = newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d = newDrainer(t, f, "")
	d.Agent = true
	start := time.Now()
	err := d.SlotForSchedule(context.Background(), "reboot", at)
	if !IsSlotRefusal(err) || time.Since(start) > 2*time.Second {
		t.Fatalf("%v after %s\n%s", err, time.Since(start), d.stderr)
	}
	if rec := slotRecord(t, f); len(rec.Waiters) != 1 || f.node(t).Spec.Unschedulable {
		t.Errorf("record %+v (its place kept for the deferral), cordoned %v", rec, f.node(t).Spec.Unschedulable)
	}
}

// With slots.gate: required, a failure before the gate (the API server
// unreachable, the Node read failing) refuses the reboot in one line: it
// cannot take a slot. (It used to go on without a drain and without a
// slot.) Optional goes on, -f too; the agent's drain ahead of a schedule
// gets a SlotRefusal.
func TestRequiredGateRefusesWhenTheAPIServerFails(t *testing.T) {
	const required = "slots:\n  gate: required\n"
	unreachable := func(d testDrainer) {
		d.Connect = func(context.Context) (kubernetes.Interface, string, error) {
			return nil, "", &drain.UnreachableError{Err: syscall.ECONNREFUSED}
		}
	}
	d := newDrainer(t, nil, required)
	unreachable(d)
	err := d.handOff(t, reboot(), nil)
	refusal(t, err, "gnsh: cannot take a reboot slot: API server unreachable", "reboot refused (slots.gate: required in ",
		"go without the gate (and without a drain) with --no-drain or -f")
	if msg := err.Error(); strings.Count(msg, "\n") != 0 {
		t.Errorf("not one line: %q", msg)
	}

	f := newFakeNode(false, nil, "web-1")
	f.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd has no leader")
	})
	d = newDrainer(t, f, required)
	refusal(t, d.handOff(t, reboot(), nil), "gnsh: cannot take a reboot slot: the API server is failing (503 Service Unavailable: etcd has no leader)")

	for _, c := range []struct {
		name, config string
		req          *legacy.Request
	}{
		{"optional", "", reboot()},
		{"-f", required, &legacy.Request{Command: "reboot", Action: legacy.Reboot, Force: 1}},
	} {
		d := newDrainer(t, nil, c.config)
		unreachable(d)
		if err := d.handOff(t, c.req, nil); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}

	d = newDrainer(t, nil, required)
	unreachable(d)
	d.Agent = true
	_, err = d.DrainForSchedule(context.Background(), "reboot", time.Now().Add(time.Hour), 10*time.Second)
	var sr *SlotRefusal
	if !errors.As(err, &sr) || !sr.Required {
		t.Errorf("the agent's drain ahead: %v", err)
	}
	// The guard's drain for a shutdown under way is not gated.
	if _, err := d.DrainForShutdown(context.Background(), "reboot", 10*time.Second); IsSlotRefusal(err) {
		t.Errorf("the guard's drain: %v", err)
	}
}

// A slot records whether the node was cordoned by a cordon that stays
// after the boot: then its agent frees the slot once the node is back and
// Ready, cordoned or not. gnsh's cordon for a shutdown is lifted after the
// boot; an admin's and a gnsh drain's stay.
func TestCordonStays(t *testing.T) {
	cordoned := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}
	for _, c := range []struct {
		n    *corev1.Node
		o    *drain.Ownership
		want bool
	}{
		{&corev1.Node{}, nil, false},
		{cordoned, nil, true},                                   // an admin's
		{cordoned, &drain.Ownership{Action: "drain"}, true},     // gnsh drain's
		{cordoned, &drain.Ownership{Action: "reboot"}, false},   // gnsh's for a shutdown (a schedule's)
		{cordoned, &drain.Ownership{Action: "poweroff"}, false}, // the same
	} {
		if got := cordonStays(c.n, c.o); got != c.want {
			t.Errorf("cordoned %v, %+v: %v, want %v", c.n.Spec.Unschedulable, c.o, got, c.want)
		}
	}
}
