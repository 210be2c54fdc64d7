package drainer

// Review of issue 21 (queued reboots): scratch tests, each asserting what
// should hold; a failure is a finding (see the review report).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"time"

	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/slots"
)

// queuedFor queues an automated reboot on d's node (node2 holding the only
// slot) and returns the request and a node agent's drainer with agentConfig.
func queuedFor(t *testing.T, agentConfig string) (*fakeNode, testDrainer, testDrainer, *QueuedReboot) {
	t.Helper()
	f, d, _ := queueRig(t, "", true, false)
	if _, err := d.prepare(t, reboot()); !errors.As(err, new(*QueuedError)) {
		t.Fatalf("not queued: %v\n%s", err, d.stderr)
	}
	q, err := d.ReadQueued()
	if err != nil || q == nil {
		t.Fatalf("queued: %v %v", q, err)
	}
	ag := newDrainer(t, f, agentConfig)
	ag.Agent, ag.LockDir = true, d.LockDir
	return f, d, ag, q
}

// An admin sets slots.gate: off while a reboot is queued (to get past a
// stuck gate, say). The agent's run is no longer gated: it cordons and
// drains, then queuedOutcome turns "no slot taken" into gateDown, whose
// verdict undoes nothing: the node is left cordoned and drained, and not
// rebooted; the runner does it again every minute until queueFor ends.
func TestReviewQueuedRunGateOffLeavesCordon(t *testing.T) {
	f, _, ag, q := queuedFor(t, "slots: {gate: off}\n")
	p, err := ag.QueuedPreparer(context.Background(), q, 5*time.Second).Prepare(context.Background(), q.Request())
	if p != nil {
		p.Finish(context.Background(), errors.New("test"))
	}
	t.Logf("prepare: %v %v\nagent stderr:\n%s", p, err, ag.stderr)
	if err != nil && f.node(t).Spec.Unschedulable {
		t.Errorf("the queued run was refused (%v) but left node1 cordoned (and drained: pods %v)", err, f.pods(t))
	}
	if err != nil {
		t.Errorf("slots.gate: off while queued: the queued reboot can never be done (refused: %v); it should be handed off as an ungated reboot is, or given up with a line that says so", err)
	}
}

// The slot taken by the agent's queued run cannot be confirmed under the
// drain lock (the Lease read fails; slots.gate: optional, the default):
// slotStands says "going on without a slot" and the run cordons and
// drains, then queuedOutcome refuses it (gateDown), undoing nothing: the
// cordon and the drain stay, and the warning was false.
func TestReviewQueuedRunSlotUnconfirmedLeavesCordon(t *testing.T) {
	f, d, ag, q := queuedFor(t, "apiTimeout: 1s\n")
	if _, err := slots.NewGate(f, loadCfg(t, d)).Free(context.Background(), func(e slots.Entry) bool { return e.Node == "node2" }); err != nil {
		t.Fatal(err)
	}
	failLeaseReadsAfterAdmission(f)
	p, err := ag.QueuedPreparer(context.Background(), q, 5*time.Second).Prepare(context.Background(), q.Request())
	if p != nil {
		p.Finish(context.Background(), errors.New("test"))
	}
	f.ReactionChain = f.ReactionChain[1:]
	t.Logf("prepare: %v %v\nagent stderr:\n%s", p, err, ag.stderr)
	if err != nil && f.node(t).Spec.Unschedulable {
		t.Errorf("the queued run was refused (%v) but left node1 cordoned (pods left: %v)", err, f.pods(t))
	}
	if err != nil && strings.Contains(ag.stderr.String(), "going on without a slot") {
		t.Errorf("the agent said it goes on without a slot, and then did not")
	}
}

// A queued reboot stands; an admin then schedules a poweroff in an hour
// (shutdown -P +60: decommissioning). logind takes it, replacing whatever
// stood, as systemd's shutdown does; gnsh's queued reboot is not replaced
// (nor named): the agent reboots the node once admitted, and logind's
// poweroff schedule dies with that boot. The later request is lost, the
// earlier one wins.
func TestReviewNewScheduleDoesNotReplaceQueued(t *testing.T) {
	_, d, _ := queueRig(t, "", true, false)
	if _, err := d.prepare(t, reboot()); !errors.As(err, new(*QueuedError)) {
		t.Fatalf("not queued: %v\n%s", err, d.stderr)
	}
	d.Automated = func() (bool, string) { return false, "" } // a person now
	d.stderr.Reset()
	off := scheduledReboot(time.Hour)
	off.Action = legacy.PowerOff
	err := d.handOff(t, off, nil)
	t.Logf("shutdown -P +60: %v\n%s", err, d.stderr)
	if q, _ := d.ReadQueued(); q != nil && !strings.Contains(d.stderr.String(), "queued") {
		t.Errorf("logind accepted a poweroff for +60; the queued %s (%s) still stands, unnamed: the agent reboots the node when admitted and the poweroff is lost", q.Action, q.What())
	}
}

