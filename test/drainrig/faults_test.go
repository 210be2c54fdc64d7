package drainrig_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drain/draintest"
	"github.com/gnsh/gnsh/test/internal/faultproxy"
	"github.com/gnsh/gnsh/test/internal/kwok"
)

// Pod list and watch: one path for both.
const podsPath = `^/api/v1/pods$`

// Evictions, in any namespace.
const evictionPath = `^/api/v1/namespaces/[^/]+/pods/[^/]+/eviction$`

// proxied is a faultproxy in front of the rig's API server and the node's
// own client (system:node:NAME) through it, recording its requests in rec.
func (r *rig) proxied(t *testing.T, node string, rec *recorder) (*faultproxy.Proxy, kubernetes.Interface) {
	t.Helper()
	p := faultproxy.ForControlPlane(t, r.cp)
	_, c := client(t, p.Kubeconfig(t, r.cp.NodeKubeconfig(t, node)), rec)
	return p, c
}

// slowPods creates n Running pods of a ReplicaSet on node whose deletion
// kwok finishes after delay at the earliest, at the end of grace at the
// latest.
func (r *rig) slowPods(t *testing.T, ns, node string, n int, delay, grace time.Duration) []string {
	t.Helper()
	rs := r.replicaSet(t, ns, "web", int32(n))
	var names []string
	for i := range n {
		p := newPod(ns, fmt.Sprintf("web-%d", i), node, rs, "ReplicaSet")
		g := int64(grace / time.Second)
		p.Spec.TerminationGracePeriodSeconds = &g
		p.Annotations["pod-delete.stage.kwok.x-k8s.io/delay"] = delay.String()
		names = append(names, ns+"/"+r.createPod(t, r.admin, p).Name)
	}
	r.waitPods(t, node, n, nil)
	return names
}

// drainAsync runs drain.Drain in the background; evicted is closed once
// every eviction is accepted.
func drainAsync(ctx context.Context, c kubernetes.Interface, opts drain.Options) (evicted <-chan struct{}, done <-chan drainResult) {
	ev := make(chan struct{})
	d := make(chan drainResult, 1)
	var once sync.Once
	opts.Progress = func(s drain.Status) {
		if s.Total > 0 && s.Evicted == s.Total {
			once.Do(func() { close(ev) })
		}
	}
	go func() {
		res, err := drain.Drain(ctx, c, opts)
		d <- drainResult{res, err}
	}()
	return ev, d
}

type drainResult struct {
	res *drain.Result
	err error
}

// waitEvicted waits until evicted is closed, failing t if the drain ends
// first.
func waitEvicted(t *testing.T, evicted <-chan struct{}, done <-chan drainResult) {
	t.Helper()
	select {
	case <-evicted:
	case d := <-done:
		t.Fatalf("drain ended before the evictions were accepted: %v", d.err)
	case <-time.After(time.Minute):
		t.Fatal("evictions not accepted within a minute")
	}
}

// 3a. Once the evictions are in, the pod list and watch answer 503 (a
// load balancer without backends): *UnreachableError soon after
// UnreachableAfter, long before the Timeout, saying what it saw. Before,
// every 503 counted as an answer and the drain ran its full Timeout into a
// BlockedError, which makes reboot refuse.
func testServerFailing(t *testing.T, r *rig) {
	const node, ns = "failing", "failing"
	r.fakeNode(t, node)
	r.namespace(t, ns)
	r.slowPods(t, ns, node, 3, 60*time.Second, 60*time.Second)
	rec := &recorder{}
	p, c := r.proxied(t, node, rec)
	ctx := ctxFor(t, 3*time.Minute)
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	const timeout, unreachableAfter = 90 * time.Second, 2 * time.Second
	evicted, done := drainAsync(ctx, c, drain.Options{Node: node, Timeout: timeout, UnreachableAfter: unreachableAfter})
	waitEvicted(t, evicted, done)

	failing := time.Now()
	rule := p.Fail("GET", podsPath, http.StatusServiceUnavailable)
	p.Interrupt() // the open watch ends too
	var d drainResult
	select {
	case d = <-done:
	case <-time.After(timeout):
		t.Fatal("drain still running a full Timeout after the pod list and watch began to fail")
	}
	took := time.Since(failing)
	t.Logf("drain ended %v after the 503s began (%d of them): %v", took.Round(time.Millisecond), rule.Hits(), d.err)
	var ue *drain.UnreachableError
	if !errors.As(d.err, &ue) || !drain.IsAPIFailure(d.err) {
		t.Fatalf("Drain: %v (%T), want *drain.UnreachableError", d.err, d.err)
	}
	if msg := ue.Error(); !strings.HasPrefix(msg, "API server failing for ") || !strings.Contains(msg, "503 Service Unavailable") {
		t.Errorf("message %q", msg)
	}
	if ue.For < unreachableAfter || took > 30*time.Second {
		t.Errorf("gave up after %v failing, %v after the 503s began (UnreachableAfter %v, Timeout %v)", ue.For, took, unreachableAfter, timeout)
	}
	if d.res == nil || d.res.Status.Evicted != 3 || d.res.Status.Gone != 0 {
		t.Errorf("result %+v", d.res)
	}
	rec.noDenials(t)
}

