package drainer

// Regression tests for the defects a review of the agent's lock, wait and
// orphan-undo changes found (each failed before its fix).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gnsh/gnsh/internal/drain"
)

// killRun runs d's drain for a reboot until its pods are being evicted,
// then stops it without any undo (as SIGKILL would), and returns the note
// it left with the process made gone.
func killRun(t *testing.T, f *fakeNode, d testDrainer, pod string) CordonNote {
	t.Helper()
	before := f.Evicted(pod)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := newRun(d.Drainer, forShutdown, "reboot")
		_ = r.loadConfig(nil)
		r.attempt(ctx, nil)
		r.lock.Release()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for f.Evicted(pod) == before {
		if time.Now().After(deadline) {
			t.Fatal("the drain did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	n, err := d.ReadCordonNote()
	if err != nil {
		t.Fatalf("no cordon note: %v", err)
	}
	n.PID, n.Start = deadPID(t), 1
	if err := d.writeRunFile(CordonNoteName, mustJSON(t, n)); err != nil {
		t.Fatal(err)
	}
	return n
}

func nothingRelies(context.Context, *drain.Ownership, time.Duration) (string, error) { return "", nil }

// A reboot typed before the agent lifted gnsh's cordon of the last boot
// takes that cordon over (adopt), then is killed: the note names the
// adopted record, and the agent undoes it. (No note was written when the
// node was cordoned already: the cordon stayed for good.)
func TestAdoptedCordonOfKilledWrapper(t *testing.T) {
	earlier := `{"action":"reboot","user":"bob","time":"2026-11-20T10:00:00Z","bootID":"boot-0"}`
	f := newFakeNode(true, map[string]string{drain.CordonAnnotation: earlier}, "web-1")
	f.Stick("web-1")
	d := newDrainer(t, f, "")
	n := killRun(t, f, d, "web-1")
	if o := drain.Owner(f.node(t)); o == nil || o.BootID != "boot-1" || !sameRecord(&n.Own, o) {
		t.Fatalf("record %+v, note %+v", o, n.Own)
	}
	a := agentDrainer(t, f, d)
	a.Relies = nothingRelies
	if undone, err := a.UndoOrphanCordon(context.Background(), n); !undone || err != nil {
		t.Fatalf("undo: %v %v\n%s", undone, err, a.stderr)
	}
	if f.node(t).Spec.Unschedulable {
		t.Fatal("still cordoned")
	}
}

// A drained record of this boot that this command did not wait for (a
// gnsh drain hours ago; pods may have come since, tolerating the cordon or
// bound directly) does not spare the drain.
func TestRebootDrainsAfterAnOlderDrain(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	var out strings.Builder
	if err := d.DrainCommand(context.Background(), 0, false, &out); err != nil {
		t.Fatal(err)
	}
	yes := true
	late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "late-1", Namespace: "app", UID: types.UID("uid-late-1"),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs2", UID: "rs2", Controller: &yes}}},
		Spec:   corev1.PodSpec{NodeName: "node1", Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if _, err := f.CoreV1().Pods("app").Create(context.Background(), late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d2 := newDrainer(t, f, "")
	if err := d2.handOff(t, reboot(), nil); err != nil {
		t.Fatal(err)
	}
	if f.Evicted("late-1") == 0 || strings.Contains(d2.stderr.String(), "not draining again") {
		t.Errorf("late-1 evicted %d times; stderr:\n%s", f.Evicted("late-1"), d2.stderr)
	}
}

// The orphan undo drops the marker: a drain it recorded served a shutdown
// that did not happen, and the guard must drain for the next one.
func TestOrphanUndoDropsTheMarker(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	p, err := d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatalf("%v %v", p, err)
	}
	p.(*run).lock.Release() // SIGKILL before the hand-off
	n, err := d.ReadCordonNote()
	if err != nil {
		t.Fatal(err)
	}
	n.PID, n.Start = deadPID(t), 1
	if err := d.writeRunFile(CordonNoteName, mustJSON(t, n)); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.DrainedFor(10 * time.Minute); !ok {
		t.Fatal("no marker to start with")
	}
	a := agentDrainer(t, f, d)
	a.Relies = nothingRelies
	if undone, err := a.UndoOrphanCordon(context.Background(), n); !undone || err != nil {
		t.Fatalf("undo %v %v", undone, err)
	}
	if m, ok := a.DrainedFor(10 * time.Minute); ok {
		t.Errorf("marker %+v still says drained", m)
	}
}

// The undo for a stale note removes only that note: a newer gnsh's note
// (its cordon standing, its process killed) stays for the next look.
func TestOrphanUndoKeepsAnotherNote(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	f.Stick("web-1")
	d := newDrainer(t, f, "")
	noteA := killRun(t, f, d, "web-1")
	if _, err := drain.Uncordon(context.Background(), f, "node1", drain.Ours, nil); err != nil {
		t.Fatal(err)
	}
	d2 := newDrainer(t, f, "")
	d2.LockDir, d2.Who = d.LockDir, Requester{User: "bob", TTY: "pts/9"}
	killRun(t, f, d2, "web-1") // B, killed too
	a := agentDrainer(t, f, d)
	a.Relies = nothingRelies
	if undone, err := a.UndoOrphanCordon(context.Background(), noteA); undone || err != nil {
		t.Fatalf("undo(A): %v %v", undone, err)
	}
	if n, err := d.ReadCordonNote(); err != nil || n.Own.User != "bob" || !f.node(t).Spec.Unschedulable {
		t.Errorf("B's note %+v %v (cordoned %v)", n, err, f.node(t).Spec.Unschedulable)
	}
}

// The agent's undo for a cancelled schedule leaves the cordon while a
// shutdown relies on it (a reboot typed meanwhile, which logind prepares).
func TestScheduleUndoLeavesCordonForShutdownUnderWay(t *testing.T) {
	ann := map[string]string{drain.CordonAnnotation: `{"action":"reboot","user":"root","bootID":"boot-1","when":"2026-11-22T02:00:00Z"}`}
	f := newFakeNode(true, ann, "web-1")
	d := newDrainer(t, f, "")
	a := agentDrainer(t, f, d)
	var asked *drain.Ownership
	a.Relies = func(_ context.Context, rec *drain.Ownership, _ time.Duration) (string, error) {
		asked = rec
		return "systemd-logind is preparing for shutdown", nil
	}
	undone, err := a.UndoScheduleCordon(context.Background(), "the scheduled reboot was cancelled", nil)
	if undone || !errors.Is(err, ErrShutdownPending) || !f.node(t).Spec.Unschedulable {
		t.Fatalf("undo %v %v, cordoned %v", undone, err, f.node(t).Spec.Unschedulable)
	}
	if asked == nil || asked.When == nil {
		t.Errorf("Relies asked about %+v, want the standing record", asked)
	}
}

// holdLegacy is an older gnsh holding its drain.lock in dir (flock
// LOCK_EX, its Holder written in it).
func holdLegacy(t *testing.T, dir string, h *Holder) *os.File {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "drain.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := flockEx(f); err != nil {
		t.Fatal(err)
	}
	if h != nil {
		if _, err := f.Write(append(mustJSON(t, h), '\n')); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// During an upgrade an older gnsh still holds its drain.lock mid-drain:
// gnsh counts it as held (naming it); a hold of that file with no live
// holder written in it (another user's, on the old 0644 file) is ignored.
// An older gnsh sees gnsh's hold: gnsh takes drain.lock too when it can.
func TestOlderGnshLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gnsh")
	old := holdLegacy(t, dir, &Holder{PID: os.Getpid(), Action: "reboot", User: "alice", Node: "node1"})
	_, err := Acquire(dir, Holder{PID: os.Getpid(), Action: "uncordon after boot", Kind: HolderAgent})
	var held *HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.User != "alice" {
		t.Fatalf("with an older gnsh holding drain.lock: %v", err)
	}
	old.Close()

	dir = filepath.Join(t.TempDir(), "gnsh")
	holdLegacy(t, dir, nil) // held, nothing written: not an older gnsh's
	l, err := Acquire(dir, Holder{PID: os.Getpid(), Action: "reboot"})
	if err != nil {
		t.Fatalf("a hold of drain.lock with no holder in it refused the lock: %v", err)
	}
	l.Release()

	dir = filepath.Join(t.TempDir(), "gnsh")
	holdLegacy(t, dir, nil).Close() // the file is there, nobody holds it
	l, err = Acquire(dir, Holder{PID: os.Getpid(), Action: "reboot", User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	f, err := os.Open(filepath.Join(dir, "drain.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := flockEx(f); err == nil {
		t.Error("an older gnsh would get drain.lock while gnsh holds its lock")
	}
	if h := readHolder(f); h == nil || h.User != "bob" {
		t.Errorf("an older gnsh reads %+v from drain.lock, want the holder", h)
	}
}

// shutdown -c while the agent drains ahead of the schedule waits for the
// agent instead of telling the admin to interrupt it (SIGINT stops the
// agent with status 0: systemd would not restart it).
func TestCancelWaitsForTheAgent(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	f.Stick("web-1")
	d := newDrainer(t, f, "")
	a := agentDrainer(t, f, d)
	at := time.Now().Add(2 * time.Minute).UTC()
	ctx, cancel := context.WithCancel(context.Background())
	agentDone := make(chan struct{})
	go func() { _, _ = a.DrainForSchedule(ctx, "reboot", at, 30*time.Second); close(agentDone) }()
	for deadline := time.Now().Add(10 * time.Second); f.Evicted("web-1") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no drain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := newDrainer(t, f, "")
	c.LockDir = d.LockDir
	out := &syncBuffer{}
	c.Stderr = out
	go func() { // the agent sees the cancel while shutdown -c waits for it
		for !strings.Contains(out.String(), "waiting for the node agent") {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if err := c.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	<-agentDone
	if s := out.String(); strings.Contains(s, "interrupt pid") || !strings.Contains(s, "waiting for the node agent") ||
		!strings.Contains(s, "for the cancelled schedule") {
		t.Errorf("shutdown -c said:\n%s", s)
	}
	if f.node(t).Spec.Unschedulable {
		t.Errorf("still cordoned after the cancel")
	}
}

// A probe never reads the agent's state empty while the agent writes it:
// a wrapper would take an empty read for an older agent, guarding.
func TestAgentStateNeverReadEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	l, err := HoldAgentLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	l.SetState(AgentNoKubeconfig)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				l.SetState(AgentNoKubeconfig)
			}
		}
	})
	for i := 0; i < 5000; i++ {
		if held, state, _ := AgentState(dir); held && state != AgentNoKubeconfig {
			t.Fatalf("probe %d read %q", i, state)
		}
	}
	close(stop)
	wg.Wait()
}
