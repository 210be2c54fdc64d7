package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drain/draintest"
	"github.com/gnsh/gnsh/internal/kube"
)

const (
	nodeName = "node-1"
	thisBoot = "b0b0b0b0-0000-4000-8000-000000000002"
	lastBoot = "a1a1a1a1-0000-4000-8000-000000000001"
)

var (
	t0   = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC) // the fake clock's start
	boot = t0.Add(-2 * time.Minute)                       // this boot began
)

// cordonedBy is gnsh's record for a cordon made before action in bootID.
func cordonedBy(action, bootID string) drain.Ownership {
	return drain.Ownership{Action: action, User: "alice", TTY: "pts/0", Time: boot.Add(-time.Hour), BootID: bootID}
}

// newNode is a Node Ready since heartbeat, cordoned by gnsh with own if
// own is not nil.
func newNode(own *drain.Ownership, heartbeat time.Time) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(heartbeat)}}
	if own != nil {
		b, _ := json.Marshal(own)
		n.Annotations = map[string]string{drain.CordonAnnotation: string(b)}
		n.Spec.Unschedulable = true
	}
	return n
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	cs  *draintest.Cluster
	fc  *clocktesting.FakeClock
	out *syncBuffer
	u   *Uncordoner
}

func newFixture(objs ...runtime.Object) *fixture {
	f := &fixture{cs: draintest.New(objs...), fc: clocktesting.NewFakeClock(t0), out: &syncBuffer{}}
	f.u = &Uncordoner{
		Connect: func(context.Context) (kubernetes.Interface, string, error) { return f.cs, nodeName, nil },
		BootID:  thisBoot, BootTime: func() (time.Time, error) { return boot, nil },
		Clock: f.fc, APITimeout: time.Second, Events: true, Out: f.out,
	}
	return f
}

