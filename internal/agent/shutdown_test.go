package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/logind"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

func TestDrainBudget(t *testing.T) {
	for _, c := range []struct{ max, want time.Duration }{
		{0, 0}, {2 * time.Second, 0}, {3 * time.Second, time.Second},
		{5 * time.Second, 3 * time.Second}, {30 * time.Second, 27 * time.Second},
	} {
		if got := DrainBudget(c.max); got != c.want {
			t.Errorf("DrainBudget(%s) = %s, want %s", c.max, got, c.want)
		}
	}
}

// guardFixture is a guard on a fake logind (private bus) that never fires
// InhibitDelayMax's timer (so a shutdown that starts was let go by the
// locks, not by the timeout) and a real drainer on a fake cluster.
type guardFixture struct {
	bus *logindtest.Bus
	ld  *logindtest.Logind
	cs  *draintest.Cluster
	d   *drainer.Drainer
	out *syncBuffer
}

func newGuardFixture(t *testing.T, version int, delayMax time.Duration) *guardFixture {
	t.Helper()
	f := &guardFixture{bus: logindtest.StartBus(t), out: &syncBuffer{}}
	f.ld = f.bus.StartLogind(t, logindtest.Options{Version: version, WaitForDelayLocks: true, InhibitDelayMax: delayMax,
		After: func(time.Duration) <-chan time.Time { return make(chan time.Time) }})
	yes := true
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}}
	for _, name := range []string{"web-1", "web-2"} {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", UID: types.UID("uid-" + name),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: &yes}}},
			Spec:   corev1.PodSpec{NodeName: nodeName},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	f.cs = draintest.New(objs...)
	dir := t.TempDir()
	f.d = &drainer.Drainer{Stderr: f.out, Getenv: func(string) string { return "" },
		ConfigPath: filepath.Join(dir, "config.yaml"), LockDir: filepath.Join(dir, "run"), KubeRoot: dir,
		Who: drainer.Requester{User: "root"}, BootID: thisBoot,
		HostID:  &kube.HostID{MachineID: "machine-1", BootID: thisBoot},
		Connect: func(context.Context) (kubernetes.Interface, string, error) { return f.cs, nodeName, nil }}
	return f
}

// start runs the guard until the test ends and waits for its lock.
func (f *guardFixture) start(t *testing.T) {
	t.Helper()
	g := &ShutdownGuard{
		Dial: func(ctx context.Context) (*logind.Conn, error) { return logind.Dial(ctx, f.bus.Address(), false) },
		Drain: func(ctx context.Context, action string, budget time.Duration) (func(string), error) {
			sd, err := f.d.DrainForShutdown(ctx, action, budget)
			return sd.Undo, err
		},
		Drained: func() (string, bool) {
			m, ok := f.d.DrainedFor(10 * time.Minute)
			return "already drained for by gnsh " + m.Action, ok
		},
		Forget: f.d.RemoveMarker,
		Out:    f.out, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f.wait(t, "the guard's delay lock", func(s logindtest.State) bool { return holds(s) })
}

func holds(s logindtest.State) bool {
	return slices.ContainsFunc(s.Inhibitors, func(i logindtest.Inhibitor) bool {
		return i.Who == InhibitWho && i.Why == InhibitWhy && i.What == "shutdown" && i.Mode == "delay"
	})
}

func (f *guardFixture) wait(t *testing.T, what string, cond func(logindtest.State) bool) logindtest.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := f.ld.Wait(ctx, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v; state %+v; log:\n%s", what, err, s, f.out)
	}
	return s
}

// eventually polls cond (something the agent does on its own goroutine
// that neither the fake logind nor a fake clock can announce) for up to
// 20 s.
func (f *guardFixture) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s; log:\n%s", what, f.out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reboot calls logind's Reboot as systemctl reboot does.
func (f *guardFixture) reboot(t *testing.T) {
	t.Helper()
	c := f.bus.Connect(t)
	if err := c.Object(logindtest.LogindName, logindtest.LogindPath).Call(logindtest.LogindInterface+".Reboot", 0, false).Err; err != nil {
		t.Fatalf("Reboot: %v", err)
	}
}

