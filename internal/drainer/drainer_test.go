package drainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drain/draintest"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/signals"
)

var _ = dispatchable((*Interrupted)(nil))

// dispatchable: dispatch maps an error with Signal() to 128+N.
func dispatchable(e interface{ Signal() syscall.Signal }) bool { return e != nil }

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

// prepare runs Prepare and, when it returned a run, keeps it for finish.
func (d testDrainer) prepare(t *testing.T, req *legacy.Request) (handoff.Prepared, error) {
	t.Helper()
	p, err := d.Prepare(context.Background(), req)
	if err != nil && p != nil {
		t.Fatalf("Prepare returned both a run and %v", err)
	}
	return p, err
}

// handOff is Prepare then, as the runner does, Accepted (when logind took
// the request) and Finish (FinishCancel for shutdown -c) with the
// hand-off's result.
func (d testDrainer) handOff(t *testing.T, req *legacy.Request, result error) error {
	t.Helper()
	p, err := d.prepare(t, req)
	if err == nil && result == nil && req.Action != legacy.Cancel && !req.DryRun {
		d.Accepted(req) // as the runner tells it, before Finish
	}
	if cr, ok := p.(handoff.CancelReporter); ok {
		// shutdown -c: logind cancelled a schedule unless it failed.
		cr.FinishCancel(context.Background(), result == nil, result)
	} else if p != nil {
		p.Finish(context.Background(), result)
	}
	return err
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
		LockDir: filepath.Join(dir, "run"), KubeRoot: dir, Who: Requester{User: "alice", TTY: "pts/3"}, BootID: "boot-1",
		HostID: &kube.HostID{MachineID: "machine-1", BootID: "boot-1"},
		Signal: signals.NewDetached(func(l string) { fmt.Fprintf(&b, "gnsh: %s\n", l) })}
	if f != nil {
		d.Connect = func(context.Context) (kubernetes.Interface, string, error) { return f, "node1", nil }
	}
	return testDrainer{d, &b}
}

// fastClock gives d a fake clock that runs a second ahead every real
// millisecond, so drain timeouts pass without the test sleeping for them.
func fastClock(t *testing.T, d testDrainer) {
	clk := clocktesting.NewFakeClock(time.Now())
	d.Clock = clk
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				clk.Step(time.Second)
			}
		}
	}()
}

func reboot() *legacy.Request { return &legacy.Request{Command: "reboot", Action: legacy.Reboot} }

// scheduledReboot is shutdown -r due in d.
func scheduledReboot(d time.Duration) *legacy.Request {
	r := reboot()
	r.Command, r.When = "shutdown", legacy.Usec(time.Now().Add(d))
	return r
}

func cancelReq() *legacy.Request { return &legacy.Request{Command: "shutdown", Action: legacy.Cancel} }

// refusal checks that err refuses the command with text containing each
// of want, and no run was returned.
func refusal(t *testing.T, err error, want ...string) {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("not a refusal: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(r.Msg, w) {
			t.Fatalf("refusal %q lacks %q", r.Msg, w)
		}
	}
}

func TestNoKubeconfigIsSilent(t *testing.T) {
	d := newDrainer(t, nil, "")
	p, err := d.prepare(t, reboot())
	if err != nil || p != nil || d.stderr.Len() != 0 {
		t.Fatalf("%v %v %q", p, err, d.stderr)
	}
	// Nor is a schedule beyond the drain timeout worth a line there.
	far := reboot()
	far.Command, far.When = "shutdown", legacy.Usec(time.Now().Add(30*time.Minute))
	if err := d.handOff(t, far, nil); err != nil || d.stderr.Len() != 0 {
		t.Fatalf("%v %q", err, d.stderr)
	}
	d.Getenv = func(k string) string {
		if k == "GNSH_DEBUG" {
			return "1"
		}
		return ""
	}
	if err := d.handOff(t, reboot(), nil); err != nil || strings.Count(d.stderr.String(), "\n") != 1 ||
		!strings.Contains(d.stderr.String(), "gnsh: debug: no kubeconfig") {
		t.Fatalf("%v %q", err, d.stderr)
	}
}

