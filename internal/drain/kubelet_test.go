package drain

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/drain/draintest"
)

// kubeletCluster is draintest's fake with node1 (Ready as given, if not
// ""), its Lease if renewed is not zero, and stuck pods: evictions are
// accepted, but nothing finishes them.
func kubeletCluster(ready corev1.ConditionStatus, renewed time.Time, pods ...*corev1.Pod) *cluster {
	n := node(true, nil)
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready,
			Reason: "KubeletNotReady", Message: "container runtime is down"}}
		if ready == corev1.ConditionTrue {
			n.Status.Conditions[0].Reason, n.Status.Conditions[0].Message = "KubeletReady", "kubelet is posting ready status"
		}
	}
	objs := []runtime.Object{n}
	if !renewed.IsZero() {
		objs = append(objs, draintest.NodeLease("node1", renewed, 40*time.Second))
	}
	var names []string
	for _, p := range pods {
		objs = append(objs, p)
		names = append(names, p.Name)
	}
	cl := &cluster{draintest.New(objs...)}
	cl.Stick(names...)
	return cl
}

// leaseGets counts the Lease GETs made.
func (cl *cluster) leaseGets() int {
	n := 0
	for _, a := range cl.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "leases" {
			if a.GetNamespace() != "kube-node-lease" || a.(k8stesting.GetAction).GetName() != "node1" {
				panic(a)
			}
			n++
		}
	}
	return n
}

// The kubelet is dead (its Lease last renewed 3 minutes ago): once the
// evictions are accepted, *NodeNotReadyError at once instead of waiting
// for the Timeout.
func TestDrainKubeletDead(t *testing.T) {
	cl := kubeletCluster(corev1.ConditionTrue, fakeNow.Add(-3*time.Minute), pod("web-1"), pod("web-2"), pod("agent", func(p *corev1.Pod) {
		p.OwnerReferences = ctrl("DaemonSet", "agent")
	}))
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute}, 100*time.Millisecond, nil)
	var ne *NodeNotReadyError
	if !errors.As(d.err, &ne) {
		t.Fatalf("err %v (%T), want *NodeNotReadyError", d.err, d.err)
	}
	if ne.Node != "node1" || ne.Reason != "Lease last renewed 3m0s ago (duration 40s)" ||
		!slices.Equal(ne.Waiting, []string{"app/web-1", "app/web-2"}) {
		t.Fatalf("%+v", ne)
	}
	if want := "the kubelet of node1 is not alive: Lease last renewed 3m0s ago (duration 40s); it cannot finish the 2 pods still terminating: app/web-1, app/web-2"; ne.Error() != want {
		t.Errorf("message\n%q, want\n%q", ne.Error(), want)
	}
	if IsAPIFailure(d.err) || d.took > time.Second || d.res.Status.Evicted != 2 {
		t.Errorf("after %v: IsAPIFailure %v, status %+v", d.took, IsAPIFailure(d.err), d.res.Status)
	}
	if n := cl.leaseGets(); n != 1 {
		t.Errorf("%d Lease GETs", n)
	}
	cl.forbiddenCalls(t)
}

// No Lease: the Node's Ready condition says.
func TestDrainNodeNotReady(t *testing.T) {
	for _, ready := range []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionUnknown} {
		cl := kubeletCluster(ready, time.Time{}, pod("web-1"))
		d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute}, 100*time.Millisecond, nil)
		var ne *NodeNotReadyError
		if !errors.As(d.err, &ne) || ne.Reason != "Ready="+string(ready)+" (KubeletNotReady): container runtime is down" {
			t.Fatalf("err %v (%T), want *NodeNotReadyError", d.err, d.err)
		}
	}
}

// A live kubelet: the drain waits, checking every few seconds, until its
// Timeout. Neither a fresh Lease nor (without one) Ready=True, nor a Node
// without a Ready condition, stop it.
func TestDrainKubeletAlive(t *testing.T) {
	for name, cl := range map[string]*cluster{
		"lease":        kubeletCluster(corev1.ConditionFalse, fakeNow, pod("web-1")),
		"ready":        kubeletCluster(corev1.ConditionTrue, time.Time{}, pod("web-1")),
		"no condition": kubeletCluster("", time.Time{}, pod("web-1")),
	} {
		d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 30 * time.Second}, 100*time.Millisecond, nil)
		var be *BlockedError
		if !errors.As(d.err, &be) || !slices.Equal(be.Waiting, []string{"app/web-1"}) {
			t.Fatalf("%s: err %v (%T), want *BlockedError", name, d.err, d.err)
		}
		// At once, then every 5 s: 7 checks in 30 s, one GET each (the
		// Lease, or the Node when there is none).
		gets := 0
		for _, a := range cl.Actions() {
			if a.GetVerb() == "get" {
				gets++
			}
		}
		if gets < 5 || gets > 8 {
			t.Errorf("%s: %d GETs in 30 s", name, gets)
		}
	}
}

