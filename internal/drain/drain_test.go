package drain

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/drain/draintest"
	k8stesting "k8s.io/client-go/testing"
	testclock "k8s.io/utils/clock/testing"
)

func ctrl(kind, name string) []metav1.OwnerReference {
	t := true
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(name), Controller: &t}}
}

func pod(name string, mod ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", UID: types.UID("uid-" + name), OwnerReferences: ctrl("ReplicaSet", "web")},
		Spec:       corev1.PodSpec{NodeName: "node1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mod {
		m(p)
	}
	return p
}

func TestClassify(t *testing.T) {
	now := metav1.Now()
	for _, tt := range []struct {
		pod     *corev1.Pod
		verdict Verdict
		warning string
	}{
		{pod("web"), Evict, ""},
		{pod("ds", func(p *corev1.Pod) { p.OwnerReferences = ctrl("DaemonSet", "agent") }), SkipDaemonSet, ""},
		{pod("static", func(p *corev1.Pod) { p.Annotations = map[string]string{MirrorAnnotation: "x"}; p.OwnerReferences = nil }), SkipMirror, ""},
		{pod("done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded; p.OwnerReferences = nil }), SkipFinished, ""},
		{pod("failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), SkipFinished, ""},
		{pod("dying", func(p *corev1.Pod) { p.DeletionTimestamp = &now }), Terminating, ""},
		{pod("bare", func(p *corev1.Pod) { p.OwnerReferences = nil }), Evict, "declares no controller: it will not be recreated elsewhere"},
		{pod("cache", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}), Evict, "uses emptyDir: its data is lost"},
		{pod("bare-cache", func(p *corev1.Pod) {
			p.OwnerReferences = nil
			p.Spec.Volumes = []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}), Evict, "declares no controller: it will not be recreated elsewhere; uses emptyDir: its data is lost"},
		{pod("owned-not-controller", func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }), Evict, "declares no controller: it will not be recreated elsewhere"},
	} {
		got := Classify(*tt.pod, false)
		if got.Verdict != tt.verdict || got.Warning != tt.warning {
			t.Errorf("%s: %v %q, want %v %q", tt.pod.Name, got.Verdict, got.Warning, tt.verdict, tt.warning)
		}
	}
}

func node(unschedulable bool, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: ann}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
}

func getNode(t *testing.T, c kubernetes.Interface) *corev1.Node {
	n, err := c.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cluster is draintest's fake API server with the node and pods given.
type cluster struct{ *draintest.Cluster }

func newCluster(pods ...*corev1.Pod) *cluster {
	objs := []runtime.Object{node(true, nil)}
	for _, p := range pods {
		objs = append(objs, p)
	}
	return &cluster{draintest.New(objs...)}
}

func (cl *cluster) forbiddenCalls(t *testing.T) {
	t.Helper()
	for _, a := range cl.Actions() {
		if a.GetResource().Resource == "daemonsets" {
			t.Errorf("drain touched DaemonSets: %v", a)
		}
		if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
			t.Errorf("drain GETs a pod (403 after deletion with kubelet credentials): %v", a)
		}
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
			if fs := a.(k8stesting.ListAction).GetListRestrictions().Fields.String(); fs != "spec.nodeName=node1" {
				t.Errorf("pod list without spec.nodeName selector: %q", fs)
			}
		}
	}
}

