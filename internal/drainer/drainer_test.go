package drainer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drain/draintest"
	"github.com/gnsh/gnsh/internal/legacy"
)

// fakeNode is draintest's fake API server with one node, node1, and
// ReplicaSet-owned pods of the names given.
type fakeNode struct{ *draintest.Cluster }

func newFakeNode(cordoned bool, annotations map[string]string, pods ...string) *fakeNode {
	yes := true
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: annotations},
		Spec: corev1.NodeSpec{Unschedulable: cordoned}}}
	for _, name := range pods {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", UID: types.UID("uid-" + name),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: &yes}}},
			Spec:   corev1.PodSpec{NodeName: "node1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	return &fakeNode{draintest.New(objs...)}
}

func (f *fakeNode) node(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := f.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *fakeNode) reasons() []string {
	var r []string
	for _, a := range f.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
			r = append(r, a.(k8stesting.CreateAction).GetObject().(*corev1.Event).Reason)
		}
	}
	return r
}

type testDrainer struct {
	*Drainer
	stderr *bytes.Buffer
}

func newDrainer(t *testing.T, f *fakeNode, config string) testDrainer {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if config != "" {
		if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	d := &Drainer{Stderr: &b, Getenv: func(string) string { return "" }, ConfigPath: cfg,
		LockDir: filepath.Join(dir, "run"), KubeRoot: dir, Who: Requester{User: "alice", TTY: "pts/3"}, BootID: "boot-1"}
	if f != nil {
		d.Connect = func(context.Context) (kubernetes.Interface, string, error) { return f, "node1", nil }
	}
	return testDrainer{d, &b}
}

func reboot() *legacy.Request { return &legacy.Request{Command: "reboot", Action: legacy.Reboot} }

func TestNoKubeconfigIsSilent(t *testing.T) {
	d := newDrainer(t, nil, "")
	if err := d.Prepare(context.Background(), reboot()); err != nil || d.stderr.Len() != 0 {
		t.Fatalf("%v %q", err, d.stderr)
	}
	// Nor is a schedule beyond the drain timeout worth a line there.
	far := reboot()
	far.Command, far.When = "shutdown", legacy.Usec(time.Now().Add(30*time.Minute))
	if err := d.Prepare(context.Background(), far); err != nil || d.stderr.Len() != 0 {
		t.Fatalf("%v %q", err, d.stderr)
	}
	d.Getenv = func(k string) string {
		if k == "GNSH_DEBUG" {
			return "1"
		}
		return ""
	}
	if err := d.Prepare(context.Background(), reboot()); err != nil || strings.Count(d.stderr.String(), "\n") != 1 ||
		!strings.Contains(d.stderr.String(), "gnsh: debug: no kubeconfig") {
		t.Fatalf("%v %q", err, d.stderr)
	}
}

func TestDrainThenHandOff(t *testing.T) {
	f := newFakeNode(false, nil, "web-1", "web-2")
	d := newDrainer(t, f, "")
	if err := d.Prepare(context.Background(), reboot()); err != nil {
		t.Fatal(err)
	}
	n := f.node(t)
	o := drain.Owner(n)
	if !n.Spec.Unschedulable || o == nil || o.Action != "reboot" || o.User != "alice" || o.TTY != "pts/3" || o.BootID != "boot-1" || o.When != nil {
		t.Fatalf("node %+v owner %+v", n.Spec, o)
	}
	if got := strings.Join(f.reasons(), " "); got != "GnshDrainStarted GnshDrainFinished GnshShutdown" {
		t.Fatalf("events %q", got)
	}
	if !strings.Contains(d.stderr.String(), "gnsh: drained node1 in ") {
		t.Fatalf("stderr %q", d.stderr)
	}
	// The hand-off went through: the cordon stays for the node agent.
	d.Finish(context.Background(), reboot(), nil)
	if !f.node(t).Spec.Unschedulable {
		t.Fatal("uncordoned after a successful hand-off")
	}
}

func TestBlockedRefusesAndUncordons(t *testing.T) {
	f := newFakeNode(false, nil, "web-1", "db-0")
	f.Protect("db-0")
	d := newDrainer(t, f, "drainTimeout: 1s\n")
	err := d.Prepare(context.Background(), reboot())
	var ee *legacy.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(ee.Msg, "app/db-0 (PodDisruptionBudget db-pdb)") ||
		!strings.Contains(ee.Msg, "--force-drain") {
		t.Fatalf("err %v", err)
	}
	if n := f.node(t); n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("node left cordoned: %+v %v", n.Spec, n.Annotations)
	}
	if got := strings.Join(f.reasons(), " "); got != "GnshDrainStarted GnshDrainFailed" {
		t.Fatalf("events %q", got)
	}
}