// The wrapper's line for a far schedule still promises the cancel the
// issue complains of ("if none comes before that time, it cancels the
// reboot"): with slots.queue auto (the default) the agent defers it
// (queues it) instead. The line is false.
func TestReviewFarScheduleLineSaysDeferred(t *testing.T) {
	_, d, _ := queueRig(t, "", false, false)
	err := d.handOff(t, scheduledReboot(time.Hour), nil)
	out := d.stderr.String()
	t.Logf("shutdown -r +60: %v\n%s", err, out)
	if strings.Contains(out, "it cancels the reboot") {
		t.Errorf("the line promises a cancel; slots.queue: auto defers (queues) the reboot instead")
	}
}

// shutdown -c racing the agent's admission: the agent's run took the slot
// and drained (its Prepared in hand: the runner hands off next, under a
// context that no withdrawal ends); shutdown -c then removes the file and
// says the queued reboot "is withdrawn". Nothing stops the hand-off: the
// node reboots after the admin was told it would not. (The runner's
// watcher looks every 2 s; from the end of the drain to logind's answer
// nothing looks at all.)
func TestReviewCancelAfterAdmissionSaysWithdrawn(t *testing.T) {
	f, d, ag, q := queuedFor(t, "")
	if _, err := slots.NewGate(f, loadCfg(t, d)).Free(context.Background(), func(e slots.Entry) bool { return e.Node == "node2" }); err != nil {
		t.Fatal(err)
	}
	p, err := ag.QueuedPreparer(context.Background(), q, 5*time.Second).Prepare(context.Background(), q.Request())
	if err != nil || p == nil {
		t.Fatalf("%v %v\n%s", p, err, ag.stderr)
	}
	defer p.Finish(context.Background(), nil)
	d.stderr.Reset()
	cerr := d.handOff(t, cancelReq(), nil)
	out := d.stderr.String()
	t.Logf("shutdown -c: %v\n%s", cerr, out)
	if strings.Contains(out, "is withdrawn") {
		t.Errorf("shutdown -c says the queued reboot is withdrawn while the agent, admitted and drained, is handing it to logind")
	}
}

// The API server answers the wrapper's single ask with 429 (its limit of
// requests in flight: a fleet's unattended-upgrades asking at once). The
// request is queued (the node agent asks again: right), but the line
// says "no reboot slot is free now" and "its queue is full", neither of
// which was seen: the gate was not read at all.
func TestReviewQueuedOn429SaysWhatHappened(t *testing.T) {
	f, d, _ := queueRig(t, "", true, false)
	f.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTooManyRequests("the server has received too many requests", 1)
	})
	_, err := d.prepare(t, reboot())
	f.ReactionChain = f.ReactionChain[1:]
	t.Logf("reboot: %v\n%s", err, d.stderr)
	var qe *QueuedError
	if !errors.As(err, &qe) {
		t.Fatalf("not queued: %v", err)
	}
	if strings.Contains(qe.Msg, "queue is full") || strings.Contains(qe.Msg, "no reboot slot is free now") {
		t.Errorf("the line claims a full queue / no free slot; the API server only answered 429: %q", qe.Msg)
	}
}

// slots.gate: required, the API server failing (503) at the wrapper's
// one ask: an automated reboot is refused (exit 1), not queued, though
// the node agent would wait the API server out (as it does for a queued
// request). unattended-upgrades tries again tomorrow.
func TestReviewRequiredGateDownQueues(t *testing.T) {
	f, d, lines := queueRig(t, "apiTimeout: 1s\nslots: {gate: required}\n", true, false)
	f.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd has no leader")
	})
	_, err := d.prepare(t, reboot())
	f.ReactionChain = f.ReactionChain[1:]
	t.Logf("reboot: %v (exit %d)\njournal %q", err, exitCode(err), *lines)
	if !errors.As(err, new(*QueuedError)) {
		t.Errorf("an automated reboot with the gate down was refused (exit %d), not queued for the agent to wait the API server out", exitCode(err))
	}
}