func TestDrainThenHandOff(t *testing.T) {
	f := newFakeNode(false, nil, "web-1", "web-2")
	d := newDrainer(t, f, "")
	p, err := d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	n := f.node(t)
	o := drain.Owner(n)
	if !n.Spec.Unschedulable || o == nil || o.Action != "reboot" || o.User != "alice" || o.TTY != "pts/3" || o.BootID != "boot-1" || o.When != nil {
		t.Fatalf("node %+v owner %+v", n.Spec, o)
	}
	if got := strings.Join(f.reasons(), " "); got != "GnshSlotTaken GnshDrainStarted GnshDrainFinished GnshShutdown" {
		t.Fatalf("events %q", got)
	}
	if !strings.Contains(d.stderr.String(), "gnsh: drained node1 in ") {
		t.Fatalf("stderr %q", d.stderr)
	}
	// Until the hand-off is over, signals are held and the lock is kept.
	if d.Signal.Mode() != signals.Hold {
		t.Fatalf("signal mode %v during the hand-off", d.Signal.Mode())
	}
	if _, err := d.lock("test", "node1", false, time.Time{}); !errors.As(err, new(*HeldError)) {
		t.Fatalf("lock not held during the hand-off: %v", err)
	}
	// The hand-off went through: the cordon stays for the node agent.
	p.Finish(context.Background(), nil)
	if !f.node(t).Spec.Unschedulable {
		t.Fatal("uncordoned after a successful hand-off")
	}
	if d.Signal.Mode() != signals.Default {
		t.Fatalf("signal mode %v after Finish", d.Signal.Mode())
	}
	l, err := d.lock("test", "node1", false, time.Time{})
	if err != nil {
		t.Fatalf("lock not released by Finish: %v", err)
	}
	l.Release()
}

func TestBlockedRefusesAndUncordons(t *testing.T) {
	f := newFakeNode(false, nil, "web-1", "db-0")
	f.Protect("db-0")
	d := newDrainer(t, f, "drainTimeout: 1m\n")
	fastClock(t, d)
	// Every change to the Node, the undo included, is made under the
	// drain lock: a second gnsh must not cordon in between.
	var patches, unlocked int
	f.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		if l, err := Acquire(d.LockDir, Holder{PID: 1}); err == nil {
			unlocked++
			l.Release()
		}
		return false, nil, nil
	})
	_, err := d.prepare(t, reboot())
	refusal(t, err, "app/db-0 (PodDisruptionBudget db-pdb)", "--force-drain")
	if n := f.node(t); n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("node left cordoned: %+v %v", n.Spec, n.Annotations)
	}
	if patches != 2 || unlocked != 0 {
		t.Fatalf("%d Node patches (want the cordon and its undo), %d of them without the drain lock held", patches, unlocked)
	}
	if got := strings.Join(f.reasons(), " "); got != "GnshSlotTaken GnshDrainStarted GnshDrainFailed GnshSlotReleased" {
		t.Fatalf("events %q", got)
	}
	if d.Signal.Mode() != signals.Default {
		t.Fatalf("signal mode %v after a refusal", d.Signal.Mode())
	}
}

func TestForceDrainHandsOff(t *testing.T) {
	f := newFakeNode(false, nil, "db-0")
	f.Protect("db-0")
	d := newDrainer(t, f, "")
	fastClock(t, d)
	req := reboot()
	req.Drain = legacy.DrainFlags{Force: true, Timeout: time.Minute}
	p, err := d.prepare(t, req)
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	if !f.node(t).Spec.Unschedulable || !strings.Contains(d.stderr.String(), "--force-drain: rebooting anyway") {
		t.Fatalf("stderr %q", d.stderr)
	}
	// "Hand off anyway" holds signals through the hand-off too.
	if d.Signal.Mode() != signals.Hold {
		t.Fatalf("signal mode %v", d.Signal.Mode())
	}
	p.Finish(context.Background(), nil)
}

func TestAdminCordonIsNeverUndone(t *testing.T) {
	f := newFakeNode(true, nil, "db-0")
	f.Protect("db-0")
	d := newDrainer(t, f, "drainTimeout: 1m\n")
	fastClock(t, d)
	if err := d.handOff(t, reboot(), nil); err == nil {
		t.Fatal("blocked drain accepted")
	}
	if n := f.node(t); !n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("admin's cordon changed: %+v %v", n.Spec, n.Annotations)
	}
	// Nor by a refused hand-off after a forced drain.
	req := reboot()
	req.Drain = legacy.DrainFlags{Force: true, Timeout: time.Minute}
	if err := d.handOff(t, req, errors.New("refused")); err != nil {
		t.Fatal(err)
	}
	if n := f.node(t); !n.Spec.Unschedulable {
		t.Fatalf("admin's cordon undone after a refused hand-off: %+v", n.Spec)
	}
}

func TestRefusedHandOffUncordons(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	if err := d.handOff(t, reboot(), &legacy.ExitError{Code: 1}); err != nil {
		t.Fatal(err)
	}
	if n := f.node(t); n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("still cordoned: %+v", n.Spec)
	}
	if !strings.Contains(d.stderr.String(), "gnsh: the reboot was not handed off; node1 uncordoned") {
		t.Fatalf("stderr %q", d.stderr)
	}
}

