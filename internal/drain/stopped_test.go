package drain

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

// On a shutdown that bypasses gnsh, kubelet stops the pods while the
// agent drains: a budget refuses their evictions until kubelet has
// written their terminal phase, then the API server accepts them. The
// drain retries a refused pod at once when the watch shows it stopped, not
// after its backoff (the fake clock never moves here), and counts the
// evictions of pods that had already stopped.
func TestRefusedPodStoppedByKubeletEvictedAtOnce(t *testing.T) {
	cl := newCluster(pod("web-1"), pod("db-0"), pod("db-1"))
	cl.Protect("db-0", "db-1")
	clk := testclock.NewFakeClock(fakeNow)
	type drained struct {
		res *Result
		err error
	}
	done := make(chan drained, 1)
	go func() {
		res, err := Drain(context.Background(), cl, Options{Node: "node1", Timeout: 10 * time.Minute,
			RetryDelay: time.Minute, MaxRetryDelay: time.Minute, Clock: clk})
		done <- drained{res, err}
	}()
	deadline := time.After(20 * time.Second) // real time: only so that a failure does not hang
	for cl.Evicted("db-0") == 0 || cl.Evicted("db-1") == 0 {
		select {
		case <-deadline:
			t.Fatal("the budget's pods were never evicted")
		case <-time.After(time.Millisecond):
		}
	}
	for _, n := range []string{"db-0", "db-1"} {
		if err := cl.StopByKubelet(context.Background(), "app", n); err != nil {
			t.Fatal(err)
		}
	}
	var d drained
	select {
	case d = <-done:
	case <-deadline:
		t.Fatalf("drain still waiting for its backoff after kubelet stopped the pods (db-0 evicted %d times)", cl.Evicted("db-0"))
	}
	if d.err != nil {
		t.Fatal(d.err)
	}
	if took := clk.Since(fakeNow); took != 0 {
		t.Fatalf("the fake clock moved (%v)", took)
	}
	for _, n := range []string{"db-0", "db-1"} {
		if got := cl.Evicted(n); got != 2 {
			t.Errorf("%s evicted %d times, want 2 (refused, then accepted once stopped)", n, got)
		}
	}
	if s := d.res.Status; s.Evicted != 3 || s.Gone != 3 || s.AlreadyStopped != 2 || s.StoppedByKubelet != 2 {
		t.Fatalf("status %+v, want 3 evicted, 3 gone, 2 already stopped, by kubelet", s)
	}
}

