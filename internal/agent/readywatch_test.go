package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
)

// notReadyNode is gnsh's cordon of the last boot on a Node the kubelet
// reports NotReady in this boot.
func notReadyNode() *corev1.Node {
	own := cordonedBy("reboot", lastBoot)
	n := newNode(&own, t0)
	n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = corev1.ConditionFalse, "KubeletNotReady"
	return n
}

// turnReady posts Ready=True with a heartbeat of now, as the kubelet does.
func (f *fixture) turnReady(t *testing.T, now time.Time) {
	t.Helper()
	n := f.node(t)
	n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = corev1.ConditionTrue, "KubeletReady"
	n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(now)
	if _, err := f.cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runAsync starts Run and returns its result channel.
func (f *fixture) runAsync(ctx context.Context) <-chan Result {
	done := make(chan Result, 1)
	go func() {
		r, _ := f.u.Run(ctx)
		done <- r
	}()
	return done
}

// waitWaiters waits (real time, bounded) until Run waits on the fake clock.
func (f *fixture) waitWaiters(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !f.fc.HasWaiters(); {
		if time.Now().After(deadline) {
			t.Fatalf("Run never waited; log:\n%s", f.out)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestUncordonFollowsReadyOnTheWatch(t *testing.T) {
	// The kubelet posts Ready while the agent waits: the agent reads the
	// Node again at once, not a ReadyPoll later. The fake clock never
	// moves, so only the watch can wake it.
	f := newFixture(notReadyNode())
	var watched []metav1.ListOptions
	f.cs.PrependWatchReactor("nodes", func(a k8stesting.Action) (bool, watch.Interface, error) {
		watched = append(watched, a.(k8stesting.WatchActionImpl).ListOptions)
		return false, nil, nil
	})
	done := f.runAsync(context.Background())
	f.waitWaiters(t)
	f.turnReady(t, t0)
	select {
	case r := <-done:
		if r.Outcome != Uncordoned {
			t.Fatalf("result %+v; log:\n%s", r, f.out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not uncordoned when the Node turned Ready (the clock did not move); log:\n%s", f.out)
	}
	if !f.fc.Now().Equal(t0) {
		t.Errorf("the clock moved to %s", f.fc.Now())
	}
	if len(watched) != 1 || watched[0].FieldSelector != "metadata.name="+nodeName ||
		watched[0].TimeoutSeconds == nil || *watched[0].TimeoutSeconds != int64(DefaultReadyWatchMax/time.Second) {
		t.Errorf("watches %+v, want one of %s bounded by %s", watched, nodeName, DefaultReadyWatchMax)
	}
}

// watches makes the fake's node watches signal on opened as they open,
// through respond (the fake's own watch if nil).
func (f *fixture) watches(respond func() (watch.Interface, error)) <-chan struct{} {
	opened := make(chan struct{}, 100)
	f.cs.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		defer func() { opened <- struct{}{} }()
		if respond == nil {
			return false, nil, nil
		}
		w, err := respond()
		return true, w, err
	})
	return opened
}

// await waits (real time, bounded) for a signal on c.
func await(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not happen", what)
	}
}

// finish waits for Run's end (real time, bounded): uncordoned.
func (f *fixture) finish(t *testing.T, done <-chan Result) {
	t.Helper()
	select {
	case r := <-done:
		if r.Outcome != Uncordoned {
			t.Fatalf("result %+v; log:\n%s", r, f.out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not uncordoned; log:\n%s", f.out)
	}
}

func TestReadyWatchIgnoresOtherChanges(t *testing.T) {
	// A change that does not touch readiness (a label), or another Node,
	// does not make the agent read again; the bound does.
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}
	f := newFixture(notReadyNode(), other)
	opened := f.watches(nil)
	done := f.runAsync(context.Background())
	await(t, opened, "the first watch")
	f.waitWaiters(t)
	n := f.node(t)
	gets := f.cs.Requests("get", "nodes")
	n.Labels = map[string]string{"x": "y"}
	if _, err := f.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	other.Labels = map[string]string{"x": "y"}
	if _, err := f.cs.CoreV1().Nodes().Update(context.Background(), other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-opened:
		t.Fatalf("read again after changes that do not touch Ready; log:\n%s", f.out)
	case <-time.After(100 * time.Millisecond):
	}
	if g := f.cs.Requests("get", "nodes"); g != gets {
		t.Errorf("%d reads of the Node after changes that do not touch Ready", g-gets)
	}
	f.fc.Step(DefaultReadyWatchMax) // the bound: read again, still NotReady, watch again
	await(t, opened, "the watch after the bound")
	if g := f.cs.Requests("get", "nodes"); g != gets+1 {
		t.Errorf("%d reads at the bound, want one", g-gets)
	}
	f.waitWaiters(t)
	f.turnReady(t, t0.Add(DefaultReadyWatchMax))
	f.finish(t, done)
}

func TestReadyWatchRefusedFallsBackOnThePoll(t *testing.T) {
	// No watch (a credential that may not watch, an old proxy): the agent
	// reads the Node every ReadyPoll as before.
	f := newFixture(notReadyNode())
	opened := f.watches(func() (watch.Interface, error) {
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", nil)
	})
	done := f.runAsync(context.Background())
	await(t, opened, "the first watch")
	f.waitWaiters(t)
	gets := f.cs.Requests("get", "nodes")
	f.fc.Step(DefaultReadyPoll)
	for deadline := time.Now().Add(10 * time.Second); f.cs.Requests("get", "nodes") == gets; {
		if time.Now().After(deadline) {
			t.Fatalf("the Node not read again after the poll; log:\n%s", f.out)
		}
		time.Sleep(time.Millisecond)
	}
	f.waitWaiters(t)
	f.turnReady(t, f.fc.Now())
	f.fc.Step(DefaultReadyPoll)
	f.finish(t, done)
	if !f.fc.Now().Equal(t0.Add(2 * DefaultReadyPoll)) {
		t.Errorf("uncordoned at %s", f.fc.Now())
	}
	select {
	case <-opened:
		t.Error("the refused watch was asked for again")
	default:
	}
}

func TestReadyWatchEndedFallsBackOnThePoll(t *testing.T) {
	// The watch ends (the API server went away): the agent reads the Node
	// again a ReadyPoll later, not only at the bound.
	f := newFixture(notReadyNode())
	f.u.Debug = true
	ws := make(chan *watch.FakeWatcher, 10)
	opened := f.watches(func() (watch.Interface, error) {
		w := watch.NewFake()
		ws <- w
		return w, nil
	})
	done := f.runAsync(context.Background())
	await(t, opened, "the first watch")
	(<-ws).Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonGone})
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(f.out.String(), "the watch of the Node ended: looking again in 5s"); {
		if time.Now().After(deadline) {
			t.Fatalf("log:\n%s", f.out)
		}
		time.Sleep(time.Millisecond)
	}
	f.turnReady(t, t0)
	f.fc.Step(DefaultReadyPoll)
	f.finish(t, done)
}
