package drain

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