// The kubelet dies while the drain waits: the next check after its Lease
// expires ends the drain.
func TestDrainKubeletDiesWhileWaiting(t *testing.T) {
	cl := kubeletCluster(corev1.ConditionTrue, fakeNow, pod("web-1"))
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute}, 200*time.Millisecond, nil)
	var ne *NodeNotReadyError
	if !errors.As(d.err, &ne) || !strings.HasPrefix(ne.Reason, "Lease last renewed 4") {
		t.Fatalf("err %v (%T), want *NodeNotReadyError", d.err, d.err)
	}
	if d.took < 40*time.Second || d.took > 40*time.Second+2*kubeletCheckInterval {
		t.Errorf("ended after %v; the Lease expired after 40s", d.took)
	}
}

// While a pod is still refused its eviction the kubelet is not asked: a
// PodDisruptionBudget keeps the normal rules, whatever the kubelet.
func TestDrainKubeletCheckWaitsForEvictions(t *testing.T) {
	cl := kubeletCluster(corev1.ConditionTrue, fakeNow.Add(-3*time.Minute), pod("web-1"), pod("db-0"))
	cl.Protect("db-0")
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 20 * time.Second}, 100*time.Millisecond, nil)
	var be *BlockedError
	if !errors.As(d.err, &be) || len(be.Blocked) != 1 || !slices.Equal(be.Waiting, []string{"app/web-1"}) {
		t.Fatalf("err %v (%T), want *BlockedError", d.err, d.err)
	}
	if n := cl.leaseGets(); n != 0 {
		t.Errorf("%d Lease GETs while an eviction was refused", n)
	}
}

// Pods already terminating when the drain starts (a second run after a
// first one timed out): nothing to evict, the kubelet is checked at once.
func TestDrainOnlyTerminatingDeadKubelet(t *testing.T) {
	dying := func(p *corev1.Pod) {
		now := metav1.NewTime(fakeNow.Add(-time.Hour))
		p.DeletionTimestamp = &now
		p.Finalizers = []string{"x"}
	}
	cl := kubeletCluster(corev1.ConditionTrue, fakeNow.Add(-time.Hour), pod("web-1", dying))
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute}, 100*time.Millisecond, nil)
	var ne *NodeNotReadyError
	if !errors.As(d.err, &ne) || d.took > time.Second || cl.Evictions() != 0 {
		t.Fatalf("err %v (%T) after %v, %d evictions; want *NodeNotReadyError at once", d.err, d.err, d.took, cl.Evictions())
	}
}

// An identity that may not GET Leases (a dedicated one without that rule)
// asks the Node instead, and asks for the Lease only once.
func TestDrainLeaseForbidden(t *testing.T) {
	for _, ready := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse} {
		cl := kubeletCluster(ready, fakeNow.Add(-time.Hour), pod("web-1"))
		cl.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "node1", errors.New("no"))
		})
		d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 20 * time.Second}, 100*time.Millisecond, nil)
		var ne *NodeNotReadyError
		var be *BlockedError
		switch {
		case ready == corev1.ConditionFalse && !errors.As(d.err, &ne):
			t.Fatalf("Ready=False: err %v (%T), want *NodeNotReadyError", d.err, d.err)
		case ready == corev1.ConditionTrue && !errors.As(d.err, &be):
			t.Fatalf("Ready=True: err %v (%T), want *BlockedError", d.err, d.err)
		}
		if n := cl.leaseGets(); n != 1 {
			t.Errorf("Ready=%s: %d Lease GETs", ready, n)
		}
	}
}

// A check that gets no answer (API server down) stops nothing; the
// failures of the pod list and watch are what count.
func TestDrainKubeletCheckFails(t *testing.T) {
	cl := kubeletCluster(corev1.ConditionFalse, time.Time{}, pod("web-1"))
	cl.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 20 * time.Second}, 100*time.Millisecond, nil)
	var be *BlockedError
	if !errors.As(d.err, &be) {
		t.Fatalf("err %v (%T), want *BlockedError", d.err, d.err)
	}
}
