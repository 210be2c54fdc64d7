package drainrig_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/kube"
)

// e. The two identities of a node (issue 22): the drain (cordon, drain,
// uncordon, Node Events) runs with the node's kubelet credentials, and the
// ServiceAccount of install/kubernetes/rbac.yaml (a token in a kubeconfig
// made as the README there says), the reboot-slot gate's, may do none of
// it. Measured here, with the kubelet's credentials (system:node:NAME under
// the Node authorizer and NodeRestriction): cordon and the cordon record
// (one patch), the pods list and watch by spec.nodeName, evictions, the
// kubelet Lease GET, uncordon, and Events in namespace default about this
// Node and about another (the gate's Events name other nodes:
// GnshSlotReclaimed, GnshSlotHeldLong): every one passes. The Node
// conditions (nodes/status) are measured by
// test/integration TestNodeLifecycleConditions.
func testDedicatedIdentity(t *testing.T, r *rig) {
	const node, ns = "dedicated", "dedicated"
	nodeObj := r.fakeNode(t, node)
	r.namespace(t, ns)
	manifest, err := os.ReadFile(filepath.Join("..", "..", "install", "kubernetes", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r.cp.Kubectl(t, manifest, "apply", "-f", "-")
	// A TokenRequest (the rig's apiserver has --service-account-issuer and
	// the signing key; no controller-manager token controller is needed).
	// Bound to the node's Node, as the role hands it out.
	token := strings.TrimSpace(r.cp.Kubectl(t, nil, "-n", "kube-system", "create", "token", "gnsh",
		"--bound-object-kind=Node", "--bound-object-name="+node, "--duration=10m"))
	kc := r.cp.TokenKubeconfig(t, token)
	if fi, err := os.Stat(kc); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig mode: %v %v", fi.Mode(), err)
	}

	ctx := ctxFor(t, 2*time.Minute)
	// The RBAC authorizer sees the new binding a moment after kubectl
	// apply returns: wait for it with a client whose 403s do not count.
	_, probe := client(t, kc, nil)
	for {
		_, err := probe.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) || ctx.Err() != nil {
			t.Fatalf("GET Node with the ServiceAccount token: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	gateRec := &recorder{}
	cfg, gate := client(t, kc, gateRec)
	ssr, err := gate.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the ServiceAccount token: %v", err)
	}
	if u := ssr.Status.UserInfo.Username; u != "system:serviceaccount:kube-system:gnsh" {
		t.Fatalf("token authenticates as %q", u)
	}

	r.rsPods(t, ns, "web", node, 3)
	ds := r.daemonSet(t, ns, "agent")
	r.createPod(t, r.admin, newPod(ns, "agent-x1", node, ds, "DaemonSet"))
	rec := &recorder{}
	_, nodeCreds := r.nodeClient(t, node, rec)
	r.mirrorPod(t, nodeCreds, ns, "static-"+node, nodeObj)
	r.waitPods(t, node, 5, nil)

	// The gate's identity still resolves the node name by GET (a node
	// whose only kubeconfig is gnsh's own).
	name, err := (&kube.Locator{Hostname: func() (string, error) { return node + ".example.com", nil }}).ResolveNodeName(ctx, cfg, gate)
	if err != nil || name != node {
		t.Fatalf("ResolveNodeName: %q %v", name, err)
	}
	// The drain's work, refused to the gate's identity: 403 each.
	if _, err := cordon(ctx, t, gate, node, owner(t)); !apierrors.IsForbidden(err) {
		t.Errorf("cordon with the ServiceAccount: %v, want 403", err)
	}
	// The drain's work with the kubelet's identity: nothing refused.
	if ok, err := cordon(ctx, t, nodeCreds, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	res, err := drain.Drain(ctx, nodeCreds, drain.Options{Node: node, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if s := res.Status; s.Total != 3 || s.Gone != 3 {
		t.Errorf("status %+v", s)
	}
	if left := r.podNames(t, node); len(left) != 2 {
		t.Errorf("pods left %v, want the DaemonSet and the mirror pod", left)
	}
	if ok, err := drain.Uncordon(ctx, nodeCreds, node, drain.Ours, nil); !ok || err != nil {
		t.Fatalf("Uncordon: %v %v", ok, err)
	}
	if n := r.getNode(t, node); n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("after Uncordon: %v %v", n.Spec.Unschedulable, n.Annotations)
	}
	postNodeEvent(t, nodeCreds, r.getNode(t, node))
	// An Event about another Node (the gate's GnshSlotReclaimed names the
	// holder it freed): the kubelet's identity may post it too, so the
	// gate's identity needs no Events at all.
	other := "dedicated-other"
	otherObj, err := r.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	postNodeEvent(t, nodeCreds, otherObj)
	rec.noDenials(t)
	total, verbs, _ := rec.counts()
	t.Logf("kubelet identity system:node:%s: %d requests %v, none refused", node, total, verbs)

	// Nothing of the drain's, nor beyond the gate's rules: no Node write,
	// no pod list outside kube-system, no eviction, no pod GET or DELETE,
	// no Secrets, no DaemonSets, no Events, no Lease but the slots'.
	pods := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	evict := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "agent-x1", Namespace: ns}}
	for what, err := range map[string]error{
		"patch node":         errOf(gate.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})),
		"patch nodes/status": errOf(gate.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"status":{}}`), metav1.PatchOptions{}, "status")),
		"list pods":          errOf(gate.CoreV1().Pods("").List(ctx, pods)),
		"watch pods":         errOf(gate.CoreV1().Pods("").Watch(ctx, pods)),
		"evict pod":          gate.PolicyV1().Evictions(ns).Evict(ctx, evict),
		"get kubelet lease":  errOf(gate.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})),
		"create event":       errOf(gate.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "x."}, InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})),
		"get pod":            errOf(gate.CoreV1().Pods(ns).Get(ctx, "agent-x1", metav1.GetOptions{})),
		"delete pod":         gate.CoreV1().Pods(ns).Delete(ctx, "agent-x1", metav1.DeleteOptions{}),
		"list secrets":       errOf(gate.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})),
		"list leases":        errOf(gate.CoordinationV1().Leases("gnsh").List(ctx, metav1.ListOptions{})),
		"get a lease":        errOf(gate.CoordinationV1().Leases("gnsh").Get(ctx, "other", metav1.GetOptions{})),
		"delete nodes":       gate.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}),
		"get daemonset":      errOf(gate.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})),
		"update node":        errOf(gate.CoreV1().Nodes().Update(ctx, r.getNode(t, node), metav1.UpdateOptions{})),
		"delete event":       gate.CoreV1().Events("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
		"list pdbs":          errOf(gate.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})),
		"update pod":         errOf(gate.CoreV1().Pods(ns).UpdateStatus(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-x1", Namespace: ns}}, metav1.UpdateOptions{})),
		"create pod":         errOf(gate.CoreV1().Pods(ns).Create(ctx, newPod(ns, "intruder", node, nil, ""), metav1.CreateOptions{})),
		"get configmaps":     errOf(gate.CoreV1().ConfigMaps("kube-system").Get(ctx, "x", metav1.GetOptions{})),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s with the ServiceAccount: %v, want 403", what, err)
		}
	}
	// What the gate reads: every Node (RBAC cannot confine it), the pods of
	// kube-system (the etcd members).
	if _, err := gate.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{}); err != nil {
		t.Errorf("ServiceAccount GET of another Node: %v (the gate reads every Node)", err)
	}
	if _, err := gate.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=etcd"}); err != nil {
		t.Errorf("ServiceAccount list of the etcd pods: %v", err)
	}
	if _, err := nodeCreds.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kubelet identity GET of another Node: %v, want 403", err)
	}
}

func errOf[T any](_ T, err error) error { return err }