func TestScheduled(t *testing.T) {
	// Beyond the drain timeout: nothing now.
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "drainTimeout: 2m\n")
	req := scheduledReboot(30 * time.Minute)
	if err := d.handOff(t, req, nil); err != nil || len(f.Actions()) != 0 ||
		!strings.Contains(d.stderr.String(), "not draining now: the reboot is due in 30m") {
		t.Fatalf("%v %q %d actions", err, d.stderr, len(f.Actions()))
	}
	// Within: drained now, the schedule recorded; shutdown -c undoes it.
	req.When = legacy.Usec(time.Now().Add(time.Minute))
	if err := d.handOff(t, req, nil); err != nil {
		t.Fatal(err)
	}
	if o := drain.Owner(f.node(t)); o == nil || o.When == nil || time.Until(*o.When) < 30*time.Second {
		t.Fatalf("owner %+v", o)
	}
	d2 := newDrainer(t, f, "")
	if err := d2.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	if n := f.node(t); n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("not uncordoned after shutdown -c: %+v", n.Spec)
	}
}

// A TIME beyond what int64 microseconds hold is far in the future, not
// in the past: nothing is drained now.
func TestScheduledOverflow(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	req := reboot()
	req.Command, req.When = "shutdown", legacy.Usec(time.Now())+60_000_000*160_000_000_000
	if err := d.handOff(t, req, nil); err != nil || len(f.Actions()) != 0 ||
		!strings.Contains(d.stderr.String(), "not draining now: the reboot is due in ") {
		t.Fatalf("%v %q %d actions", err, d.stderr, len(f.Actions()))
	}
}

func TestCancelLeavesOtherCordons(t *testing.T) {
	// gnsh's cordon for an immediate reboot (no "when") and an admin's.
	for _, ann := range []map[string]string{{drain.CordonAnnotation: `{"action":"reboot","user":"bob"}`}, nil} {
		f := newFakeNode(true, ann)
		d := newDrainer(t, f, "")
		if err := d.handOff(t, cancelReq(), nil); err != nil {
			t.Fatal(err)
		}
		if !f.node(t).Spec.Unschedulable {
			t.Fatalf("%v: uncordoned by shutdown -c", ann)
		}
	}
}

// A config file shutdown -c cannot read never stops the cancel.
func TestCancelWithBadConfig(t *testing.T) {
	d := newDrainer(t, newFakeNode(false, nil), "drian: 1\n")
	p, err := d.prepare(t, cancelReq())
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	p.Finish(context.Background(), nil)
}

func TestForceOnlyCordons(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	req := reboot()
	req.Force = 2
	p, err := d.prepare(t, req)
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	if !f.node(t).Spec.Unschedulable || f.Evictions() != 0 {
		t.Fatalf("cordoned %v, %d evictions", f.node(t).Spec.Unschedulable, f.Evictions())
	}
	p.Finish(context.Background(), nil)
	if !f.node(t).Spec.Unschedulable {
		t.Fatal("uncordoned after reboot(2)")
	}
}

// A reboot(2) that fails leaves the machine up: -f's cordon is undone.
func TestForceFailedRebootUncordons(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	req := reboot()
	req.Force = 2
	if err := d.handOff(t, req, legacy.Fail("Failed to reboot: Operation not permitted")); err != nil {
		t.Fatal(err)
	}
	if n := f.node(t); n.Spec.Unschedulable || drain.Owner(n) != nil {
		t.Fatalf("still cordoned after a failed reboot(2): %+v", n.Spec)
	}
}

// interruptOn delivers sig the first time the fake API server sees an
// action matching verb and resource (the drain is then in the middle of
// that step).
func interruptOn(f *fakeNode, d testDrainer, verb, resource string, sig syscall.Signal) {
	var once sync.Once
	f.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { d.Signal.Deliver(sig) })
		return false, nil, nil
	})
}

func TestSignalAborts(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	f.Stick("web-1")
	d := newDrainer(t, f, "")
	interruptOn(f, d, "create", "pods", syscall.SIGTERM) // at the eviction
	_, err := d.prepare(t, reboot())
	var intr *Interrupted
	if !errors.As(err, &intr) || intr.Signal() != syscall.SIGTERM ||
		err.Error() != "gnsh: drain interrupted by SIGTERM; nothing was shut down" {
		t.Fatalf("err %v", err)
	}
	if n := f.node(t); n.Spec.Unschedulable {
		t.Fatal("still cordoned after SIGTERM")
	}
	if !strings.Contains(d.stderr.String(), "gnsh: drain interrupted by SIGTERM; node1 uncordoned") {
		t.Fatalf("stderr %q", d.stderr)
	}
}