func TestForceDrainHandsOff(t *testing.T) {
	f := newFakeNode(false, nil, "db-0")
	f.Protect("db-0")
	d := newDrainer(t, f, "")
	req := reboot()
	req.Drain = legacy.DrainFlags{Force: true, Timeout: 500 * time.Millisecond}
	if err := d.Prepare(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if !f.node(t).Spec.Unschedulable || !strings.Contains(d.stderr.String(), "--force-drain: rebooting anyway") {
		t.Fatalf("stderr %q", d.stderr)
	}
}

func TestAdminCordonIsNeverUndone(t *testing.T) {
	f := newFakeNode(true, nil, "db-0")
	f.Protect("db-0")
	d := newDrainer(t, f, "drainTimeout: 1s\n")
	if err := d.Prepare(context.Background(), reboot()); err == nil {
		t.Fatal("blocked drain accepted")
	}
	d.Finish(context.Background(), reboot(), errors.New("refused"))
	if n := f.node(t); !n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("admin's cordon changed: %+v %v", n.Spec, n.Annotations)
	}
}

func TestRefusedHandOffUncordons(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	if err := d.Prepare(context.Background(), reboot()); err != nil {
		t.Fatal(err)
	}
	d.Finish(context.Background(), reboot(), &legacy.ExitError{Code: 1})
	if n := f.node(t); n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("still cordoned: %+v", n.Spec)
	}
}

func TestScheduled(t *testing.T) {
	// Beyond the drain timeout: nothing now.
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "drainTimeout: 2m\n")
	req := reboot()
	req.Command, req.When = "shutdown", legacy.Usec(time.Now().Add(30*time.Minute))
	if err := d.Prepare(context.Background(), req); err != nil || len(f.Actions()) != 0 ||
		!strings.Contains(d.stderr.String(), "not draining now: the reboot is due in 30m") {
		t.Fatalf("%v %q %d actions", err, d.stderr, len(f.Actions()))
	}
	// Within: drained now, the schedule recorded; shutdown -c undoes it.
	req.When = legacy.Usec(time.Now().Add(time.Minute))
	if err := d.Prepare(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if o := drain.Owner(f.node(t)); o == nil || o.When == nil || time.Until(*o.When) < 30*time.Second {
		t.Fatalf("owner %+v", o)
	}
	cancel := &legacy.Request{Command: "shutdown", Action: legacy.Cancel}
	d2 := newDrainer(t, f, "")
	d2.Finish(context.Background(), cancel, nil)
	if n := f.node(t); n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("not uncordoned after shutdown -c: %+v", n.Spec)
	}
}

func TestCancelLeavesOtherCordons(t *testing.T) {
	// gnsh's cordon for an immediate reboot (no "when") and an admin's.
	for _, ann := range []map[string]string{{drain.CordonAnnotation: `{"action":"reboot","user":"bob"}`}, nil} {
		f := newFakeNode(true, ann)
		d := newDrainer(t, f, "")
		d.Finish(context.Background(), &legacy.Request{Command: "shutdown", Action: legacy.Cancel}, nil)
		if !f.node(t).Spec.Unschedulable {
			t.Fatalf("%v: uncordoned by shutdown -c", ann)
		}
	}
}