func TestDrain(t *testing.T) {
	now := metav1.Now()
	cl := newCluster(
		pod("web-1"), pod("web-2"),
		pod("agent", func(p *corev1.Pod) { p.OwnerReferences = ctrl("DaemonSet", "agent") }),
		pod("static", func(p *corev1.Pod) { p.Annotations = map[string]string{MirrorAnnotation: "m"}; p.OwnerReferences = nil }),
		pod("job-done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("bare", func(p *corev1.Pod) { p.OwnerReferences = nil }),
		pod("dying", func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Finalizers = []string{"x"} }),
	)
	// The already-terminating pod goes away on its own.
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = cl.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "app", "dying")
	}()
	var warnings []string
	var last Status
	res, err := Drain(context.Background(), cl, Options{Node: "node1", Timeout: 10 * time.Second,
		Warn: func(s string) { warnings = append(warnings, s) }, Progress: func(s Status) { last = s }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status.Total != 4 || res.Status.Evicted != 3 || res.Status.Gone != 4 || last.Gone != 4 || last.Terminating != 0 {
		t.Fatalf("status %+v", res.Status)
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "app/bare declares no controller") {
		t.Fatalf("warnings %q", warnings)
	}
	for _, n := range []string{"agent", "static", "job-done", "dying"} {
		if cl.Evicted(n) != 0 {
			t.Errorf("%s was evicted", n)
		}
	}
	cl.forbiddenCalls(t)
}

func TestDrainBlockedByPDB(t *testing.T) {
	cl := newCluster(pod("web-1"), pod("db-0"), pod("db-1"))
	cl.Protect("db-0", "db-1")
	// A 429 from a PodDisruptionBudget is no API failure: however short
	// UnreachableAfter, the drain runs to its Timeout.
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 1500 * time.Millisecond, UnreachableAfter: 200 * time.Millisecond,
		RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 400 * time.Millisecond}, 20*time.Millisecond, nil)
	var be *BlockedError
	if !errors.As(d.err, &be) {
		t.Fatalf("err %v, want BlockedError", d.err)
	}
	if d.took < 1500*time.Millisecond {
		t.Fatalf("BlockedError after %v, before the Timeout", d.took)
	}
	if len(be.Blocked) != 2 || be.Blocked[0].Pod != "app/db-0" || be.Blocked[0].PDB != "db-pdb" {
		t.Fatalf("blocked %+v", be.Blocked)
	}
	if !strings.Contains(be.Error(), "app/db-0 (PodDisruptionBudget db-pdb), app/db-1 (PodDisruptionBudget db-pdb)") {
		t.Fatalf("message %q", be.Error())
	}
	if IsAPIFailure(d.err) {
		t.Fatalf("IsAPIFailure(%v)", d.err)
	}
	// Backoff, not a hot loop: 100, 200, 400, 400 ms … ≈ 5 tries in 1.5 s.
	if n := cl.Evicted("db-0"); n < 2 || n > 8 {
		t.Fatalf("db-0 evicted %d times in 1.5 s", n)
	}
	cl.forbiddenCalls(t)
}

func TestDrainEmptyNode(t *testing.T) {
	cl := newCluster(pod("agent", func(p *corev1.Pod) { p.OwnerReferences = ctrl("DaemonSet", "a") }))
	res, err := Drain(context.Background(), cl, Options{Node: "node1", Timeout: time.Second})
	if err != nil || res.Status.Total != 0 || len(res.Pods) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		d := backoff(time.Second, 5*time.Second, n)
		if d < want*8/10 || d > want*12/10 {
			t.Errorf("backoff(%d) = %v, want %v ±20%%", n, d, want)
		}
	}
}

// An API server that stops answering mid-drain ends the drain with
// *UnreachableError after UnreachableAfter, well before the drain timeout.
func TestDrainUnreachableMidDrain(t *testing.T) {
	cl := newCluster(pod("web-1"), pod("web-2"))
	down := &url.Error{Op: "Post", URL: "https://127.0.0.1:1/api", Err: syscall.ECONNREFUSED}
	cl.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, down
	})
	cl.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) { return true, nil, down })
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 30 * time.Second,
		RetryDelay: 50 * time.Millisecond, UnreachableAfter: 300 * time.Millisecond}, 50*time.Millisecond, nil)
	var ue *UnreachableError
	if !errors.As(d.err, &ue) || !IsUnreachable(d.err) || !IsAPIFailure(d.err) {
		t.Fatalf("err %v, want UnreachableError", d.err)
	}
	if ue.For < 300*time.Millisecond || d.took > 10*time.Second {
		t.Fatalf("gave up after %v, unreachable for %v", d.took, ue.For)
	}
	if !strings.HasPrefix(ue.Error(), "API server unreachable for ") || !strings.Contains(ue.Error(), "connection refused") {
		t.Fatalf("message %q", ue.Error())
	}
}

