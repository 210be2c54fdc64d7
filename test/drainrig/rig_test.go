// Package drainrig_test drives internal/drain and internal/kube against a
// real kube-apiserver (test/internal/controlplane: Node,RBAC authorization,
// NodeRestriction, the disruption controller, kwok as the kubelet of Nodes
// annotated kwok.x-k8s.io/node=fake). The drain runs with the node's own
// client certificate (system:node:NAME), as gnsh does by default; set-up
// uses the admin.
//
// The tests skip when the control plane cannot be started here and fail
// instead under GNSH_REQUIRE_RIGS=1. Build the binaries once with
// test/k8s/build.sh.
package drainrig_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/test/internal/controlplane"
	"github.com/gnsh/gnsh/test/internal/kwok"
)

// rig is one control plane shared by parallel subtests, each on its own
// Node and namespace.
type rig struct {
	cp    *controlplane.ControlPlane
	admin kubernetes.Interface // unthrottled
	mu    sync.Mutex           // serialises controlplane.sh user (one openssl CA serial file)
}

// startRig starts a control plane with kwok and node identities for nodes
// (created up front: controlplane.sh's CA serial file is not safe for
// concurrent use).
func startRig(t *testing.T, nodes ...string) *rig {
	t.Helper()
	controlplane.Need(t)
	cp := controlplane.StartWith(t, controlplane.Options{Kwok: true, Nodes: nodes})
	cfg, err := (&kube.Locator{Timeout: 30 * time.Second}).RESTConfig(cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	return &rig{cp: cp, admin: kubernetes.NewForConfigOrDie(cfg)}
}

// userKubeconfig is cp.UserKubeconfig, safe for parallel subtests.
func (r *rig) userKubeconfig(t *testing.T, name string, groups ...string) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cp.UserKubeconfig(t, name, groups...)
}

// client builds a client from kubeconfig the way gnsh does
// (kube.Locator.RESTConfig: QPS 100, 5 s per request, user agent gnsh),
// recording every request in rec if rec is not nil.
func client(t *testing.T, kubeconfig string, rec *recorder) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	cfg, err := (&kube.Locator{}).RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if rec != nil {
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &recordingRT{next: rt, rec: rec} })
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}

// nodeClient is the client of the kubelet identity system:node:NAME,
// from a kubeconfig shaped like kubeadm's kubelet.conf.
func (r *rig) nodeClient(t *testing.T, node string, rec *recorder) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	return client(t, r.cp.NodeKubeconfig(t, node), rec)
}

// recorder counts API requests and keeps those answered 401 or 403.
type recorder struct {
	mu     sync.Mutex
	total  int
	byVerb map[string]int
	denied []string
}

type recordingRT struct {
	next http.RoundTripper
	rec  *recorder
}

func (rt *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	r := rt.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	if r.byVerb == nil {
		r.byVerb = map[string]int{}
	}
	verb := req.Method
	if req.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	} else if strings.HasSuffix(req.URL.Path, "/eviction") {
		verb = "EVICT"
	}
	r.byVerb[verb]++
	if err == nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized) {
		r.denied = append(r.denied, fmt.Sprintf("%d %s %s", resp.StatusCode, req.Method, req.URL.RequestURI()))
	}
	return resp, err
}

func (r *recorder) counts() (int, map[string]int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]int{}
	for k, v := range r.byVerb {
		m[k] = v
	}
	return r.total, m, append([]string(nil), r.denied...)
}