func (f *guardFixture) node(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := f.cs.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *guardFixture) pods(t *testing.T) int {
	t.Helper()
	l, err := f.cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// started waits for logind to go on with the shutdown and checks that the
// lock let it go, not InhibitDelayMax.
func (f *guardFixture) started(t *testing.T) logindtest.State {
	t.Helper()
	s := f.wait(t, "the shutdown to start", func(s logindtest.State) bool { return s.ShutdownStarted })
	if s.DelayTimedOut || holds(s) {
		t.Fatalf("logind went on by its timeout, not by the lock's release: %+v", s)
	}
	return s
}

func TestGuardDrainsShutdownThatBypassedWrapper(t *testing.T) {
	for _, v := range []int{247, 252} {
		t.Run(fmt.Sprint("v", v), func(t *testing.T) {
			f := newGuardFixture(t, v, 30*time.Second)
			var late atomic.Int32 // evictions once logind had gone on
			f.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() == "eviction" && f.ld.State().ShutdownStarted {
					late.Add(1)
				}
				return false, nil, nil
			})
			f.start(t)
			f.reboot(t)
			f.started(t)
			// The lock is released only once the drain has returned.
			if got := f.cs.Evictions(); got != 2 {
				t.Errorf("evictions = %d, want 2; log:\n%s", got, f.out)
			}
			if n := late.Load(); n != 0 {
				t.Errorf("%d evictions after logind went on", n)
			}
			if n := f.pods(t); n != 0 {
				t.Errorf("%d pods left when logind went on", n)
			}
			n := f.node(t)
			own := drain.Owner(n)
			if !n.Spec.Unschedulable || own == nil || own.Action != "reboot" || own.BootID != thisBoot {
				t.Fatalf("node not cordoned by gnsh for a reboot: unschedulable=%v owner=%+v", n.Spec.Unschedulable, own)
			}
			t.Logf("log:\n%s", f.out)
		})
	}
}

