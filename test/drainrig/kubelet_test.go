package drainrig_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/test/internal/kwok"
)

// TestDrainRig runs every scenario that leaves the API server up on one
// control plane, in parallel, each on its own Node and namespace.
func TestDrainRig(t *testing.T) {
	t.Parallel()
	r := startRig(t, "plain", "cordoned", "kinds", "pdb", "scale", "named", "dedicated",
		"failing", "blip", "denied", "deadlease", "notready", "owned")
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *rig)
	}{
		{"PlainDrain", testPlainDrain},
		{"AdminCordonKept", testAdminCordonKept},
		{"PodKinds", testPodKinds},
		{"PDBBlocks", testPDBBlocks},
		{"200Pods", test200Pods},
		{"NodeName", testNodeName},
		{"DedicatedIdentity", testDedicatedIdentity},
		{"ServerFailing", testServerFailing},
		{"ServerFailsBriefly", testServerFailsBriefly},
		{"EvictionDenied", testEvictionDenied},
		{"KubeletDead", testKubeletDead},
		{"NodeNotReady", testNodeNotReady},
		{"Ownership", testOwnership},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, r)
		})
	}
}

// rsPods creates n Running pods of a new ReplicaSet on node.
func (r *rig) rsPods(t *testing.T, ns, rsName, node string, n int) []string {
	t.Helper()
	rs := r.replicaSet(t, ns, rsName, int32(n))
	var names []string
	for i := range n {
		p := r.createPod(t, r.admin, newPod(ns, fmt.Sprintf("%s-%d", rsName, i), node, rs, "ReplicaSet"))
		names = append(names, ns+"/"+p.Name)
	}
	return names
}

// cordon is drain.Cordon of the Node as c reads it, as gnsh does it.
func cordon(ctx context.Context, t *testing.T, c kubernetes.Interface, node string, own drain.Ownership) (bool, error) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return drain.Cordon(ctx, c, n, own, nil)
}

func owner(t *testing.T) drain.Ownership {
	return drain.Ownership{Action: "reboot", User: "alice", TTY: "pts/0",
		Time: time.Now().UTC().Truncate(time.Second), BootID: "boot-" + t.Name()}
}

// a. Cordon, drain and uncordon with the kubelet's identity.
func testPlainDrain(t *testing.T, r *rig) {
	const node, ns = "plain", "plain"
	r.fakeNode(t, node)
	r.namespace(t, ns)
	r.rsPods(t, ns, "web", node, 5)
	r.waitPods(t, node, 5, nil)

	rec := &recorder{}
	cfg, c := r.nodeClient(t, node, rec)
	if id := kube.NodeIdentity(cfg); id != node {
		t.Fatalf("NodeIdentity of the node kubeconfig = %q", id)
	}
	ctx := ctxFor(t, 2*time.Minute)
	own := owner(t)
	if ok, err := cordon(ctx, t, c, node, own); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	n := r.getNode(t, node)
	got := drain.Owner(n)
	if !n.Spec.Unschedulable || got == nil {
		t.Fatalf("after Cordon: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	if got.User != own.User || got.Action != own.Action || got.BootID != own.BootID || !got.Time.Equal(own.Time) {
		t.Errorf("ownership %+v, want %+v", *got, own)
	}
	// Cordoning again (a second gnsh run) changes nothing.
	if ok, err := cordon(ctx, t, c, node, drain.Ownership{Action: "poweroff"}); ok || err != nil {
		t.Fatalf("second Cordon: %v %v", ok, err)
	}
	if o := drain.Owner(r.getNode(t, node)); o == nil || o.Action != "reboot" {
		t.Fatalf("second Cordon changed the ownership: %+v", o)
	}

	var mu sync.Mutex
	var warnings []string
	res, err := drain.Drain(ctx, c, drain.Options{Node: node, Timeout: time.Minute,
		Warn: func(s string) { mu.Lock(); warnings = append(warnings, s); mu.Unlock() }})
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if s := res.Status; s.Total != 5 || s.Evicted != 5 || s.Gone != 5 || s.Blocked != 0 {
		t.Errorf("status %+v", s)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings for ReplicaSet pods: %q", warnings)
	}
	if left := r.podNames(t, node); len(left) != 0 {
		t.Errorf("pods left after the drain: %v", left)
	}

	if ok, err := drain.Uncordon(ctx, c, node, drain.Ours, nil); !ok || err != nil {
		t.Fatalf("Uncordon: %v %v", ok, err)
	}
	n = r.getNode(t, node)
	if n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("after Uncordon: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	if ok, err := drain.Uncordon(ctx, c, node, drain.Ours, nil); ok || err != nil {
		t.Fatalf("second Uncordon: %v %v", ok, err)
	}

	// gnsh's Events about the Node, with the same identity: NodeRestriction
	// lets a node post Events about itself.
	postNodeEvent(t, c, n)
	rec.noDenials(t)
	total, verbs, _ := rec.counts()
	t.Logf("kubelet identity: %d requests %v", total, verbs)
}

// postNodeEvent posts an Event about node the way gnsh does
// (drainer.PostEvent: a core/v1 Event in namespace default, create only);
// the identity must be allowed to.
func postNodeEvent(t *testing.T, c kubernetes.Interface, node *corev1.Node) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	reason := fmt.Sprintf("GnshTest%x", time.Now().UnixNano())
	if err := drainer.PostEvent(ctx, c, node.Name, corev1.EventTypeNormal, reason, "posted by test/drainrig", 10*time.Second); err != nil {
		t.Fatalf("post Event: %v", err)
	}
}

