package drainer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/legacy"
)

func TestAgentLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if running, _, err := AgentState(dir); running || err != nil {
		t.Fatalf("no lock file: running %v, %v", running, err)
	}
	l, err := HoldAgentLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(dir, AgentLockName))
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("lock file: %v, %v", fi, err)
	}
	if di, err := os.Lstat(dir); err != nil || di.Mode() != os.ModeDir|0o700 {
		t.Fatalf("lock directory: %v, %v", di, err)
	}
	if running, _, err := AgentState(dir); !running || err != nil {
		t.Fatalf("lock held: running %v, %v", running, err)
	}
	var ar *AgentRunningError
	if _, err := HoldAgentLock(dir); !errors.As(err, &ar) || ar.PID != os.Getpid() {
		t.Fatalf("second agent: %v", err)
	}
	l.Release()
	if running, _, err := AgentState(dir); running || err != nil {
		t.Fatalf("lock released: running %v, %v", running, err)
	}
	// The probe leaves no lock behind: the agent can take it again.
	l, err = HoldAgentLock(dir)
	if err != nil {
		t.Fatalf("after the probes: %v", err)
	}
	l.Release()
}

// An agent starting while a probe holds its shared lock for a moment
// still gets the lock (it used to exit as if another agent ran).
func TestAgentLockWhileProbed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, AgentLockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	probe, err := os.Open(filepath.Join(dir, AgentLockName))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	fd := int(probe.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	unlocked := make(chan struct{})
	go func() {
		defer close(unlocked)
		time.Sleep(100 * time.Millisecond)
		_ = syscall.Flock(fd, syscall.LOCK_UN)
	}()
	defer func() { <-unlocked }()
	l, err := HoldAgentLock(dir)
	if err != nil {
		t.Fatalf("agent starting during a probe: %v", err)
	}
	l.Release()
}

func TestAgentLockNotFollowedThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Symlink(target, filepath.Join(dir, AgentLockName)); err != nil {
		t.Fatal(err)
	}
	if _, err := HoldAgentLock(dir); err == nil || !strings.Contains(err.Error(), "is a symlink: remove it") {
		t.Fatalf("lock taken through a symlink: %v", err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the symlink's target was created: %v", err)
	}
	if running, _, err := AgentState(dir); running || err == nil {
		t.Errorf("probe through a symlink: running %v, %v", running, err)
	}
	// Nor a lock directory that is a symlink.
	link := filepath.Join(t.TempDir(), "gnsh")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := HoldAgentLock(link); err == nil {
		t.Fatal("lock taken in a symlinked directory")
	}
}