func TestIsUnreachable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&url.Error{Op: "Get", URL: "x", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("cordon: %w", syscall.ECONNRESET), true},
		{apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n", errors.New("no")), false},
		{apierrors.NewTooManyRequests("pdb", 1), false},
		{nil, false},
	} {
		if got := IsUnreachable(c.err); got != c.want {
			t.Errorf("IsUnreachable(%v) = %v", c.err, got)
		}
	}
}

// drained is what fakeDrain saw.
type drained struct {
	res  *Result
	err  error
	took time.Duration // on the fake clock
}

// fakeDrain runs Drain on a FakeClock and moves that clock on by step
// about every millisecond of real time, so that the drain's goroutines and
// the fake API server keep up, until Drain returns. No test waits for a
// timeout in real time: a drain of five fake minutes takes 300 real
// milliseconds at a step of a second. each, if set, is called before
// every step with the fake time so far.
func fakeDrain(t *testing.T, c kubernetes.Interface, opts Options, step time.Duration, each func(time.Duration)) drained {
	t.Helper()
	clk := testclock.NewFakeClock(fakeNow)
	opts.Clock = clk
	done := make(chan drained, 1)
	go func() {
		res, err := Drain(context.Background(), c, opts)
		done <- drained{res: res, err: err}
	}()
	limit := opts.Timeout + time.Minute
	for {
		select {
		case d := <-done:
			d.took = clk.Since(fakeNow)
			return d
		case <-time.After(time.Millisecond):
		}
		took := clk.Since(fakeNow)
		if took > limit {
			t.Fatalf("Drain still running after %v on the fake clock (Timeout %v)", took, opts.Timeout)
		}
		if each != nil {
			each(took)
		}
		clk.Step(step)
	}
}

// fakeNow is when fakeDrain's clock starts.
var fakeNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// An eviction whose pod the watch sees gone before the eviction's answer
// comes back still counts as evicted, once: the drain may end as soon as
// the last pod is gone, without waiting for that answer (test/drainrig once
// saw Evicted 1 of 2 on a real API server). The fake API server cannot
// hold an answer back (it answers under its lock), so this drives the
// run's bookkeeping directly.
func TestEvictedCountedWhenGoneFirst(t *testing.T) {
	clk := testclock.NewFakeClock(fakeNow)
	web := Classify(*pod("web-1"), false)
	r := &run{opts: Options{}, clk: clk, start: clk.Now(), res: &Result{},
		pending:     map[types.UID]*Pod{web.Pod.UID: &web},
		blocked:     map[types.UID]Blocked{},
		terminating: map[types.UID]bool{}, serverFailed: map[types.UID]bool{},
		health: &health{clk: clk}}
	if !r.podGone(web.Pod.UID) {
		t.Fatal("the last pod gone did not end the drain")
	}
	if err := r.evicted(evictOutcome{pod: &web, result: evictAccepted}); err != nil { // the late answer
		t.Fatal(err)
	}
	if s := r.res.Status; s.Gone != 1 || s.Evicted != 1 {
		t.Fatalf("status %+v, want 1 gone, 1 evicted", s)
	}
	// A pod whose eviction was refused and that went anyway was not evicted.
	db := Classify(*pod("db-0"), false)
	r.pending[db.Pod.UID] = &db
	r.blocked[db.Pod.UID] = Blocked{Pod: db.Name(), PDB: "db"}
	r.podGone(db.Pod.UID)
	if s := r.res.Status; s.Gone != 2 || s.Evicted != 1 {
		t.Fatalf("status %+v, want 2 gone, 1 evicted", s)
	}
}