// run runs the Uncordoner to its end, stepping the fake clock a second
// at a time whenever it waits; hook (if not nil) sees each new fake time.
// The real-time bound only catches a hung test.
func (f *fixture) run(t *testing.T, ctx context.Context, hook func(now time.Time)) Result {
	t.Helper()
	type ret struct {
		r   Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		r, err := f.u.Run(ctx)
		done <- ret{r, err}
	}()
	guard := time.After(20 * time.Second)
	for {
		select {
		case r := <-done:
			if r.err != nil && r.r.Outcome != Stopped {
				t.Fatalf("Run: %v", r.err)
			}
			return r.r
		case <-guard:
			t.Fatalf("Run did not end; log:\n%s", f.out)
		default:
		}
		if f.fc.HasWaiters() {
			f.fc.Step(time.Second)
			if hook != nil {
				hook(f.fc.Now())
			}
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func (f *fixture) node(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := f.cs.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// events are the messages of the Events created, by reason.
func (f *fixture) events() []string {
	var out []string
	for _, a := range f.cs.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
			ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return out
}

func (f *fixture) patches() int { return f.cs.Requests("patch", "nodes") }

func TestUncordonsGnshRebootFromEarlierBoot(t *testing.T) {
	for _, action := range ShutdownActions {
		t.Run(action, func(t *testing.T) {
			own := cordonedBy(action, lastBoot)
			f := newFixture(newNode(&own, t0.Add(-10*time.Second)))
			r := f.run(t, context.Background(), nil)
			if r.Outcome != Uncordoned || r.Owner == nil || r.Owner.Action != action {
				t.Fatalf("result %+v, want uncordoned; log:\n%s", r, f.out)
			}
			n := f.node(t)
			if n.Spec.Unschedulable {
				t.Error("node still cordoned")
			}
			if _, ok := n.Annotations[drain.CordonAnnotation]; ok {
				t.Error("gnsh's annotation not removed")
			}
			want := fmt.Sprintf("GnshUncordoned: Uncordoned after boot: cordoned by gnsh for a %s requested by alice on pts/0 at %s",
				action, own.Time.Format(time.RFC3339))
			if ev := f.events(); len(ev) != 1 || ev[0] != want {
				t.Errorf("events %q, want [%q]", ev, want)
			}
			log := f.out.String()
			if !strings.HasPrefix(log, "gnsh: "+nodeName+" uncordoned after boot: cordoned by gnsh for a "+action) ||
				strings.Count(log, "\n") != 1 {
				t.Errorf("log:\n%s", log)
			}
		})
	}
}

func TestNoEventWhenEventsOff(t *testing.T) {
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, t0))
	f.u.Events = false
	if r := f.run(t, context.Background(), nil); r.Outcome != Uncordoned {
		t.Fatalf("result %+v", r)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("events %q with Events off", ev)
	}
}

// leftAlone runs the agent on a Node set up by setup and checks it is
// left exactly as it was, with a log line containing why.
func leftAlone(t *testing.T, f *fixture, why string) {
	t.Helper()
	before := f.node(t)
	r := f.run(t, context.Background(), nil)
	if r.Outcome != Left {
		t.Fatalf("result %+v, want left; log:\n%s", r, f.out)
	}
	after := f.node(t)
	if after.Spec.Unschedulable != before.Spec.Unschedulable ||
		after.Annotations[drain.CordonAnnotation] != before.Annotations[drain.CordonAnnotation] ||
		after.ResourceVersion != before.ResourceVersion {
		t.Errorf("node changed: before %+v %v, after %+v %v", before.Spec, before.Annotations, after.Spec, after.Annotations)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("events %q", ev)
	}
	if log := f.out.String(); !strings.Contains(log, why) || strings.Count(log, "\n") != 1 {
		t.Errorf("log %q, want one line containing %q", log, why)
	}
}

func TestSameBootLeft(t *testing.T) {
	// Cordoned by gnsh in this boot: the reboot has not happened (yet), or
	// was refused after the cordon; undoing it is the drain's business.
	own := cordonedBy("reboot", thisBoot)
	f := newFixture(newNode(&own, t0))
	leftAlone(t, f, "in this boot: that reboot has not happened")
}

func TestGnshDrainCordonLeft(t *testing.T) {
	own := cordonedBy("drain", lastBoot)
	f := newFixture(newNode(&own, t0))
	leftAlone(t, f, "cordoned by gnsh drain (requested by alice on pts/0")
}

func TestAdminCordonLeft(t *testing.T) {
	n := newNode(nil, t0)
	n.Spec.Unschedulable = true // kubectl cordon, no annotation
	f := newFixture(n)
	leftAlone(t, f, "cordoned, but not by gnsh")
}

func TestAdminRecordonLeft(t *testing.T) {
	// gnsh cordoned for a reboot in the last boot; an admin then ran
	// kubectl uncordon (which leaves gnsh's annotation) and kubectl cordon:
	// the cordon is the admin's now.
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, t0))
	ctx := context.Background()
	if err := draintest.KubectlCordon(ctx, f.cs, nodeName, false); err != nil {
		t.Fatal(err)
	}
	if err := draintest.KubectlCordon(ctx, f.cs, nodeName, true); err != nil {
		t.Fatal(err)
	}
	f.cs.ClearActions()
	leftAlone(t, f, "cordoned, but not by gnsh")
}

func TestSchedulableLeft(t *testing.T) {
	f := newFixture(newNode(nil, t0))
	leftAlone(t, f, "is schedulable: nothing to uncordon")
	if f.patches() != 0 {
		t.Errorf("%d patches", f.patches())
	}
}

func TestOwnershipWithoutBootIDFallsBackOnTime(t *testing.T) {
	before := cordonedBy("poweroff", "")
	f := newFixture(newNode(&before, t0))
	if r := f.run(t, context.Background(), nil); r.Outcome != Uncordoned {
		t.Fatalf("cordoned before the boot time: %+v", r)
	}
	after := cordonedBy("poweroff", "")
	after.Time = boot.Add(time.Minute)
	f = newFixture(newNode(&after, t0))
	if r := f.run(t, context.Background(), nil); r.Outcome != Left {
		t.Fatalf("cordoned after the boot time: %+v", r)
	}
}

func TestWaitsUntilReadyForThisBoot(t *testing.T) {
	// The Node still shows the Ready=True of the last boot: the kubelet
	// has not posted since. The agent waits (nothing patched, a line at
	// most every 30 s) until it has.
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, boot.Add(-5*time.Minute)))
	readyAt := t0.Add(95 * time.Second)
	var patchedEarly bool
	hook := func(now time.Time) {
		if now.Before(readyAt) && f.patches() > 0 {
			patchedEarly = true
		}
		if now.Equal(readyAt) {
			n := f.node(t)
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(now)
			if _, err := f.cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		}
	}
	r := f.run(t, context.Background(), hook)
	if r.Outcome != Uncordoned || patchedEarly {
		t.Fatalf("result %+v, patched early %v; log:\n%s", r, patchedEarly, f.out)
	}
	if f.fc.Now().Before(readyAt) || f.fc.Now().After(readyAt.Add(DefaultReadyPoll)) {
		t.Errorf("uncordoned at %s, Ready for this boot at %s", f.fc.Now(), readyAt)
	}
	waits := strings.Count(f.out.String(), "waiting for "+nodeName+" to be Ready for this boot: Ready=True was last reported at")
	if waits < 3 || waits > 4 { // at 0, 30, 60 (and 90) s
		t.Errorf("%d waiting lines in 95 s, want one every 30 s; log:\n%s", waits, f.out)
	}
}