// a. An admin's cordon is never undone, and gnsh does not claim it.
func testAdminCordonKept(t *testing.T, r *rig) {
	const node, ns = "cordoned", "cordoned"
	r.fakeNode(t, node)
	r.namespace(t, ns)
	r.rsPods(t, ns, "web", node, 2)
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := r.admin.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitPods(t, node, 2, nil)

	rec := &recorder{}
	_, c := r.nodeClient(t, node, rec)
	if ok, err := cordon(ctx, t, c, node, owner(t)); ok || err != nil {
		t.Fatalf("Cordon of an admin-cordoned node: %v %v", ok, err)
	}
	if o := drain.Owner(r.getNode(t, node)); o != nil {
		t.Fatalf("gnsh claimed the admin's cordon: %+v", o)
	}
	if _, err := drain.Drain(ctx, c, drain.Options{Node: node, Timeout: time.Minute}); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if ok, err := drain.Uncordon(ctx, c, node, drain.Ours, nil); ok || err != nil {
		t.Fatalf("Uncordon(onlyIfOurs) of the admin's cordon: %v %v", ok, err)
	}
	if n := r.getNode(t, node); !n.Spec.Unschedulable {
		t.Fatal("the admin's cordon was removed")
	}
	rec.noDenials(t)
}

// b. DaemonSet, mirror, emptyDir, controller-less and finished pods.
func testPodKinds(t *testing.T, r *rig) {
	const node, ns = "kinds", "kinds"
	nodeObj := r.fakeNode(t, node)
	r.namespace(t, ns)
	rec := &recorder{}
	_, c := r.nodeClient(t, node, rec)

	ds := r.daemonSet(t, ns, "agent")
	r.createPod(t, r.admin, newPod(ns, "agent-x1", node, ds, "DaemonSet"))
	r.mirrorPod(t, c, ns, "etcd-"+node, nodeObj)
	rs := r.replicaSet(t, ns, "cache", 1)
	cache := newPod(ns, "cache-0", node, rs, "ReplicaSet")
	cache.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	r.createPod(t, r.admin, cache)
	r.createPod(t, r.admin, newPod(ns, "bare", node, nil, ""))
	// A Job's pod that kwok runs to completion (phase Succeeded).
	job, err := r.admin.BatchV1().Jobs(ns).Create(ctxFor(t, time.Minute), &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: func() corev1.PodSpec {
			s := podSpec("")
			s.RestartPolicy = corev1.RestartPolicyNever
			return s
		}()}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := newPod(ns, "once-x1", node, job, "Job")
	done.Spec.RestartPolicy = corev1.RestartPolicyNever
	done.Annotations["pod-complete.stage.kwok.x-k8s.io/delay"] = "0s"
	done.Annotations["pod-complete.stage.kwok.x-k8s.io/jitter-delay"] = "0s"
	r.createPod(t, r.admin, done)
	r.waitPods(t, node, 5, func(p *corev1.Pod) bool {
		if p.Name == "once-x1" {
			return p.Status.Phase == corev1.PodSucceeded
		}
		return kwok.RunningReady(p)
	})

	ctx := ctxFor(t, 2*time.Minute)
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	// strictDrain first: kubectl drain's refusal, at once, nothing evicted.
	_, err = drain.Drain(ctx, c, drain.Options{Node: node, Timeout: time.Minute, Strict: true})
	var be *drain.BlockedError
	if !errors.As(err, &be) || !be.StrictOnly() || len(be.Refused) != 2 ||
		!strings.Contains(err.Error(), "kinds/bare (declares no controller)") || !strings.Contains(err.Error(), "kinds/cache-0 (uses emptyDir)") {
		t.Fatalf("strict Drain: %v", err)
	}
	if pods, _, err := drain.ListNodePods(ctx, c, node); err != nil || len(pods) != 5 {
		t.Fatalf("after the strict refusal: %d pods, %v", len(pods), err)
	}
	var mu sync.Mutex
	var warnings []string
	res, err := drain.Drain(ctx, c, drain.Options{Node: node, Timeout: time.Minute,
		Warn: func(s string) { mu.Lock(); warnings = append(warnings, s); mu.Unlock() }})
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	verdicts := map[string]drain.Verdict{}
	for _, p := range res.Pods {
		verdicts[p.Pod.Name] = p.Verdict
	}
	want := map[string]drain.Verdict{"agent-x1": drain.SkipDaemonSet, "etcd-kinds": drain.SkipMirror,
		"cache-0": drain.Evict, "bare": drain.Evict, "once-x1": drain.SkipFinished}
	for name, v := range want {
		if verdicts[name] != v {
			t.Errorf("%s: verdict %v, want %v (all: %v)", name, verdicts[name], v, verdicts)
		}
	}
	slices.Sort(warnings)
	wantWarn := []string{
		"kinds/bare declares no controller: it will not be recreated elsewhere",
		"kinds/cache-0 uses emptyDir: its data is lost",
	}
	if !slices.Equal(warnings, wantWarn) {
		t.Errorf("warnings %q, want %q", warnings, wantWarn)
	}
	if s := res.Status; s.Total != 2 || s.Evicted != 2 || s.Gone != 2 {
		t.Errorf("status %+v", s)
	}
	left := r.podNames(t, node)
	if want := []string{"kinds/agent-x1", "kinds/etcd-kinds", "kinds/once-x1"}; !slices.Equal(left, want) {
		t.Errorf("pods left %v, want %v", left, want)
	}
	// The kubelet identity could not GET the DaemonSet; a drain that tried
	// (kubectl's) would have got a 403 here.
	rec.noDenials(t)
}

