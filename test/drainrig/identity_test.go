package drainrig_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/kube"
)

// e. The dedicated identity of install/kubernetes/rbac.yaml: a
// ServiceAccount token in a kubeconfig made as the README there says.
// Cordon, drain, uncordon and a Node Event must need nothing more.
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
	token := strings.TrimSpace(r.cp.Kubectl(t, nil, "-n", "kube-system", "create", "token", "gnsh", "--duration=10m"))
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

	rec := &recorder{}
	cfg, c := client(t, kc, rec)
	ssr, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the ServiceAccount token: %v", err)
	}
	if u := ssr.Status.UserInfo.Username; u != "system:serviceaccount:kube-system:gnsh" {
		t.Fatalf("token authenticates as %q", u)
	}

	r.rsPods(t, ns, "web", node, 3)
	ds := r.daemonSet(t, ns, "agent")
	r.createPod(t, r.admin, newPod(ns, "agent-x1", node, ds, "DaemonSet"))
	_, nodeCreds := r.nodeClient(t, node, nil)
	r.mirrorPod(t, nodeCreds, ns, "static-"+node, nodeObj)
	r.waitPods(t, node, 5, nil)

	// No certificate CN: the node name comes from the host name, by GET.
	name, err := (&kube.Locator{Hostname: func() (string, error) { return node + ".example.com", nil }}).ResolveNodeName(ctx, cfg, c)
	if err != nil || name != node {
		t.Fatalf("ResolveNodeName: %q %v", name, err)
	}
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	res, err := drain.Drain(ctx, c, drain.Options{Node: node, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if s := res.Status; s.Total != 3 || s.Gone != 3 {
		t.Errorf("status %+v", s)
	}
	if left := r.podNames(t, node); len(left) != 2 {
		t.Errorf("pods left %v, want the DaemonSet and the mirror pod", left)
	}
	if ok, err := drain.Uncordon(ctx, c, node, drain.Ours, nil); !ok || err != nil {
		t.Fatalf("Uncordon: %v %v", ok, err)
	}
	if n := r.getNode(t, node); n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("after Uncordon: %v %v", n.Spec.Unschedulable, n.Annotations)
	}
	postNodeEvent(t, c, r.getNode(t, node))
	// rbac.yaml grants the kubelet check its GET of the node's Lease:
	// nothing at all is refused.
	rec.noDenials(t)
	total, verbs, _ := rec.counts()
	t.Logf("ServiceAccount gnsh: %d requests %v", total, verbs)

	// Nothing beyond the rules: no pod GET or DELETE (PDBs are bypassed by
	// DELETE), no Secrets, no DaemonSets, no Lease but the slots' (nodes
	// list is the reboot-slot gate's: test/slotsrig).
	for what, err := range map[string]error{
		"get pod":        errOf(c.CoreV1().Pods(ns).Get(ctx, "agent-x1", metav1.GetOptions{})),
		"delete pod":     c.CoreV1().Pods(ns).Delete(ctx, "agent-x1", metav1.DeleteOptions{}),
		"list secrets":   errOf(c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})),
		"list leases":    errOf(c.CoordinationV1().Leases("gnsh").List(ctx, metav1.ListOptions{})),
		"get a lease":    errOf(c.CoordinationV1().Leases("gnsh").Get(ctx, "other", metav1.GetOptions{})),
		"delete nodes":   c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}),
		"get daemonset":  errOf(c.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})),
		"update node":    errOf(c.CoreV1().Nodes().Update(ctx, r.getNode(t, node), metav1.UpdateOptions{})),
		"delete event":   c.CoreV1().Events("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
		"list pdbs":      errOf(c.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})),
		"update pod":     errOf(c.CoreV1().Pods(ns).UpdateStatus(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-x1", Namespace: ns}}, metav1.UpdateOptions{})),
		"create pod":     errOf(c.CoreV1().Pods(ns).Create(ctx, newPod(ns, "intruder", node, nil, ""), metav1.CreateOptions{})),
		"get configmaps": errOf(c.CoreV1().ConfigMaps("kube-system").Get(ctx, "x", metav1.GetOptions{})),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s with the ServiceAccount: %v, want 403", what, err)
		}
	}

	// The caveat of any RBAC identity: it is not confined to its node. The
	// ServiceAccount may read (and patch) another Node; the kubelet identity
	// of this node may not.
	other := "dedicated-other"
	if _, err := r.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{}); err != nil {
		t.Errorf("ServiceAccount GET of another Node: %v (RBAC was expected to allow it)", err)
	}
	if _, err := nodeCreds.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kubelet identity GET of another Node: %v, want 403", err)
	}
}

func errOf[T any](_ T, err error) error { return err }
