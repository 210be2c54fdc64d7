package drainer

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/drain"
)

// deadPID is the PID of a process that has ended.
func deadPID(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// killedMidDrain is a wrapper's reboot killed (SIGKILL) mid-drain: its
// cordon and its note stand, its process is gone.
func killedMidDrain(t *testing.T, f *fakeNode, d testDrainer) CordonNote {
	t.Helper()
	f.Stick("web-1")
	n := killRun(t, f, d, "web-1")
	if n.Node != "node1" || n.Own.Action != "reboot" || n.Own.BootID != "boot-1" {
		t.Fatalf("note %+v", n)
	}
	if o := drain.Owner(f.node(t)); o == nil || !sameRecord(&n.Own, o) {
		t.Fatalf("record %+v, note %+v", o, n.Own)
	}
	return n
}

func idle(context.Context) (string, error) { return "", nil }

// A wrapper killed mid-drain leaves its cordon; the agent's undo lifts it
// when nothing relies on it, posts GnshUncordoned and drops the note.
func TestUndoOrphanCordon(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	n := killedMidDrain(t, f, d)
	if !d.HolderGone(n) {
		t.Fatal("a dead PID's holder is not gone")
	}
	a := agentDrainer(t, f, d)
	a.Relies = func(context.Context, *drain.Ownership, time.Duration) (string, error) { return "", nil }
	undone, err := a.UndoOrphanCordon(context.Background(), n)
	if err != nil || !undone {
		t.Fatalf("undo: %v %v\n%s", undone, err, a.stderr)
	}
	if nd := f.node(t); nd.Spec.Unschedulable {
		t.Fatal("still cordoned")
	}
	if _, err := d.ReadCordonNote(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("note left: %v", err)
	}
	if r := f.reasons(); !strings.Contains(strings.Join(r, " "), ReasonUncordoned) {
		t.Errorf("events %v", r)
	}
}

// Nothing is undone while a shutdown the cordon may serve is pending or
// under way, while a drain holds the lock, when logind cannot be asked, or
// when the record standing is another request's.
func TestUndoOrphanCordonLeaves(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, f *fakeNode, d testDrainer, n *CordonNote) func(context.Context) (string, error)
		want     func(error) bool
		noteGone bool
	}{
		{"shutdown pending", func(*testing.T, *fakeNode, testDrainer, *CordonNote) func(context.Context) (string, error) {
			return func(context.Context) (string, error) { return "systemd-logind is preparing for shutdown", nil }
		}, func(err error) bool { return errors.Is(err, ErrShutdownPending) }, false},
		{"logind unreachable", func(*testing.T, *fakeNode, testDrainer, *CordonNote) func(context.Context) (string, error) {
			return func(context.Context) (string, error) { return "", errors.New("no bus") }
		}, func(err error) bool { return err != nil && strings.Contains(err.Error(), "cannot tell") }, false},
		{"a drain runs", func(t *testing.T, f *fakeNode, d testDrainer, n *CordonNote) func(context.Context) (string, error) {
			l, err := d.lock("reboot", "node1", true, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(l.Release)
			return idle
		}, IsLockHeld, false},
		{"another request's record", func(t *testing.T, f *fakeNode, d testDrainer, n *CordonNote) func(context.Context) (string, error) {
			n.Own.User = "bob" // the note names a record that does not stand
			data, _ := json.Marshal(n)
			if err := d.writeRunFile(CordonNoteName, data); err != nil {
				t.Fatal(err)
			}
			return idle
		}, func(err error) bool { return err == nil }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNode(false, nil, "web-1")
			d := newDrainer(t, f, "")
			n := killedMidDrain(t, f, d)
			pending := tc.setup(t, f, d, &n)
			a := agentDrainer(t, f, d)
			a.Relies = func(ctx context.Context, _ *drain.Ownership, _ time.Duration) (string, error) { return pending(ctx) }
			undone, err := a.UndoOrphanCordon(context.Background(), n)
			if undone || !tc.want(err) {
				t.Fatalf("undo: %v %v", undone, err)
			}
			if !f.node(t).Spec.Unschedulable {
				t.Fatal("uncordoned")
			}
			if _, err := d.ReadCordonNote(); errors.Is(err, os.ErrNotExist) != tc.noteGone {
				t.Errorf("note: %v", err)
			}
		})
	}
}

// The note is written before the cordon and dropped by the run's own undo
// (SIGINT, a refusal): then nothing is left for the agent.
func TestCordonNoteDroppedByUndo(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	f.Protect("web-1")
	d := newDrainer(t, f, "drainTimeout: 2s\n")
	fastClock(t, d)
	err := d.handOff(t, reboot(), nil)
	refusal(t, err)
	if f.node(t).Spec.Unschedulable {
		t.Fatal("cordon not undone")
	}
	if _, err := d.ReadCordonNote(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("note left after the undo: %v", err)
	}
}

// A live holder is not gone; a PID used again (another start time) is.
func TestHolderGone(t *testing.T) {
	d := newDrainer(t, nil, "")
	c := exec.Command("sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	start, err := procStart(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if d.HolderGone(CordonNote{PID: c.Process.Pid, Start: start}) {
		t.Error("a running holder taken for gone")
	}
	if !d.HolderGone(CordonNote{PID: c.Process.Pid, Start: start + 1}) {
		t.Error("a PID used again taken for the holder")
	}
	if !d.HolderGone(CordonNote{PID: deadPID(t)}) {
		t.Error("a dead holder not gone")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// flockEx takes an exclusive flock without waiting.
func flockEx(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }
