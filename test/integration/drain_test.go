package integration

// The drain before the hand-off, end to end: the real binary as a legacy
// command in the rig, with a node's own kubelet credentials
// (system:node:NAME under the Node authorizer and NodeRestriction) against
// a real control plane (test/internal/controlplane, kwok playing the
// kubelet: pods go Running, deletions are finalised after a random part of
// their grace period), handing off to the fake logind. The set-up uses
// the admin. Each scenario has its own Node and namespace, so they run in
// parallel on one control plane.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/test/internal/controlplane"
	"github.com/gnsh/gnsh/test/internal/kwok"
	"github.com/gnsh/gnsh/test/internal/rig"
)

// Annotation and Event reasons of gnsh (internal/drain, internal/drainer),
// spelled out: the test checks the contract, not the constants.
const (
	cordonAnnotation = "gnsh.io/cordoned"
	evStarted        = "GnshDrainStarted"
	evFinished       = "GnshDrainFinished"
	evFailed         = "GnshDrainFailed"
	evShutdown       = "GnshShutdown"
	evUncordoned     = "GnshUncordoned"
)

// config is a gnsh config that keeps the drains short, with the given
// "key: value" lines in place of the defaults.
func config(lines ...string) string {
	c := map[string]string{"apiTimeout": "2s", "unreachableAfter": "3s", "drainTimeout": "30s"}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, ": ")
		c[k] = v
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, "%s: %s\n", k, c[k])
	}
	return b.String()
}

var fastConfig = config()

// cluster is one control plane shared by parallel scenarios.
type cluster struct {
	cp    *controlplane.ControlPlane
	admin kubernetes.Interface // unthrottled
}