// 3a. 503 for a moment, shorter than UnreachableAfter: the drain carries
// on and finishes.
func testServerFailsBriefly(t *testing.T, r *rig) {
	const node, ns = "blip", "blip"
	r.fakeNode(t, node)
	r.namespace(t, ns)
	r.slowPods(t, ns, node, 3, 3*time.Second, 6*time.Second)
	rec := &recorder{}
	p, c := r.proxied(t, node, rec)
	ctx := ctxFor(t, 3*time.Minute)
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	evicted, done := drainAsync(ctx, c, drain.Options{Node: node, Timeout: time.Minute, UnreachableAfter: 5 * time.Second})
	waitEvicted(t, evicted, done)
	rule := p.Fail("GET", podsPath, http.StatusServiceUnavailable)
	p.Interrupt()
	// Until the drain has met the 503 twice (the watch, the re-list).
	for deadline := time.Now().Add(10 * time.Second); rule.Hits() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	rule.Remove()
	d := <-done
	if d.err != nil {
		t.Fatalf("Drain after %d 503s: %v", rule.Hits(), d.err)
	}
	if rule.Hits() < 2 || d.res.Status.Gone != 3 {
		t.Errorf("%d 503s; status %+v", rule.Hits(), d.res.Status)
	}
	rec.noDenials(t)
}

// 3b. An eviction answered 403 (or 401) ends the drain at once with an
// error for which IsAPIFailure is true: the credentials cannot drain.
func testEvictionDenied(t *testing.T, r *rig) {
	const node, ns = "denied", "denied"
	r.fakeNode(t, node)
	r.namespace(t, ns)
	r.rsPods(t, ns, "web", node, 2)
	r.waitPods(t, node, 2, nil)
	rec := &recorder{}
	p, c := r.proxied(t, node, rec)
	ctx := ctxFor(t, 3*time.Minute)
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	injected := 0
	for _, code := range []int{http.StatusForbidden, http.StatusUnauthorized} {
		rule := p.Fail("POST", evictionPath, code)
		start := time.Now()
		_, err := drain.Drain(ctx, c, drain.Options{Node: node, Timeout: time.Minute})
		took := time.Since(start)
		var be *drain.BlockedError
		var ue *drain.UnreachableError
		if err == nil || errors.As(err, &be) || errors.As(err, &ue) || !drain.IsAPIFailure(err) {
			t.Fatalf("%d: Drain: %v (%T), want an API failure", code, err, err)
		}
		if code == http.StatusForbidden && !apierrors.IsForbidden(err) || code == http.StatusUnauthorized && !apierrors.IsUnauthorized(err) {
			t.Errorf("%d: %v", code, err)
		}
		if took > 20*time.Second {
			t.Errorf("%d: Drain took %v (Timeout 1m): not at once", code, took)
		}
		t.Logf("%d after %v: %v", code, took.Round(time.Millisecond), err)
		injected += rule.Hits()
		rule.Remove()
	}
	// The only refusals are the injected ones.
	_, _, denied := rec.counts()
	for _, d := range denied {
		if !regexp.MustCompile(`^40[13] POST /api/v1/namespaces/denied/pods/web-\d/eviction`).MatchString(d) {
			t.Errorf("refused: %s", d)
		}
	}
	// Both pods' evictions go out at once; the drain ends at the first
	// refusal and may cancel the other before its answer is read.
	if len(denied) < 2 || len(denied) > injected {
		t.Errorf("%d refusals, %d injected", len(denied), injected)
	}
}

