package drain

// Edge cases of following pods' states in the drain (issue 23): each
// TestStopped…Fix test failed before its fix (a review's finding); the
// others hold the properties a review found sound (running pods keep their
// backoff, one early retry per pod, the watcher sends only changes, 300
// pods stopped at once).

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

// reviewRun is a run with its maps, as the bookkeeping tests of
// stopped_test.go build it.
func reviewRun(clk *testclock.FakeClock, ctx context.Context, pods ...*Pod) *run {
	r := &run{opts: Options{RetryDelay: time.Minute, MaxRetryDelay: time.Minute, UnreachableAfter: DefaultUnreachableAfter},
		clk: clk, start: clk.Now(), res: &Result{}, ctx: ctx,
		pending: map[types.UID]*Pod{}, blocked: map[types.UID]Blocked{},
		terminating: map[types.UID]bool{}, attempts: map[types.UID]int{}, serverFailed: map[types.UID]bool{},
		state: map[types.UID]podState{}, due: map[types.UID]int{}, timers: map[types.UID]clock.Timer{},
		hurried: map[types.UID]bool{}, stoppedFirst: map[types.UID]podState{},
		sem: make(chan struct{}, 1), outcomes: make(chan evictOutcome, 8), retry: make(chan retryTick, 8),
		health: &health{clk: clk}}
	for _, p := range pods {
		r.pending[p.Pod.UID] = p
	}
	r.res.Status.Total = len(pods)
	return r
}

// Finding: a pod whose eviction failed with the server (503) and that
// someone else deletes during its backoff is taken as terminating
// (deletedMeanwhile) and never evicted again, but it stays in
// serverFailed: the evictions' run of failures is never ended (only
// podGone or another eviction's answer ends it). While it waits for that
// pod, the next single watch failure (or any refusal's unusable) ends the
// drain with *UnreachableError "API server failing for 11s", though the
// server answers and no eviction is outstanding. Before the change the
// pod was retried, and the retry's answer ended the run of failures.
func TestStoppedFixDeletedMeanwhileKeepsEvictionFailure(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	web, db := Classify(*pod("web-1"), false), Classify(*pod("db-0"), false)
	r := reviewRun(clk, ctx, &web, &db)
	if err := r.evicted(evictOutcome{pod: &web, result: evictAccepted}); err != nil {
		t.Fatal(err)
	}
	fail := unavailable()
	if err := r.evicted(evictOutcome{pod: &db, result: evictServerFailing, err: fail,
		blocked: &Blocked{Pod: db.Name(), Reason: "API server failing: 503 Service Unavailable"}}); err != nil {
		t.Fatal(err)
	}
	// During its backoff, someone else deletes db-0 (a long grace period).
	r.podChanged(podState{uid: db.Pod.UID, deleting: true})
	if !r.terminating[db.Pod.UID] {
		t.Fatal("setup: db-0 not taken as deleted meanwhile")
	}
	clk.Step(11 * time.Second) // the server answers again; db-0 terminates slowly
	// One watch failure wakes the loop (case <-r.failing: r.unusable()).
	r.health.failed(podRequests, fail)
	if err := r.unusable(); err != nil {
		t.Fatalf("one watch failure ends the drain: %v (serverFailed %v, no eviction outstanding)", err, r.serverFailed)
	}
	// Its eviction's answer was lost and its deletion followed: that
	// eviction took effect, and is counted (it is not sent again).
	if s := r.res.Status; s.Evicted != 2 {
		t.Errorf("status %+v: want 2 evicted (web-1 answered, db-0's answer lost, then its deletion seen)", s)
	}
}