func TestWaitsWhileNotReady(t *testing.T) {
	own := cordonedBy("reboot", lastBoot)
	n := newNode(&own, t0)
	n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = corev1.ConditionFalse, "KubeletNotReady"
	f := newFixture(n)
	ctx, cancel := context.WithCancel(context.Background())
	r := f.run(t, ctx, func(now time.Time) {
		if now.Sub(t0) >= time.Minute {
			cancel()
		}
	})
	if r.Outcome != Stopped || !f.node(t).Spec.Unschedulable {
		t.Fatalf("result %+v", r)
	}
	if !strings.Contains(f.out.String(), "Ready is False (KubeletNotReady)") {
		t.Errorf("log:\n%s", f.out)
	}
}

func TestReadyByLeaseOrBootID(t *testing.T) {
	own := cordonedBy("reboot", lastBoot)
	// A heartbeat from before the boot, but the kubelet renewed its Lease
	// since: it is running in this boot.
	f := newFixture(newNode(&own, boot.Add(-time.Minute)), draintest.NodeLease(nodeName, t0.Add(-5*time.Second), 40*time.Second))
	if r := f.run(t, context.Background(), nil); r.Outcome != Uncordoned {
		t.Fatalf("lease renewed since boot: %+v; log:\n%s", r, f.out)
	}
	n := newNode(&own, boot.Add(-time.Minute))
	n.Status.NodeInfo.BootID = thisBoot
	f = newFixture(n)
	if r := f.run(t, context.Background(), nil); r.Outcome != Uncordoned {
		t.Fatalf("kubelet reports this boot's ID: %+v; log:\n%s", r, f.out)
	}
}

func TestReadyForBoot(t *testing.T) {
	old, recent := boot.Add(-time.Minute), boot.Add(time.Minute)
	cases := []struct {
		name   string
		status corev1.ConditionStatus
		beat   time.Time
		bootID string
		lease  *time.Time
		want   bool
	}{
		{"heartbeat after boot", corev1.ConditionTrue, recent, "", nil, true},
		{"heartbeat before boot", corev1.ConditionTrue, old, "", nil, false},
		{"lease after boot", corev1.ConditionTrue, old, "", &recent, true},
		{"lease before boot", corev1.ConditionTrue, old, "", &old, false},
		{"this boot's ID", corev1.ConditionTrue, old, thisBoot, nil, true},
		{"last boot's ID", corev1.ConditionTrue, old, lastBoot, nil, false},
		{"not ready, fresh", corev1.ConditionFalse, recent, thisBoot, &recent, false},
		{"unknown", corev1.ConditionUnknown, recent, "", nil, false},
	}
	for _, c := range cases {
		n := newNode(nil, c.beat)
		n.Status.Conditions[0].Status = c.status
		n.Status.NodeInfo.BootID = c.bootID
		if got, why := ReadyForBoot(n, boot, thisBoot, c.lease); got != c.want {
			t.Errorf("%s: %v (%s), want %v", c.name, got, why, c.want)
		}
	}
	if ok, why := ReadyForBoot(&corev1.Node{}, boot, thisBoot, nil); ok || !strings.Contains(why, "no") {
		t.Errorf("no conditions: %v %s", ok, why)
	}
}

func TestWaitsForTheDrainLock(t *testing.T) {
	// A drain (say, a reboot run right after boot) holds the lock for the
	// first 40 s: the agent waits, then uncordons under the lock.
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, t0))
	var tries, held, releases int
	f.u.Lock = func(node string) (func(), error) {
		tries++
		if node != nodeName {
			t.Errorf("lock for %q", node)
		}
		if f.fc.Now().Sub(t0) < 40*time.Second {
			return nil, fmt.Errorf("%w (pid 42, reboot by bob)", ErrLockHeld)
		}
		held++
		return func() {
			releases++
			if ev := f.events(); len(ev) != 0 {
				t.Errorf("Event posted under the lock: %q", ev)
			}
		}, nil
	}
	if r := f.run(t, context.Background(), nil); r.Outcome != Uncordoned {
		t.Fatalf("result %+v; log:\n%s", r, f.out)
	}
	if held != 1 || releases != 1 || tries != 9 { // 0, 5, …, 40 s
		t.Errorf("lock tried %d times, taken %d, released %d", tries, held, releases)
	}
	if n := strings.Count(f.out.String(), "gnsh: waiting for the drain of node-1 to end: the drain lock is held (pid 42, reboot by bob)"); n != 2 {
		t.Errorf("%d waiting lines in 40 s, want 2 (0 and 30 s); log:\n%s", n, f.out)
	}
}