func TestStateOf(t *testing.T) {
	now := pod("x").CreationTimestamp
	for _, tt := range []struct {
		pod                           *corev1.Pod
		terminal, byKubelet, deleting bool
	}{
		{pod: pod("running")},
		{pod: pod("done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), terminal: true},
		{pod: pod("failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), terminal: true},
		{pod: pod("kubelet", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"}}
		}), byKubelet: true},
		{pod: pod("evicted", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"}}
		})},
		{pod: pod("deleting", func(p *corev1.Pod) { p.DeletionTimestamp = &now }), deleting: true},
	} {
		s := stateOf(tt.pod)
		if s.terminal != tt.terminal || s.byKubelet != tt.byKubelet || s.deleting != tt.deleting || s.uid != tt.pod.UID {
			t.Errorf("%s: %+v", tt.pod.Name, s)
		}
	}
}

// A refusal that comes back after the watch saw the pod stopped is
// retried at once, once; a refusal of a pod being deleted meanwhile is
// not retried: the drain waits for the pod as for one already
// terminating. The fake API server answers under its lock, so this drives
// the run's bookkeeping directly.
func TestRefusalOfStoppedPod(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	db0, db1 := Classify(*pod("db-0"), false), Classify(*pod("db-1"), false)
	cl := newCluster(&db0.Pod, &db1.Pod)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &run{c: cl, opts: Options{RetryDelay: time.Minute, MaxRetryDelay: time.Minute}, clk: clk, start: clk.Now(), res: &Result{}, ctx: ctx,
		pending:     map[types.UID]*Pod{db0.Pod.UID: &db0, db1.Pod.UID: &db1},
		blocked:     map[types.UID]Blocked{},
		terminating: map[types.UID]bool{}, attempts: map[types.UID]int{}, serverFailed: map[types.UID]bool{},
		state: map[types.UID]podState{}, due: map[types.UID]int{}, timers: map[types.UID]clock.Timer{}, hurried: map[types.UID]bool{}, stoppedFirst: map[types.UID]podState{},
		evictor: newEvictor(cl, nil), sem: make(chan struct{}, 1), outcomes: make(chan evictOutcome, 2),
		health: &health{clk: clk}}
	refused := func(p *Pod) evictOutcome {
		return evictOutcome{pod: p, result: evictRefused, blocked: &Blocked{Pod: p.Name(), PDB: "db"}}
	}

	r.state[db0.Pod.UID] = podState{uid: db0.Pod.UID, terminal: true, byKubelet: true}
	if err := r.evicted(refused(&db0)); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-r.outcomes:
		if o.pod != &db0 || o.result != evictAccepted {
			t.Fatalf("retry of the stopped pod: %+v", o)
		}
	case <-time.After(10 * time.Second): // real time: only so that a failure does not hang
		t.Fatal("the stopped pod's eviction was not retried at once")
	}
	if _, ok := r.due[db0.Pod.UID]; ok {
		t.Fatal("the stopped pod's retry also waits for its backoff")
	}
	// Once only: a second refusal waits for the backoff.
	if err := r.evicted(refused(&db0)); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.due[db0.Pod.UID]; !ok {
		t.Fatal("a second refusal of the stopped pod is not retried after its backoff")
	}

	r.state[db1.Pod.UID] = podState{uid: db1.Pod.UID, deleting: true}
	if err := r.evicted(refused(&db1)); err != nil {
		t.Fatal(err)
	}
	_, due := r.due[db1.Pod.UID]
	if _, blocked := r.blocked[db1.Pod.UID]; due || blocked || !r.terminating[db1.Pod.UID] {
		t.Fatalf("pod deleted meanwhile: due %v, terminating %v, blocked %v", r.due, r.terminating, r.blocked)
	}
	if cl.Evicted("db-1") != 0 || cl.Evicted("db-0") != 1 {
		t.Fatalf("evictions: db-0 %d, db-1 %d", cl.Evicted("db-0"), cl.Evicted("db-1"))
	}
}

// An eviction whose answer comes after the watch saw the pod deleted and
// then stopped (kubelet ending it for that deletion) was not of a pod
// already stopped.
func TestStoppedAfterDeletionNotCounted(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	web := Classify(*pod("web-1"), false)
	r := &run{clk: clk, start: clk.Now(), res: &Result{},
		pending:     map[types.UID]*Pod{web.Pod.UID: &web},
		blocked:     map[types.UID]Blocked{},
		terminating: map[types.UID]bool{}, serverFailed: map[types.UID]bool{},
		state: map[types.UID]podState{}, due: map[types.UID]int{}, timers: map[types.UID]clock.Timer{}, hurried: map[types.UID]bool{}, stoppedFirst: map[types.UID]podState{},
		health: &health{clk: clk}}
	r.podChanged(podState{uid: web.Pod.UID, deleting: true})
	r.podChanged(podState{uid: web.Pod.UID, deleting: true, terminal: true})
	r.podGone(web.Pod.UID)
	if s := r.res.Status; s.Evicted != 1 || s.AlreadyStopped != 0 {
		t.Fatalf("status %+v, want 1 evicted, none already stopped", s)
	}
}

// The eviction of a stopped pod deletes it at once: the watch may show
// the deletion, and the eviction's own DisruptionTarget condition in
// place of kubelet's, before the eviction's answer comes. The pod was
// stopped by kubelet before: counted so (as the real kubelet's bypass
// case showed).
func TestStoppedThenDeletedCounted(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	web := Classify(*pod("web-1"), false)
	r := &run{clk: clk, start: clk.Now(), res: &Result{},
		pending:     map[types.UID]*Pod{web.Pod.UID: &web},
		blocked:     map[types.UID]Blocked{web.Pod.UID: {Pod: web.Name(), PDB: "web"}},
		terminating: map[types.UID]bool{}, serverFailed: map[types.UID]bool{},
		state: map[types.UID]podState{}, due: map[types.UID]int{}, timers: map[types.UID]clock.Timer{}, hurried: map[types.UID]bool{web.Pod.UID: true}, stoppedFirst: map[types.UID]podState{},
		health: &health{clk: clk}}
	r.podChanged(podState{uid: web.Pod.UID, terminal: true, byKubelet: true})
	// The eviction replaces kubelet's DisruptionTarget condition with its
	// own, then deletes the pod.
	r.podChanged(podState{uid: web.Pod.UID, terminal: true})
	r.podChanged(podState{uid: web.Pod.UID, terminal: true, deleting: true})
	if err := r.evicted(evictOutcome{pod: &web, result: evictAccepted}); err != nil {
		t.Fatal(err)
	}
	r.podGone(web.Pod.UID)
	if s := r.res.Status; s.Evicted != 1 || s.AlreadyStopped != 1 || s.StoppedByKubelet != 1 {
		t.Fatalf("status %+v, want 1 evicted, already stopped by kubelet", s)
	}
}

// The watch may show kubelet's status write after the answer to the
// eviction it made possible: the pod is counted once it is gone.
func TestStoppedSeenAfterAnswerCounted(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	web := Classify(*pod("web-1"), false)
	r := &run{clk: clk, start: clk.Now(), res: &Result{},
		pending:     map[types.UID]*Pod{web.Pod.UID: &web},
		blocked:     map[types.UID]Blocked{web.Pod.UID: {Pod: web.Name(), PDB: "web"}},
		terminating: map[types.UID]bool{}, serverFailed: map[types.UID]bool{},
		state: map[types.UID]podState{}, due: map[types.UID]int{}, timers: map[types.UID]clock.Timer{}, hurried: map[types.UID]bool{}, stoppedFirst: map[types.UID]podState{},
		health: &health{clk: clk}}
	if err := r.evicted(evictOutcome{pod: &web, result: evictAccepted}); err != nil {
		t.Fatal(err)
	}
	r.podChanged(podState{uid: web.Pod.UID, terminal: true, byKubelet: true})
	r.podChanged(podState{uid: web.Pod.UID, terminal: true, deleting: true})
	r.podGone(web.Pod.UID)
	if s := r.res.Status; s.Evicted != 1 || s.AlreadyStopped != 1 || s.StoppedByKubelet != 1 {
		t.Fatalf("status %+v, want 1 evicted, already stopped by kubelet", s)
	}
}

// A refused pod kubelet stopped, retried, and seen gone before the
// retry's answer: evicted, and already stopped by kubelet.
func TestRetryAnsweredAfterGoneCounted(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	web := Classify(*pod("web-1"), false)
	r := &run{clk: clk, start: clk.Now(), res: &Result{},
		pending:     map[types.UID]*Pod{web.Pod.UID: &web},
		blocked:     map[types.UID]Blocked{web.Pod.UID: {Pod: web.Name(), PDB: "web"}},
		terminating: map[types.UID]bool{}, serverFailed: map[types.UID]bool{},
		state: map[types.UID]podState{}, due: map[types.UID]int{}, timers: map[types.UID]clock.Timer{}, stoppedFirst: map[types.UID]podState{},
		hurried:  map[types.UID]bool{web.Pod.UID: true}, // the early retry, made once it stopped,
		inflight: map[types.UID]int{web.Pod.UID: 1},     // sent
		health:   &health{clk: clk}}
	r.podChanged(podState{uid: web.Pod.UID, terminal: true, byKubelet: true})
	r.podGone(web.Pod.UID)
	if err := r.evicted(evictOutcome{pod: &web, result: evictAccepted}); err != nil { // the late answer
		t.Fatal(err)
	}
	if s := r.res.Status; s.Evicted != 1 || s.AlreadyStopped != 1 || s.StoppedByKubelet != 1 {
		t.Fatalf("status %+v, want 1 evicted, already stopped by kubelet", s)
	}
}