// Finding (count): podGone now counts a refused pod as evicted whenever
// an eviction of it is in flight, also the ordinary backoff retry of a
// pod that never stopped. A running pod the budget keeps refusing, deleted
// by someone else (a rollout) while its retry is out, is counted evicted
// although the retry's answer is the budget's 429 again. Before the
// change, TestEvictedCountedWhenGoneFirst's rule held: "A pod whose
// eviction was refused and that went anyway was not evicted."
func TestStoppedFixRefusedRunningPodGoneDuringRetryCounted(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := Classify(*pod("db-0"), false)
	r := reviewRun(clk, ctx, &db)
	r.blocked[db.Pod.UID] = Blocked{Pod: db.Name(), PDB: "db"}
	r.inflight = map[types.UID]int{db.Pod.UID: 1} // its backoff retry, sent; the pod never stopped
	r.podGone(db.Pod.UID)                         // deleted by someone else
	if err := r.evicted(evictOutcome{pod: &db, result: evictRefused, blocked: &Blocked{Pod: db.Name(), PDB: "db"}}); err != nil {
		t.Fatal(err) // the retry's answer: refused again
	}
	if s := r.res.Status; s.Evicted != 0 {
		t.Fatalf("status %+v: a pod the budget refused every time, deleted by someone else, counted evicted", s)
	}
}