func TestWaitsForAPendingShutdown(t *testing.T) {
	// A reboot run right after boot drained under gnsh's cordon of the
	// last boot and handed off: logind waits for the delay locks. The
	// agent leaves the cordon while the shutdown is pending; here it is
	// cancelled after 20 s, and the agent goes on.
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, t0))
	locked, asks := false, 0
	f.u.Lock = func(string) (func(), error) { locked = true; return func() { locked = false }, nil }
	f.u.Shutdown = func(ctx context.Context) (string, error) {
		asks++
		if !locked {
			t.Error("logind asked outside the drain lock")
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Error("logind asked without a deadline")
		}
		if f.fc.Now().Sub(t0) < 20*time.Second {
			return "systemd-logind is preparing for shutdown", nil
		}
		return "", nil
	}
	if r := f.run(t, context.Background(), nil); r.Outcome != Uncordoned {
		t.Fatalf("result %+v; log:\n%s", r, f.out)
	}
	if asks != 5 { // 0, 5, 10, 15, 20 s
		t.Errorf("asked logind %d times", asks)
	}
	if !strings.HasPrefix(f.out.String(), "gnsh: waiting for the pending shutdown: systemd-logind is preparing for shutdown; gnsh's cordon stays while it is\n") {
		t.Errorf("log:\n%s", f.out)
	}
}

func TestLogindUnreachableGoesOn(t *testing.T) {
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, t0))
	f.u.Shutdown = func(context.Context) (string, error) { return "", errors.New("no system bus") }
	if r := f.run(t, context.Background(), nil); r.Outcome != Uncordoned {
		t.Fatalf("result %+v; log:\n%s", r, f.out)
	}
	if !strings.HasPrefix(f.out.String(), "gnsh: cannot ask systemd-logind whether a shutdown is pending (no system bus); going on\n") {
		t.Errorf("log:\n%s", f.out)
	}
}

