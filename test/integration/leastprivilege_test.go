package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/internal/nodefacts"
	"github.com/gnsh/gnsh/internal/slots"
)

// TestLeastPrivilegeAttacker (issue 22): an attacker who read both of one
// node's credential files, its kubelet kubeconfig (the drain's identity)
// and gnsh's own ServiceAccount token kubeconfig made from
// install/kubernetes/rbac.yaml (the gate's), moves nothing on another
// node. Each request is refused with 403, asserted and named one by one:
// cordon another node, patch another Node's annotations, evict a pod on
// another node, delete the Lease gnsh/reboot-slots, replace it
// (delete-and-create, a Lease of another name, and updates that would
// have the garbage collector delete it or that change what rbac.yaml's
// ValidatingAdmissionPolicy guards), read a Secret. What is left (the
// gate's own writes of the record) is allowed: checked last.
func TestLeastPrivilegeAttacker(t *testing.T) {
	k := startCluster(t, "lp-a", "lp-b")
	a := k.newNode(t, "lp-a")
	b := k.newNode(t, "lp-b")
	b.replicaSet("web", 1, podOpts{})
	b.waitRunning(1)
	victim := b.pods()[0]
	ctx := ctxFor(t, 3*time.Minute)
	if _, err := k.admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "crown-jewels"},
		StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	identities := []struct {
		name string
		c    kubernetes.Interface
	}{
		{"kubelet system:node:lp-a", clientFor(t, k.cp.NodeKubeconfig(t, a.name))},
		{"gate system:serviceaccount:kube-system:gnsh", clientFor(t, k.gnshIdentity(t)(a.name))},
	}
	gate := identities[1].c
	// The Lease as the gate makes it, with the gate's identity: the
	// ValidatingAdmissionPolicy lets this one through.
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh",
		Labels: map[string]string{"app.kubernetes.io/name": "gnsh"}}}
	slots.Record{Version: slots.Schema, Next: 1}.Encode(l)
	if _, err := gate.CoordinationV1().Leases("gnsh").Create(ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the gate's identity creates gnsh/reboot-slots: %v", err)
	}
	// The API server loads a new ValidatingAdmissionPolicy a moment after
	// it is created: wait until it refuses a Lease of another name.
	waitVAP(t, ctx, gate)

	lease := func() *coordinationv1.Lease {
		l, err := k.admin.CoordinationV1().Leases("gnsh").Get(ctx, "reboot-slots", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	update := func(c kubernetes.Interface, change func(*coordinationv1.Lease)) error {
		l := lease()
		change(l)
		_, err := c.CoordinationV1().Leases("gnsh").Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
	one := int32(1)
	attacks := []struct {
		what string
		do   func(c kubernetes.Interface) error
	}{
		{"cordon another node (patch lp-b spec.unschedulable)", func(c kubernetes.Interface) error {
			return errOf(c.CoreV1().Nodes().Patch(ctx, b.name, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}))
		}},
		{"patch another Node's annotations (lp-b)", func(c kubernetes.Interface) error {
			return errOf(c.CoreV1().Nodes().Patch(ctx, b.name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"gnsh.io/cordoned":"forged"}}}`), metav1.PatchOptions{}))
		}},
		{"patch another Node's status (lp-b nodes/status)", func(c kubernetes.Interface) error {
			return errOf(c.CoreV1().Nodes().Patch(ctx, b.name, types.StrategicMergePatchType, []byte(`{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`), metav1.PatchOptions{}, "status"))
		}},
		{"evict a pod on another node (" + victim.Namespace + "/" + victim.Name + " on lp-b)", func(c kubernetes.Interface) error {
			return c.PolicyV1().Evictions(victim.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: victim.Namespace}})
		}},
		{"delete the Lease gnsh/reboot-slots (also the first half of delete-and-create)", func(c kubernetes.Interface) error {
			return c.CoordinationV1().Leases("gnsh").Delete(ctx, "reboot-slots", metav1.DeleteOptions{})
		}},
		{"create a Lease of another name in gnsh (reboot-slots-2)", func(c kubernetes.Interface) error {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots-2", Namespace: "gnsh"}}
			return errOf(c.CoordinationV1().Leases("gnsh").Create(ctx, l, metav1.CreateOptions{}))
		}},
		{"update the Lease with an ownerReference to a missing owner (the garbage collector would delete it)", func(c kubernetes.Interface) error {
			return update(c, func(l *coordinationv1.Lease) {
				l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: "00000000-0000-0000-0000-000000000000"}}
			})
		}},
		{"update the Lease with a finalizer (blocks an admin's reset)", func(c kubernetes.Interface) error {
			return update(c, func(l *coordinationv1.Lease) { l.Finalizers = []string{"example.com/stuck"} })
		}},
		{"update the Lease's labels", func(c kubernetes.Interface) error {
			return update(c, func(l *coordinationv1.Lease) { l.Labels["app.kubernetes.io/name"] = "other" })
		}},
		{"update another annotation of the Lease", func(c kubernetes.Interface) error {
			return update(c, func(l *coordinationv1.Lease) { l.Annotations["example.com/x"] = "y" })
		}},
		{"update the Lease's spec.leaseDurationSeconds", func(c kubernetes.Interface) error {
			return update(c, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = &one })
		}},
		{"read a Secret (kube-system/crown-jewels)", func(c kubernetes.Interface) error {
			return errOf(c.CoreV1().Secrets("kube-system").Get(ctx, "crown-jewels", metav1.GetOptions{}))
		}},
		{"list Secrets in every namespace", func(c kubernetes.Interface) error {
			return errOf(c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}))
		}},
	}
	for _, id := range identities {
		for _, at := range attacks {
			err := at.do(id.c)
			if !apierrors.IsForbidden(err) {
				t.Errorf("NOT REFUSED as %s: %s: %v, want 403 Forbidden", id.name, at.what, err)
				continue
			}
			t.Logf("refused (403) as %s: %s: %s", id.name, at.what, statusText(err))
		}
	}
	// Nothing changed on lp-b.
	if n := b.get(); n.Spec.Unschedulable || n.Annotations["gnsh.io/cordoned"] != "" {
		t.Errorf("lp-b changed: unschedulable %v, annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
	if ps := b.pods(); len(ps) != 1 || ps[0].DeletionTimestamp != nil {
		t.Errorf("lp-b's pod: %v", names(ps))
	}
	// The gate's own work still goes: the record and the holder written
	// by the gate's identity (compare-and-swap updates).
	if err := update(gate, func(l *coordinationv1.Lease) {
		slots.Record{Version: slots.Schema, Next: 2, Holders: []slots.Entry{{Node: a.name, UID: a.uid, Boot: "b1", Phase: slots.Draining,
			Action: "reboot", Who: "alice", Renew: 10}}}.Encode(l)
	}); err != nil {
		t.Errorf("the gate's update of the record: %v", err)
	}
	if h := lease().Spec.HolderIdentity; h == nil || *h != a.name {
		t.Errorf("holderIdentity %v", h)
	}
}

// waitVAP waits until rbac.yaml's ValidatingAdmissionPolicy refuses a
// Lease of another name created by gnsh's identity.
func waitVAP(t *testing.T, ctx context.Context, gate kubernetes.Interface) {
	t.Helper()
	for {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "vap-probe", Namespace: "gnsh"}}
		_, err := gate.CoordinationV1().Leases("gnsh").Create(ctx, l, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "gnsh-slots-lease") {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the ValidatingAdmissionPolicy gnsh-slots-lease never refused a Lease of another name: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 30 * time.Second
	return kubernetes.NewForConfigOrDie(cfg)
}

func errOf[T any](_ T, err error) error { return err }

// statusText is the API server's message for err, for the log.
func statusText(err error) string {
	if se, ok := err.(apierrors.APIStatus); ok {
		return se.Status().Message
	}
	return fmt.Sprint(err)
}

// TestRBACApplyOverEarlier: an earlier release's gnsh:drain (patch
// Nodes, evict pods) and gnsh:events (post Events), made by kubectl create
// (no last-applied annotation: kubectl apply of this rbac.yaml cannot
// empty them, and never deletes them), keep their rights; gnsh doctor's
// reboot slots check fails naming the deletes; the deletes the Ansible
// role runs (nodefacts.EarlierRBACDelete) take the rights back, and
// doctor is then content; rbac.yaml applied again changes nothing (the
// role counts any line but "unchanged" as a change).
func TestRBACApplyOverEarlier(t *testing.T) {
	k := startCluster(t)
	earlier := []byte(`apiVersion: v1
kind: ServiceAccount
metadata: {name: gnsh, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "gnsh:drain"}
rules:
- {apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch", "patch"]}
- {apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"]}
- {apiGroups: [""], resources: ["pods/eviction"], verbs: ["create"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "gnsh:drain"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "gnsh:drain"}
subjects: [{kind: ServiceAccount, name: gnsh, namespace: kube-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: "gnsh:events", namespace: default}
rules:
- {apiGroups: [""], resources: ["events"], verbs: ["create"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "gnsh:events", namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "gnsh:events"}
subjects: [{kind: ServiceAccount, name: gnsh, namespace: kube-system}]
`)
	k.cp.Kubectl(t, earlier, "create", "-f", "-")
	gateKC := k.gnshIdentity(t) // kubectl apply of this rbac.yaml
	a, b := k.newNode(t, "up-a"), k.newNode(t, "up-b")
	kc := gateKC(a.name)
	env := k.nodeEnv(t, a.name, writeConfig(t, config("node: "+a.name, gated("slots: {maxUnavailable: 1}", kc))))
	slotsLine := func() string {
		_, r := doctorLine(t, env)
		for _, l := range strings.Split(r.Stdout, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[1] == "reboot" && f[2] == "slots" {
				return l
			}
		}
		t.Fatalf("no reboot slots line:\n%s", r.Stdout)
		return ""
	}
	const excess = "these credentials may also patch nodes, create pods/eviction, create events in default, which the gate never does"
	line := ""
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if line = slotsLine(); strings.Contains(line, excess) || time.Now().After(end) {
			break
		}
	}
	if !strings.HasPrefix(line, "fail  reboot slots") || !strings.Contains(line, excess) || !strings.Contains(line, nodefacts.EarlierRBACDelete) {
		t.Fatalf("doctor over the earlier rights:\n%s\nwant fail, %q and the deletes", line, excess)
	}
	// The gate's token of node a can still cordon node b: the weakness
	// doctor names.
	gate := clientFor(t, kc)
	ctx := ctxFor(t, time.Minute)
	if _, err := gate.CoreV1().Nodes().Patch(ctx, b.name, types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the earlier gnsh:drain made by kubectl create lets patch Nodes: %v", err)
	}

	// The role's deletes.
	for _, cmd := range strings.Split(nodefacts.EarlierRBACDelete, "; ") {
		k.cp.Kubectl(t, nil, strings.Fields(cmd)[1:]...)
	}
	for _, obj := range [][]string{{"clusterrole", "gnsh:drain"}, {"clusterrolebinding", "gnsh:drain"}, {"-n", "default", "role", "gnsh:events"}, {"-n", "default", "rolebinding", "gnsh:events"}} {
		if out := k.cp.Kubectl(t, nil, append([]string{"get", "--ignore-not-found", "-o", "name"}, obj...)...); strings.TrimSpace(out) != "" {
			t.Errorf("%v after the deletes: %s", obj, out)
		}
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := gate.CoreV1().Nodes().Patch(ctx, b.name, types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"y"}}}`), metav1.PatchOptions{})
		if apierrors.IsForbidden(err) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("node a's gate token patching Node b after the deletes: %v, want 403", err)
		}
	}
	if line = slotsLine(); !strings.HasPrefix(line, "ok    reboot slots") || strings.Contains(line, "may also") {
		t.Errorf("doctor after the deletes:\n%s", line)
	}
	manifest, err := os.ReadFile(filepath.Join("..", "..", "install", "kubernetes", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(k.cp.Kubectl(t, manifest, "apply", "-f", "-")), "\n") {
		if !strings.HasSuffix(l, " unchanged") {
			t.Errorf("applied again: %s", l)
		}
	}
}