// Sound: a budget's refusal of a running pod still waits for its backoff
// (the fake clock does not move: no second eviction), and only once the
// pod is stopped is it retried at once. The watch relisting (a resent,
// unchanged state) adds nothing.
func TestStoppedRunningPodWaitsForBackoff(t *testing.T) {
	cl := newCluster(pod("db-0"), pod("web-1"))
	cl.Protect("db-0")
	clk := testclock.NewFakeClock(fakeNow)
	done := make(chan error, 1)
	var res *Result
	go func() {
		var err error
		res, err = Drain(context.Background(), cl, Options{Node: "node1", Timeout: 10 * time.Minute,
			RetryDelay: time.Minute, MaxRetryDelay: time.Minute, Clock: clk})
		done <- err
	}()
	deadline := time.After(20 * time.Second)
	for cl.Evicted("db-0") == 0 {
		select {
		case <-deadline:
			t.Fatal("db-0 never evicted")
		case <-time.After(time.Millisecond):
		}
	}
	// A status change that is not a stop (Ready false) must not hurry it.
	p, err := cl.CoreV1().Pods("app").Get(context.Background(), "db-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
	if _, err := cl.CoreV1().Pods("app").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // real time: room for a wrong early retry
	if n := cl.Evicted("db-0"); n != 1 {
		t.Fatalf("running db-0 evicted %d times without its backoff passing", n)
	}
	if err := cl.StopByKubelet(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-deadline:
		t.Fatal("stopped db-0 not retried at once")
	}
	if n := cl.Evicted("db-0"); n != 2 {
		t.Fatalf("db-0 evicted %d times, want 2", n)
	}
	if s := res.Status; s.Evicted != 2 || s.Gone != 2 || s.AlreadyStopped != 1 || s.StoppedByKubelet != 1 {
		t.Fatalf("status %+v", s)
	}
}

// Sound: a pod flapping (its state resent, toggled) gets one early retry
// only; states of pods not pending (gone, or a new pod with the same name:
// another UID) are ignored.
func TestStoppedFlappingOneHurry(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := Classify(*pod("db-0"), false)
	cl := newCluster(&db.Pod)
	r := reviewRun(clk, ctx, &db)
	r.evictor = newEvictor(cl, nil)
	r.blocked[db.Pod.UID] = Blocked{Pod: db.Name(), PDB: "db"}
	r.retryLater(&db)
	for i := 0; i < 50; i++ {
		r.podChanged(podState{uid: db.Pod.UID, terminal: true, byKubelet: i%2 == 0})
		r.podChanged(podState{uid: db.Pod.UID})
		r.podChanged(podState{uid: "uid-other", terminal: true, byKubelet: true}) // same name, new UID: not pending
	}
	if n := r.inflight[db.Pod.UID]; n != 1 {
		t.Fatalf("%d evictions of db-0 in flight after flapping, want 1", n)
	}
	if _, ok := r.due[db.Pod.UID]; ok {
		t.Fatal("db-0 both retried early and due")
	}
}

// Sound: the watcher sends nothing for untracked pods (a new pod of the
// same name has another UID) and nothing again for an unchanged state (a
// relist).
func TestStoppedWatcherLook(t *testing.T) {
	ch := make(chan podState, 4)
	w := &watcher{tracked: map[types.UID]bool{"uid-db-0": true}, changed: ch, seen: map[types.UID]podState{}}
	failed := pod("db-0", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	other := pod("db-0", func(p *corev1.Pod) { p.UID = "uid-db-0-new"; p.Status.Phase = corev1.PodFailed })
	ctx := context.Background()
	for i := 0; i < 3; i++ { // the event, then two relists resending every pod
		w.look(ctx, failed)
		w.look(ctx, other)
		w.look(ctx, pod("db-1", func(p *corev1.Pod) { p.UID = "uid-db-0-x" })) // untracked
	}
	if len(ch) != 1 {
		t.Fatalf("%d states sent, want 1", len(ch))
	}
	if s := <-ch; s.uid != "uid-db-0" || !s.terminal {
		t.Fatalf("sent %+v", s)
	}
}

// Sound (scale, liveness): 300 pods under a budget, all refused, then all
// stopped by kubelet at once: every pod is evicted exactly twice, the drain
// ends without the clock moving, the counts agree, and no goroutine is
// left after Drain returns (the cancelled retry timers' goroutines end
// with the drain).
func TestStoppedManyPodsStoppedAtOnce(t *testing.T) {
	const n = 300
	var pods []*corev1.Pod
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("db-%d", i)
		pods = append(pods, pod(name))
		names = append(names, name)
	}
	cl := newCluster(pods...)
	cl.Protect(names...)
	before := runtime.NumGoroutine()
	clk := testclock.NewFakeClock(fakeNow)
	done := make(chan error, 1)
	var res *Result
	go func() {
		var err error
		res, err = Drain(context.Background(), cl, Options{Node: "node1", Timeout: 10 * time.Minute,
			RetryDelay: time.Minute, MaxRetryDelay: time.Minute, Clock: clk})
		done <- err
	}()
	deadline := time.After(60 * time.Second)
	for cl.Evictions() < n {
		select {
		case <-deadline:
			t.Fatalf("only %d evictions", cl.Evictions())
		case <-time.After(time.Millisecond):
		}
	}
	if err := cl.StopByKubelet(context.Background(), "app", names[0]); err != nil { // waits for the watch
		t.Fatal(err)
	}
	for _, name := range names[1:] {
		p, err := cl.CoreV1().Pods("app").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
			Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"})
		if _, err := cl.CoreV1().Pods("app").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Microsecond) // the fake's watch channel holds 100 events
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-deadline:
		t.Fatalf("drain of %d stopped pods did not end (%d evictions)", n, cl.Evictions())
	}
	if took := clk.Since(fakeNow); took != 0 {
		t.Fatalf("fake clock moved %v", took)
	}
	for _, name := range names {
		if e := cl.Evicted(name); e != 2 {
			t.Errorf("%s evicted %d times, want 2", name, e)
		}
	}
	if s := res.Status; s.Evicted != n || s.Gone != n || s.AlreadyStopped != n || s.StoppedByKubelet != n || s.Blocked != 0 {
		t.Fatalf("status %+v", s)
	}
	var after int
	for i := 0; i < 200; i++ {
		if after = runtime.NumGoroutine(); after <= before+5 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d goroutines after the drain, %d before", after, before)
}

// Finding, through the whole drain: the eviction of web-1 takes effect
// but its answer is cut off (a load balancer restarting: no answer,
// evictServerFailing, as TestDrainEvictionAnswerCutOff). The watch shows
// web-1 being deleted (gnsh's own eviction, a 30 s grace period) during
// its backoff: it is taken as deleted meanwhile and not evicted again, and
// the evictions' run of failures from that lost answer never ends. At
// +15 s one watch request fails once: the drain ends with
// *UnreachableError "API server unreachable for 15s" (and the caller hands
// off without waiting for the pod) though the server answers again at
// once. Before the change the eviction was retried after 1 s, answered,
// and the drain waited for the pod until its Timeout.
func TestStoppedFixCutOffAnswerThenOneWatchFailure(t *testing.T) {
	cl := kubeletCluster(corev1.ConditionTrue, time.Time{}, pod("web-1"))
	cut := fmt.Errorf("stream error when reading response body, may be caused by closed connection. Please retry. Original error: %w",
		http2.StreamError{StreamID: 13, Code: http2.ErrCodeInternal})
	var mu sync.Mutex
	var f podFaults
	tries := 0
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	cl.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if tries++; tries == 1 { // evicted, the answer lost
			go func() { // the deletion, once the drain watches (the fake's watch starts from now)
				for {
					f.mu.Lock()
					n := len(f.watches)
					f.mu.Unlock()
					if n > 0 {
						break
					}
					time.Sleep(time.Millisecond)
				}
				o, err := cl.Tracker().Get(gvr, "app", "web-1")
				if err != nil {
					panic(err)
				}
				p := o.(*corev1.Pod).DeepCopy()
				now := metav1.NewTime(fakeNow)
				p.DeletionTimestamp = &now
				if err := cl.Tracker().Update(gvr, p, "app"); err != nil {
					panic(err)
				}
			}()
			return true, nil, cut
		}
		return false, nil, nil
	})
	f.install(cl)
	faulted, cleared, waited := false, false, false
	var terminating atomic.Bool
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 30 * time.Second, RetryDelay: 2 * time.Second, MaxRetryDelay: 2 * time.Second,
		Progress: func(s Status) {
			if s.Terminating > 0 {
				terminating.Store(true)
			}
		}}, 10*time.Millisecond, func(now time.Duration) {
		switch {
		case !waited && now >= time.Second:
			// Give the watch real time to show the deletion before the
			// retry comes due (a real watch takes milliseconds, the backoff
			// a second).
			waited = true
			for i := 0; i < 100 && !terminating.Load(); i++ {
				time.Sleep(2 * time.Millisecond)
			}
		case !faulted && now >= 15*time.Second:
			faulted = true
			f.set(unavailable()) // one watch request fails…
		case faulted && !cleared && f.failures() > 0:
			cleared = true
			f.set(nil) // …then the server answers again
		}
	})
	var ue *UnreachableError
	if errors.As(d.err, &ue) {
		t.Fatalf("after %v: %v (one watch failure; evictions tried %d times)", d.took, d.err, tries)
	}
	var be *BlockedError
	if !errors.As(d.err, &be) || !slices.Equal(be.Waiting, []string{"app/web-1"}) {
		t.Fatalf("err %v (%T), want *BlockedError waiting for app/web-1", d.err, d.err)
	}
	if tries != 1 {
		t.Logf("evictions tried %d times (the code before the change retries web-1 after its backoff)", tries)
	}
}

