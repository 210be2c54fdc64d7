package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/slots"
)

// queueFake is the queue file and the runs of a QueueRunner under test.
type queueFake struct {
	mu      sync.Mutex
	q       *drainer.QueuedReboot
	runs    []time.Duration // the waits asked
	result  func(ctx context.Context, n int) error
	givenUp string
	saved   int
}

func (f *queueFake) runner(clk *clocktesting.FakeClock, out *syncBuffer) *QueueRunner {
	return &QueueRunner{
		Read: func() (*drainer.QueuedReboot, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.q == nil {
				return nil, nil
			}
			c := *f.q
			return &c, nil
		},
		Save: func(*drainer.QueuedReboot) error { f.mu.Lock(); f.saved++; f.mu.Unlock(); return nil },
		Remove: func(q *drainer.QueuedReboot) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			if !drainer.SameQueued(f.q, q) {
				return false
			}
			f.q = nil
			return true
		},
		Reboot: func(ctx context.Context, q *drainer.QueuedReboot, wait time.Duration) error {
			f.mu.Lock()
			f.runs = append(f.runs, wait)
			n := len(f.runs)
			f.mu.Unlock()
			return f.result(ctx, n)
		},
		GiveUp: func(_ context.Context, q *drainer.QueuedReboot, why string) {
			f.mu.Lock()
			f.givenUp = why
			f.mu.Unlock()
		},
		Out: out, Clock: clk, Poll: time.Second, Retry: time.Minute,
	}
}

func (f *queueFake) state() (runs []time.Duration, q *drainer.QueuedReboot, givenUp string, saved int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.runs...), f.q, f.givenUp, f.saved
}

// until steps the fake clock a second at a time (letting the runner
// run between steps) until cond holds, at most max steps.
func until(t *testing.T, clk *clocktesting.FakeClock, max int, cond func() bool) {
	t.Helper()
	for i := 0; i < max; i++ {
		if cond() {
			return
		}
		deadline := time.Now().Add(time.Second)
		for !clk.HasWaiters() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		clk.Step(time.Second)
		time.Sleep(5 * time.Millisecond) // let the runner take the step
	}
	if !cond() {
		t.Fatalf("not reached within %d steps", max)
	}
}

func slotWaitErr() error {
	return &drainer.Refusal{Msg: "no slot", Err: &slots.WaitError{Waited: time.Second}}
}

// A queued reboot is asked for until admitted: a wait that runs out is
// asked again (its place saved), and once handed off the request goes.
func TestQueueRunnerAsksUntilHandedOff(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	f := &queueFake{q: &drainer.QueuedReboot{BootID: "b", Action: "reboot", Since: now, Until: now.Add(time.Hour)}}
	f.result = func(ctx context.Context, n int) error {
		if n < 3 {
			return slotWaitErr()
		}
		return nil
	}
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.runner(clk, &out).Run(ctx) }()
	until(t, clk, 30, func() bool { _, q, _, _ := f.state(); return q == nil })
	runs, _, _, saved := f.state()
	if len(runs) != 3 || saved != 2 {
		t.Fatalf("runs %v saved %d", runs, saved)
	}
	if runs[0] != time.Hour {
		t.Errorf("first wait %s, want until the request's end (1h)", runs[0])
	}
	if !strings.Contains(out.String(), "gnsh: agent: the queued reboot was handed off") {
		t.Errorf("%s", out.String())
	}
}