func TestRetriesAPIErrorsWithBackoff(t *testing.T) {
	// The API server fails every request for the first 3 minutes (fake
	// time): the agent retries 1 s doubling to 30 s, logs at most every
	// 30 s, then uncordons.
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, t0))
	up := t0.Add(3 * time.Minute)
	var attempts []time.Duration
	f.cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		now := f.fc.Now()
		if now.Before(up) {
			attempts = append(attempts, now.Sub(t0))
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	var status []string
	f.u.Status = func(l string) { status = append(status, l) }
	r := f.run(t, context.Background(), nil)
	if r.Outcome != Uncordoned {
		t.Fatalf("result %+v; log:\n%s", r, f.out)
	}
	if len(status) != 6 || !strings.HasPrefix(status[0], nodeName+": read Node: ") || !strings.Contains(status[0], "etcd is down; retrying in 1s") {
		t.Errorf("status lines %q, want the 6 logged retry lines", status)
	}
	want := []time.Duration{0, 1, 3, 7, 15, 31, 61, 91, 121, 151}
	if len(attempts) != len(want) {
		t.Fatalf("attempts at %v, want %v s", attempts, want)
	}
	for i := range want {
		if attempts[i] != want[i]*time.Second {
			t.Fatalf("attempts at %v, want %v s", attempts, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(f.out.String()), "\n")
	var retries int
	for _, l := range lines {
		if !strings.HasPrefix(l, "gnsh: ") {
			t.Errorf("line without prefix: %q", l)
		}
		if strings.Contains(l, "retrying in") {
			retries++
			if !strings.Contains(l, "etcd is down") {
				t.Errorf("retry line without the cause: %q", l)
			}
		}
	}
	// Attempts at 0, 1, 3, 7, 15, 31, 61, 91, 121, 151 s: lines at 0, 31,
	// 61, 91, 121, 151.
	if retries != 6 {
		t.Errorf("%d retry lines for %d attempts, want 6 (one every 30 s); log:\n%s", retries, len(attempts), f.out)
	}
	if !strings.Contains(f.out.String(), "more attempts since the last line") {
		t.Errorf("held-back attempts not counted; log:\n%s", f.out)
	}
}

func TestRetriesConnect(t *testing.T) {
	// The API server is not up when the agent starts: resolving the node
	// name fails (connection refused) until it is.
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, t0))
	calls := 0
	f.u.Connect = func(context.Context) (kubernetes.Interface, string, error) {
		calls++
		if f.fc.Now().Sub(t0) < 40*time.Second {
			return nil, "", errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		return f.cs, nodeName, nil
	}
	onNode := 0
	f.u.OnNode = func() {
		onNode++
		if calls != 1 {
			t.Errorf("OnNode after %d connect attempts, want the first (a kubeconfig, the API server down)", calls)
		}
	}
	if r := f.run(t, context.Background(), nil); r.Outcome != Uncordoned {
		t.Fatalf("result %+v; log:\n%s", r, f.out)
	}
	if onNode != 1 {
		t.Errorf("OnNode called %d times, want once", onNode)
	}
	if calls != 7 { // 0, 1, 3, 7, 15, 31, 61
		t.Errorf("%d connect attempts", calls)
	}
	if n := strings.Count(f.out.String(), "cannot reach the cluster yet (dial tcp"); n != 2 {
		t.Errorf("%d connect lines, want 2 (0 and 31 s); log:\n%s", n, f.out)
	}
}

// Installed before kubeadm join: no kubeconfig at first. The agent says
// so once (NotNode, one line), looks again every KubeconfigPoll, and once
// one appears takes the node up (OnNode) and goes on as at start; it used
// to idle for good.
func TestNoKubeconfigYet(t *testing.T) {
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, t0))
	calls, notNode, onNode := 0, 0, 0
	f.u.Connect = func(context.Context) (kubernetes.Interface, string, error) {
		calls++
		if calls <= 3 {
			return nil, "", kube.ErrNoKubeconfig
		}
		return f.cs, nodeName, nil
	}
	f.u.KubeconfigPoll = 5 * time.Second
	f.u.NotNode = func() { notNode++ }
	f.u.OnNode = func() {
		onNode++
		if calls != 4 {
			t.Errorf("OnNode at connect %d, want the first with a kubeconfig (4)", calls)
		}
	}
	start := f.fc.Now()
	r := f.run(t, context.Background(), nil)
	if r.Outcome != Uncordoned || notNode != 1 || onNode != 1 {
		t.Fatalf("result %+v, NotNode %d, OnNode %d; log:\n%s", r, notNode, onNode, f.out)
	}
	if took := f.fc.Now().Sub(start); took < 15*time.Second || took > 20*time.Second {
		t.Errorf("took %v of the clock for 3 looks 5 s apart", took)
	}
	want := "gnsh: no kubeconfig found: not a Kubernetes node (yet); looking for one every 5s\n" +
		"gnsh: found a kubeconfig: this machine is a Kubernetes node now\n" +
		"gnsh: " + nodeName + " uncordoned after boot"
	if log := f.out.String(); !strings.HasPrefix(log, want) {
		t.Errorf("log %q, want it to start %q", log, want)
	}
}

func TestStopsOnCancel(t *testing.T) {
	f := newFixture()
	f.u.Connect = func(context.Context) (kubernetes.Interface, string, error) {
		return nil, "", errors.New("connection refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !f.fc.HasWaiters() {
			time.Sleep(50 * time.Microsecond)
		}
		cancel() // while it waits for its backoff
	}()
	r, err := f.u.Run(ctx)
	if r.Outcome != Stopped || !errors.Is(err, context.Canceled) {
		t.Fatalf("result %+v, %v", r, err)
	}
}