// Finding (minor, latent): stopped() takes kubelet's DisruptionTarget
// condition alone (phase still Running) as stopped, but the API server
// ignores a budget only for a terminal phase (canIgnorePDB). A pod seen
// with the condition before its phase spends its one early retry on a
// refusal; when the watch then shows it Failed, it waits for its backoff
// (up to MaxRetryDelay). Current kubelets send the condition with the
// terminal phase (status manager's mergePodStatus), so this needs an older
// kubelet or another writer of TerminationByKubelet.
func TestStoppedFixConditionAloneSpendsTheHurry(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := Classify(*pod("db-0"), false)
	cl := newCluster(&db.Pod)
	cl.Protect("db-0")
	r := reviewRun(clk, ctx, &db)
	r.evictor = newEvictor(cl, nil)
	refused := evictOutcome{pod: &db, result: evictRefused, blocked: &Blocked{Pod: db.Name(), PDB: "db"}}
	if err := r.evicted(refused); err != nil { // the first refusal: backoff
		t.Fatal(err)
	}
	// kubelet's condition with the phase still Running: a budget still
	// refuses it (the API server ignores budgets for terminal pods only),
	// so it is not retried early, and the one early retry is kept.
	r.podChanged(podState{uid: db.Pod.UID, byKubelet: true})
	if n, due := r.inflight[db.Pod.UID], r.due[db.Pod.UID] != 0; n != 0 || !due {
		t.Fatalf("db-0 with kubelet's condition, still Running: %d evictions in flight, due %v: want none, its retry kept", n, due)
	}
	r.podChanged(podState{uid: db.Pod.UID, terminal: true, byKubelet: true}) // now Failed: no budget refuses it
	if n := r.inflight[db.Pod.UID]; n != 1 {
		_, due := r.due[db.Pod.UID]
		t.Fatalf("db-0 Failed: %d evictions in flight, due %v: it waits for its backoff (%d requests so far)", n, due, cl.Evicted("db-0"))
	}
}