// deadNode creates a Node that kwok does not manage (no
// kwok.x-k8s.io/node annotation): nobody finishes its pods' deletion. Its
// status says Ready as given; with a Lease last renewed at renewed, if
// not zero. Its n pods (a ReplicaSet's) stay Pending.
func (r *rig) deadNode(t *testing.T, name string, ready corev1.NodeCondition, renewed time.Time, n int) []string {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	nd := kwok.Node(name, 110)
	delete(nd.Annotations, "kwok.x-k8s.io/node")
	nd, err := r.admin.CoreV1().Nodes().Create(ctx, nd, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready.Type = corev1.NodeReady
	ready.LastHeartbeatTime = metav1.NewTime(time.Now().Add(-3 * time.Minute))
	ready.LastTransitionTime = ready.LastHeartbeatTime
	nd.Status.Conditions = []corev1.NodeCondition{ready}
	if _, err := r.admin.CoreV1().Nodes().UpdateStatus(ctx, nd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !renewed.IsZero() {
		if _, err := r.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx,
			draintest.NodeLease(name, renewed, 40*time.Second), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.namespace(t, name)
	rs := r.replicaSet(t, name, "web", int32(n))
	var names []string
	for i := range n {
		names = append(names, name+"/"+r.createPod(t, r.admin, newPod(name, fmt.Sprintf("web-%d", i), name, rs, "ReplicaSet")).Name)
	}
	return names
}

// 4. The kubelet is dead: the node's Lease was last renewed 3 minutes ago,
// and nobody finishes the evicted pods. *NodeNotReadyError soon after the
// evictions, not a BlockedError at the Timeout. Before, the drain waited
// its full Timeout and reboot refused, so a reboot could not fix a wedged
// kubelet. Also: the kubelet's credentials may GET their own Lease (and
// only theirs).
func testKubeletDead(t *testing.T, r *rig) {
	const node = "deadlease"
	pods := r.deadNode(t, node, corev1.NodeCondition{Status: corev1.ConditionTrue, Reason: "KubeletReady"},
		time.Now().Add(-3*time.Minute), 3)
	ctx := ctxFor(t, 3*time.Minute)
	_, probe := r.nodeClient(t, node, nil)
	l, err := probe.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil {
		t.Fatalf("GET own Lease with the node's credentials: %+v %v", l, err)
	}
	if _, err := probe.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "notready", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("GET another node's Lease: %v, want 403", err)
	}
	rec := &recorder{}
	_, c := r.nodeClient(t, node, rec)
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	const timeout = 90 * time.Second
	evicted, done := drainAsync(ctx, c, drain.Options{Node: node, Timeout: timeout})
	waitEvicted(t, evicted, done)
	since := time.Now()
	var d drainResult
	select {
	case d = <-done:
	case <-time.After(timeout):
		t.Fatal("drain still waiting a full Timeout after the evictions")
	}
	took := time.Since(since)
	t.Logf("%v after the evictions: %v", took.Round(time.Millisecond), d.err)
	var ne *drain.NodeNotReadyError
	if !errors.As(d.err, &ne) || drain.IsAPIFailure(d.err) {
		t.Fatalf("Drain: %v (%T), want *drain.NodeNotReadyError", d.err, d.err)
	}
	if ne.Node != node || !strings.HasPrefix(ne.Reason, "Lease last renewed 3m") || !slices.Equal(ne.Waiting, pods) {
		t.Errorf("%+v, want Waiting %v", ne, pods)
	}
	if took > 20*time.Second {
		t.Errorf("NodeNotReadyError %v after the evictions (Timeout %v)", took, timeout)
	}
	// The pods are still there, being deleted: only a kubelet ends that.
	for _, p := range r.waitPods(t, node, 3, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil }) {
		if p.Status.Phase != corev1.PodPending {
			t.Errorf("%s: %s", p.Name, p.Status.Phase)
		}
	}
	rec.noDenials(t)
}

// 4. No Lease at all: the Node's Ready condition (Unknown, as the node
// lifecycle controller leaves a silent node) says the kubelet is dead.
func testNodeNotReady(t *testing.T, r *rig) {
	const node = "notready"
	r.deadNode(t, node, corev1.NodeCondition{Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		Message: "Kubelet stopped posting node status."}, time.Time{}, 2)
	rec := &recorder{}
	_, c := r.nodeClient(t, node, rec)
	ctx := ctxFor(t, 3*time.Minute)
	if _, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("own Lease: %v, want 404", err)
	}
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	start := time.Now()
	_, err := drain.Drain(ctx, c, drain.Options{Node: node, Timeout: 90 * time.Second})
	var ne *drain.NodeNotReadyError
	if !errors.As(err, &ne) || ne.Reason != "Ready=Unknown (NodeStatusUnknown): Kubelet stopped posting node status." {
		t.Fatalf("Drain: %v (%T), want *drain.NodeNotReadyError", err, err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("NodeNotReadyError after %v (Timeout 90s)", took)
	}
	rec.noDenials(t)
}

// 5. Who owns a cordon, as the real API server records it: gnsh's cordon
// is gnsh's; after an admin's kubectl uncordon and cordon (field manager
// kubectl-cordon; gnsh's annotation stays) it is the admin's, and only an
// explicit uncordon removes it; a schedulable node loses a leftover
// annotation.
func testOwnership(t *testing.T, r *rig) {
	const node = "owned"
	r.fakeNode(t, node)
	rec := &recorder{}
	_, c := r.nodeClient(t, node, rec)
	ctx := ctxFor(t, 2*time.Minute)
	managers := func(n *corev1.Node) []string {
		var m []string
		for _, e := range n.ManagedFields {
			if e.Subresource == "" && strings.Contains(string(e.FieldsV1.Raw), `"f:unschedulable"`) {
				m = append(m, e.Manager)
			}
		}
		return m
	}
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	n := r.getNode(t, node)
	if drain.Owner(n) == nil || !slices.Equal(managers(n), []string{drain.FieldManager}) {
		t.Fatalf("after gnsh's cordon: Owner %v, spec.unschedulable managed by %v", drain.Owner(n), managers(n))
	}
	// An admin's update that leaves spec.unschedulable as it is takes no
	// ownership of it.
	if _, err := r.admin.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`),
		metav1.PatchOptions{FieldManager: draintest.KubectlFieldManager}); err != nil {
		t.Fatal(err)
	}
	if n := r.getNode(t, node); drain.Owner(n) == nil {
		t.Fatalf("an unchanged value changed hands: %v", managers(n))
	}
	// kubectl uncordon, then kubectl cordon.
	for _, u := range []bool{false, true} {
		if err := draintest.KubectlCordon(ctx, r.admin, node, u); err != nil {
			t.Fatal(err)
		}
	}
	n = r.getNode(t, node)
	if _, ok := n.Annotations[drain.CordonAnnotation]; !ok || !n.Spec.Unschedulable {
		t.Fatalf("after kubectl uncordon and cordon: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	if o := drain.Owner(n); o != nil || !slices.Equal(managers(n), []string{draintest.KubectlFieldManager}) {
		t.Fatalf("the admin's cordon: Owner %+v, spec.unschedulable managed by %v", o, managers(n))
	}
	if ok, err := drain.Uncordon(ctx, c, node, drain.Ours, nil); ok || err != nil || !r.getNode(t, node).Spec.Unschedulable {
		t.Fatalf("Uncordon(Ours) of the admin's cordon: %v %v", ok, err)
	}
	if ok, err := drain.Uncordon(ctx, c, node, nil, nil); !ok || err != nil {
		t.Fatalf("Uncordon(nil): %v %v", ok, err)
	}
	n = r.getNode(t, node)
	if _, ok := n.Annotations[drain.CordonAnnotation]; ok || n.Spec.Unschedulable {
		t.Fatalf("after Uncordon(nil): unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}

	// gnsh's cordon again; the admin uncordons: the annotation is left over.
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	if err := draintest.KubectlCordon(ctx, r.admin, node, false); err != nil {
		t.Fatal(err)
	}
	if ok, err := drain.Uncordon(ctx, c, node, drain.Ours, nil); ok || err != nil {
		t.Fatalf("Uncordon(Ours) of a schedulable node: %v %v", ok, err)
	}
	n = r.getNode(t, node)
	if _, ok := n.Annotations[drain.CordonAnnotation]; ok || n.Spec.Unschedulable {
		t.Fatalf("leftover annotation: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	rec.noDenials(t)
}