func TestFarScheduleMessage(t *testing.T) {
	for _, agent := range []string{"", AgentGuarding, AgentNoKubeconfig, "older agent"} {
		f := newFakeNode(false, nil, "web-1")
		d := newDrainer(t, f, "drainTimeout: 5m\n")
		now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.Local)
		d.Clock = clocktesting.NewFakeClock(now)
		if agent != "" {
			l, err := HoldAgentLock(d.LockDir)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if agent == "older agent" { // it wrote its PID alone
				if err := os.WriteFile(filepath.Join(d.LockDir, AgentLockName), []byte("4242\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				l.SetState(agent)
			}
		}
		req := reboot()
		req.Command, req.When = "shutdown", legacy.Usec(now.Add(2*time.Hour))
		if err := d.handOff(t, req, nil); err != nil || len(f.Actions()) != 0 {
			t.Fatalf("agent %q: %v, %d actions", agent, err, len(f.Actions()))
		}
		head := "gnsh: not draining now: the reboot is due in 2h0m0s, beyond the drain timeout (5m0s)"
		want := head + ", and the node agent (gnsh.service) is not running: nothing will drain the node before it; run 'gnsh drain' before it, or start the agent (systemctl enable --now gnsh.service; " +
			"where the Ansible role installs gnsh, set gnsh_agent: true, or its next run stops the agent again)\n"
		switch agent {
		case AgentGuarding, "older agent":
			want = head + "; the node agent (gnsh.service) will drain the node at " +
				now.Add(115*time.Minute).Format("2006-01-02 15:04:05 MST") + " (5m0s before it)" +
				", once it has a reboot slot (if none comes before the reboot's time, it defers the reboot until one does, within slots.queueFor: 24h0m0s)\n"
		case AgentNoKubeconfig:
			want = head + ", and the node agent (gnsh.service) has not taken this node up yet (no kubeconfig when it last looked): nothing promises a drain before it; check 'systemctl status gnsh' in a minute, or run 'gnsh drain' before it\n"
		}
		if got := d.stderr.String(); got != want {
			t.Errorf("agent %q:\n got %q\nwant %q", agent, got, want)
		}
	}
}

// The agent drains with the config file's drainTimeout, not the command
// line's: a --drain-timeout shorter than the file's, the agent drains now.
// With the slot gate off, the line names no slot.
func TestFarScheduleMessageAgentDrainsNow(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "drainTimeout: 5m\nslots: {gate: off}\n")
	l, err := HoldAgentLock(d.LockDir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	l.SetState(AgentGuarding)
	req := reboot()
	req.Command, req.When, req.Drain.Timeout = "shutdown", legacy.Usec(time.Now().Add(3*time.Minute)), time.Minute
	if err := d.handOff(t, req, nil); err != nil || len(f.Actions()) != 0 {
		t.Fatalf("%v, %d actions", err, len(f.Actions()))
	}
	if !strings.HasSuffix(d.stderr.String(), "beyond the drain timeout (1m0s); the node agent (gnsh.service) will drain the node now (its drain timeout is 5m0s)\n") {
		t.Errorf("stderr %q", d.stderr)
	}
}

func TestDrainForSchedule(t *testing.T) {
	f := newFakeNode(false, nil, "web-1", "web-2")
	d := newDrainer(t, f, "")
	at := time.Now().Add(30 * time.Minute).Truncate(time.Microsecond)
	if _, err := d.DrainForSchedule(context.Background(), "poweroff", at, 20*time.Second); err != nil {
		t.Fatalf("DrainForSchedule: %v\n%s", err, d.stderr)
	}
	o := drain.Owner(f.node(t))
	if o == nil || o.Action != "poweroff" || o.When == nil || !o.When.Equal(at) || o.BootID != "boot-1" {
		t.Fatalf("cordon record %+v", o)
	}
	if got := f.Evictions(); got != 2 {
		t.Errorf("evictions %v", got)
	}
	if !d.ScheduleDrained(at) || d.ScheduleDrained(at.Add(time.Second)) {
		t.Error("ScheduleDrained does not name the schedule")
	}
	l, err := d.AcquireLock("check", "node1", time.Time{})
	if err != nil {
		t.Fatalf("drain lock still held: %v", err)
	}
	l.Release()

	// Again for the same schedule: nothing is evicted or changed.
	before := len(f.Actions())
	if _, err := d.DrainForSchedule(context.Background(), "poweroff", at, 20*time.Second); !errors.Is(err, ErrAlreadyDrained) {
		t.Fatalf("second drain: %v", err)
	}
	for _, a := range f.Actions()[before:] {
		if a.GetVerb() != "get" {
			t.Errorf("second drain did %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}

	// The guard counts the marker until 10 minutes after the schedule's
	// time, not only 10 minutes after the drain.
	clk := clocktesting.NewFakeClock(time.Now())
	d.Clock = clk
	for _, c := range []struct {
		at   time.Time
		want bool
	}{{at.Add(-20 * time.Minute), true}, {at, true}, {at.Add(9 * time.Minute), true}, {at.Add(11 * time.Minute), false}} {
		clk.SetTime(c.at)
		if _, ok := d.DrainedFor(10 * time.Minute); ok != c.want {
			t.Errorf("DrainedFor at schedule%+v = %v", c.at.Sub(at), ok)
		}
	}

	// shutdown -c through the wrapper undoes this cordon and drops the
	// marker.
	d.Clock = nil
	if err := d.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	if n := f.node(t); n.Spec.Unschedulable {
		t.Errorf("shutdown -c left the agent's cordon for the schedule")
	}
	if _, err := d.ReadMarker(); !os.IsNotExist(err) {
		t.Errorf("marker after shutdown -c: %v", err)
	}
}

// The wrapper drained for a near schedule: the agent finds its cordon for
// that schedule and does not drain again.
func TestDrainForScheduleAfterWrapper(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	req := scheduledReboot(time.Minute)
	if err := d.handOff(t, req, nil); err != nil {
		t.Fatal(err)
	}
	at := legacy.FromUsec(req.When)
	if !d.ScheduleDrained(at) {
		t.Error("the wrapper's marker does not name the schedule")
	}
	d.RemoveMarker() // the cordon alone must do
	before := len(f.Actions())
	if _, err := d.DrainForSchedule(context.Background(), "reboot", at, 20*time.Second); !errors.Is(err, ErrAlreadyDrained) {
		t.Fatalf("agent's drain after the wrapper's: %v", err)
	}
	for _, a := range f.Actions()[before:] {
		if a.GetVerb() != "get" {
			t.Errorf("agent's drain did %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if !d.ScheduleDrained(at) {
		t.Error("no marker for the schedule after finding the wrapper's cordon")
	}
	// Another schedule: drained (the cordon stays as it is).
	if _, err := d.DrainForSchedule(context.Background(), "reboot", at.Add(time.Minute), 20*time.Second); err != nil {
		t.Fatalf("drain for another schedule: %v", err)
	}
}

func TestUndoScheduleCordon(t *testing.T) {
	when := `"when":"2026-11-22T02:00:00Z"`
	for _, c := range []struct {
		name   string
		ann    map[string]string
		undone bool
	}{
		{"gnsh's for a schedule in this boot", map[string]string{drain.CordonAnnotation: `{"action":"reboot","user":"root","bootID":"boot-1",` + when + `}`}, true},
		{"gnsh's for a schedule in an earlier boot", map[string]string{drain.CordonAnnotation: `{"action":"reboot","user":"root","bootID":"boot-0",` + when + `}`}, false},
		{"gnsh's for an immediate reboot", map[string]string{drain.CordonAnnotation: `{"action":"reboot","user":"root","bootID":"boot-1"}`}, false},
		{"an admin's", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeNode(true, c.ann, "web-1")
			d := newDrainer(t, f, "")
			if err := d.writeMarker("reboot", nil); err != nil {
				t.Fatal(err)
			}
			undone, err := d.UndoScheduleCordon(context.Background(), "the scheduled reboot was cancelled", nil)
			if err != nil || undone != c.undone || f.node(t).Spec.Unschedulable == c.undone {
				t.Fatalf("undone %v, %v; unschedulable %v", undone, err, f.node(t).Spec.Unschedulable)
			}
			if _, err := d.ReadMarker(); !os.IsNotExist(err) {
				t.Errorf("marker left: %v", err)
			}
		})
	}
}

// A shutdown due after all (asked under the lock): nothing changes.
func TestUndoScheduleCordonPending(t *testing.T) {
	ann := map[string]string{drain.CordonAnnotation: `{"action":"reboot","user":"root","bootID":"boot-1","when":"2026-11-22T02:00:00Z"}`}
	f := newFakeNode(true, ann, "web-1")
	d := newDrainer(t, f, "")
	if err := d.writeMarker("reboot", nil); err != nil {
		t.Fatal(err)
	}
	var lockHeld bool
	pending := func(context.Context) bool {
		_, err := Acquire(d.LockDir, Holder{PID: 1})
		lockHeld = IsLockHeld(err)
		return true
	}
	undone, err := d.UndoScheduleCordon(context.Background(), "nothing scheduled", pending)
	if !errors.Is(err, ErrShutdownPending) || undone || !f.node(t).Spec.Unschedulable || !lockHeld {
		t.Fatalf("undone %v, %v; unschedulable %v; asked under the lock %v", undone, err, f.node(t).Spec.Unschedulable, lockHeld)
	}
	if _, err := d.ReadMarker(); err != nil {
		t.Errorf("marker: %v", err)
	}
}

func TestUndoScheduleCordonWaitsForTheLock(t *testing.T) {
	f := newFakeNode(true, map[string]string{drain.CordonAnnotation: `{"action":"reboot","user":"root","bootID":"boot-1","when":"2026-11-22T02:00:00Z"}`}, "web-1")
	d := newDrainer(t, f, "")
	l, err := d.AcquireLock("reboot", "node1", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if _, err := d.UndoScheduleCordon(context.Background(), "cancelled", nil); !IsLockHeld(err) {
		t.Fatalf("with the lock held: %v", err)
	}
}

// With no cordon of gnsh's for a schedule, the look takes no lock: a
// shutdown typed meanwhile never waits for it.
func TestUndoScheduleCordonWithoutCordonTakesNoLock(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	l, err := d.AcquireLock("reboot", "node1", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if undone, err := d.UndoScheduleCordon(context.Background(), "cancelled", nil); undone || err != nil {
		t.Fatalf("no cordon, lock held by another: %v %v", undone, err)
	}
}

// shutdown -k TIME: the wrapper notes the dry run for the agent; a real
// request or a cancel drops the note.
func TestDryRunNote(t *testing.T) {
	for _, next := range []string{"real schedule", "cancel"} {
		f := newFakeNode(false, nil, "web-1")
		d := newDrainer(t, f, "")
		at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		d.NoteDryRun(legacy.Usec(at))
		if !d.DryRunAt(at) || d.DryRunAt(at.Add(time.Second)) {
			t.Fatal("DryRunAt does not name the dry run")
		}
		if fi, err := os.Lstat(filepath.Join(d.LockDir, DryRunName)); err != nil || fi.Mode() != 0o600 {
			t.Errorf("note: %v, %v", fi, err)
		}
		d2 := newDrainer(t, f, "")
		d2.LockDir = d.LockDir
		if d2.BootID = "boot-2"; d2.DryRunAt(at) {
			t.Error("a note of another boot counts")
		}
		req := reboot()
		req.Command, req.When = "shutdown", legacy.Usec(at)
		if next == "cancel" {
			req = cancelReq()
		}
		if err := d.handOff(t, req, nil); err != nil {
			t.Fatal(err)
		}
		if d.DryRunAt(at) {
			t.Errorf("%s: the dry run's note stays", next)
		}
	}
	// Not a Kubernetes node: nothing is written.
	d := newDrainer(t, nil, "")
	d.NoteDryRun(legacy.Usec(time.Now().Add(time.Hour)))
	if _, err := os.Lstat(d.LockDir); !os.IsNotExist(err) {
		t.Errorf("without a kubeconfig: %v", err)
	}
}

// A schedule made with --no-drain is noted as such for the agent, and is
// not a dry run.
func TestNoDrainNote(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	d.NoteNoDrain(legacy.Usec(at))
	if !d.NoDrainAt(at) || d.NoDrainAt(at.Add(time.Second)) || d.DryRunAt(at) {
		t.Fatal("NoDrainAt does not name the schedule, or DryRunAt takes it")
	}
	d.NoteDryRun(legacy.Usec(at))
	if d.NoDrainAt(at) || !d.DryRunAt(at) {
		t.Fatal("the dry run did not replace the note")
	}
}

// A wrapper's drain for shutdown -r +1 that ended on an API failure leaves
// gnsh's cordon for the schedule standing, but not drained: the agent's
// drain ahead of that schedule runs (it used to take the cordon for a
// finished drain, and the reboot went ahead with the pods on the node).
func TestDrainForScheduleAfterFailedWrapperDrain(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	forbid := true
	f.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" || !forbid {
			return false, nil, nil
		}
		return true, nil, apierrors.NewServiceUnavailable("etcd: no leader")
	})
	d := newDrainer(t, f, "unreachableAfter: 1s\n")
	req := scheduledReboot(time.Minute)
	if err := d.handOff(t, req, nil); err != nil {
		t.Fatal(err)
	}
	at := legacy.FromUsec(req.When)
	o := drain.Owner(f.node(t))
	if o == nil || o.When == nil || o.Drained != nil {
		t.Fatalf("after the failed drain: record %+v, want gnsh's for the schedule, not drained; stderr:\n%s", o, d.stderr)
	}
	if d.ScheduleDrained(at) {
		t.Fatal("a marker after a drain that did not finish")
	}
	forbid = false
	if _, err := d.DrainForSchedule(context.Background(), "reboot", at, 20*time.Second); err != nil {
		t.Fatalf("agent's drain after the wrapper's failed one: %v\n%s", err, d.stderr)
	}
	if f.Evicted("web-1") == 0 || len(f.pods(t)) != 0 {
		t.Fatalf("web-1 evicted %d times, pods left %v", f.Evicted("web-1"), f.pods(t))
	}
	if o := drain.Owner(f.node(t)); o == nil || o.Drained == nil || !o.When.Equal(at.UTC().Truncate(time.Second)) && !o.When.Equal(at.UTC()) {
		t.Fatalf("record %+v, want the schedule's, drained", o)
	}
	if !d.ScheduleDrained(at) {
		t.Error("no marker after the agent's drain")
	}
	if !strings.Contains(d.stderr.String(), "but its drain did not finish: draining again") {
		t.Errorf("stderr:\n%s", d.stderr)
	}
}

// The agent's drain ahead of a schedule cut short by SIGTERM (a package
// upgrade restarting the agent) leaves the cordon, not drained: the agent
// started again drains again, and the marker comes only once it finishes.
func TestDrainForScheduleResumedAfterRestart(t *testing.T) {
	f := newFakeNode(false, nil, "web-1", "web-2")
	f.Stick("web-1", "web-2")
	d := newDrainer(t, f, "")
	at := time.Now().Add(2 * time.Minute).UTC()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := d.DrainForSchedule(ctx, "reboot", at, 30*time.Second); done <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for f.Evicted("web-2") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the drain did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // SIGTERM
	if err := <-done; err == nil || errors.Is(err, ErrAlreadyDrained) {
		t.Fatalf("cut-short drain: %v", err)
	}
	if o := drain.Owner(f.node(t)); o == nil || o.Drained != nil {
		t.Fatalf("record %+v, want gnsh's, not drained", o)
	}
	if d.ScheduleDrained(at) {
		t.Fatal("a marker for a drain cut short")
	}
	// The pods go now; the agent, started again, drains again.
	f.gone(t, "web-1")
	f.gone(t, "web-2")
	if _, err := d.DrainForSchedule(context.Background(), "reboot", at, 30*time.Second); err != nil {
		t.Fatalf("drain after the restart: %v\n%s", err, d.stderr)
	}
	if o := drain.Owner(f.node(t)); o == nil || o.Drained == nil {
		t.Fatalf("record %+v, want drained", o)
	}
	if !d.ScheduleDrained(at) {
		t.Error("no marker after the finished drain")
	}
	// And now it counts as drained.
	if _, err := d.DrainForSchedule(context.Background(), "reboot", at, 30*time.Second); !errors.Is(err, ErrAlreadyDrained) {
		t.Fatalf("third drain: %v", err)
	}
}

// pods are the names of the pods left on node1.
func (f *fakeNode) pods(t *testing.T) []string {
	t.Helper()
	l, err := f.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out
}

// A request that does not reach logind, or that logind refuses, leaves
// the notes of the schedule that stands: the admin's shutdown -r
// --no-drain 02:00 stays ungated by the agent. (Prepare used to drop them
// before the request was even handed off.) Once logind takes a request,
// they go: a --no-drain schedule's note is then the only one.
func TestRefusedRequestKeepsTheNoDrainNote(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	f.Stick("web-1")
	d := newDrainer(t, f, "drainTimeout: 1s\n")
	at := time.Now().Add(3 * time.Hour).Truncate(time.Microsecond)
	noDrain := func(at time.Time) *legacy.Request {
		r := reboot()
		r.Command, r.When, r.Drain.Skip = "shutdown", legacy.Usec(at), true
		return r
	}
	d.NoteNoDrain(legacy.Usec(at)) // as the runner, before logind's call
	if err := d.handOff(t, noDrain(at), nil); err != nil {
		t.Fatal(err)
	}
	if !d.NoDrainAt(at) {
		t.Fatal("not noted")
	}
	// A reboot whose drain is refused (blocked), and one logind refuses.
	refusal(t, d.handOff(t, reboot(), nil), "reboot refused")
	skip := reboot()
	skip.Drain.Skip = true
	if err := d.handOff(t, skip, errors.New("logind said no")); err != nil {
		t.Fatal(err)
	}
	// A new --no-drain schedule logind refuses: noted beside, never in place.
	later := at.Add(time.Hour)
	d.NoteNoDrain(legacy.Usec(later))
	if !d.NoDrainAt(at) || !d.NoDrainAt(later) {
		t.Fatalf("after refused requests: %v %v", d.NoDrainAt(at), d.NoDrainAt(later))
	}
	// logind takes it: the old schedule's note goes.
	d.Accepted(noDrain(later))
	if d.NoDrainAt(at) || !d.NoDrainAt(later) {
		t.Fatalf("after the new schedule: %v %v", d.NoDrainAt(at), d.NoDrainAt(later))
	}
	// Any other request logind takes drops the notes.
	d.Accepted(reboot())
	if d.NoDrainAt(later) {
		t.Fatal("a reboot taken by logind left the note")
	}
}

// reboot --no-drain at once is marked for the node agent, whose guard
// otherwise drains every shutdown that did not come through gnsh; logind
// refusing it takes the mark away. A dry run, -f, a schedule, a machine
// that is not a node and a config with drain: false mark nothing. A
// --no-drain schedule whose time came is due for the guard too.
func TestNoDrainMarked(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	skip := func(mod func(*legacy.Request)) *legacy.Request {
		r := reboot()
		r.Drain.Skip = true
		if mod != nil {
			mod(r)
		}
		return r
	}
	if err := d.handOff(t, skip(nil), nil); err != nil {
		t.Fatal(err)
	}
	m, ok := d.DrainedFor(time.Minute)
	if !ok || !m.NoDrain || m.Action != "reboot" {
		t.Fatalf("reboot --no-drain: marker %+v %v", m, ok)
	}
	// Refused by logind: the mark goes (the marker before it, if any, is
	// put back: TestRefusedNoDrainKeepsScheduleMarker).
	d.RemoveMarker()
	if err := d.handOff(t, skip(nil), errors.New("logind said no")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadMarker(); !os.IsNotExist(err) {
		t.Fatalf("refused by logind: the mark stays (%v)", err)
	}
	for name, mod := range map[string]func(*legacy.Request){
		"dry run":  func(r *legacy.Request) { r.DryRun = true },
		"-f":       func(r *legacy.Request) { r.Force = 1 },
		"schedule": func(r *legacy.Request) { r.Command, r.When = "shutdown", legacy.Usec(time.Now().Add(time.Hour)) },
	} {
		if err := d.handOff(t, skip(mod), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := d.ReadMarker(); !os.IsNotExist(err) {
			t.Errorf("%s --no-drain: marked (%v)", name, err)
		}
	}
	for name, d := range map[string]testDrainer{"not a node": newDrainer(t, nil, ""), "drain: false": newDrainer(t, f, "drain: false\n")} {
		if err := d.handOff(t, skip(nil), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := d.ReadMarker(); !os.IsNotExist(err) {
			t.Errorf("%s: marked (%v)", name, err)
		}
	}

	// A --no-drain schedule: due for the guard from a minute before its
	// time until maxAge after it, never otherwise.
	at := time.Now().Add(30 * time.Second).Truncate(time.Microsecond)
	d.NoteNoDrain(legacy.Usec(at))
	if got, ok := d.NoDrainDue(10 * time.Minute); !ok || !got.Equal(at) {
		t.Errorf("a --no-drain schedule due in 30s: %v %v", got, ok)
	}
	d.NoteNoDrain(legacy.Usec(time.Now().Add(time.Hour)))
	d.Accepted(skip(func(r *legacy.Request) { r.Command, r.When = "shutdown", legacy.Usec(time.Now().Add(time.Hour)) }))
	if _, ok := d.NoDrainDue(10 * time.Minute); ok {
		t.Error("a --no-drain schedule an hour away is due")
	}
	d.NoteDryRun(legacy.Usec(at))
	if _, ok := d.NoDrainDue(10 * time.Minute); ok {
		t.Error("a dry run is due as --no-drain")
	}
}
