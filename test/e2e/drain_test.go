//go:build e2e

package e2e

// The drain case: the container is a Kubernetes node. A real control plane
// on the host's loopback (test/internal/controlplane, kwok playing the
// kubelet) has a Node for it with pods; /etc/kubernetes/kubelet.conf in the
// container carries the node's own client certificate, as kubeadm lays it
// out. `reboot` (gnsh) must cordon, evict and wait for the pods, post its
// Events, and only then hand off to logind, whose PrepareForShutdown and
// delay lock follow. The order is proved on one clock: the apiserver's
// audit log (µs) against dbus-monitor's timestamps in the container.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/test/internal/controlplane"
	"github.com/gnsh/gnsh/test/internal/kwok"
)

const (
	drainGrace    = 2 // terminationGracePeriodSeconds of the evicted pods
	drainWebPods  = 3 // ReplicaSet pods on the drained node
	cordonAnnoKey = "gnsh.io/cordoned"
	// Where kubeadm puts the kubelet's kubeconfig and its rotated client
	// certificate (a symlink to the current dated file).
	kubeletConf     = "/etc/kubernetes/kubelet.conf"
	kubeletPKI      = "/var/lib/kubelet/pki"
	kubeletCertLink = kubeletPKI + "/kubelet-client-current.pem"
)

// ---------------------------------------------------------------- shared control plane

// One control plane serves every drain case (one Node per suite). It is
// started by the first drain case that needs it and stopped when TestE2E
// ends. TestAgentE2E has its own (agentCP), stopped when it ends.
type sharedCP struct {
	parent  *testing.T // the top test: owns the control plane's cleanup and state dir
	once    sync.Once
	cp      *controlplane.ControlPlane
	skipped bool
	mu      sync.Mutex // controlplane.sh node: openssl's CA serial file is not concurrency-safe
}

var cpShared = &sharedCP{}

// parentScoped hands StartWith a test whose failures and logs are the
// calling case's, but whose cleanups and temp dirs belong to TestE2E, so
// the control plane outlives the case that started it.
type parentScoped struct {
	*testing.T
	parent *testing.T
}

func (p parentScoped) TempDir() string  { return p.parent.TempDir() }
func (p parentScoped) Cleanup(f func()) { p.parent.Cleanup(f) }

// controlPlane is the shared control plane the case runs on: d.shared, or
// cpShared.
func (d *drainCase) controlPlane() *sharedCP {
	if d.shared != nil {
		return d.shared
	}
	return cpShared
}