// Never before the time asked; within the window only, its wait ending
// when the window closes; given up at Until.
func TestQueueRunnerWaitsForItsTimeAndWindow(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	at := now.Add(10 * time.Second)
	f := &queueFake{q: &drainer.QueuedReboot{BootID: "b", Action: "reboot", Since: now, NotBefore: &at, Until: now.Add(2 * time.Minute)}}
	f.result = func(ctx context.Context, n int) error { return slotWaitErr() }
	var out syncBuffer
	r := f.runner(clk, &out)
	// The window opens 30 s after now and closes 60 s later.
	r.Window = fakeWindow{open: now.Add(30 * time.Second), close: now.Add(90 * time.Second)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	until(t, clk, 60, func() bool { runs, _, _, _ := f.state(); return len(runs) > 0 })
	if el := clk.Now().Sub(now); el < 30*time.Second {
		t.Fatalf("asked %s after queueing, before the window opened", el)
	}
	runs, _, _, _ := f.state()
	if runs[0] > time.Minute || runs[0] < time.Minute-2*time.Second {
		t.Errorf("wait %s, want until the window closes (1m after it opened)", runs[0])
	}
	if !strings.Contains(out.String(), "waits for the window") {
		t.Errorf("%s", out.String())
	}
	until(t, clk, 200, func() bool { _, _, g, _ := f.state(); return g != "" })
	if _, q, g, _ := f.state(); q != nil || !strings.Contains(g, "slots.queueFor") {
		t.Errorf("given up: %q, queued %+v", g, q)
	}
	if !strings.Contains(out.String(), "warning: the queued reboot") || !strings.Contains(out.String(), "is given up") {
		t.Errorf("%s", out.String())
	}
}

// Withdrawn (shutdown -c removes the file) while its run waits: the run's
// context ends (its place is withdrawn by it), nothing is asked again.
func TestQueueRunnerWithdrawn(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	f := &queueFake{q: &drainer.QueuedReboot{BootID: "b", Action: "reboot", Since: now, Until: now.Add(time.Hour)}}
	started := make(chan struct{})
	ended := make(chan error, 1)
	f.result = func(ctx context.Context, n int) error {
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return slotWaitErr()
	}
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.runner(clk, &out).Run(ctx) }()
	until(t, clk, 10, func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})
	f.mu.Lock()
	f.q = nil
	f.mu.Unlock()
	until(t, clk, 10, func() bool { return strings.Contains(out.String(), "was withdrawn") })
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("its run ended with %v", err)
	}
	clk.Step(10 * time.Second)
	if runs, _, _, _ := f.state(); len(runs) != 1 {
		t.Errorf("asked again after the withdrawal: %v", runs)
	}
}

type fakeWindow struct{ open, close time.Time }

func (w fakeWindow) Next(t time.Time) (time.Time, time.Time) {
	if t.Before(w.close) {
		return w.open, w.close
	}
	return w.open.Add(24 * time.Hour), w.close.Add(24 * time.Hour)
}
func (w fakeWindow) String() string { return "test window" }

// A window that does not open again before the request's end gives it up
// at once (when the window closes), not at its end.
func TestQueueRunnerGivesUpWhenNoWindowIsLeft(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	f := &queueFake{q: &drainer.QueuedReboot{BootID: "b", Action: "reboot", Since: now, Until: now.Add(2 * time.Hour)}}
	f.result = func(ctx context.Context, n int) error { return slotWaitErr() }
	var out syncBuffer
	r := f.runner(clk, &out)
	r.Window = fakeWindow{open: now.Add(-time.Hour), close: now.Add(30 * time.Second)} // the next opens a day later
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	until(t, clk, 120, func() bool { _, _, g, _ := f.state(); return g != "" })
	if el := clk.Now().Sub(now); el > 2*time.Minute {
		t.Errorf("given up %s after queueing, want when the window closed (30s)", el)
	}
	if _, _, g, _ := f.state(); !strings.Contains(g, "does not open again before") {
		t.Errorf("why %q", g)
	}
}

// Within a window, the wait ends Lead (the drain timeout) before the
// window closes; an opening too short for that is skipped.
func TestQueueRunnerWhenLeavesTheLead(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cur := &drainer.QueuedReboot{Action: "reboot", Since: now, Until: now.Add(48 * time.Hour)}
	r := &QueueRunner{Window: fakeWindow{open: now.Add(-time.Hour), close: now.Add(10 * time.Minute)}, Lead: 5 * time.Minute}
	start, end, _ := r.when(cur, now)
	if !start.Equal(now) || !end.Equal(now.Add(5*time.Minute)) {
		t.Errorf("start %s end %s, want now and 5m before the close", start, end)
	}
	r.Lead = 15 * time.Minute // the rest of this opening is too short
	start, end, why := r.when(cur, now)
	if !start.Equal(now.Add(23*time.Hour)) || !end.Equal(now.Add(24*time.Hour-5*time.Minute)) || !strings.Contains(why, "waits for the window") {
		t.Errorf("start %s end %s (%s), want the next opening", start, end, why)
	}
}