// Every window is closed: a signal before the drain starts, during -f's
// cordon, and a second one during the undo.
func TestSignalWindows(t *testing.T) {
	t.Run("before the cordon", func(t *testing.T) {
		f := newFakeNode(false, nil, "web-1")
		d := newDrainer(t, f, "")
		interruptOn(f, d, "get", "nodes", syscall.SIGINT)
		_, err := d.prepare(t, reboot())
		if intr := new(*Interrupted); !errors.As(err, intr) || (*intr).Sig != syscall.SIGINT {
			t.Fatalf("err %v", err)
		}
		if f.node(t).Spec.Unschedulable {
			t.Fatal("cordoned after SIGINT")
		}
	})
	t.Run("during -f's cordon", func(t *testing.T) {
		f := newFakeNode(false, nil, "web-1")
		d := newDrainer(t, f, "")
		interruptOn(f, d, "patch", "nodes", syscall.SIGINT)
		req := reboot()
		req.Force = 2
		_, err := d.prepare(t, req)
		if intr := new(*Interrupted); !errors.As(err, intr) {
			t.Fatalf("err %v", err)
		}
		if n := f.node(t); n.Spec.Unschedulable {
			t.Fatalf("-f's cordon left after SIGINT: %+v", n.Annotations)
		}
	})
	t.Run("again during the undo", func(t *testing.T) {
		f := newFakeNode(false, nil, "web-1")
		f.Stick("web-1")
		d := newDrainer(t, f, "")
		interruptOn(f, d, "create", "pods", syscall.SIGINT)
		var second sync.Once
		f.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"unschedulable":false`) {
				second.Do(func() { d.Signal.Deliver(syscall.SIGINT) })
			}
			return false, nil, nil
		})
		_, err := d.prepare(t, reboot())
		if intr := new(*Interrupted); !errors.As(err, intr) {
			t.Fatalf("err %v", err)
		}
		if f.node(t).Spec.Unschedulable {
			t.Fatal("the undo was cut short")
		}
		if !strings.Contains(d.stderr.String(), "gnsh: SIGINT received while undoing gnsh's cordon of node1; not interrupting") {
			t.Fatalf("stderr %q", d.stderr)
		}
	})
	t.Run("as the drain ends", func(t *testing.T) {
		// The last pod goes, then SIGINT comes before the hand-off: it
		// still stops the command (nothing handed off yet).
		f := newFakeNode(false, nil, "web-1")
		d := newDrainer(t, f, "")
		f.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.(k8stesting.CreateAction).GetObject().(*corev1.Event).Reason == ReasonDrainFinished {
				d.Signal.Deliver(syscall.SIGINT)
			}
			return false, nil, nil
		})
		_, err := d.prepare(t, reboot())
		if intr := new(*Interrupted); !errors.As(err, intr) || (*intr).Sig != syscall.SIGINT {
			t.Fatalf("err %v", err)
		}
		if f.node(t).Spec.Unschedulable {
			t.Fatal("still cordoned")
		}
	})
	t.Run("during the hand-off", func(t *testing.T) {
		f := newFakeNode(false, nil, "web-1")
		d := newDrainer(t, f, "")
		p, err := d.prepare(t, reboot())
		if err != nil {
			t.Fatal(err)
		}
		d.Signal.Deliver(syscall.SIGTERM)
		d.Signal.Deliver(syscall.SIGHUP)
		p.Finish(context.Background(), nil)
		if !strings.Contains(d.stderr.String(), "gnsh: SIGTERM received while handing the reboot to the system; not interrupting") ||
			!strings.Contains(d.stderr.String(), "gnsh: SIGHUP received") || d.Signal.Caught() != 0 {
			t.Fatalf("stderr %q", d.stderr)
		}
	})
}

func TestLockNamesTheHolder(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	l, err := Acquire(d.LockDir, Holder{PID: 4242, Action: "poweroff", User: "bob", TTY: "pts/9", Node: "node1", Since: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	_, err = d.prepare(t, reboot())
	refusal(t, err, "pid 4242, poweroff by bob on pts/9")
	if f.node(t).Spec.Unschedulable {
		t.Fatal("cordoned without the lock")
	}
	// -f goes on, without a cordon.
	req := reboot()
	req.Force = 2
	if err := d.handOff(t, req, nil); err != nil || f.node(t).Spec.Unschedulable ||
		!strings.Contains(d.stderr.String(), "; reboot -f goes on without a cordon") {
		t.Fatalf("-f: %v %q", err, d.stderr)
	}
	l.Release()
	if err := d.handOff(t, reboot(), nil); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

// The lock stays held until the undo after a refused hand-off is done.
func TestLockHeldThroughTheUndo(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	p, err := d.prepare(t, reboot())
	if err != nil {
		t.Fatal(err)
	}
	var heldDuringUndo bool
	f.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		_, err := Acquire(d.LockDir, Holder{PID: 1})
		heldDuringUndo = errors.As(err, new(*HeldError))
		return false, nil, nil
	})
	p.Finish(context.Background(), errors.New("refused"))
	if !heldDuringUndo || f.node(t).Spec.Unschedulable {
		t.Fatalf("held during the undo %v, cordoned %v", heldDuringUndo, f.node(t).Spec.Unschedulable)
	}
}

// Not root: a kubeconfig that cannot be read, or a lock that cannot be
// made, refuses with one line that says what to do.
func TestNotPermitted(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	d.Connect = func(context.Context) (kubernetes.Interface, string, error) {
		return nil, "", &kube.UnreadableError{Path: "/etc/kubernetes/kubelet.conf", Err: fs.ErrPermission}
	}
	_, err := d.prepare(t, reboot())
	refusal(t, err, "cannot drain this Kubernetes node as alice", "run the command as root, or again with --no-drain")
	if strings.Count(err.Error(), "\n") != 0 {
		t.Fatalf("not one line: %q", err)
	}
	d = newDrainer(t, f, "")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.LockDir = filepath.Join(file, "gnsh") // cannot be created
	_, err = d.prepare(t, reboot())
	refusal(t, err, "cannot take the drain lock", "run the command as root, or again with --no-drain")
	if f.node(t).Spec.Unschedulable {
		t.Fatal("cordoned without the lock")
	}
}

func TestConfigErrors(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "drian: false\n")
	_, err := d.prepare(t, reboot())
	refusal(t, err, `: line 1: drian: unknown key; did you mean drain?`, "--no-drain")
	req := reboot()
	req.Drain.Skip = true
	if err := d.handOff(t, req, nil); err != nil || len(f.Actions()) != 0 {
		t.Fatalf("--no-drain: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	d := newDrainer(t, nil, "")
	d.Connect = func(context.Context) (kubernetes.Interface, string, error) {
		return nil, "", &drain.UnreachableError{Err: syscall.ECONNREFUSED}
	}
	if err := d.handOff(t, reboot(), nil); err != nil ||
		!strings.HasPrefix(d.stderr.String(), "gnsh: warning: API server unreachable") {
		t.Fatalf("%v %q", err, d.stderr)
	}
}

// An API server that answers but cannot be used never stops a reboot: one
// warning naming the status and the fix, then the hand-off.
func TestAPIServerAnswersButCannotBeUsed(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	for _, c := range []struct {
		name string
		verb string
		err  error
		want string
	}{
		{"401", "get", apierrors.NewUnauthorized("Unauthorized"), "(401 Unauthorized): renew them"},
		{"403", "get", apierrors.NewForbidden(gr, "node1", errors.New("no")), "(403 Forbidden: "},
		{"503", "get", apierrors.NewServiceUnavailable("etcd has no leader"), "the API server is failing (503 Service Unavailable: etcd has no leader)"},
		{"500", "patch", apierrors.NewInternalError(errors.New("boom")), "the API server is failing (500 Internal Server Error: "},
		{"429", "patch", apierrors.NewTooManyRequests("slow down", 1), "the API server is throttling requests (429 Too Many Requests: slow down)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeNode(false, nil, "web-1")
			f.PrependReactor(c.verb, "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, c.err })
			d := newDrainer(t, f, "")
			if err := d.handOff(t, reboot(), nil); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(d.stderr.String()), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "gnsh: warning: ") || !strings.Contains(lines[0], c.want) ||
				!strings.HasSuffix(lines[0], "; rebooting without draining") {
				t.Fatalf("stderr %q", d.stderr)
			}
		})
	}
}

// A dead kubelet: the evicted pods cannot go. gnsh does not wait for them
// (nor refuse at the timeout): one warning, the hand-off; its cordon stays.
func TestKubeletDeadHandsOff(t *testing.T) {
	f := newFakeNode(false, nil, "web-1", "web-2")
	f.Stick("web-1", "web-2")
	if err := f.Tracker().Add(draintest.NodeLease("node1", time.Now().Add(-10*time.Minute), 40*time.Second)); err != nil {
		t.Fatal(err)
	}
	d := newDrainer(t, f, "drainTimeout: 1h\n")
	p, err := d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	p.Finish(context.Background(), nil)
	if !strings.Contains(d.stderr.String(), "; rebooting without waiting for them") || !f.node(t).Spec.Unschedulable {
		t.Fatalf("stderr %q", d.stderr)
	}
	if got := strings.Join(f.reasons(), " "); got != "GnshSlotTaken GnshDrainStarted GnshDrainFailed GnshShutdown" {
		t.Fatalf("events %q", got)
	}
}

// A Node of this name that is another machine is not drained.
func TestOtherMachinesNode(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	n := f.node(t)
	n.Status.NodeInfo.MachineID = "machine-2"
	if _, err := f.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := newDrainer(t, f, "")
	if err := d.handOff(t, reboot(), nil); err != nil {
		t.Fatal(err)
	}
	if f.node(t).Spec.Unschedulable || f.Evictions() != 0 ||
		!strings.Contains(d.stderr.String(), "gnsh: warning: the Node node1 in the cluster is not this machine (") ||
		!strings.Contains(d.stderr.String(), "; rebooting without draining") {
		t.Fatalf("stderr %q", d.stderr)
	}
}

func TestUnregisteredNodeIsNotDrained(t *testing.T) {
	f := newFakeNode(false, nil)
	d := newDrainer(t, f, "")
	d.Connect = func(context.Context) (kubernetes.Interface, string, error) { return f, "node9", nil }
	if err := d.handOff(t, reboot(), nil); err != nil ||
		!strings.Contains(d.stderr.String(), "warning: the cluster has no Node node9; rebooting without draining") {
		t.Fatalf("%v %q", err, d.stderr)
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
	if err := d.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	if !f.node(t).Spec.Unschedulable || !strings.Contains(d.stderr.String(), "interrupt pid 77 (SIGINT)") {
		t.Fatalf("%q", d.stderr)
	}
}

func TestPolicy(t *testing.T) {
	type v = verdict
	for _, c := range []struct {
		o     outcome
		p     purpose
		force bool
		want  verdict
	}{
		{drained, forShutdown, false, v{proceed: true}},
		{notANode, forShutdown, false, v{proceed: true}},
		{badConfig, forShutdown, false, v{warn: true}},
		{badConfig, forForce, false, v{proceed: true, warn: true}},
		{notPermitted, forShutdown, false, v{warn: true}},
		{lockHeld, forShutdown, false, v{warn: true}},
		{lockHeld, forForce, false, v{proceed: true, warn: true}},
		{apiFailed, forShutdown, false, v{proceed: true, warn: true}},
		{notRegistered, forShutdown, false, v{proceed: true, warn: true}},
		{otherMachine, forShutdown, false, v{proceed: true, warn: true}},
		{kubeletDown, forShutdown, false, v{proceed: true, warn: true}},
		{blocked, forShutdown, false, v{undo: true, warn: true}},
		{blocked, forShutdown, true, v{proceed: true, warn: true}},
		{interrupted, forShutdown, true, v{undo: true, warn: true}},
		{interrupted, forForce, false, v{undo: true, warn: true}},
		{apiFailed, forForce, false, v{proceed: true, warn: true}},
		{drained, forMaintenance, false, v{proceed: true}},
		{blocked, forMaintenance, true, v{warn: true}},
		{apiFailed, forMaintenance, false, v{warn: true}},
		{interrupted, forMaintenance, false, v{undo: true, warn: true}},
	} {
		if got := decide(c.o, c.p, c.force); got != c.want {
			t.Errorf("decide(%v, %d, %v) = %+v, want %+v", c.o, c.p, c.force, got, c.want)
		}
	}
}

func TestStatusLine(t *testing.T) {
	s := drain.Status{Total: 10, Gone: 4, Terminating: 3, Blocked: 2, Elapsed: 3500 * time.Millisecond,
		BlockedPods: []drain.Blocked{{Pod: "app/db-0", PDB: "db"}, {Pod: "app/db-1", PDB: "db"}}}
	if got, want := statusLine("n1", s), "draining n1: 4/10 pods gone, 0 evicted, 3 terminating, 2 blocked by PDB app/db (3s)"; got != want {
		t.Fatalf("%q", got)
	}
	k := drain.Status{Total: 3, Gone: 1, Evicted: 2, AlreadyStopped: 2, StoppedByKubelet: 2, Terminating: 1, Elapsed: time.Second}
	if got, want := statusLine("n1", k), "draining n1: 1/3 pods gone, 2 evicted (2 already stopped by kubelet), 1 terminating (1s)"; got != want {
		t.Fatalf("%q", got)
	}
	var b bytes.Buffer
	clk := clocktesting.NewFakeClock(time.Now())
	p := newProgress(&b, false, "n1", clk)
	p.update(s)
	p.update(s) // unchanged: no second line
	s.BlockedPods = nil
	s.Blocked = 0
	p.update(s) // the blockers changed: a line at once
	if n := strings.Count(b.String(), "\n"); n != 2 {
		t.Fatalf("plain lines %q", b.String())
	}
	b.Reset()
	p = newProgress(&b, true, "n1", clk)
	p.update(s)
	p.printf("done")
	if !strings.HasPrefix(b.String(), "\r\033[Kgnsh: draining n1") || !strings.HasSuffix(b.String(), "\ngnsh: done\n") {
		t.Fatalf("tty %q", b.String())
	}
}

func TestTickAdvancesTheClock(t *testing.T) {
	var b bytes.Buffer
	clk := clocktesting.NewFakeClock(time.Now())
	p := newProgress(&b, true, "n1", clk)
	stop := p.ticking()
	clk.Step(time.Second) // before any status: nothing
	p.update(drain.Status{Total: 1})
	// Each second the fake clock passes, the live line's clock shows it
	// (waiting for each redraw before the next step: a fake ticker's
	// channel holds one tick and drops the rest).
	for i := 1; i <= 5; i++ {
		clk.Step(time.Second)
		want := fmt.Sprintf("0/1 pods gone, 0 evicted, 0 terminating (%ds)", i)
		deadline := time.Now().Add(10 * time.Second)
		for !strings.HasSuffix(p.text(&b), want) {
			if time.Now().After(deadline) {
				t.Fatalf("after %ds: %q", i, p.text(&b))
			}
			goruntime.Gosched()
		}
	}
	stop()
	n := len(p.text(&b))
	clk.Step(time.Second) // after the drain: nothing
	if len(p.text(&b)) != n || !strings.HasSuffix(p.text(&b), "(5s)\n") {
		t.Fatalf("tick after stop: %q", p.text(&b))
	}
}

// text reads what p wrote to b, under p's lock.
func (p *progress) text(b *bytes.Buffer) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return b.String()
}

func TestSummary(t *testing.T) {
	pod := func(v drain.Verdict, warning string) drain.Pod { return drain.Pod{Verdict: v, Warning: warning} }
	evict3 := []drain.Pod{pod(drain.Evict, ""), pod(drain.Evict, "x"), pod(drain.Evict, ""), pod(drain.SkipDaemonSet, "")}
	for _, c := range []struct {
		pods []drain.Pod
		want string
		st   drain.Status
	}{
		{[]drain.Pod{pod(drain.Evict, "")}, "1 pod evicted", drain.Status{}},
		{[]drain.Pod{pod(drain.Evict, "x"), pod(drain.Evict, ""), pod(drain.SkipDaemonSet, ""), pod(drain.SkipMirror, "")},
			"2 pods evicted (1 with warnings); left: 1 DaemonSet pod, 1 mirror pod", drain.Status{}},
		{[]drain.Pod{pod(drain.Terminating, ""), pod(drain.SkipDaemonSet, ""), pod(drain.SkipDaemonSet, ""), pod(drain.SkipFinished, "")},
			"0 pods evicted; 1 already terminating; left: 2 DaemonSet pods, 1 finished", drain.Status{}},
		// A shutdown that bypassed gnsh: kubelet had stopped the pods
		// before their evictions were accepted.
		{evict3, "3 pods evicted (1 with warnings, 3 already stopped by kubelet); left: 1 DaemonSet pod",
			drain.Status{Evicted: 3, AlreadyStopped: 3, StoppedByKubelet: 3}},
		{evict3, "3 pods evicted (1 with warnings, 2 already stopped); left: 1 DaemonSet pod",
			drain.Status{Evicted: 3, AlreadyStopped: 2}},
		{evict3, "3 pods evicted (1 with warnings, 2 already stopped, 1 by kubelet); left: 1 DaemonSet pod",
			drain.Status{Evicted: 3, AlreadyStopped: 2, StoppedByKubelet: 1}},
		{[]drain.Pod{pod(drain.Evict, "")}, "1 pod evicted (1 already stopped by kubelet)",
			drain.Status{Evicted: 1, AlreadyStopped: 1, StoppedByKubelet: 1}},
	} {
		if got := summary(&drain.Result{Pods: c.pods, Status: c.st}); got != c.want {
			t.Errorf("summary %q, want %q", got, c.want)
		}
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
	// gnsh's own kubeconfig must be usable: it is checked as a named one.
	conf := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\n" +
		"users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
	if err := os.WriteFile(kc, []byte(conf), 0o600); err != nil {
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
	if got := bad.Describe(reboot()); !strings.HasPrefix(got, "refuse: ") || !strings.Contains(got, `drian: unknown key`) {
		t.Errorf("bad config: %q", got)
	}
	// shutdown -c is never refused for them (its plan exits 0): only
	// gnsh's part after the cancel is left out.
	cancel := req(func(r *legacy.Request) { r.Action = legacy.Cancel })
	badKC := newDrainer(t, nil, "kubeconfig: /nonexistent/kubeconfig\n")
	for name, got := range map[string]string{"bad config": bad.Describe(cancel), "bad kubeconfig": badKC.Describe(cancel)} {
		if !strings.HasPrefix(got, "after the cancel: nothing (") || strings.Contains(got, "refuse") {
			t.Errorf("shutdown -c, %s: %q", name, got)
		}
	}
}

// gnsh uncordon takes the drain lock: it never races a drain's cordon.
func TestUncordonTakesTheLock(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	p, err := d.prepare(t, reboot())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = d.UncordonCommand(context.Background(), true, &out)
	refusal(t, err, "another gnsh is draining this node")
	if !f.node(t).Spec.Unschedulable {
		t.Fatal("uncordoned while a drain held the lock")
	}
	p.Finish(context.Background(), nil)
	if err := d.UncordonCommand(context.Background(), true, &out); err != nil || out.String() != "node1 uncordoned\n" {
		t.Fatalf("after the drain: %v %q", err, out.String())
	}
}

// A reboot that took over gnsh's cordon from an earlier boot and was then
// refused (here by logind) gives the record back: the node agent lifts
// that cordon after this boot, as it would have without the reboot.
func TestRefusedRebootGivesBackAnAdoptedCordon(t *testing.T) {
	earlier := `{"action":"reboot","user":"bob","time":"2026-11-20T10:00:00Z","bootID":"boot-0"}`
	f := newFakeNode(true, map[string]string{drain.CordonAnnotation: earlier}, "web-1")
	d := newDrainer(t, f, "")
	p, err := d.prepare(t, reboot())
	if err != nil {
		t.Fatal(err)
	}
	if o := drain.Owner(f.node(t)); o == nil || o.BootID != "boot-1" {
		t.Fatalf("not adopted: %+v", o)
	}
	p.Finish(context.Background(), errors.New("Access denied"))
	n := f.node(t)
	if got := n.Annotations[drain.CordonAnnotation]; got != earlier || !n.Spec.Unschedulable {
		t.Fatalf("after the refused reboot: unschedulable %v, record %s", n.Spec.Unschedulable, got)
	}
	if drain.Owner(n) == nil {
		t.Fatal("the given-back cordon is no longer gnsh's")
	}
	if !strings.Contains(d.stderr.String(), "gnsh's cordon of node1 stands for the earlier boot again") {
		t.Fatalf("stderr %q", d.stderr)
	}
}

// A drain over gnsh's cordon left from an earlier boot takes it over, so
// that the node agent does not lift it after this boot.
func TestDrainAdoptsAnEarlierBootsCordon(t *testing.T) {
	earlier := `{"action":"reboot","user":"bob","time":"2026-11-20T10:00:00Z","bootID":"boot-0"}`
	f := newFakeNode(true, map[string]string{drain.CordonAnnotation: earlier}, "web-1")
	if drain.Owner(f.node(t)) == nil {
		t.Fatal("the fake does not record gnsh's cordon")
	}
	d := newDrainer(t, f, "")
	var out bytes.Buffer
	if err := d.DrainCommand(context.Background(), 0, false, &out); err != nil {
		t.Fatal(err)
	}
	o := drain.Owner(f.node(t))
	if o == nil || o.Action != "drain" || o.BootID != "boot-1" || o.User != "alice" {
		t.Fatalf("record %+v", o)
	}
	if !strings.Contains(d.stderr.String(), "gnsh: gnsh's cordon of node1 from an earlier boot now stands for this gnsh drain") {
		t.Fatalf("stderr %q", d.stderr)
	}
	// A record of this boot is not rewritten.
	d2 := newDrainer(t, f, "")
	if err := d2.handOff(t, reboot(), nil); err != nil {
		t.Fatal(err)
	}
	if o := drain.Owner(f.node(t)); o == nil || o.Action != "drain" {
		t.Fatalf("this boot's record rewritten: %+v", o)
	}
}

// Every write to the Node goes through the same-machine check: with a node
// name that names another machine's Node (a copied config), shutdown -c,
// the agent's undo for a cancelled schedule and gnsh uncordon leave that
// machine's cordon (for its own schedule, in its own boot) alone.
func TestNoWriteToAnotherMachinesNode(t *testing.T) {
	when := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	record := `{"action":"reboot","user":"bob","bootID":"boot-1","when":"` + when.Format(time.RFC3339) + `"}`
	for _, tc := range []struct {
		name string
		do   func(d testDrainer) error
	}{
		{"shutdown -c", func(d testDrainer) error { return d.handOff(t, cancelReq(), nil) }},
		{"agent undo", func(d testDrainer) error {
			_, err := d.UndoScheduleCordon(context.Background(), "cancelled", nil)
			return err
		}},
		{"gnsh uncordon --only-if-ours", func(d testDrainer) error {
			return d.UncordonCommand(context.Background(), true, io.Discard)
		}},
		{"gnsh uncordon", func(d testDrainer) error {
			return d.UncordonCommand(context.Background(), false, io.Discard)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNode(true, map[string]string{drain.CordonAnnotation: record})
			n := f.node(t)
			n.Status.NodeInfo.MachineID = "machine-2"
			n.ManagedFields = []metav1.ManagedFieldsEntry{draintest.GnshCordonFields()}
			if _, err := f.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			d := newDrainer(t, f, "")
			err := tc.do(d)
			if err != nil && !strings.Contains(err.Error(), "is not this machine") {
				t.Errorf("error %v", err)
			}
			if got := f.node(t); !got.Spec.Unschedulable || got.Annotations[drain.CordonAnnotation] != record {
				t.Fatalf("another machine's Node changed: unschedulable %v, %q; stderr %q", got.Spec.Unschedulable, got.Annotations, d.stderr)
			}
			if n := f.Requests("patch", "nodes"); n != 0 {
				t.Errorf("%d patches", n)
			}
		})
	}
}