// startCluster starts a control plane with kwok, with node identities for
// nodes made up front (controlplane.sh's CA serial file is not safe for
// concurrent use).
func startCluster(t *testing.T, nodes ...string) *cluster {
	t.Helper()
	need(t)
	controlplane.Need(t)
	cp := controlplane.StartWith(t, controlplane.Options{Kwok: true, Nodes: nodes})
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Timeout = 30 * time.Second
	return &cluster{cp: cp, admin: kubernetes.NewForConfigOrDie(cfg)}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// node is one kwok Node with its own namespace, as seen by the admin.
type node struct {
	*cluster
	t    *testing.T
	name string
	ns   string
	uid  types.UID
}

// newNode creates a Node that kwok is the kubelet of, waits until it is
// Ready, and creates the namespace ns-NAME.
func (k *cluster) newNode(t *testing.T, name string) *node {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	obj, err := k.admin.CoreV1().Nodes().Create(ctx, kwok.Node(name, 100), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{cluster: k, t: t, name: name, ns: "ns-" + name, uid: obj.UID}
	if _, err := k.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kwok.WaitNodeReady(t, ctx, k.admin, name)
	return n
}

// podOpts shape a test pod.
type podOpts struct {
	// hold keeps the pod Terminating once deleted (grace period and kwok's
	// delay 5 minutes), until forceDelete.
	hold     bool
	emptyDir bool
}

func (n *node) pod(name string, owner *metav1.OwnerReference, o podOpts) *corev1.Pod {
	grace := int64(1)
	// Without kwok's random 1-5 s delays; a deletion then takes a random
	// part of the grace period.
	ann := kwok.PodAnnotations(0)
	if o.hold {
		grace = 300
		ann = kwok.PodAnnotations(300 * time.Second)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns, Annotations: ann, Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			NodeName:                      n.name,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.invalid/pause:1"}},
		},
	}
	if owner != nil {
		p.Labels["app"] = owner.Name
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if o.emptyDir {
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	return p
}

func (n *node) create(c kubernetes.Interface, p *corev1.Pod) {
	n.t.Helper()
	if _, err := c.CoreV1().Pods(p.Namespace).Create(ctxFor(n.t, time.Minute), p, metav1.CreateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// templateSpec is the pod template of the ReplicaSets and DaemonSets.
var templateSpec = corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause:1"}}}

// replicaSet creates a ReplicaSet object (no controller runs: it gives the
// pods a real owner, and the disruption controller a scale) and its pods
// NAME-0 … on the node.
func (n *node) replicaSet(name string, replicas int32, o podOpts) []string {
	n.t.Helper()
	rs, err := n.admin.AppsV1().ReplicaSets(n.ns).Create(ctxFor(n.t, time.Minute), kwok.ReplicaSet(n.ns, name, replicas, templateSpec),
		metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	ref := metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	var names []string
	for i := range replicas {
		p := n.pod(fmt.Sprintf("%s-%d", name, i), ref, o)
		n.create(n.admin, p)
		names = append(names, n.ns+"/"+p.Name)
	}
	return names
}

// daemonSetPod creates a DaemonSet object and one pod it owns on the node.
func (n *node) daemonSetPod(name string) string {
	n.t.Helper()
	ds, err := n.admin.AppsV1().DaemonSets(n.ns).Create(ctxFor(n.t, time.Minute), kwok.DaemonSet(n.ns, name, templateSpec), metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	p := n.pod(name+"-x", metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet")), podOpts{})
	n.create(n.admin, p)
	return n.ns + "/" + p.Name
}

// mirrorPod creates the API copy of a static pod as the kubelet does, with
// the node's own credentials (NodeRestriction allows a node only mirror
// pods bound to itself and owned by its Node).
func (n *node) mirrorPod(name string) string {
	n.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", n.cp.NodeKubeconfig(n.t, n.name))
	if err != nil {
		n.t.Fatal(err)
	}
	ctrl := true
	p := n.pod(name, &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n.name, UID: n.uid, Controller: &ctrl}, podOpts{})
	p.Annotations["kubernetes.io/config.mirror"] = "0123456789abcdef"
	p.Annotations["kubernetes.io/config.source"] = "file"
	n.create(kubernetes.NewForConfigOrDie(cfg), p)
	return n.ns + "/" + p.Name
}

// pdb creates a PodDisruptionBudget allowing no disruption of app's pods
// and waits until the disruption controller has processed it with every
// pod healthy: from then on evictions get 429 at once.
func (n *node) pdb(app string, healthy int32) {
	n.t.Helper()
	ctx := ctxFor(n.t, time.Minute)
	zero := intstr.FromInt32(0)
	_, err := n.admin.PolicyV1().PodDisruptionBudgets(n.ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: n.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	kwok.WaitPDB(n.t, ctx, n.admin, n.ns, app, func(s policyv1.PodDisruptionBudgetStatus) bool {
		return s.CurrentHealthy == healthy && s.ExpectedPods == healthy && s.DisruptionsAllowed == 0
	})
}

// pods lists the pods bound to the node.
func (n *node) pods() []corev1.Pod {
	n.t.Helper()
	l, err := n.podsErr(ctxFor(n.t, time.Minute))
	if err != nil {
		n.t.Fatal(err)
	}
	return l
}

func (n *node) podsErr(ctx context.Context) ([]corev1.Pod, error) {
	return kwok.NodePods(ctx, n.admin, n.name)
}

func names(pods []corev1.Pod) []string {
	var s []string
	for _, p := range pods {
		s = append(s, p.Namespace+"/"+p.Name)
	}
	sort.Strings(s)
	return s
}

// waitPods waits until there are want pods on the node and ok holds for
// each.
func (n *node) waitPods(want int, what string, ok func(*corev1.Pod) bool) {
	n.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		l := n.pods()
		good := 0
		for i := range l {
			if ok(&l[i]) {
				good++
			}
		}
		if len(l) == want && good == want {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: %d pods, %d of them %s; want %d", n.name, len(l), good, what, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRunning waits until want pods are Running and Ready (a Pending pod
// bypasses PodDisruptionBudgets).
func (n *node) waitRunning(want int) {
	n.t.Helper()
	n.waitPods(want, "Running and Ready", kwok.RunningReady)
}

// waitTerminating waits until the node has want pods, all being deleted:
// the evictions went out.
func (n *node) waitTerminating(want int) {
	n.t.Helper()
	n.waitPods(want, "terminating", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// forceDelete finishes the deletion of every terminating pod at once.
func (n *node) forceDelete() {
	n.t.Helper()
	zero := int64(0)
	for _, p := range n.pods() {
		if p.DeletionTimestamp == nil {
			continue
		}
		err := n.admin.CoreV1().Pods(p.Namespace).Delete(ctxFor(n.t, time.Minute), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) { // gone meanwhile: as good
			n.t.Fatal(err)
		}
	}
}

func (n *node) get() *corev1.Node {
	n.t.Helper()
	obj, err := n.admin.CoreV1().Nodes().Get(ctxFor(n.t, time.Minute), n.name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return obj
}

// ownership is gnsh's annotation, decoded.
type ownership struct {
	Action, User, TTY, BootID string
	Time                      time.Time
	When                      *time.Time
}

// cordon returns spec.unschedulable and gnsh's annotation (nil if absent).
func (n *node) cordon() (bool, *ownership) {
	n.t.Helper()
	obj := n.get()
	v, ok := obj.Annotations[cordonAnnotation]
	if !ok {
		return obj.Spec.Unschedulable, nil
	}
	var o ownership
	if err := json.Unmarshal([]byte(v), &o); err != nil {
		n.t.Fatalf("%s: %q", cordonAnnotation, v)
	}
	return obj.Spec.Unschedulable, &o
}

// wantCordon checks the node's cordon: by gnsh for action, or none ("").
func (n *node) wantCordon(action string) *ownership {
	n.t.Helper()
	unsched, o := n.cordon()
	switch {
	case action == "" && (unsched || o != nil):
		n.t.Errorf("%s: unschedulable %v, annotation %+v; want neither", n.name, unsched, o)
	case action != "" && (!unsched || o == nil || o.Action != action || o.User != "alice"):
		n.t.Errorf("%s: unschedulable %v, annotation %+v; want gnsh's cordon for %s by alice", n.name, unsched, o, action)
	}
	return o
}

// adminCordon makes the node unschedulable the way kubectl cordon does.
func (n *node) adminCordon() {
	n.t.Helper()
	_, err := n.admin.CoreV1().Nodes().Patch(ctxFor(n.t, time.Minute), n.name, types.StrategicMergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+cordonAnnotation+`":null}},"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
}

// events returns the reasons of the Events on the node in namespace
// default, oldest first.
func (n *node) events() []string {
	n.t.Helper()
	l, err := n.admin.CoreV1().Events(metav1.NamespaceDefault).List(ctxFor(n.t, time.Minute), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", n.name).String()})
	if err != nil {
		n.t.Fatal(err)
	}
	sort.SliceStable(l.Items, func(i, j int) bool { return l.Items[i].CreationTimestamp.Before(&l.Items[j].CreationTimestamp) })
	var r []string
	for _, e := range l.Items {
		if e.Source.Component == "gnsh" {
			r = append(r, e.Reason)
		}
	}
	return r
}

// wantEvents checks that the node has exactly these gnsh Events, in any
// order (their timestamps have one-second resolution).
func (n *node) wantEvents(want ...string) {
	n.t.Helper()
	got := n.events()
	g, w := slices.Clone(got), slices.Clone(want)
	sort.Strings(g)
	sort.Strings(w)
	if !reflect.DeepEqual(g, w) {
		n.t.Errorf("%s: Events %q, want %q", n.name, got, want)
	}
}

// env is what gnsh gets: the node's kubelet kubeconfig, a config file and
// a user name.
func (n *node) env(config string) []string {
	n.t.Helper()
	return []string{"KUBECONFIG=" + n.cp.NodeKubeconfig(n.t, n.name), "GNSH_CONFIG=" + writeConfig(n.t, config), "LOGNAME=alice"}
}

func writeConfig(t *testing.T, config string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(f, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// gnshRun runs a legacy command (or gnsh) in the rig and logs its output.
func gnshRun(t *testing.T, bus *logindtest.Bus, env []string, name string, args ...string) rig.Result {
	t.Helper()
	addr := "unix:path=/nonexistent/bus"
	if bus != nil {
		addr = bus.Address()
	}
	start := time.Now()
	r := run(t, addr, env, name, args...)
	logRun(t, name, args, r, time.Since(start))
	return r
}

func logRun(t *testing.T, name string, args []string, r rig.Result, d time.Duration) {
	t.Helper()
	after := ""
	if d > 0 {
		after = " after " + d.Round(time.Millisecond).String()
	}
	t.Logf("%s: exit %d%s\nstdout:\n%sstderr:\n%s", strings.Join(append([]string{name}, args...), " "),
		r.Code, after, r.Stdout, r.Stderr)
}

// startCmd starts a legacy command in the rig without waiting.
func startCmd(t *testing.T, bus *logindtest.Bus, env []string, runDir, name string, args ...string) *rig.Proc {
	t.Helper()
	return rig.Start(t, rig.Spec{Env: append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, env...),
		Argv: append([]string{filepath.Join(binDir, name)}, args...), RunDir: runDir})
}

func waitCmd(t *testing.T, p *rig.Proc, name string, args ...string) rig.Result {
	t.Helper()
	r := p.Wait()
	logRun(t, name, args, r, 0)
	return r
}

func members(calls []logindtest.Call) []string {
	var s []string
	for _, c := range calls {
		s = append(s, c.Member)
	}
	return s
}

// wantHandOff checks that logind got exactly the hand-off of an
// immediate shutdown: SetWallMessage, then method. what prefixes the
// failure, if not "".
func wantHandOff(t *testing.T, what string, calls []logindtest.Call, method string) {
	t.Helper()
	if got, want := members(calls), []string{"SetWallMessage", method}; !reflect.DeepEqual(got, want) {
		if what != "" {
			what += ": "
		}
		t.Errorf("%slogind got %q, want %q", what, got, want)
	}
}

// wantLines checks that stderr has each of want as a whole line; "…" in
// a want matches anything.
func wantLines(t *testing.T, stderr string, want ...string) {
	t.Helper()
	for _, w := range want {
		parts := strings.Split(w, "…")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		if !regexp.MustCompile(`(?m)^` + strings.Join(parts, `.*`) + `$`).MatchString(stderr) {
			t.Errorf("stderr lacks the line %q", w)
		}
	}
}

func noLogind(t *testing.T, ld *logindtest.Logind) {
	t.Helper()
	if c := ld.AllCalls(); len(c) != 0 {
		t.Errorf("logind was called: %q", wire(c))
	}
}

// drainNodes are the Nodes of TestDrain, one per scenario.
var drainNodes = []string{"plain", "plain239", "kinds", "pdb", "unreach", "sigint", "sigterm", "sighup",
	"lock", "sched", "force", "cli", "refused"}

// TestDrain runs the scenarios of the drain before the hand-off.
func TestDrain(t *testing.T) {
	t.Parallel()
	k := startCluster(t, drainNodes...)
	for _, sc := range []struct {
		name string
		f    func(*testing.T, *cluster)
	}{
		{"reboot drains first", func(t *testing.T, k *cluster) { testDrainFirst(t, k, "plain", 252, "RebootWithFlags") }},
		{"reboot drains first on v239", func(t *testing.T, k *cluster) { testDrainFirst(t, k, "plain239", 239, "Reboot") }},
		{"logind refuses", testLogindRefuses},
		{"what stays and what goes", testPodKinds},
		{"PDB refuses, --force-drain hands off", testPDB},
		{"API server unreachable at start", testUnreachableAtStart},
		{"SIGINT", func(t *testing.T, k *cluster) { testSignal(t, k, "sigint", syscall.SIGINT) }},
		{"SIGTERM", func(t *testing.T, k *cluster) { testSignal(t, k, "sigterm", syscall.SIGTERM) }},
		{"SIGHUP is ignored", testSIGHUP},
		{"one drain at a time", testLock},
		{"scheduled", testScheduled},
		{"reboot -f", testForce},
		{"gnsh drain and uncordon", testCommands},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.f(t, k)
		})
	}
}

// testDrainFirst: plain reboot evicts everything evictable, and only then
// calls logind; the node stays cordoned by gnsh (the node agent uncordons
// after boot).
func testDrainFirst(t *testing.T, k *cluster, name string, version int, method string) {
	n := k.newNode(t, name)
	n.replicaSet("web", 3, podOpts{})
	n.waitRunning(3)

	bus := logindtest.StartBus(t)
	var mu sync.Mutex
	var atCall []string
	var atCallErr error
	checked := false
	ld := bus.StartLogind(t, logindtest.Options{Version: version, OnCall: func(c logindtest.Call) {
		if c.Member != method {
			return
		}
		// What the node had when logind was asked to reboot.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := n.podsErr(ctx)
		mu.Lock()
		defer mu.Unlock()
		atCall, atCallErr, checked = names(l), err, true
	}})
	r := gnshRun(t, bus, n.env(fastConfig), "reboot")
	if r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	wantHandOff(t, "", ld.Calls(), method)
	mu.Lock()
	if !checked || atCallErr != nil || len(atCall) != 0 {
		t.Errorf("when logind got %s: checked %v, pods on the node %q (%v); want none", method, checked, atCall, atCallErr)
	}
	mu.Unlock()
	wantLines(t, r.Stderr, "gnsh: drained "+name+" in …")
	if !strings.HasSuffix(r.Stderr, ": 3 pods evicted\n") {
		t.Errorf("last line is not the summary")
	}
	o := n.wantCordon("reboot")
	if o != nil && (o.When != nil || o.BootID == "" || time.Since(o.Time) > time.Minute) {
		t.Errorf("ownership %+v", o)
	}
	n.wantEvents(evStarted, evFinished, evShutdown)
}

// testLogindRefuses: when logind refuses the reboot after the drain,
// gnsh's cordon is undone (the pods are gone, but the node is usable).
func testLogindRefuses(t *testing.T, k *cluster) {
	n := k.newNode(t, "refused")
	n.replicaSet("web", 1, podOpts{})
	n.waitRunning(1)
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Errors: map[string]*dbus.Error{
		"RebootWithFlags": dbus.NewError("org.freedesktop.DBus.Error.AccessDenied", []any{"Access denied"})}})
	r := gnshRun(t, bus, n.env(fastConfig), "reboot")
	if r.Code != 1 {
		t.Fatalf("exit %d, want 1", r.Code)
	}
	wantHandOff(t, "", ld.Calls(), "RebootWithFlags")
	wantLines(t, r.Stderr, "gnsh: drained refused in …", "Call to Reboot failed: Access denied",
		"gnsh: the reboot was not handed off; refused uncordoned")
	n.wantCordon("")
	n.wantEvents(evStarted, evFinished, evShutdown, evFailed)
}

// testPodKinds: DaemonSet and mirror pods stay; pods with emptyDir or
// without a controller are evicted, each with a warning line.
func testPodKinds(t *testing.T, k *cluster) {
	n := k.newNode(t, "kinds")
	n.replicaSet("web", 1, podOpts{})
	n.replicaSet("cache", 1, podOpts{emptyDir: true})
	ds := n.daemonSetPod("agent")
	mirror := n.mirrorPod("static")
	n.create(n.admin, n.pod("bare", nil, podOpts{}))
	n.waitRunning(5)

	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{})
	r := gnshRun(t, bus, n.env(fastConfig), "reboot")
	if r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	wantHandOff(t, "", ld.Calls(), "RebootWithFlags")
	wantLines(t, r.Stderr,
		"gnsh: evicting ns-kinds/bare declares no controller: it will not be recreated elsewhere",
		"gnsh: evicting ns-kinds/cache-0 uses emptyDir: its data is lost",
		"gnsh: drained kinds in …")
	if !strings.HasSuffix(r.Stderr, ": 3 pods evicted (2 with warnings); left: 1 DaemonSet pod, 1 mirror pod\n") {
		t.Errorf("summary")
	}
	if got := strings.Count(r.Stderr, "gnsh: evicting "); got != 2 {
		t.Errorf("%d warning lines, want 2", got)
	}
	if got, want := names(n.pods()), []string{ds, mirror}; !reflect.DeepEqual(got, want) {
		t.Errorf("left on the node: %q, want %q", got, want)
	}
}

// testPDB: a PodDisruptionBudget that allows nothing refuses the reboot
// (exit 1, no logind call, gnsh's cordon undone) until --force-drain; an
// admin's own cordon is never undone.
func testPDB(t *testing.T, k *cluster) {
	n := k.newNode(t, "pdb")
	n.replicaSet("web", 2, podOpts{})
	db := n.replicaSet("db", 2, podOpts{})
	n.waitRunning(4)
	n.pdb("db", 2)
	env := n.env(config("drainTimeout: 3s"))

	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{})
	r := gnshRun(t, bus, env, "reboot")
	if r.Code != 1 {
		t.Fatalf("exit %d, want 1", r.Code)
	}
	noLogind(t, ld)
	wantLines(t, r.Stderr,
		"gnsh: nothing was shut down; pdb uncordoned",
		"gnsh: drain of pdb did not finish within 3s; eviction refused for "+db[0]+" (PodDisruptionBudget db), "+db[1]+" (PodDisruptionBudget db)",
		"gnsh: reboot refused. To reboot anyway, run the command again with --force-drain …")
	n.wantCordon("")
	if got := names(n.pods()); !reflect.DeepEqual(got, db) {
		t.Errorf("left on the node: %q, want %q", got, db)
	}
	n.wantEvents(evStarted, evFailed)

	r = gnshRun(t, bus, env, "reboot", "--force-drain")
	if r.Code != 0 {
		t.Fatalf("--force-drain: exit %d", r.Code)
	}
	wantHandOff(t, "--force-drain", ld.Calls(), "RebootWithFlags")
	wantLines(t, r.Stderr, "gnsh: warning: drain of pdb did not finish within 3s; eviction refused for … --force-drain: rebooting anyway")
	n.wantCordon("reboot")
	n.wantEvents(evStarted, evFailed, evStarted, evFailed, evShutdown)

	// An admin's cordon stays after a refused drain.
	n.adminCordon()
	ld2 := newLogind(t)
	r = gnshRun(t, ld2.bus, env, "reboot")
	if r.Code != 1 {
		t.Fatalf("admin's cordon: exit %d, want 1", r.Code)
	}
	noLogind(t, ld2.ld)
	wantLines(t, r.Stderr, "gnsh: pdb was already cordoned, not by gnsh; that cordon stays")
	if strings.Contains(r.Stderr, "uncordoned") {
		t.Errorf("gnsh claims to have uncordoned")
	}
	if unsched, o := n.cordon(); !unsched || o != nil {
		t.Errorf("admin's cordon: unschedulable %v, annotation %+v", unsched, o)
	}
}

type busLogind struct {
	bus *logindtest.Bus
	ld  *logindtest.Logind
}

// newLogind starts a fresh bus with a v252 logind.
func newLogind(t *testing.T) busLogind {
	t.Helper()
	b := logindtest.StartBus(t)
	return busLogind{b, b.StartLogind(t, logindtest.Options{})}
}

// testUnreachableAtStart: an API server that does not answer (or refuses
// connections) never stops a reboot: one warning line, and the hand-off
// comes within about apiTimeout; reboot -f's reboot(2) within about
// forceCordonTimeout, even with a much longer apiTimeout.
func testUnreachableAtStart(t *testing.T, k *cluster) {
	kc, err := os.ReadFile(k.cp.NodeKubeconfig(t, "unreach"))
	if err != nil {
		t.Fatal(err)
	}
	server := regexp.MustCompile(`server: https://127\.0\.0\.1:\d+`)
	if !server.Match(kc) {
		t.Fatalf("no server line in the kubeconfig:\n%s", kc)
	}
	// A listener that accepts and never answers, and a closed port.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()

	for _, tc := range []struct{ what, addr string }{{"silent", silent.Addr().String()}, {"closed port", closed.Addr().String()}} {
		f := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(f, server.ReplaceAll(kc, []byte("server: https://"+tc.addr)), 0o600); err != nil {
			t.Fatal(err)
		}
		b := newLogind(t)
		start := time.Now()
		r := gnshRun(t, b.bus, []string{"KUBECONFIG=" + f, "GNSH_CONFIG=" + writeConfig(t, fastConfig), "LOGNAME=alice"}, "reboot")
		took := time.Since(start)
		if r.Code != 0 {
			t.Fatalf("%s: exit %d", tc.what, r.Code)
		}
		wantHandOff(t, tc.what, b.ld.Calls(), "RebootWithFlags")
		lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "gnsh: warning: API server unreachable") ||
			!strings.Contains(lines[0], "; rebooting without ") {
			t.Errorf("%s: want one warning line, got %q", tc.what, r.Stderr)
		}
		if took > 30*time.Second {
			t.Errorf("%s: the hand-off took %v", tc.what, took)
		}

		// -f: the TLS handshake with the silent server never ends; the
		// cordon attempt is bounded by forceCordonTimeout, neither by
		// apiTimeout nor by client-go's TLS handshake timeout (10 s).
		b = newLogind(t)
		start = time.Now()
		r = gnshRun(t, b.bus, []string{"KUBECONFIG=" + f, "GNSH_CONFIG=" + writeConfig(t, config("apiTimeout: 30s", "forceCordonTimeout: 1s"))},
			"reboot", "-f")
		took = time.Since(start)
		if r.Kernel != "restart" {
			t.Fatalf("%s: reboot -f: exit %d, want reboot(2); stderr %q", tc.what, r.Code, r.Stderr)
		}
		noLogind(t, b.ld)
		wantLines(t, r.Stderr, "gnsh: warning: … reboot -f goes on without a cordon", "Rebooting.")
		if took > 6*time.Second {
			t.Errorf("%s: reboot -f took %s, want about forceCordonTimeout (1s)", tc.what, took.Round(100*time.Millisecond))
		}
	}
}

// testSignal: SIGINT or SIGTERM in the middle of a drain stops it: exit
// 128+N, gnsh's cordon undone, no logind call.
func testSignal(t *testing.T, k *cluster, name string, sig syscall.Signal) {
	n := k.newNode(t, name)
	n.replicaSet("slow", 2, podOpts{hold: true})
	n.waitRunning(2)
	b := newLogind(t)
	p := startCmd(t, b.bus, n.env(fastConfig), "", "reboot")
	n.waitTerminating(2)
	if err := p.Signal(sig); err != nil {
		t.Fatal(err)
	}
	r := waitCmd(t, p, "reboot")
	if r.Code != 128+int(sig) || r.Kernel != "" {
		t.Fatalf("exit %d (%q), want %d", r.Code, r.Kernel, 128+int(sig))
	}
	noLogind(t, b.ld)
	wantLines(t, r.Stderr,
		"gnsh: drain interrupted by "+map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[sig]+"; "+name+" uncordoned",
		"gnsh: drain interrupted by …; nothing was shut down")
	n.wantCordon("")
	n.wantEvents(evStarted, evFailed)
}

// testSIGHUP: a dropped ssh session does not stop the drain; the command
// carries on and hands off.
func testSIGHUP(t *testing.T, k *cluster) {
	n := k.newNode(t, "sighup")
	n.replicaSet("slow", 2, podOpts{hold: true})
	n.waitRunning(2)
	b := newLogind(t)
	p := startCmd(t, b.bus, n.env(fastConfig), "", "reboot")
	n.waitTerminating(2)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if c := b.ld.AllCalls(); len(c) != 0 {
		t.Fatalf("logind called before the pods were gone: %q", wire(c))
	}
	n.forceDelete()
	r := waitCmd(t, p, "reboot")
	if r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	wantHandOff(t, "", b.ld.Calls(), "RebootWithFlags")
	wantLines(t, r.Stderr, "gnsh: drained sighup in …")
	n.wantCordon("reboot")
}

// testLock: a second gnsh on the same node (sharing /run) refuses at once,
// naming the holder; the first one carries on.
func testLock(t *testing.T, k *cluster) {
	n := k.newNode(t, "lock")
	n.replicaSet("slow", 2, podOpts{hold: true})
	n.waitRunning(2)
	runDir := t.TempDir()
	b := newLogind(t)
	p := startCmd(t, b.bus, n.env(fastConfig), runDir, "reboot")
	n.waitTerminating(2)

	env2 := append(n.env(fastConfig), "LOGNAME=bob")
	second := waitCmd(t, startCmd(t, b.bus, env2, runDir, "poweroff"), "poweroff")
	if second.Code != 1 {
		t.Errorf("second: exit %d, want 1", second.Code)
	}
	if !regexp.MustCompile(`^gnsh: another gnsh is draining this node \(pid \d+, reboot by alice, since \d\d:\d\d:\d\d\); wait for it to finish, or stop it\n$`).
		MatchString(second.Stderr) {
		t.Errorf("second: stderr %q", second.Stderr)
	}
	if c := b.ld.AllCalls(); len(c) != 0 {
		t.Errorf("logind called: %q", wire(c))
	}

	n.forceDelete()
	r := waitCmd(t, p, "reboot")
	if r.Code != 0 {
		t.Fatalf("first: exit %d", r.Code)
	}
	wantHandOff(t, "", b.ld.Calls(), "RebootWithFlags")
	n.wantCordon("reboot")
	if b, err := os.ReadFile(filepath.Join(runDir, "gnsh", "drain.flock")); err != nil || len(b) != 0 {
		t.Errorf("lock file after the drain: %q, %v; want it empty", b, err)
	}
}

// testScheduled: a shutdown due beyond drainTimeout is only scheduled (the
// agent does not drain ahead of it yet: gnsh says how to); one within it drains now, recording
// "when", then schedules; shutdown -c cancels and undoes gnsh's cordon.
func testScheduled(t *testing.T, k *cluster) {
	n := k.newNode(t, "sched")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	env := n.env(config("drainTimeout: 5m"))
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 247})

	r := gnshRun(t, bus, env, "shutdown", "-r", "+30")
	if r.Code != 0 {
		t.Fatalf("+30: exit %d", r.Code)
	}
	if !regexp.MustCompile(`^gnsh: not draining now: the reboot is due in (29m59s|30m0s), beyond the drain timeout \(5m0s\), and the node agent \(gnsh\.service\) is not running: nothing will drain the node before it; run 'gnsh drain' before it, or start the agent \(systemctl enable --now gnsh\.service; where the Ansible role installs gnsh, set gnsh_agent: true, or its next run stops the agent again\)\nReboot scheduled for [^\n]+, use 'shutdown -c' to cancel\.\n$`).
		MatchString(r.Stderr) {
		t.Errorf("+30: stderr %q", r.Stderr)
	}
	if typ, _ := ld.Scheduled(); typ != "reboot" {
		t.Errorf("+30: scheduled %q", typ)
	}
	n.wantCordon("")
	if got := len(n.pods()); got != 2 {
		t.Errorf("+30: %d pods left, want 2", got)
	}

	before := time.Now()
	r = gnshRun(t, bus, env, "shutdown", "-r", "+1")
	if r.Code != 0 {
		t.Fatalf("+1: exit %d", r.Code)
	}
	calls := ld.Calls()[3:]
	if got := members(calls); !reflect.DeepEqual(got, []string{"SetWallMessage", "ScheduleShutdown", "Get"}) {
		t.Fatalf("+1: logind got %q", got)
	}
	wantLines(t, r.Stderr, "gnsh: drained sched in …", "Reboot scheduled for …")
	if len(n.pods()) != 0 {
		t.Errorf("+1: pods left: %q", names(n.pods()))
	}
	o := n.wantCordon("reboot")
	due := time.UnixMicro(int64(calls[1].Args[1].(uint64)))
	if o == nil || o.When == nil || o.When.Sub(due).Abs() > time.Second || due.Before(before.Add(59*time.Second)) {
		t.Errorf("+1: ownership %+v, scheduled for %v", o, due)
	}

	r = gnshRun(t, bus, env, "shutdown", "-c")
	if r.Code != 0 {
		t.Fatalf("-c: exit %d", r.Code)
	}
	// Then, before lifting the cordon, whether a shutdown is under way:
	// PreparingForShutdown and ScheduledShutdown, read.
	if got := members(ld.Calls()[6:]); !reflect.DeepEqual(got, []string{"SetWallMessage", "CancelScheduledShutdown", "Get", "Get"}) {
		t.Errorf("-c: logind got %q", got)
	}
	if r.Stderr != "gnsh: the scheduled shutdown was cancelled; sched uncordoned\n" {
		t.Errorf("-c: stderr %q", r.Stderr)
	}
	n.wantCordon("")
	n.wantEvents(evStarted, evFinished, evShutdown, evUncordoned)
}

// testForce: reboot -f cordons (best effort), evicts nothing and never
// talks to logind; reboot(2) ends the namespace.
func testForce(t *testing.T, k *cluster) {
	n := k.newNode(t, "force")
	want := n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	b := newLogind(t)
	r := gnshRun(t, b.bus, n.env(fastConfig), "reboot", "-f")
	if r.Kernel != "restart" {
		t.Fatalf("exit %d, want reboot(2)", r.Code)
	}
	noLogind(t, b.ld)
	if r.Stderr != "gnsh: cordoned force; reboot -f does not drain\nRebooting.\n" {
		t.Errorf("stderr %q", r.Stderr)
	}
	n.wantCordon("reboot")
	n.waitRunning(2)
	if got := names(n.pods()); !reflect.DeepEqual(got, want) {
		t.Errorf("pods %q, want %q", got, want)
	}
	n.wantEvents(evShutdown)
}

// testCommands: gnsh drain --dry-run changes nothing; gnsh drain drains;
// gnsh uncordon --only-if-ours undoes only gnsh's cordon.
func testCommands(t *testing.T, k *cluster) {
	n := k.newNode(t, "cli")
	n.replicaSet("web", 2, podOpts{})
	ds := n.daemonSetPod("agent")
	n.waitRunning(3)
	env := n.env(fastConfig)

	r := gnshRun(t, nil, env, "gnsh", "drain", "--dry-run")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("--dry-run: exit %d", r.Code)
	}
	for _, re := range []string{`(?m)^would cordon cli$`, `(?m)^ns-cli/web-0\s+evict\s*$`, `(?m)^ns-cli/web-1\s+evict\s*$`,
		`(?m)^ns-cli/agent-x\s+skip: DaemonSet pod\s*$`, `(?m)^2 of 3 pods would be evicted \(dry run: nothing changed\)$`} {
		if !regexp.MustCompile(re).MatchString(r.Stdout) {
			t.Errorf("--dry-run: stdout lacks %s", re)
		}
	}
	n.wantCordon("")
	n.waitRunning(3)

	r = gnshRun(t, nil, env, "gnsh", "drain")
	if r.Code != 0 {
		t.Fatalf("drain: exit %d", r.Code)
	}
	wantLines(t, r.Stderr, "gnsh: drained cli in …")
	n.wantCordon("drain")
	if got := names(n.pods()); !reflect.DeepEqual(got, []string{ds}) {
		t.Errorf("left: %q", got)
	}

	r = gnshRun(t, nil, env, "gnsh", "uncordon", "--only-if-ours")
	if r.Code != 0 || r.Stdout != "cli uncordoned\n" {
		t.Errorf("uncordon: exit %d", r.Code)
	}
	n.wantCordon("")
	n.wantEvents(evStarted, evFinished, evUncordoned)

	n.adminCordon()
	r = gnshRun(t, nil, env, "gnsh", "uncordon", "--only-if-ours")
	if r.Code != 0 || r.Stdout != "cli is cordoned, but not by gnsh; left as it is\n" {
		t.Errorf("uncordon of an admin's cordon: exit %d", r.Code)
	}
	if unsched, o := n.cordon(); !unsched || o != nil {
		t.Errorf("admin's cordon: unschedulable %v, annotation %+v", unsched, o)
	}
}

// TestDrainAPIServerDies: the API server dies in the middle of a drain;
// after unreachableAfter gnsh gives up the drain with a warning and hands
// off. It kills the apiserver, so it has a control plane of its own.
func TestDrainAPIServerDies(t *testing.T) {
	t.Parallel()
	k := startCluster(t, "dies")
	n := k.newNode(t, "dies")
	n.replicaSet("slow", 2, podOpts{hold: true})
	n.waitRunning(2)
	b := newLogind(t)
	p := startCmd(t, b.bus, n.env(fastConfig), "", "reboot")
	n.waitTerminating(2)
	if err := syscall.Kill(k.cp.PIDs()["kube-apiserver"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	r := waitCmd(t, p, "reboot")
	took := time.Since(killed)
	if r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	wantHandOff(t, "", b.ld.Calls(), "RebootWithFlags")
	wantLines(t, r.Stderr, "gnsh: warning: API server unreachable for …")
	if !strings.Contains(r.Stderr, "; rebooting without finishing the drain of dies\n") {
		t.Errorf("the warning does not say that the reboot goes on")
	}
	if took > 30*time.Second {
		t.Errorf("hand-off %v after the API server died", took)
	}
}

// TestDrainWithoutKubeconfig: a machine that is not a Kubernetes node
// behaves exactly as before gnsh drained; a broken config refuses the
// reboot unless --no-drain. The host's /etc/gnsh and /etc/kubernetes are
// hidden in the namespace.
func TestDrainWithoutKubeconfig(t *testing.T) {
	need(t)
	hidden := func(t *testing.T, bus *logindtest.Bus, env []string, name string, args ...string) rig.Result {
		t.Helper()
		r := rig.Run(t, rig.Spec{Env: append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, env...),
			Argv: append([]string{filepath.Join(binDir, name)}, args...), Hide: []string{"/etc/gnsh", "/etc/kubernetes"}})
		logRun(t, name, args, r, 0)
		return r
	}
	for _, args := range [][]string{{"reboot"}, {"reboot", "--no-drain"}, {"shutdown", "-r", "+30"}} {
		bus := logindtest.StartBus(t)
		ld := bus.StartLogind(t, logindtest.Options{})
		r := hidden(t, bus, []string{"LOGNAME=alice"}, args[0], args[1:]...)
		if r.Code != 0 {
			t.Fatalf("%q: exit %d", args, r.Code)
		}
		if args[0] == "reboot" {
			if r.Stderr != "" {
				t.Errorf("%q: stderr %q, want nothing", args, r.Stderr)
			}
			if got := wire(ld.Calls()); !reflect.DeepEqual(got, []string{`SetWallMessage(sb:"",true)`, `RebootWithFlags(t:0x0)`}) {
				t.Errorf("%q: logind got %q", args, got)
			}
		} else if !regexp.MustCompile(`^Reboot scheduled for [^\n]+, use 'shutdown -c' to cancel\.\n$`).MatchString(r.Stderr) {
			t.Errorf("%q: stderr %q", args, r.Stderr)
		}
	}

	bad := writeConfig(t, "drainTimout: 1m\n")
	b := newLogind(t)
	r := hidden(t, b.bus, []string{"GNSH_CONFIG=" + bad}, "reboot")
	if r.Code != 1 {
		t.Errorf("bad config: exit %d, want 1", r.Code)
	}
	noLogind(t, b.ld)
	wantLines(t, r.Stderr, "gnsh: "+bad+": line 1: drainTimout: unknown key; did you mean drainTimeout?",
		"gnsh: nothing was shut down; fix the file, or run the command again with --no-drain")
	r = hidden(t, b.bus, []string{"GNSH_CONFIG=" + bad}, "reboot", "--no-drain")
	if r.Code != 0 || r.Stderr != "" {
		t.Errorf("bad config, --no-drain: exit %d", r.Code)
	}
	wantHandOff(t, "bad config, --no-drain", b.ld.Calls(), "RebootWithFlags")
}

// TestNodeLifecycleConditions: on an API server with the
// NodeLifecycleConditions feature gate on, with nodeConditions on, a
// reboot's drain leaves the Node's DrainInProgress False and Drained True
// (KEP-5683), written with the kubelet's own credentials on the status
// subresource, next to the kubelet's conditions (Ready stays); gnsh
// uncordon sets Drained False. Off (the default), none is written.
func TestNodeLifecycleConditions(t *testing.T) {
	need(t)
	controlplane.Need(t)
	cp := controlplane.StartWith(t, controlplane.Options{Kwok: true, FeatureGates: "NodeLifecycleConditions=true"})
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	k := &cluster{cp: cp, admin: kubernetes.NewForConfigOrDie(cfg)}
	n := k.newNode(t, "conds")
	n.replicaSet("web", 1, podOpts{})
	n.waitRunning(1)
	b := newLogind(t)
	cond := func(typ corev1.NodeConditionType) *corev1.NodeCondition {
		t.Helper()
		obj, err := n.admin.CoreV1().Nodes().Get(ctxFor(t, time.Minute), n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range obj.Status.Conditions {
			if c.Type == typ {
				return &obj.Status.Conditions[i]
			}
		}
		return nil
	}
	r := waitCmd(t, startCmd(t, b.bus, n.env(config("nodeConditions: true")), "", "reboot"), "reboot")
	if r.Code != 0 {
		t.Fatalf("reboot: exit %d", r.Code)
	}
	ip, dr := cond("DrainInProgress"), cond("Drained")
	if ip == nil || ip.Status != corev1.ConditionFalse || dr == nil || dr.Status != corev1.ConditionTrue || dr.Reason != "GnshDrained" ||
		!strings.Contains(dr.Message, "drained by gnsh in ") || !strings.Contains(dr.Message, "before reboot requested by alice") {
		t.Fatalf("after the reboot's drain: DrainInProgress %+v, Drained %+v", ip, dr)
	}
	if rd := cond(corev1.NodeReady); rd == nil || rd.Status != corev1.ConditionTrue {
		t.Errorf("Ready %+v", rd)
	}
	r = gnshRun(t, nil, n.env(config("nodeConditions: true")), "gnsh", "uncordon", "--only-if-ours")
	if r.Code != 0 {
		t.Fatalf("uncordon: exit %d", r.Code)
	}
	if dr := cond("Drained"); dr == nil || dr.Status != corev1.ConditionFalse || dr.Reason != "GnshUncordoned" {
		t.Errorf("after gnsh uncordon: Drained %+v", dr)
	}

	off := k.newNode(t, "conds-off")
	r = waitCmd(t, startCmd(t, newLogind(t).bus, off.env(fastConfig), "", "reboot"), "reboot")
	obj, err := off.admin.CoreV1().Nodes().Get(ctxFor(t, time.Minute), off.name, metav1.GetOptions{})
	if r.Code != 0 || err != nil {
		t.Fatalf("reboot: exit %d, %v", r.Code, err)
	}
	for _, c := range obj.Status.Conditions {
		if c.Type == "DrainInProgress" || c.Type == "Drained" {
			t.Errorf("nodeConditions off, yet %+v", c)
		}
	}
}