// c. A PodDisruptionBudget that allows no disruption blocks the drain until
// its Timeout; the error names the pods and the budget.
func testPDBBlocks(t *testing.T, r *rig) {
	const node, ns = "pdb", "pdb"
	r.fakeNode(t, node)
	r.namespace(t, ns)
	db := r.rsPods(t, ns, "db", node, 3)
	web := r.rsPods(t, ns, "web", node, 2)
	ctx := ctxFor(t, 2*time.Minute)
	minAvail := intstr.FromInt32(3)
	_, err := r.admin.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db-pdb", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvail,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.waitPods(t, node, 5, nil)
	// Enforced only once the disruption controller has seen all three
	// healthy (Running and Ready; Pending pods would bypass it).
	kwok.WaitPDB(t, ctx, r.admin, ns, "db-pdb", func(s policyv1.PodDisruptionBudgetStatus) bool {
		return s.CurrentHealthy == 3 && s.DesiredHealthy == 3 && s.DisruptionsAllowed == 0
	})

	rec := &recorder{}
	_, c := r.nodeClient(t, node, rec)
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	const timeout = 4 * time.Second
	start := time.Now()
	var last drain.Status
	var mu sync.Mutex
	_, err = drain.Drain(ctx, c, drain.Options{Node: node, Timeout: timeout, RetryDelay: 300 * time.Millisecond,
		MaxRetryDelay: time.Second, Progress: func(s drain.Status) { mu.Lock(); last = s; mu.Unlock() }})
	took := time.Since(start)
	var be *drain.BlockedError
	if !errors.As(err, &be) {
		t.Fatalf("Drain: %v (%T), want *drain.BlockedError", err, err)
	}
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if took < timeout || took > timeout+10*time.Second {
		t.Errorf("Drain returned after %v with Timeout %v", took, timeout)
	}
	var blocked []string
	for _, b := range be.Blocked {
		blocked = append(blocked, b.Pod)
		if b.PDB != "db-pdb" || !strings.Contains(b.Reason, "db-pdb") {
			t.Errorf("blocked %+v: want PDB db-pdb", b)
		}
	}
	if !slices.Equal(blocked, db) {
		t.Errorf("blocked pods %v, want %v", blocked, db)
	}
	for _, p := range db {
		if !strings.Contains(be.Error(), p+" (PodDisruptionBudget db-pdb)") {
			t.Errorf("error does not name %s and its PDB: %v", p, be)
		}
	}
	if be.Node != node || be.Timeout != timeout {
		t.Errorf("BlockedError %+v", be)
	}
	mu.Lock()
	if last.Blocked != 3 || last.Evicted != 2 {
		t.Errorf("last progress %+v", last)
	}
	mu.Unlock()
	// The protected pods are untouched; the others were evicted.
	r.waitGone(t, node, web...)
	if left := r.podNames(t, node); !slices.Equal(left, db) {
		t.Errorf("pods left %v, want %v", left, db)
	}
	// 429s are not denials.
	rec.noDenials(t)
}