func TestGuardHonoursWrapperMarker(t *testing.T) {
	f := newGuardFixture(t, 252, 30*time.Second)
	if err := os.MkdirAll(f.d.LockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(drainer.Marker{BootID: thisBoot, Action: "reboot", Time: time.Now().UTC()})
	if err := os.WriteFile(filepath.Join(f.d.LockDir, drainer.MarkerName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	f.reboot(t)
	f.started(t)
	if got := f.cs.Evictions(); got != 0 {
		t.Errorf("evictions = %d after the wrapper's drain, want 0", got)
	}
	if f.node(t).Spec.Unschedulable {
		t.Error("the agent cordoned a node the wrapper had drained for")
	}
	// That shutdown is cancelled: the marker goes, and the next shutdown
	// that bypasses the wrapper is drained for.
	f.ld.CancelShutdown()
	f.wait(t, "the lock taken again", holds)
	f.eventually(t, "the marker removed after the cancel", func() bool {
		_, err := f.d.ReadMarker()
		return os.IsNotExist(err)
	})
	f.reboot(t)
	f.started(t)
	if got := f.cs.Evictions(); got != 2 {
		t.Errorf("evictions = %d for the second shutdown, want 2; log:\n%s", got, f.out)
	}
}

func TestGuardStaleMarkerDrains(t *testing.T) {
	f := newGuardFixture(t, 252, 30*time.Second)
	if err := os.MkdirAll(f.d.LockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, m := range []drainer.Marker{
		{BootID: lastBoot, Action: "reboot", Time: time.Now().UTC()},                 // another boot
		{BootID: thisBoot, Action: "reboot", Time: time.Now().Add(-time.Hour).UTC()}, // too old
	} {
		b, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(f.d.LockDir, drainer.MarkerName), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok := f.d.DrainedFor(10 * time.Minute); ok {
			t.Errorf("marker %+v honoured", m)
		}
	}
}

func TestGuardCancelledShutdownUndoesCordon(t *testing.T) {
	f := newGuardFixture(t, 252, 30*time.Second)
	f.start(t)
	f.reboot(t)
	f.started(t)
	if !f.node(t).Spec.Unschedulable {
		t.Fatalf("not cordoned; log:\n%s", f.out)
	}
	if !f.ld.CancelShutdown() {
		t.Fatal("no shutdown to cancel")
	}
	f.wait(t, "the lock taken again", holds)
	f.eventually(t, "the cordon undone after the cancel", func() bool { return !f.node(t).Spec.Unschedulable })
	if drain.Owner(f.node(t)) != nil {
		t.Error("gnsh's record left on the node")
	}
	t.Logf("log:\n%s", f.out)
}

func TestGuardAPIFailingStillReleases(t *testing.T) {
	f := newGuardFixture(t, 247, 3*time.Second) // budget 1 s
	f.cs.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	f.start(t)
	f.reboot(t)
	f.started(t)
}

// A drain that cannot finish (a pod that never goes) ends with the budget,
// InhibitDelayMax less 2 s, and the lock is released before logind's
// timeout: the agent never holds a shutdown up.
func TestGuardSlowDrainReleasesWithinBudget(t *testing.T) {
	f := newGuardFixture(t, 252, 3*time.Second) // budget 1 s
	f.cs.Stick("web-1")
	f.start(t)
	f.reboot(t)
	f.started(t)
	if !f.node(t).Spec.Unschedulable {
		t.Error("the cordon of an unfinished drain was lifted; the node is going down")
	}
}

func TestGuardReconnects(t *testing.T) {
	f := newGuardFixture(t, 252, 30*time.Second)
	first, err := logindtest.NewBus()
	if err != nil {
		t.Skip(err)
	}
	defer first.Close()
	firstLd, err := logindtest.NewLogind(first.Address(), logindtest.Options{Version: 252})
	if err != nil {
		t.Fatal(err)
	}
	defer firstLd.Close()
	var mu sync.Mutex
	addr := first.Address()
	g := &ShutdownGuard{
		Dial: func(ctx context.Context) (*logind.Conn, error) {
			mu.Lock()
			a := addr
			mu.Unlock()
			return logind.Dial(ctx, a, false)
		},
		Drain: func(context.Context, string, time.Duration) (func(string), error) { return func(string) {}, nil },
		Out:   f.out, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if _, err := firstLd.Wait(wctx, holds); err != nil {
		t.Fatalf("no lock on the first bus: %v", err)
	}
	// The system bus goes away (dbus-daemon restarted): the guard dials
	// again, with backoff, and takes its lock on the new one.
	mu.Lock()
	addr = f.bus.Address()
	mu.Unlock()
	_ = firstLd.Close()
	_ = first.Close()
	f.wait(t, "the lock on the new bus", holds)
}

// systemctl soft-reboot (systemd ≥ 254: RebootWithFlags with the soft
// reboot flag) keeps the boot ID: a cordon made for it would never be
// taken for one of an earlier boot, and the node would stay cordoned for
// good. The guard does not drain for it, as the schedule follower does not
// for a scheduled soft-reboot; it lets logind go on at once.
func TestGuardDoesNotDrainForSoftReboot(t *testing.T) {
	f := newGuardFixture(t, 254, 30*time.Second)
	f.start(t)
	c := f.bus.Connect(t)
	if err := c.Object(logindtest.LogindName, logindtest.LogindPath).Call(logindtest.LogindInterface+".RebootWithFlags", 0, logindtest.FlagSoftReboot).Err; err != nil {
		t.Fatalf("RebootWithFlags(soft-reboot): %v", err)
	}
	s := f.started(t)
	if s.Action != "soft-reboot" {
		t.Fatalf("logind's action %q, want soft-reboot", s.Action)
	}
	if n := f.node(t); n.Spec.Unschedulable || f.cs.Evictions() != 0 {
		t.Fatalf("cordoned %v, %d evictions for a soft-reboot; log:\n%s", n.Spec.Unschedulable, f.cs.Evictions(), f.out)
	}
	if !strings.Contains(f.out.String(), "a soft-reboot is under way: not draining for it") {
		t.Errorf("log:\n%s", f.out)
	}
}