// noDenials fails t if any recorded request was refused, but for those
// matching except, if given.
func (r *recorder) noDenials(t *testing.T, except ...*regexp.Regexp) {
	t.Helper()
	_, _, denied := r.counts()
	var d []string
	for _, s := range denied {
		if !slices.ContainsFunc(except, func(re *regexp.Regexp) bool { return re.MatchString(s) }) {
			d = append(d, s)
		}
	}
	if len(d) > 0 {
		t.Errorf("requests refused (403/401):\n%s", strings.Join(d, "\n"))
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fakeNode creates a Node that kwok acts as kubelet for and waits until it
// is Ready.
func (r *rig) fakeNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	n := kwok.Node(name, 500)
	n.Labels["type"] = "kwok"
	if _, err := r.admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return kwok.WaitNodeReady(t, ctx, r.admin, name)
}

func (r *rig) namespace(t *testing.T, name string) {
	t.Helper()
	_, err := r.admin.CoreV1().Namespaces().Create(ctxFor(t, time.Minute),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// replicaSet creates a ReplicaSet object (no controller runs: it only gives
// pods a real owner, and the disruption controller its scale).
func (r *rig) replicaSet(t *testing.T, ns, name string, replicas int32) *appsv1.ReplicaSet {
	t.Helper()
	rs, err := r.admin.AppsV1().ReplicaSets(ns).Create(ctxFor(t, time.Minute), kwok.ReplicaSet(ns, name, replicas, podSpec("")),
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func (r *rig) daemonSet(t *testing.T, ns, name string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := r.admin.AppsV1().DaemonSets(ns).Create(ctxFor(t, time.Minute), kwok.DaemonSet(ns, name, podSpec("")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func podSpec(node string) corev1.PodSpec {
	grace := int64(1)
	return corev1.PodSpec{
		NodeName:                      node,
		TerminationGracePeriodSeconds: &grace,
		Containers:                    []corev1.Container{{Name: "c", Image: "registry.invalid/pause:1"}},
	}
}

// newPod is a pod bound to node, owned (as controller) by owner if given.
// kwok starts it at once and finishes its deletion at a random moment
// within the remaining grace period.
func newPod(ns, name, node string, owner metav1.Object, ownerKind string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: kwok.PodAnnotations(0), Labels: map[string]string{}},
		Spec:       podSpec(node),
	}
	if owner != nil {
		p.Labels["app"] = owner.GetName()
		apiVersion := "apps/v1"
		if ownerKind == "Job" {
			apiVersion = "batch/v1"
		}
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner,
			schemaGVK(apiVersion, ownerKind))}
	}
	return p
}

func (r *rig) createPod(t *testing.T, c kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(p.Namespace).Create(ctxFor(t, time.Minute), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitPods waits until every pod on node satisfies ok (Running and Ready
// by default: a Pending pod bypasses PodDisruptionBudgets) and there are
// want of them.
func (r *rig) waitPods(t *testing.T, node string, want int, ok func(*corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	if ok == nil {
		ok = kwok.RunningReady
	}
	ctx := ctxFor(t, 90*time.Second)
	var last string
	for {
		l, err := kwok.NodePods(ctx, r.admin, node)
		if err == nil {
			var notYet []string
			for i := range l {
				if !ok(&l[i]) {
					notYet = append(notYet, l[i].Name+"="+string(l[i].Status.Phase))
				}
			}
			if len(l) == want && len(notYet) == 0 {
				return l
			}
			sort.Strings(notYet)
			if len(notYet) > 10 {
				notYet = append(notYet[:10], "…")
			}
			last = fmt.Sprintf("%d pods, want %d; not yet: %v", len(l), want, notYet)
		} else {
			last = err.Error()
		}
		if ctx.Err() != nil {
			t.Fatalf("pods on %s: %s", node, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podNames lists the names of the pods on node (admin view).
func (r *rig) podNames(t *testing.T, node string) []string {
	t.Helper()
	l, err := kwok.NodePods(ctxFor(t, time.Minute), r.admin, node)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range l {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	sort.Strings(names)
	return names
}

// waitGone waits until none of names (namespace/name) is left on node.
func (r *rig) waitGone(t *testing.T, node string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := map[string]bool{}
		for _, n := range r.podNames(t, node) {
			left[n] = true
		}
		var still []string
		for _, n := range names {
			if left[n] {
				still = append(still, n)
			}
		}
		if len(still) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still on %s: %v", node, still)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *rig) getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := r.admin.CoreV1().Nodes().Get(ctxFor(t, time.Minute), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// mirrorPod creates the API copy of a static pod as the kubelet does: with
// the node's own credentials (NodeRestriction lets a node create only
// mirror pods, bound to itself and owned by its Node).
func (r *rig) mirrorPod(t *testing.T, nodeClient kubernetes.Interface, ns, name string, node *corev1.Node) *corev1.Pod {
	t.Helper()
	p := newPod(ns, name, node.Name, nil, "")
	p.Annotations["kubernetes.io/config.mirror"] = "0123456789abcdef"
	p.Annotations["kubernetes.io/config.source"] = "file"
	ctrl := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &ctrl}}
	return r.createPod(t, nodeClient, p)
}

func schemaGVK(apiVersion, kind string) schema.GroupVersionKind {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		panic(err)
	}
	return gv.WithKind(kind)
}