// d. 200 pods: about one request per pod (one list, one watch, one eviction
// each), instead of kubectl's one GET per pod per second while waiting.
func test200Pods(t *testing.T, r *rig) {
	const node, ns, n = "scale", "scale", 200
	r.fakeNode(t, node)
	r.namespace(t, ns)
	rs := r.replicaSet(t, ns, "bulk", n)
	ctx := ctxFor(t, 3*time.Minute)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				p := newPod(ns, fmt.Sprintf("bulk-%03d", i), node, rs, "ReplicaSet")
				if _, err := r.admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	created := time.Since(start)
	r.waitPods(t, node, n, nil)
	t.Logf("%d pods created in %v, Running and Ready after %v", n, created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	_, cordoner := r.nodeClient(t, node, nil)
	if ok, err := cordon(ctx, t, cordoner, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	rec := &recorder{}
	_, c := r.nodeClient(t, node, rec)
	start = time.Now()
	res, err := drain.Drain(ctx, c, drain.Options{Node: node, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	total, verbs, _ := rec.counts()
	t.Logf("drained %d pods in %v with %d requests %v", n, time.Since(start).Round(time.Millisecond), total, verbs)
	if s := res.Status; s.Total != n || s.Evicted != n || s.Gone != n {
		t.Errorf("status %+v", s)
	}
	if verbs["EVICT"] < n {
		t.Errorf("%d evictions for %d pods", verbs["EVICT"], n)
	}
	if limit := 2*n + 20; total >= limit {
		t.Errorf("%d requests for %d pods, want < %d", total, n, limit)
	}
	if left := r.podNames(t, node); len(left) != 0 {
		t.Errorf("%d pods left", len(left))
	}
	rec.noDenials(t)
}

// g. The node name: from the kubelet certificate's CN, else from the host
// name by GETting the Node.
func testNodeName(t *testing.T, r *rig) {
	ctx := ctxFor(t, time.Minute)
	if _, err := r.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "named"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Kubelet credentials: the CN system:node:named, from the file paths of
	// kubelet.conf or from embedded data, without asking the API server.
	for _, kc := range []string{r.cp.NodeKubeconfig(t, "named"), r.cp.NodeKubeconfigData(t, "named")} {
		rec := &recorder{}
		cfg, c := client(t, kc, rec)
		l := &kube.Locator{Hostname: func() (string, error) { return "not-the-node", nil }}
		name, err := l.ResolveNodeName(ctx, cfg, c)
		if err != nil || name != "named" {
			t.Errorf("ResolveNodeName with %s: %q %v", kc, name, err)
		}
		if total, _, _ := rec.counts(); total != 0 {
			t.Errorf("ResolveNodeName from the CN sent %d requests", total)
		}
		// The resolved name is the node's own: GET allowed.
		if _, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("GET own Node: %v", err)
		}
	}

	// A client certificate that is not a node's: the host name, by GET.
	const user = "ops-bot"
	kc := r.userKubeconfig(t, user)
	_, err := r.admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test:node-getter"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test:node-getter"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "test:node-getter"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, c := client(t, kc, nil)
	if id := kube.NodeIdentity(cfg); id != "" {
		t.Fatalf("NodeIdentity of %s = %q", user, id)
	}
	resolve := func(host string) (string, error) {
		var name string
		var err error
		// RBAC bindings take effect within moments, not at once.
		for range 50 {
			name, err = (&kube.Locator{Hostname: func() (string, error) { return host, nil }}).ResolveNodeName(ctx, cfg, c)
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return name, err
	}
	for _, host := range []string{"named", "NAMED.example.com"} {
		if name, err := resolve(host); name != "named" || err != nil {
			t.Errorf("host name %q: %q %v", host, name, err)
		}
	}
	// No match, and no right to list Nodes: say what to configure.
	name, err := (&kube.Locator{Hostname: func() (string, error) { return "elsewhere", nil }}).ResolveNodeName(ctx, cfg, c)
	if err == nil || !strings.Contains(err.Error(), "set node in /etc/gnsh/config.yaml") {
		t.Errorf("unknown host name: %q %v", name, err)
	}
	// A configured name wins.
	if name, err := (&kube.Locator{NodeName: "given"}).ResolveNodeName(ctx, cfg, c); name != "given" || err != nil {
		t.Errorf("configured name: %q %v", name, err)
	}
}