// A window that does not open before slots.queueFor ends (a weekly window
// two days or more ahead, queueFor 24h): the command says "queued" and
// exits 0 though the request is sure to be given up unrun; nothing says
// so until the agent gives it up a day later.
func TestReviewQueuedBeyondItsWindowSaysSo(t *testing.T) {
	day := strings.ToLower(time.Now().UTC().Add(72 * time.Hour).Weekday().String()[:3])
	cfg := "slots:\n  window: {days: " + day + ", start: \"02:00\", end: \"03:00\", timeZone: UTC}\n"
	_, d, _ := queueRig(t, cfg, true, false)
	_, err := d.prepare(t, reboot())
	t.Logf("reboot: %v (exit %d)", err, exitCode(err))
	var qe *QueuedError
	if errors.As(err, &qe) && !strings.Contains(qe.Msg, "queueFor") {
		t.Errorf("queued (exit 0) though the window %s does not open before slots.queueFor (24h) ends: it is sure to be given up", day)
	}
}

// The issue's case 3: "requests made outside slots.window wait until it
// opens". An automated reboot made outside the window that finds a slot
// free is admitted and drained at once: the window holds only requests
// that found no slot free.
func TestReviewAutomatedOutsideWindowWaitsForIt(t *testing.T) {
	day := strings.ToLower(time.Now().UTC().Add(72 * time.Hour).Weekday().String()[:3])
	cfg := "slots:\n  window: {days: " + day + ", start: \"02:00\", end: \"03:00\", timeZone: UTC}\n"
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, cfg)
	d.Automated = func() (bool, string) { return true, "no terminal on stdin and stderr" }
	l, err := HoldAgentLock(d.lockDir())
	if err != nil {
		t.Fatal(err)
	}
	l.SetState(AgentGuarding)
	t.Cleanup(l.Release)
	p, err := d.prepare(t, reboot())
	if p != nil {
		defer p.Finish(context.Background(), errors.New("test"))
	}
	t.Logf("reboot: %v %v\n%s", p, err, d.stderr)
	if p != nil {
		t.Errorf("an automated reboot outside its window (%s 02:00-03:00 UTC) was admitted and drained at once (cordoned: %v)", day, f.node(t).Spec.Unschedulable)
	}
}

// shutdown -c while the agent's run waits for the slot: withdrawQueued
// removes the file, then the waiter entry. The agent's run, watching the
// Lease, sees its entry gone and writes it back (its ticket kept: "a
// waiter that others dropped comes back in it"); the runner notices the
// file gone at its next poll (up to 2 s) and ends the run, whose entry
// stays (StayOnCancel). A withdrawn request's place is left in the queue,
// ahead of the others, until it lapses.
func TestReviewCancelWhileWaitingLeavesNoPlace(t *testing.T) {
	f, d, ag, q := queuedFor(t, "")
	// The runner ends the run of a withdrawn request with this cause.
	ctx, cancelCause := context.WithCancelCause(context.Background())
	cancel := func() { cancelCause(slots.ErrWithdrawn) }
	done := make(chan error, 1)
	go func() {
		_, err := ag.QueuedPreparer(ctx, q, 20*time.Second).Prepare(context.Background(), q.Request())
		done <- err
	}()
	time.Sleep(time.Second) // the agent's run waits, watching
	if err := d.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	_, in := slotRecord(t, f).Waiter("node1")
	t.Logf("right after shutdown -c: waiter entry %v", in)
	time.Sleep(1500 * time.Millisecond) // the runner's poll (DefaultQueuePoll 2 s)
	cancel()
	err := <-done
	w, in := slotRecord(t, f).Waiter("node1")
	t.Logf("run ended: %v; waiter entry %v %+v", err, in, w)
	if in {
		t.Errorf("shutdown -c withdrew the queued reboot, but its place stands in the queue (ticket %d), written back by the agent's run", w.Ticket)
	}
}

// What the node agent logs when its queued run is refused for the gate
// being unavailable (slots.gate: optional, the default; the API server
// failing): the runner prints the refusal inside one line ("the queued
// reboot was not handed off: %v; asking again in 1m0s"). It is two
// lines, names slots.gate: required (not what is set) and tells a person
// to use --no-drain or -f, which mean nothing to the agent.
func TestReviewQueuedRunRefusalIsOneTrueLine(t *testing.T) {
	f, _, ag, q := queuedFor(t, "apiTimeout: 1s\n")
	f.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd has no leader")
	})
	_, err := ag.QueuedPreparer(context.Background(), q, 5*time.Second).Prepare(context.Background(), q.Request())
	f.ReactionChain = f.ReactionChain[1:]
	if err == nil {
		t.Fatal("not refused")
	}
	line := "gnsh: agent: the queued reboot was not handed off: " + err.Error() + "; asking again in 1m0s"
	t.Logf("the agent's line:\n%s", line)
	if strings.Contains(line, "\n") {
		t.Errorf("the agent's line is %d lines", strings.Count(line, "\n")+1)
	}
	if strings.Contains(line, "required") || strings.Contains(line, "--no-drain") {
		t.Errorf("the agent's line names slots.gate: required (optional is set) or --no-drain/-f")
	}
}