// strictDrain: the pods kubectl drain refuses (emptyDir, no controller)
// are Refused, naming why; every other verdict is unchanged.
func TestClassifyStrict(t *testing.T) {
	now := metav1.Now()
	emptyDir := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	for _, tt := range []struct {
		pod     *corev1.Pod
		verdict Verdict
		kubectl string
	}{
		{pod("web"), Evict, ""},
		{pod("bare", func(p *corev1.Pod) { p.OwnerReferences = nil }), Refused, "declares no controller"},
		{pod("cache", emptyDir), Refused, "uses emptyDir"},
		{pod("bare-cache", func(p *corev1.Pod) { p.OwnerReferences = nil; emptyDir(p) }), Refused, "declares no controller, uses emptyDir"},
		// What the drain leaves anyway stays as it is.
		{pod("ds", func(p *corev1.Pod) { p.OwnerReferences = ctrl("DaemonSet", "agent"); emptyDir(p) }), SkipDaemonSet, ""},
		{pod("static", func(p *corev1.Pod) { p.Annotations = map[string]string{MirrorAnnotation: "x"}; p.OwnerReferences = nil }), SkipMirror, ""},
		{pod("done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded; p.OwnerReferences = nil }), SkipFinished, ""},
		{pod("dying", func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.OwnerReferences = nil }), Terminating, ""},
	} {
		got := Classify(*tt.pod, true)
		if got.Verdict != tt.verdict || got.Kubectl != tt.kubectl {
			t.Errorf("%s: %v %q, want %v %q", tt.pod.Name, got.Verdict, got.Kubectl, tt.verdict, tt.kubectl)
		}
		if lax := Classify(*tt.pod, false); lax.Verdict == Refused || lax.Kubectl != tt.kubectl {
			t.Errorf("%s without strict: %v %q", tt.pod.Name, lax.Verdict, lax.Kubectl)
		}
	}
}

// With Strict, such a pod blocks the drain as a PodDisruptionBudget that
// never allows, without waiting for the timeout: without EvictRest nothing
// is evicted (kubectl drain's refusal); with it every other pod goes
// first. Either way the error names them.
func TestDrainStrict(t *testing.T) {
	pods := func() *cluster {
		return newCluster(pod("web-1"), pod("bare", func(p *corev1.Pod) { p.OwnerReferences = nil }),
			pod("cache", func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			}))
	}
	want := "strictDrain: node1 holds pods that kubectl drain refuses to evict (without --delete-emptydir-data or --force): " +
		"app/bare (declares no controller), app/cache (uses emptyDir)"
	cl := pods()
	res, err := Drain(context.Background(), cl, Options{Node: "node1", Timeout: time.Hour, Strict: true})
	var be *BlockedError
	if !errors.As(err, &be) || !be.StrictOnly() || be.Error() != want || cl.Evictions() != 0 {
		t.Fatalf("refuse: %v (%d evictions)", err, cl.Evictions())
	}
	if len(res.Pods) != 3 || res.Status.Evicted != 0 {
		t.Fatalf("result %+v", res)
	}
	cl = pods()
	res, err = Drain(context.Background(), cl, Options{Node: "node1", Timeout: time.Hour, Strict: true, EvictRest: true})
	if !errors.As(err, &be) || !be.StrictOnly() || be.Error() != want {
		t.Fatalf("evict the rest: %v", err)
	}
	if cl.Evicted("web-1") != 1 || cl.Evicted("bare") != 0 || cl.Evicted("cache") != 0 || res.Status.Gone != 1 {
		t.Fatalf("evictions web-1 %d bare %d cache %d, status %+v", cl.Evicted("web-1"), cl.Evicted("bare"), cl.Evicted("cache"), res.Status)
	}
	// Without Strict: all three go, with a warning each (the default).
	cl = pods()
	if _, err := Drain(context.Background(), cl, Options{Node: "node1", Timeout: time.Hour}); err != nil || cl.Evictions() != 3 {
		t.Fatalf("default: %v, %d evictions", err, cl.Evictions())
	}
	// A PodDisruptionBudget that holds until the timeout: both said.
	cl = newCluster(pod("db-0"), pod("bare", func(p *corev1.Pod) { p.OwnerReferences = nil }))
	cl.Protect("db-0")
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 500 * time.Millisecond, Strict: true, EvictRest: true,
		RetryDelay: 100 * time.Millisecond}, 20*time.Millisecond, nil)
	if !errors.As(d.err, &be) || be.StrictOnly() ||
		!strings.Contains(be.Error(), "eviction refused for app/db-0 (PodDisruptionBudget db-pdb); not evicted (strictDrain): app/bare (declares no controller)") {
		t.Fatalf("with a PDB: %v", d.err)
	}
}