func TestForceOnlyCordons(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	req := reboot()
	req.Force = 2
	if err := d.Prepare(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if !f.node(t).Spec.Unschedulable || f.Evictions() != 0 {
		t.Fatalf("cordoned %v, %d evictions", f.node(t).Spec.Unschedulable, f.Evictions())
	}
}

func TestSignalAborts(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	f.Stick("web-1")
	d := newDrainer(t, f, "")
	sigs := make(chan os.Signal, 1)
	d.Signals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	go func() {
		for f.Evictions() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		sigs <- syscall.SIGTERM
	}()
	err := d.Prepare(context.Background(), reboot())
	var ee *legacy.ExitError
	if !errors.As(err, &ee) || ee.Code != 143 {
		t.Fatalf("err %v", err)
	}
	if n := f.node(t); n.Spec.Unschedulable {
		t.Fatal("still cordoned after SIGTERM")
	}
}

func TestLockNamesTheHolder(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	l, err := Acquire(d.LockDir, Holder{PID: 4242, Action: "poweroff", User: "bob", TTY: "pts/9", Node: "node1", Since: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	err = d.Prepare(context.Background(), reboot())
	if err == nil || !strings.Contains(err.Error(), "pid 4242, poweroff by bob on pts/9") {
		t.Fatalf("err %v", err)
	}
	if f.node(t).Spec.Unschedulable {
		t.Fatal("cordoned without the lock")
	}
	l.Release()
	if err := d.Prepare(context.Background(), reboot()); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "drian: false\n")
	err := d.Prepare(context.Background(), reboot())
	if err == nil || !strings.Contains(err.Error(), `unknown key "drian"`) || !strings.Contains(err.Error(), "--no-drain") {
		t.Fatalf("err %v", err)
	}
	req := reboot()
	req.Drain.Skip = true
	if err := d.Prepare(context.Background(), req); err != nil || len(f.Actions()) != 0 {
		t.Fatalf("--no-drain: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	d := newDrainer(t, nil, "")
	d.Connect = func(context.Context) (kubernetes.Interface, string, error) {
		return nil, "", &drain.UnreachableError{Err: syscall.ECONNREFUSED}
	}
	if err := d.Prepare(context.Background(), reboot()); err != nil ||
		!strings.HasPrefix(d.stderr.String(), "gnsh: warning: API server unreachable") {
		t.Fatalf("%v %q", err, d.stderr)
	}
}

func TestStatusLine(t *testing.T) {
	s := drain.Status{Total: 10, Gone: 4, Terminating: 3, Blocked: 2, Elapsed: 3500 * time.Millisecond,
		BlockedPods: []drain.Blocked{{Pod: "app/db-0", PDB: "db"}, {Pod: "app/db-1", PDB: "db"}}}
	if got, want := statusLine("n1", s), "draining n1: 4/10 pods gone, 0 evicted, 3 terminating, 2 blocked by PDB app/db (3s)"; got != want {
		t.Fatalf("%q", got)
	}
	var b bytes.Buffer
	p := newProgress(&b, false, "n1")
	p.update(s)
	p.update(s) // unchanged: no second line
	s.BlockedPods = nil
	s.Blocked = 0
	p.update(s) // the blockers changed: a line at once
	if n := strings.Count(b.String(), "\n"); n != 2 {
		t.Fatalf("plain lines %q", b.String())
	}
	b.Reset()
	p = newProgress(&b, true, "n1")
	p.update(s)
	p.printf("done")
	if !strings.HasPrefix(b.String(), "\r\033[Kgnsh: draining n1") || !strings.HasSuffix(b.String(), "\ngnsh: done\n") {
		t.Fatalf("tty %q", b.String())
	}
}

func TestTickAdvancesTheClock(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, true, "n1")
	p.tick() // before any status: nothing
	p.update(drain.Status{Total: 1})
	p.mu.Lock()
	p.start = p.start.Add(-5 * time.Second)
	p.last = time.Time{}
	p.mu.Unlock()
	p.tick()
	if !strings.HasSuffix(b.String(), "0/1 pods gone, 0 evicted, 0 terminating (5s)") {
		t.Fatalf("%q", b.String())
	}
	p.done()
	n := b.Len()
	p.tick() // after the drain: nothing
	if b.Len() != n {
		t.Fatalf("tick after done: %q", b.String())
	}
}

func TestUnregisteredNodeIsNotDrained(t *testing.T) {
	f := newFakeNode(false, nil)
	d := newDrainer(t, f, "")
	d.Connect = func(context.Context) (kubernetes.Interface, string, error) { return f, "node9", nil }
	if err := d.Prepare(context.Background(), reboot()); err != nil ||
		!strings.Contains(d.stderr.String(), "warning: the cluster has no Node node9; rebooting without draining") {
		t.Fatalf("%v %q", err, d.stderr)
	}
}

func TestSummary(t *testing.T) {
	pod := func(v drain.Verdict, warning string) drain.Pod { return drain.Pod{Verdict: v, Warning: warning} }
	for _, c := range []struct {
		pods []drain.Pod
		want string
	}{
		{[]drain.Pod{pod(drain.Evict, "")}, "1 pod evicted"},
		{[]drain.Pod{pod(drain.Evict, "x"), pod(drain.Evict, ""), pod(drain.SkipDaemonSet, ""), pod(drain.SkipMirror, "")},
			"2 pods evicted (1 with warnings); left: 1 DaemonSet pod, 1 mirror pod"},
		{[]drain.Pod{pod(drain.Terminating, ""), pod(drain.SkipDaemonSet, ""), pod(drain.SkipDaemonSet, ""), pod(drain.SkipFinished, "")},
			"0 pods evicted; 1 already terminating; left: 2 DaemonSet pods, 1 finished"},
	} {
		if got := summary(&drain.Result{Pods: c.pods}); got != c.want {
			t.Errorf("summary %q, want %q", got, c.want)
		}
	}
}

// Once drained, SIGINT/SIGTERM stay caught until Finish: the hand-off is
// not cut in half.
func TestSignalsHeldUntilFinish(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	sigs := make(chan os.Signal, 1)
	released := false
	d.Signals = func() (<-chan os.Signal, func()) { return sigs, func() { released = true } }
	if err := d.Prepare(context.Background(), reboot()); err != nil {
		t.Fatal(err)
	}
	if released {
		t.Fatal("signals released before the hand-off")
	}
	sigs <- syscall.SIGINT // during the hand-off: ignored
	d.Finish(context.Background(), reboot(), nil)
	if !released || !f.node(t).Spec.Unschedulable {
		t.Fatalf("released %v", released)
	}
}

func TestCancelWhileDraining(t *testing.T) {
	when := time.Now().Add(time.Minute).UTC()
	f := newFakeNode(true, map[string]string{drain.CordonAnnotation: `{"action":"reboot","user":"bob","when":"` + when.Format(time.RFC3339) + `"}`})
	d := newDrainer(t, f, "")
	l, err := Acquire(d.LockDir, Holder{PID: 77, Action: "reboot", User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	d.Finish(context.Background(), &legacy.Request{Command: "shutdown", Action: legacy.Cancel}, nil)
	if !f.node(t).Spec.Unschedulable || !strings.Contains(d.stderr.String(), "interrupt pid 77 (SIGINT)") {
		t.Fatalf("%q", d.stderr)
	}
}

func TestDescribe(t *testing.T) {
	d := newDrainer(t, nil, "")
	req := func(mod func(*legacy.Request)) *legacy.Request { r := reboot(); mod(r); return r }
	none := func(*legacy.Request) {}
	if got := d.Describe(reboot()); got != "none: no kubeconfig, not a Kubernetes node" {
		t.Errorf("no kubeconfig: %q", got)
	}
	kc := filepath.Join(d.KubeRoot, "etc", "gnsh", "kubeconfig")
	if err := os.MkdirAll(filepath.Dir(kc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mod  func(*legacy.Request)
		want string
	}{
		{none, "cordon, evict, wait up to 5m0s, then the calls; not drained in time: refuse"},
		{func(r *legacy.Request) { r.Drain.Force, r.Drain.Timeout = true, time.Minute }, "wait up to 1m0s, then the calls; not drained in time: hand off anyway"},
		{func(r *legacy.Request) { r.Drain.Skip = true }, "none: --no-drain"},
		{func(r *legacy.Request) { r.DryRun = true }, "none: a dry run"},
		{func(r *legacy.Request) { r.Force = 2 }, "cordon only, best effort within 3s"},
		{func(r *legacy.Request) { r.When = legacy.Usec(time.Now().Add(time.Hour)) }, "none now: due beyond the drain timeout (5m0s)"},
		{func(r *legacy.Request) { r.When = legacy.Usec(time.Now().Add(time.Minute)) }, "cordon, evict, wait up to 5m0s"},
		{func(r *legacy.Request) { r.Action = legacy.Cancel }, "after the cancel: undo gnsh's cordon"},
		{func(r *legacy.Request) { r.Action = legacy.Show }, ""},
	} {
		got := d.Describe(req(c.mod))
		if !strings.HasPrefix(got, c.want) && !(c.want != "" && strings.Contains(got, c.want)) || (c.want == "" && got != "") {
			t.Errorf("%+v: %q, want %q…", req(c.mod), got, c.want)
		}
	}
	bad := newDrainer(t, nil, "drian: 1\n")
	if got := bad.Describe(reboot()); !strings.HasPrefix(got, "refuse: ") || !strings.Contains(got, `unknown key "drian"`) {
		t.Errorf("bad config: %q", got)
	}
}