// The node agent stopping (systemctl restart gnsh, the role's handler
// after a config change) in the middle of a queued run's drain (an
// eviction refused, so the drain goes on): the agent stopping leaves an Event on the Node and
// lines that name a shutdown -c nobody ran.
func TestReviewQueuedDrainStoppedSaysWhy(t *testing.T) {
	f, d, ag, q := queuedFor(t, "")
	if _, err := slots.NewGate(f, loadCfg(t, d)).Free(context.Background(), func(e slots.Entry) bool { return e.Node == "node2" }); err != nil {
		t.Fatal(err)
	}
	f.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 1)
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !f.node(t).Spec.Unschedulable {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second)
		cancel()
	}()
	_, err := ag.QueuedPreparer(ctx, q, 10*time.Second).Prepare(context.Background(), q.Request())
	f.ReactionChain = f.ReactionChain[1:]
	var msgs []string
	for _, a := range f.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
			e := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
	}
	t.Logf("agent stopping mid-drain: %v\nstderr:\n%s\nevents:\n%s", err, ag.stderr, strings.Join(msgs, "\n"))
	if all := ag.stderr.String() + strings.Join(msgs, "\n"); strings.Contains(all, "shutdown -c") {
		t.Errorf("the agent stopping mid-drain is told as a shutdown -c")
	}
	if f.node(t).Spec.Unschedulable {
		t.Errorf("left cordoned")
	}
}

// The API server fails in the middle of the queued run's drain (slot
// held, node cordoned). A person's reboot goes on then (never wedge a
// node a person waits on); a queued reboot nobody waits on could wait
// the API server out as it does before its slot, but it is handed off
// with its pods still running.
func TestReviewQueuedRunAPIDownMidDrain(t *testing.T) {
	f, d, ag, q := queuedFor(t, "apiTimeout: 1s\ndrainTimeout: 20s\n")
	if _, err := slots.NewGate(f, loadCfg(t, d)).Free(context.Background(), func(e slots.Entry) bool { return e.Node == "node1" || e.Node == "node2" }); err != nil {
		t.Fatal(err)
	}
	f.PrependReactor("*", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o, err := f.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", "node1")
		if err == nil && o.(*corev1.Node).Spec.Unschedulable {
			return true, nil, apierrors.NewServiceUnavailable("etcd has no leader")
		}
		return false, nil, nil
	})
	p, err := ag.QueuedPreparer(context.Background(), q, 10*time.Second).Prepare(context.Background(), q.Request())
	f.ReactionChain = f.ReactionChain[1:]
	t.Logf("API server down mid-drain: %v %v\nstderr:\n%s", p, err, ag.stderr)
	if p != nil {
		p.Finish(context.Background(), errors.New("test"))
		t.Errorf("the queued reboot would be handed off undrained (pods left %v)", f.pods(t))
	}
}

// A person's reboot at a terminal while one is queued shares the node's
// waiter entry (its place); refused after slots.wait, it withdraws that
// entry. The node agent's next ask comes back in the queued request's
// ticket (Ask.Ticket): the place is not lost. (Sound.)
func TestReviewPersonRefusedKeepsTheQueuedPlace(t *testing.T) {
	f, d, ag, q := queuedFor(t, "")
	person := newDrainer(t, f, "slots: {wait: 1s}\n")
	person.LockDir = d.LockDir
	person.Automated = func() (bool, string) { return false, "" }
	if _, err := person.prepare(t, reboot()); err == nil || errors.As(err, new(*QueuedError)) {
		t.Fatalf("the person's reboot: %v", err)
	}
	_, in := slotRecord(t, f).Waiter("node1")
	t.Logf("after the person's refusal: waiter entry %v", in)
	if _, err := ag.QueuedPreparer(context.Background(), q, time.Second).Prepare(context.Background(), q.Request()); !IsSlotWait(err) {
		t.Fatalf("%v", err)
	}
	if w, ok := slotRecord(t, f).Waiter("node1"); !ok || w.Ticket != q.Ticket || q.Place != 1 {
		t.Errorf("the queued request's place after a person's refusal: %+v %v (ticket %d, place %d)", w, ok, q.Ticket, q.Place)
	}
	if r, _ := ag.ReadQueued(); r == nil {
		t.Errorf("the person's refusal removed the queued request")
	}
}