func TestBootTimeFromUptime(t *testing.T) {
	p := t.TempDir() + "/uptime"
	if err := os.WriteFile(p, []byte("123.45 678.90\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := BootTimeFromUptime(t0, p)
	if err != nil || !got.Equal(t0.Add(-123450*time.Millisecond)) {
		t.Errorf("%v, %v", got, err)
	}
	if _, err := BootTimeFromUptime(t0, t.TempDir()+"/none"); err == nil {
		t.Error("no error for a missing file")
	}
}

// A machine whose machine-id changed (reimaged, or stateless) and has no
// DMI UUID: right after boot its Node still shows the IDs the kubelet
// posted in the last boot. The same-machine check waits for the kubelet to
// report in this boot instead of ending the uncordon (gnsh's own reboot
// cordon then stayed for good).
func TestStaleNodeInfoWaits(t *testing.T) {
	own := cordonedBy("reboot", lastBoot)
	n := newNode(&own, boot.Add(-5*time.Minute))
	n.Status.NodeInfo.MachineID, n.Status.NodeInfo.BootID = "old-machine-id", lastBoot
	f := newFixture(n)
	f.u.Check = kube.HostID{MachineID: "new-machine-id", BootID: thisBoot}.Check
	readyAt := t0.Add(20 * time.Second)
	hook := func(now time.Time) {
		if now.Equal(readyAt) { // the kubelet posts its status for this boot
			n := f.node(t)
			n.Status.NodeInfo.MachineID, n.Status.NodeInfo.BootID = "new-machine-id", thisBoot
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(now)
			if _, err := f.cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		}
	}
	if r := f.run(t, context.Background(), hook); r.Outcome != Uncordoned {
		t.Fatalf("result %+v; log:\n%s", r, f.out)
	}
}

// Another machine's Node (a wrong node name), Ready for this boot as far
// as its heartbeat goes: never touched, the agent says why it waits.
func TestAnotherMachinesNodeWaits(t *testing.T) {
	own := cordonedBy("reboot", lastBoot)
	n := newNode(&own, t0)
	n.Status.NodeInfo.MachineID = "their-machine"
	f := newFixture(n)
	f.u.Check = kube.HostID{MachineID: "this-machine", BootID: thisBoot}.Check
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !strings.Contains(f.out.String(), "to be this machine") {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if r := f.run(t, ctx, nil); r.Outcome != Stopped {
		t.Fatalf("result %+v", r)
	}
	if f.patches() != 0 || !f.node(t).Spec.Unschedulable {
		t.Errorf("%d patches of another machine's Node", f.patches())
	}
}

// A kubeconfig named in the config file that is not there (kubeadm join
// has not written kubelet.conf yet, or a typo) is neither "not a node" nor
// an unreachable cluster: the agent says what it is, in the journal and
// its STATUS, does not take the node up, looks again, and once the file
// is there goes on as at start (issue 19).
func TestNamedKubeconfigMissing(t *testing.T) {
	own := cordonedBy("reboot", lastBoot)
	f := newFixture(newNode(&own, t0))
	missing := &kube.KubeconfigError{Path: "/etc/kubernetes/kubelet.conf", From: "kubeconfig in /etc/gnsh/config.yaml",
		Err: &fs.PathError{Op: "stat", Path: "/etc/kubernetes/kubelet.conf", Err: fs.ErrNotExist}}
	calls, notNode, onNode := 0, 0, 0
	f.u.Connect = func(context.Context) (kubernetes.Interface, string, error) {
		calls++
		if calls <= 3 {
			return nil, "", missing
		}
		return f.cs, nodeName, nil
	}
	f.u.KubeconfigPoll = 5 * time.Second
	f.u.NotNode = func() { notNode++ }
	f.u.OnNode = func() { onNode++ }
	var status []string
	f.u.Status = func(s string) { status = append(status, s) }
	start := f.fc.Now()
	r := f.run(t, context.Background(), nil)
	if r.Outcome != Uncordoned || notNode != 0 || onNode != 1 {
		t.Fatalf("result %+v, NotNode %d, OnNode %d; log:\n%s", r, notNode, onNode, f.out)
	}
	if took := f.fc.Now().Sub(start); took < 15*time.Second || took > 20*time.Second {
		t.Errorf("took %v of the clock for 3 looks 5 s apart", took)
	}
	want := "gnsh: kubeconfig in /etc/gnsh/config.yaml: /etc/kubernetes/kubelet.conf does not exist: shutdowns through gnsh are refused " +
		"(but with --no-drain) and the node is not guarded until it is fixed or removed; looking again every 5s\n" +
		"gnsh: found a kubeconfig: this machine is a Kubernetes node now\n"
	if log := f.out.String(); !strings.HasPrefix(log, want) || strings.Contains(log, "cannot reach the cluster") {
		t.Errorf("log %q, want it to start %q", log, want)
	}
	if len(status) == 0 || !strings.HasPrefix(status[0], "kubeconfig in /etc/gnsh/config.yaml: /etc/kubernetes/kubelet.conf does not exist") {
		t.Errorf("STATUS %q", status)
	}
}