// connect starts (or joins) the case's control plane and makes its admin
// client, with a rate limit sized for populating and checking the case.
func (d *drainCase) connect(t *testing.T) {
	d.cp = d.controlPlane().get(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", d.cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	d.admin = kubernetes.NewForConfigOrDie(cfg)
}

// get starts the control plane on first use and returns it.
func (s *sharedCP) get(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	s.once.Do(func() {
		defer func() { s.skipped = t.Skipped() }()
		parent := s.parent
		if parent == nil {
			parent = t
		}
		s.cp = controlplane.StartWith(parentScoped{t, parent}, controlplane.Options{Kwok: true, Audit: true, Nodes: []string{}})
	})
	if s.cp == nil {
		if s.skipped {
			t.Skip("SKIP: no Kubernetes control plane (see the first drain case; make k8s builds one)")
		}
		t.Fatal("the Kubernetes control plane did not start (see the first drain case)")
	}
	return s.cp
}

// ---------------------------------------------------------------- the case

// drainCase is one suite's drain case; steps runs before the container
// goes down, check after.
type drainCase struct {
	suite      string
	node, peer string // the container's Node, and a Node elsewhere
	ns         string
	cp         *controlplane.ControlPlane
	admin      kubernetes.Interface
	webOnNode  []string // pod names expected to be evicted
	keep       []string // pods that must stay: the DaemonSet pod, the peer's pod
	out        result   // gnsh's reboot
	trigger    time.Time
	shared     *sharedCP // whose control plane (cpShared if nil)
	server     string    // if set, the server URL written into kubelet.conf instead of the API server's
	// realKubelet: the Node is the real kubelet's (it registers it itself,
	// runs its pods on fakecri): populate creates only the peer.
	realKubelet bool
}

func newDrainCase(suite string) *drainCase {
	return &drainCase{suite: suite, node: "gnsh-e2e-" + suite, peer: "gnsh-e2e-" + suite + "-peer", ns: "drain-" + suite}
}

func (d *drainCase) tcase() tcase {
	return tcase{name: "drain_reboot", gnsh: true, steps: d.steps, check: d.check,
		wantExit: 133, wantPFS: true, delay: delayHonoured, wantCall: `^Reboot(WithFlags)?$`, timeout: 60 * time.Second,
		why: "reboot on a Kubernetes node: gnsh drains it with the kubelet's credentials, then logind honours the delay lock"}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (d *drainCase) steps(c *container) time.Time {
	t := c.t
	d.connect(t)
	setupStart := time.Now()
	d.populate(t)
	d.installKubeconfig(c)
	c.logf("cluster set up in %v: Node %s with %d ReplicaSet pods (grace %d s) + 1 DaemonSet pod, PDB web minAvailable 1, peer Node %s with 1 web pod",
		time.Since(setupStart).Round(time.Millisecond), d.node, drainWebPods, drainGrace, d.peer)

	d.trigger = time.Now()
	d.out = c.run(60*time.Second, "reboot")
	if d.out.rc != 0 {
		t.Errorf("reboot: rc %d, want 0 (drained and handed off)", d.out.rc)
	}
	for _, l := range strings.Split(strings.TrimSpace(d.out.stderr), "\n") {
		c.logf("gnsh said: %s", l)
	}
	return d.trigger
}

// populate creates both Nodes (kwok plays their kubelet), a namespace, a
// ReplicaSet "web" with drainWebPods pods on the node and one on the peer,
// a DaemonSet pod on the node and a PodDisruptionBudget that allows the
// drain, then waits until every pod is Running and Ready and the
// disruption controller has processed the budget.
func (d *drainCase) populate(t *testing.T) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	for _, n := range []string{d.node, d.peer} {
		if n == d.node && d.realKubelet {
			continue
		}
		if _, err := d.admin.CoreV1().Nodes().Create(ctx, kwok.Node(n, 110), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Node %s: %v", n, err)
		}
	}
	if _, err := d.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs, err := d.admin.AppsV1().ReplicaSets(d.ns).Create(ctx, kwok.ReplicaSet(d.ns, "web", drainWebPods+1, drainPodSpec("")),
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := d.admin.AppsV1().DaemonSets(d.ns).Create(ctx, kwok.DaemonSet(d.ns, "node-agent", drainPodSpec("")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web, agent := map[string]string{"app": "web"}, map[string]string{"app": "node-agent"} // the labels rs and ds select
	minAvailable := intstr.FromInt32(1)
	if _, err := d.admin.PolicyV1().PodDisruptionBudgets(d.ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: d.ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: web}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	rsRef := *metav1.NewControllerRef(rs, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"})
	dsRef := *metav1.NewControllerRef(ds, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"})
	pods := []*corev1.Pod{}
	for i := 1; i <= drainWebPods; i++ {
		p := drainPod(d.ns, fmt.Sprintf("web-%d", i), d.node, web, rsRef)
		d.webOnNode = append(d.webOnNode, p.Name)
		pods = append(pods, p)
	}
	pods = append(pods, drainPod(d.ns, "web-peer", d.peer, web, rsRef), drainPod(d.ns, "node-agent-"+d.suite, d.node, agent, dsRef))
	d.keep = []string{"web-peer", "node-agent-" + d.suite}
	for _, p := range pods {
		if _, err := d.admin.CoreV1().Pods(d.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}

	// Ready pods (a Pending pod would bypass the budget) and a processed
	// budget: 4 healthy, 1 required, so all 3 evictions are allowed.
	var last string
	for {
		last = d.readiness(ctx, len(pods))
		if last == "" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("cluster not ready after 60 s: %s", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readiness returns what is not ready yet ("" when everything is).
func (d *drainCase) readiness(ctx context.Context, wantPods int) string {
	n, err := d.admin.CoreV1().Nodes().Get(ctx, d.node, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if !kwok.NodeReady(n) {
		return "node " + d.node + " not Ready"
	}
	l, err := d.admin.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	if len(l.Items) != wantPods {
		return fmt.Sprintf("%d pods, want %d", len(l.Items), wantPods)
	}
	for _, p := range l.Items {
		if !kwok.RunningReady(&p) {
			return "pod " + p.Name + " not Running and Ready (" + string(p.Status.Phase) + ")"
		}
	}
	pdb, err := d.admin.PolicyV1().PodDisruptionBudgets(d.ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if s := pdb.Status; s.ObservedGeneration != pdb.Generation || s.CurrentHealthy != drainWebPods+1 || s.DisruptionsAllowed != drainWebPods {
		return fmt.Sprintf("PDB web: observedGeneration %d/%d, currentHealthy %d, disruptionsAllowed %d",
			s.ObservedGeneration, pdb.Generation, s.CurrentHealthy, s.DisruptionsAllowed)
	}
	return ""
}

func drainPodSpec(node string) corev1.PodSpec {
	grace := int64(drainGrace)
	return corev1.PodSpec{
		NodeName:                      node,
		TerminationGracePeriodSeconds: &grace,
		Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
	}
}

// drainPod is a pod bound to node. The annotations make kwok start it at
// once and finish its deletion when its grace period ends (the stage's
// delay is the smaller of the annotation and the time left until the
// deletionTimestamp).
func drainPod(ns, name, node string, labels map[string]string, owner metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner},
			Annotations: kwok.PodAnnotations(time.Hour)},
		Spec: drainPodSpec(node),
	}
}

// installKubeconfig puts the node's kubeconfig where kubeadm does: the
// kubelet.conf layout with file paths to the rotated client certificate
// (a symlink to a dated cert+key file).
func (d *drainCase) installKubeconfig(c *container) {
	t := c.t
	shared := d.controlPlane()
	shared.mu.Lock()
	kcPath := func() string { defer shared.mu.Unlock(); return d.cp.NodeKubeconfig(t, d.node) }()
	kc, err := os.ReadFile(kcPath)
	if err != nil {
		t.Fatal(err)
	}
	if d.server != "" {
		if !strings.Contains(string(kc), "server: "+d.cp.Server) {
			t.Fatalf("%s does not name the server %s:\n%s", kcPath, d.cp.Server, kc)
		}
		kc = []byte(strings.ReplaceAll(string(kc), "server: "+d.cp.Server, "server: "+d.server))
	}
	hostPEM := filepath.Join(d.cp.Dir, "pki", "node-"+d.node+".pem")
	if n := strings.Count(string(kc), hostPEM); n != 2 {
		t.Fatalf("%s: want client-certificate and client-key = %s, found it %d times:\n%s", kcPath, hostPEM, n, kc)
	}
	pem, err := os.ReadFile(hostPEM)
	if err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(c.dir, "rig", "k8s")
	if err := os.MkdirAll(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stage, "kubelet.conf"), []byte(strings.ReplaceAll(string(kc), hostPEM, kubeletCertLink)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stage, "client.pem"), pem, 0o600); err != nil {
		t.Fatal(err)
	}
	dated := kubeletPKI + "/kubelet-client-" + time.Now().UTC().Format("2006-01-02-15-04-05") + ".pem"
	c.must("sh", "-ec", `mkdir -p /etc/kubernetes `+kubeletPKI+`
		install -m 0600 /rig/k8s/kubelet.conf `+kubeletConf+`
		install -m 0600 /rig/k8s/client.pem `+dated+`
		ln -sfn `+dated+` `+kubeletCertLink+`
		rm -rf /rig/k8s`)
}

// ---------------------------------------------------------------- after the reboot

func (d *drainCase) check(c *container) {
	t := c.t
	if d.admin == nil {
		return // steps failed before the cluster was set up
	}
	ctx := ctxT(t, 30*time.Second)

	// gnsh's own account of the drain.
	for _, want := range []string{"drained " + d.node + " in ", fmt.Sprintf("%d pods evicted", drainWebPods), "left: 1 DaemonSet pod"} {
		if !strings.Contains(d.out.stderr, want) {
			t.Errorf("gnsh's output lacks %q:\n%s", want, d.out.stderr)
		}
	}

	// The ReplicaSet pods on the node are gone; the DaemonSet pod and the
	// pod on the peer are still there.
	l, err := d.admin.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, p := range l.Items {
		left[p.Name] = true
	}
	for _, p := range d.webOnNode {
		if left[p] {
			t.Errorf("pod %s still exists after the drain", p)
		}
	}
	for _, p := range d.keep {
		if !left[p] {
			t.Errorf("pod %s is gone; the drain must leave it", p)
		}
	}

	// Cordoned, with gnsh's ownership record.
	n, err := d.admin.CoreV1().Nodes().Get(ctx, d.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable {
		t.Errorf("node %s is not cordoned", d.node)
	}
	var own struct{ Action, User string }
	if v, ok := n.Annotations[cordonAnnoKey]; !ok {
		t.Errorf("node %s has no %s annotation; annotations: %v", d.node, cordonAnnoKey, n.Annotations)
	} else if err := json.Unmarshal([]byte(v), &own); err != nil || own.Action != "reboot" {
		t.Errorf("%s = %s: want action reboot (%v)", cordonAnnoKey, v, err)
	} else {
		c.logf("%s: %s", cordonAnnoKey, v)
	}
	if p, _ := d.admin.CoreV1().Nodes().Get(ctx, d.peer, metav1.GetOptions{}); p != nil && p.Spec.Unschedulable {
		t.Errorf("peer node %s was cordoned", d.peer)
	}

	// gnsh's Events on the Node.
	evs, err := d.admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + d.node})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, e := range evs.Items {
		if e.Source.Component == "gnsh" {
			reasons[e.Reason] = e.Message
			c.logf("Event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	for _, r := range []string{"GnshDrainStarted", "GnshDrainFinished", "GnshShutdown"} {
		if _, ok := reasons[r]; !ok {
			t.Errorf("no %s Event on node %s; gnsh's Events: %v", r, d.node, reasons)
		}
	}

	d.checkOrder(c)
}

// auditEvent is the part of an apiserver audit record the checks need.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource, Namespace, Name, Subresource string
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp metav1.MicroTime `json:"stageTimestamp"`
	raw            []byte
}

func readAudit(path string) ([]auditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Stage == "ResponseComplete" && e.ObjectRef != nil && e.ResponseStatus != nil {
			e.raw = append([]byte(nil), sc.Bytes()...)
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// checkOrder proves from the apiserver's audit log (when each request was
// answered) and dbus-monitor (when logind was called and signalled) that
// the drain finished before the hand-off: last pod deleted < last gnsh
// Event posted < Reboot called < PrepareForShutdown(true). It also checks
// that gnsh used the kubelet's identity for all of it.
func (d *drainCase) checkOrder(c *container) {
	t := c.t
	evs, err := readAudit(d.cp.AuditLog)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	nodeUser := "system:node:" + d.node
	onNode := map[string]bool{}
	for _, p := range d.webOnNode {
		onNode[p] = true
	}
	type mark struct {
		at   time.Time
		what string
	}
	var marks []mark
	var cordon, firstEvict, lastGone, lastEvent time.Time
	evicted, gone, gnshEvents := map[string]bool{}, map[string]bool{}, 0
	var mine []byte // this case's audit records, kept with the artefacts
	defer func() { _ = os.WriteFile(filepath.Join(c.dir, "audit.jsonl"), mine, 0o644) }()
	for _, e := range evs {
		r, code, at := e.ObjectRef, e.ResponseStatus.Code, e.StageTimestamp.Time
		if e.User.Username == nodeUser || r.Namespace == d.ns || r.Name == d.node {
			mine = append(append(mine, e.raw...), '\n')
		}
		if at.Before(d.trigger) {
			continue
		}
		switch {
		case r.Resource == "nodes" && r.Name == d.node && e.Verb == "patch" && e.User.Username == nodeUser && code == 200:
			if cordon.IsZero() {
				cordon = at
				marks = append(marks, mark{at, "node patched (cordon) by " + e.User.Username})
			}
		case r.Resource == "pods" && r.Subresource == "eviction" && r.Namespace == d.ns && e.Verb == "create":
			marks = append(marks, mark{at, fmt.Sprintf("eviction of %s by %s: %d", r.Name, e.User.Username, code)})
			if !onNode[r.Name] {
				t.Errorf("gnsh tried to evict %s/%s, which it must leave", r.Namespace, r.Name)
			}
			if e.User.Username != nodeUser {
				t.Errorf("eviction of %s by %s, want the kubelet's identity %s", r.Name, e.User.Username, nodeUser)
			}
			if code == 201 {
				evicted[r.Name] = true
			}
			if firstEvict.IsZero() {
				firstEvict = at
			}
		case r.Resource == "pods" && r.Subresource == "" && r.Namespace == d.ns && e.Verb == "delete" && onNode[r.Name] && code == 200:
			// The final delete (kwok, once the grace period is over).
			marks = append(marks, mark{at, fmt.Sprintf("pod %s deleted by %s", r.Name, e.User.Username)})
			gone[r.Name] = true
			if at.After(lastGone) {
				lastGone = at
			}
		case r.Resource == "events" && e.Verb == "create" && e.User.Username == nodeUser && code == 201:
			gnshEvents++
			marks = append(marks, mark{at, "Event posted by " + e.User.Username})
			if at.After(lastEvent) {
				lastEvent = at
			}
		}
	}
	for _, p := range d.webOnNode {
		if !evicted[p] {
			t.Errorf("no accepted eviction of %s by %s in the audit log", p, nodeUser)
		}
		if !gone[p] {
			t.Errorf("no final delete of %s in the audit log", p)
		}
	}
	if cordon.IsZero() {
		t.Errorf("no cordon (patch of node %s by %s) in the audit log", d.node, nodeUser)
	}
	if gnshEvents < 3 {
		t.Errorf("%d Events created by %s, want 3 (started, finished, shutdown)", gnshEvents, nodeUser)
	}

	var reboot time.Time
	for _, m := range c.calls() {
		if strings.HasPrefix(m.member, "Reboot") {
			reboot = m.at
			marks = append(marks, mark{m.at, "logind " + m.member + " called"})
			break
		}
	}
	pfs, ok := c.pfs()
	if ok {
		marks = append(marks, mark{pfs, "logind: PrepareForShutdown(true)"})
	}
	marks = append(marks, mark{c.exitAt, fmt.Sprintf("container exited (rc %d)", c.exitCode)})
	sort.SliceStable(marks, func(i, j int) bool { return marks[i].at.Before(marks[j].at) })
	var b strings.Builder
	for _, m := range marks {
		fmt.Fprintf(&b, "%+8.3fs  %s\n", m.at.Sub(d.trigger).Seconds(), m.what)
	}
	_ = os.WriteFile(filepath.Join(c.dir, "timeline.txt"), []byte(b.String()), 0o644)
	c.logf("timeline (seconds after `reboot`):\n%s", b.String())

	if reboot.IsZero() || !ok || lastGone.IsZero() || lastEvent.IsZero() {
		t.Errorf("timeline incomplete: reboot call %v, PFS %v, last pod gone %v, last Event %v", reboot, pfs, lastGone, lastEvent)
		return
	}
	var first, afterGone int // Events posted before the first eviction, after the last pod went
	for _, m := range marks {
		if strings.HasPrefix(m.what, "Event posted") {
			if firstEvict.IsZero() || m.at.Before(firstEvict) {
				first++
			}
			if m.at.After(lastGone) {
				afterGone++
			}
		}
	}
	if first != 1 || afterGone != 2 {
		t.Errorf("%d gnsh Events before the first eviction (want 1: GnshDrainStarted), %d after the last pod went (want 2: GnshDrainFinished, GnshShutdown)",
			first, afterGone)
	}
	if !lastGone.Before(lastEvent) || !lastEvent.Before(reboot) || reboot.After(pfs) {
		t.Errorf("wrong order: last pod gone %s, last gnsh Event %s, Reboot call %s, PrepareForShutdown %s (want increasing)",
			lastGone.Format("15:04:05.000000"), lastEvent.Format("15:04:05.000000"), reboot.Format("15:04:05.000000"), pfs.Format("15:04:05.000000"))
	}
	if took := lastGone.Sub(cordon); took < 500*time.Millisecond {
		t.Errorf("drain took %v from cordon to the last pod gone; with a %d s grace period it must take visible time", took, drainGrace)
	}
}

// reportBoot does the kubelet's part that kwok does not: the Node's
// status.nodeInfo.bootID is the container's boot ID, as a kubelet reports
// it after each boot (the reboot-slot gate frees a slot once the Node
// shows a new boot).
func (d *drainCase) reportBoot(t *testing.T, c *container) {
	t.Helper()
	boot := strings.TrimSpace(c.must("cat", "/proc/sys/kernel/random/boot_id").stdout)
	for try := 0; ; try++ {
		ctx := ctxT(t, 10*time.Second)
		n, err := d.admin.CoreV1().Nodes().Get(ctx, d.node, metav1.GetOptions{})
		if err == nil {
			n.Status.NodeInfo.BootID = boot
			if _, err = d.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err == nil {
				c.logf("Node %s reports boot ID %s", d.node, boot)
				return
			}
		}
		if try == 10 {
			t.Fatalf("Node %s: reporting boot ID %s: %v", d.node, boot, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