// Two automated requests on one node at the same moment (a cron job and
// unattended-upgrades): both are queued (exit 0), one request stands in
// the file, one waiter entry in the Lease. (Sound; the later request
// replaces the earlier one silently, as systemd's newer schedule does.)
func TestReviewTwoAutomatedAtOnce(t *testing.T) {
	f, d, _ := queueRig(t, "", true, false)
	d2 := newDrainer(t, f, "")
	d2.LockDir, d2.Automated, d2.Journal = d.LockDir, d.Automated, d.Journal
	errs := make(chan error, 2)
	for _, dd := range []testDrainer{d, d2} {
		go func(dd testDrainer) { _, err := dd.Prepare(context.Background(), reboot()); errs <- err }(dd)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.As(err, new(*QueuedError)) {
			t.Errorf("not queued: %v", err)
		}
	}
	rec := slotRecord(t, f)
	q, _ := d.ReadQueued()
	t.Logf("waiters %d; queued %+v", len(rec.Waiters), q)
	if len(rec.Waiters) != 1 || q == nil || q.Ticket != rec.Waiters[0].Ticket {
		t.Errorf("record %+v, queued %+v", rec, q)
	}
}

// The request cannot be written for the agent after its place was taken
// (as a wrapper killed between the two): refused (exit 1), and its waiter
// entry (KeepPlace) is left in the queue, unrenewed, ahead of the others
// until it lapses; the refusal line.
func TestReviewQueueWriteFailsLeavesNoPlace(t *testing.T) {
	f, d, lines := queueRig(t, "", true, false)
	if err := os.MkdirAll(filepath.Join(d.lockDir(), QueueName, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := d.prepare(t, reboot())
	w, in := slotRecord(t, f).Waiter("node1")
	t.Logf("reboot: %v (exit %d)\njournal %q\nwaiter %v %+v", err, exitCode(err), *lines, in, w)
	if in {
		t.Errorf("refused, yet its place stays in the queue (ticket %d)", w.Ticket)
	}
}

// strictDrain: true and a pod no controller recreates: a person's (or
// the wrapper's) reboot is refused at once, evicting nothing (as kubectl
// drain). The agent's run of a queued reboot is drained with EvictRest
// (r.d.Agent): it evicts every other pod, then is refused all the same
// (blocked), and the runner does it again a minute later, for slots.queueFor.
// Not "the wrapper's own path".
func TestReviewQueuedRunStrictDrainEvictsLikeTheWrapper(t *testing.T) {
	f, d, ag, q := queuedFor(t, "strictDrain: true\n")
	if _, err := slots.NewGate(f, loadCfg(t, d)).Free(context.Background(), func(e slots.Entry) bool { return e.Node == "node2" }); err != nil {
		t.Fatal(err)
	}
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "app", UID: "uid-bare"},
		Spec: corev1.PodSpec{NodeName: "node1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if _, err := f.CoreV1().Pods("app").Create(context.Background(), bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := ag.QueuedPreparer(context.Background(), q, 5*time.Second).Prepare(context.Background(), q.Request())
	if p != nil {
		p.Finish(context.Background(), errors.New("test"))
	}
	t.Logf("queued run, strictDrain: %v %v\npods left %v\nstderr:\n%s", p, err, f.pods(t), ag.stderr)
	if err != nil && !slicesContains(f.pods(t), "web-1") {
		t.Errorf("refused for strictDrain, yet web-1 was evicted (the wrapper evicts nothing then)")
	}
}

func slicesContains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

// The node agent runs but has not reached "guarding" (it just started,
// or restarts: AgentStarting): an automated reboot with no slot free is
// not queued (right: nothing would carry it yet) and refused with "the
// node agent is not running", which is false; and it is refused after
// waiting slots.wait rather than waiting the moment it takes the agent to
// start.
func TestReviewAgentStartingIsNotNotRunning(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d := newDrainer(t, f, "slots: {wait: 1s}\n")
	d.Automated = func() (bool, string) { return true, "no terminal on stdin and stderr" }
	l, err := HoldAgentLock(d.lockDir()) // AgentStarting
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Release)
	_, err = d.prepare(t, reboot())
	t.Logf("reboot, agent starting: %v", err)
	if err != nil && strings.Contains(err.Error(), "the node agent is not running") {
		t.Errorf("the refusal says the node agent is not running; it runs (starting)")
	}
}
