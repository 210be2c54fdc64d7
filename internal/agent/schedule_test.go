package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

// followerFixture runs a ScheduleFollower on a fake clock with a logind
// schedule the test sets, recording the drains and undos it asks for.
type followerFixture struct {
	clk  *clocktesting.FakeClock
	out  *syncBuffer
	file string

	mu        sync.Mutex
	ls        LogindSchedule
	readErr   error
	drains    []drainCall
	drainErr  error
	undos     []string
	undoErr   error
	wrapperAt time.Time // Drained reports true for this schedule
	dryAt     time.Time // DryRun reports true for this schedule
	noDrainAt time.Time // NoDrain reports true for this schedule
	orphan    bool      // a cordon of gnsh's for a cancelled schedule stands
	onUndo    func()    // called as an undo begins (without f.mu)
	cancels   []string  // Cancel's calls: "type@usec: why"
	uncancel  []string  // Uncancelled's calls: "action: why"
	cancelErr error     // Cancel's error
	slotErr   error     // Slot's error
	slotAsked []string  // Slot's calls: "action@usec"
}

type drainCall struct {
	action string
	at     time.Time
	budget time.Duration
	now    time.Time
}

var s0 = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

const followerTimeout = 5 * time.Minute

func startFollower(t *testing.T, setup func(*followerFixture)) *followerFixture {
	t.Helper()
	f := &followerFixture{clk: clocktesting.NewFakeClock(s0), out: &syncBuffer{}, file: filepath.Join(t.TempDir(), "scheduled")}
	if setup != nil {
		setup(f)
	}
	fl := &ScheduleFollower{
		Read: func(context.Context) (LogindSchedule, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.ls, f.readErr
		},
		File:         f.file,
		DrainTimeout: followerTimeout,
		Drained: func(at time.Time) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return at.Equal(f.wrapperAt)
		},
		DryRun: func(at time.Time) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return at.Equal(f.dryAt)
		},
		NoDrain: func(at time.Time) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return at.Equal(f.noDrainAt)
		},
		Drain: func(_ context.Context, action string, at time.Time, budget time.Duration) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.drains = append(f.drains, drainCall{action, at, budget, f.clk.Now()})
			return f.drainErr
		},
		Undo: func(ctx context.Context, why string, pending func(context.Context) bool) (bool, error) {
			f.mu.Lock()
			err, onUndo := f.undoErr, f.onUndo
			f.mu.Unlock()
			if onUndo != nil {
				onUndo()
			}
			if err != nil {
				return false, err
			}
			if pending != nil && pending(ctx) { // as under the lock: Read takes f.mu
				return false, nil
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if why == orphanWhy && !f.orphan {
				return false, nil // no such cordon stands
			}
			f.orphan = false // any undo lifts gnsh's cordon for a schedule
			f.undos = append(f.undos, why)
			return true, nil
		},
		Cancel: func(_ context.Context, typ string, usec uint64, _ time.Time, why string) (bool, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.cancels = append(f.cancels, fmt.Sprintf("%s@%d: %s", typ, usec, why))
			if f.cancelErr != nil {
				return false, f.cancelErr
			}
			if f.ls.Type != typ || f.ls.USec != usec {
				return false, nil // the schedule changed
			}
			f.ls = LogindSchedule{}
			_ = os.Remove(f.file)
			return true, nil
		},
		Slot: func(_ context.Context, action string, at time.Time) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.slotAsked = append(f.slotAsked, fmt.Sprintf("%s@%d", action, usecOf(at)))
			return f.slotErr
		},
		Uncancelled: func(_ context.Context, action string, _ time.Time, why string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.uncancel = append(f.uncancel, action+": "+why)
		},
		Out: f.out, Clock: f.clk,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = fl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f.idle(t)
	return f
}

// idle waits until the follower waits on the clock again.
func (f *followerFixture) idle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !f.clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatalf("the follower never waits; log:\n%s", f.out)
		}
		time.Sleep(time.Millisecond)
	}
}

// to moves the clock to at and lets the follower look once more: the file
// is stamped as logind would rewrite it, so the property is read.
func (f *followerFixture) to(t *testing.T, at time.Time) {
	t.Helper()
	f.clk.SetTime(at)
	f.idle(t)
	// A second look: the first may have run before the drain's result.
	f.clk.Step(DefaultSchedulePoll)
	f.idle(t)
}

// set changes logind's schedule (and its file, as logind does).
func (f *followerFixture) set(t *testing.T, ls LogindSchedule) {
	t.Helper()
	f.mu.Lock()
	f.ls = ls
	f.mu.Unlock()
	if ls.Type == "" || ls.USec == 0 {
		_ = os.Remove(f.file)
		return
	}
	// A new inode, as logind's rename makes.
	tmp := f.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("USEC=%d\nWARN_WALL=1\nMODE=%s\n", ls.USec, ls.Type)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.file); err != nil {
		t.Fatal(err)
	}
}

func (f *followerFixture) calls() ([]drainCall, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]drainCall(nil), f.drains...), append([]string(nil), f.undos...)
}

func usecOf(at time.Time) uint64 { return uint64(at.UnixMicro()) }

func TestFollowerDrainsAtDeadlineLessDrainTimeout(t *testing.T) {
	f := startFollower(t, nil)
	at := s0.Add(2 * time.Hour)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(2*time.Second))
	if !strings.Contains(f.out.String(), "gnsh: agent: a reboot is scheduled for "+at.Local().Format("2006-01-02 15:04:05 MST")+": draining at "+
		at.Add(-followerTimeout).Local().Format("2006-01-02 15:04:05 MST")+" (drainTimeout 5m0s before it)\n") {
		t.Errorf("no line for the schedule seen:\n%s", f.out)
	}
	f.to(t, at.Add(-followerTimeout-time.Second-DefaultSchedulePoll))
	f.idle(t)
	if d, _ := f.calls(); len(d) != 0 {
		t.Fatalf("drained before deadline − drainTimeout: %+v", d)
	}
	f.clk.SetTime(at.Add(-followerTimeout))
	f.idle(t)
	f.drained(t, 1)
	d, _ := f.calls()
	if c := d[0]; c.action != "reboot" || !c.at.Equal(at) || c.now.Before(at.Add(-followerTimeout)) ||
		c.budget != followerTimeout-DefaultScheduleMargin {
		t.Errorf("drain %+v", c)
	}
	// Exactly once, however often it looks (and rereads the property).
	for i := 0; i < 3; i++ {
		f.to(t, f.clk.Now().Add(DefaultScheduleReread))
	}
	if d, u := f.calls(); len(d) != 1 || len(u) != 0 {
		t.Errorf("drains %+v, undos %q", d, u)
	}
	for _, want := range []string{"draining ahead of the scheduled reboot for ", "drained ahead of the scheduled reboot for "} {
		if strings.Count(f.out.String(), want) != 1 {
			t.Errorf("want one line %q:\n%s", want, f.out)
		}
	}
}

// drained waits until the follower has asked for n drains and taken the
// end of each (its line), and looks at the clock again.
func (f *followerFixture) drained(t *testing.T, n int) {
	t.Helper()
	eventually(t, f.out, fmt.Sprintf("drain %d", n), func() bool {
		d, _ := f.calls()
		return len(d) == n && strings.Count(f.out.String(), "drained ahead of the scheduled") == n
	})
	f.idle(t)
}

// eventually polls cond (the follower's drain runs on its own goroutine)
// for up to 20 s.
func eventually(t *testing.T, out fmt.Stringer, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s; log:\n%s", what, out)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFollowerCancelUndoes(t *testing.T) {
	f := startFollower(t, nil)
	at := s0.Add(4 * time.Minute) // within drainTimeout: at once
	f.set(t, LogindSchedule{Type: "poweroff", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	f.drained(t, 1)
	f.set(t, LogindSchedule{Type: "", USec: 0})
	f.to(t, f.clk.Now())
	d, u := f.calls()
	if len(d) != 1 || len(u) != 1 || !strings.HasPrefix(u[0], "the scheduled poweroff for ") || !strings.HasSuffix(u[0], " was cancelled") {
		t.Fatalf("drains %+v, undos %q; log:\n%s", d, u, f.out)
	}
	if !strings.Contains(f.out.String(), "was cancelled; gnsh's cordon for it undone\n") {
		t.Errorf("log:\n%s", f.out)
	}
	// Once: nothing more to undo.
	f.to(t, f.clk.Now().Add(DefaultScheduleReread))
	if _, u := f.calls(); len(u) != 1 {
		t.Errorf("undos %q", u)
	}
}

func TestFollowerMovedLaterUndoesThenDrainsAgain(t *testing.T) {
	f, _ := startDrainedAhead(t)
	later := s0.Add(time.Hour)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(later)})
	f.to(t, f.clk.Now())
	if _, u := f.calls(); len(u) != 1 || !strings.Contains(u[0], " was moved to "+later.Local().Format("2006-01-02 15:04:05 MST")) {
		t.Fatalf("undos %q; log:\n%s", u, f.out)
	}
	f.to(t, later.Add(-followerTimeout))
	f.drained(t, 2)
	if d, _ := f.calls(); !d[1].at.Equal(later) {
		t.Errorf("second drain %+v", d[1])
	}
}

// startDrainedAhead starts a follower, schedules a reboot 3 minutes
// ahead (within the fixture's drainTimeout) and waits for its one drain.
func startDrainedAhead(t *testing.T) (*followerFixture, time.Time) {
	t.Helper()
	f := startFollower(t, nil)
	at := s0.Add(3 * time.Minute)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	f.drained(t, 1)
	return f, at
}

// Moved, but still within drainTimeout: the cordon serves the new time,
// nothing is undone; the new schedule is drained for (the wrapper's
// marker may already say so).
func TestFollowerMovedWithinTimeoutKeepsCordon(t *testing.T) {
	f, at := startDrainedAhead(t)
	f.mu.Lock()
	f.wrapperAt = at.Add(time.Minute)
	f.mu.Unlock()
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at.Add(time.Minute))})
	f.to(t, f.clk.Now())
	if d, u := f.calls(); len(d) != 1 || len(u) != 0 {
		t.Errorf("drains %+v, undos %q; log:\n%s", d, u, f.out)
	}
}

func TestFollowerWrapperDrainedAlready(t *testing.T) {
	at := s0.Add(4 * time.Minute)
	f := startFollower(t, func(f *followerFixture) { f.wrapperAt = at })
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	if d, _ := f.calls(); len(d) != 0 {
		t.Fatalf("drained again after the wrapper: %+v", d)
	}
	if !strings.Contains(f.out.String(), "was drained for already (by gnsh's wrapper)") {
		t.Errorf("log:\n%s", f.out)
	}
	// Cancelled by a means that bypasses the wrapper: the cordon goes.
	f.set(t, LogindSchedule{})
	f.to(t, f.clk.Now())
	if _, u := f.calls(); len(u) != 1 {
		t.Errorf("undos %q; log:\n%s", u, f.out)
	}
}

func TestFollowerIgnores(t *testing.T) {
	at := s0.Add(time.Minute)
	for _, c := range []struct {
		name string
		ls   LogindSchedule
		file string // the file's content, when the property cannot be read
	}{
		{"dry run", LogindSchedule{Type: "dry-reboot", USec: usecOf(at)}, ""},
		{"soft-reboot", LogindSchedule{Type: "soft-reboot", USec: usecOf(at)}, ""},
		{"never (past year 294247)", LogindSchedule{Type: "reboot", USec: 1 << 63}, ""},
		{"nothing (v252)", LogindSchedule{Type: "", USec: 1<<64 - 1}, ""},
		{"an immediate action (v251+)", LogindSchedule{Type: "reboot", USec: 0}, ""},
		{"v219's dry run in the file", LogindSchedule{}, fmt.Sprintf("USEC=%d\nWARN_WALL=1\nMODE=reboot\nDRY_RUN=1\n", usecOf(at))},
		{"too near to drain", LogindSchedule{Type: "reboot", USec: usecOf(s0.Add(DefaultScheduleMargin))}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFollower(t, func(f *followerFixture) {
				f.ls = c.ls
				if c.file != "" {
					f.readErr = errors.New("org.freedesktop.DBus.Error.UnknownProperty")
					if err := os.WriteFile(f.file, []byte(c.file), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			})
			f.to(t, s0.Add(time.Second))
			f.to(t, at.Add(time.Second))
			if d, u := f.calls(); len(d) != 0 || len(u) != 0 {
				t.Errorf("drains %+v, undos %q; log:\n%s", d, u, f.out)
			}
		})
	}
}

// A dry run the wrapper noted is not drained for; a real schedule that
// replaces it is.
func TestFollowerDryRunNoted(t *testing.T) {
	at := s0.Add(time.Minute)
	f := startFollower(t, func(f *followerFixture) { f.dryAt = at })
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	f.to(t, s0.Add(2*time.Second))
	if d, _ := f.calls(); len(d) != 0 {
		t.Fatalf("drained ahead of a dry run: %+v", d)
	}
	if n := strings.Count(f.out.String(), "a dry run (shutdown -k) is scheduled for "); n != 1 {
		t.Errorf("%d lines about the dry run:\n%s", n, f.out)
	}
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at.Add(time.Second))})
	f.to(t, f.clk.Now())
	f.drained(t, 1)
}

// Without the property (v219, or no bus), the file alone is followed.
func TestFollowerFileFallback(t *testing.T) {
	f := startFollower(t, func(f *followerFixture) { f.readErr = errors.New("no bus") })
	at := s0.Add(time.Hour)
	f.set(t, LogindSchedule{Type: "halt", USec: usecOf(at)})
	f.mu.Lock()
	f.ls = LogindSchedule{} // what the failing Read would not tell anyway
	f.mu.Unlock()
	f.to(t, at.Add(-followerTimeout))
	f.drained(t, 1)
	if d, _ := f.calls(); d[0].action != "halt" || !d[0].at.Equal(at) {
		t.Errorf("drain %+v", d[0])
	}
	if n := strings.Count(f.out.String(), "reading systemd-logind's scheduled shutdown: no bus; following "); n != 1 {
		t.Errorf("%d lines about the read error:\n%s", n, f.out)
	}
	_ = os.Remove(f.file)
	f.to(t, f.clk.Now())
	if _, u := f.calls(); len(u) != 1 {
		t.Errorf("undos %q; log:\n%s", u, f.out)
	}
}

// The schedule's time came: logind prepares for the shutdown (and on 247
// and 252 keeps the schedule, or resets it): the cordon stays.
func TestFollowerKeepsCordonWhenLogindActs(t *testing.T) {
	f, at := startDrainedAhead(t)
	f.mu.Lock()
	f.ls.Preparing = true
	f.mu.Unlock()
	f.to(t, at.Add(DefaultScheduleReread))
	f.set(t, LogindSchedule{Preparing: true})
	f.to(t, f.clk.Now())
	if d, u := f.calls(); len(d) != 1 || len(u) != 0 {
		t.Errorf("drains %+v, undos %q; log:\n%s", d, u, f.out)
	}
}

// An undo while a drain holds the lock waits for it, with one line.
func TestFollowerUndoWaitsForTheLock(t *testing.T) {
	f, _ := startDrainedAhead(t)
	f.mu.Lock()
	f.undoErr = &drainer.HeldError{}
	f.mu.Unlock()
	f.set(t, LogindSchedule{})
	f.to(t, f.clk.Now())
	f.to(t, f.clk.Now())
	if _, u := f.calls(); len(u) != 0 {
		t.Fatalf("undos %q", u)
	}
	f.mu.Lock()
	f.undoErr = nil
	f.mu.Unlock()
	f.to(t, f.clk.Now())
	if _, u := f.calls(); len(u) != 1 {
		t.Errorf("undos %q; log:\n%s", u, f.out)
	}
	if n := strings.Count(f.out.String(), "waiting for the drain lock to undo gnsh's cordon"); n != 1 {
		t.Errorf("%d waiting lines:\n%s", n, f.out)
	}
}

// scheduleFixture: the follower and the shutdown guard side by side, as
// gnsh agent runs them, with the real drainer on a fake cluster and a fake
// logind on a private bus that keeps the schedule file. The test fires
// logind's timers itself: the first armed is the schedule's.
type scheduleFixture struct {
	*guardFixture
	file string

	mu     sync.Mutex
	timers []chan time.Time
}

func newScheduleFixture(t *testing.T, cordonedByAdmin bool) *scheduleFixture {
	t.Helper()
	f := &scheduleFixture{guardFixture: newGuardFixture(t, 252, 30*time.Second)}
	f.ld.Close() // the guard fixture's logind: this one keeps the file and hands out the timers
	f.file = filepath.Join(t.TempDir(), "systemd", "shutdown", "scheduled")
	f.ld = f.bus.StartLogind(t, logindtest.Options{Version: 252, WaitForDelayLocks: true, InhibitDelayMax: 30 * time.Second,
		ScheduleFile: f.file, After: func(time.Duration) <-chan time.Time {
			ch := make(chan time.Time, 1)
			f.mu.Lock()
			f.timers = append(f.timers, ch)
			f.mu.Unlock()
			return ch
		}})
	if cordonedByAdmin {
		n := f.node(t)
		n.Spec.Unschedulable = true
		if _, err := f.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{FieldManager: "kubectl-cordon"}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// follow runs the follower until the test ends, or until stop is called.
func (f *scheduleFixture) follow(t *testing.T, drainTimeout time.Duration) (stop func()) {
	t.Helper()
	fl := &ScheduleFollower{
		Read:         func(ctx context.Context) (LogindSchedule, error) { return ReadLogindSchedule(ctx, f.bus.Address()) },
		File:         f.file,
		DrainTimeout: drainTimeout,
		Drained:      f.d.ScheduleDrained,
		Drain: func(ctx context.Context, action string, at time.Time, budget time.Duration) error {
			_, err := f.d.DrainForSchedule(ctx, action, at, budget)
			return err
		},
		Undo: f.d.UndoScheduleCordon,
		Out:  f.out, Poll: 20 * time.Millisecond, Margin: 200 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = fl.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func (f *scheduleFixture) schedule(t *testing.T, typ string, at time.Time) {
	t.Helper()
	c := f.bus.Connect(t)
	if err := c.Object(logindtest.LogindName, logindtest.LogindPath).Call(logindtest.LogindInterface+".ScheduleShutdown", 0, typ, usecOf(at)).Err; err != nil {
		t.Fatalf("ScheduleShutdown: %v", err)
	}
}

func (f *scheduleFixture) cancelSchedule(t *testing.T) {
	t.Helper()
	c := f.bus.Connect(t)
	if err := c.Object(logindtest.LogindName, logindtest.LogindPath).Call(logindtest.LogindInterface+".CancelScheduledShutdown", 0).Err; err != nil {
		t.Fatalf("CancelScheduledShutdown: %v", err)
	}
}

// evictionTimes records when each eviction was asked for.
func (f *scheduleFixture) evictionTimes() func() []time.Time {
	var mu sync.Mutex
	var times []time.Time
	f.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
		}
		return false, nil, nil
	})
	return func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), times...)
	}
}

// The follower drains drainTimeout before the deadline, with the
// wrapper's record for a schedule; when logind acts, the guard finds the
// marker and lets the shutdown go without a second drain.
func TestScheduleDrainedOnceThenGuardLetsGo(t *testing.T) {
	f := newScheduleFixture(t, false)
	evictions := f.evictionTimes()
	f.start(t) // the guard
	const drainTimeout = 2 * time.Second
	f.follow(t, drainTimeout)
	at := time.Now().Add(4 * time.Second).Truncate(time.Microsecond)
	f.schedule(t, "reboot", at)
	f.eventually(t, "the drain ahead of the schedule", func() bool { return len(evictions()) == 2 && f.pods(t) == 0 })
	for _, e := range evictions() {
		if e.Before(at.Add(-drainTimeout)) {
			t.Errorf("evicted %s before the deadline, earlier than drainTimeout (%s)", at.Sub(e), drainTimeout)
		}
	}
	own := drain.Owner(f.node(t))
	if own == nil || own.Action != "reboot" || own.When == nil || !own.When.Equal(at) || own.BootID != thisBoot {
		t.Fatalf("cordon record %+v", own)
	}
	f.eventually(t, "the drain's end", func() bool { return strings.Contains(f.out.String(), "drained ahead of the scheduled reboot") })
	// logind's time comes.
	f.eventually(t, "the schedule's timer", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.timers) > 0 })
	f.mu.Lock()
	f.timers[0] <- time.Now()
	f.mu.Unlock()
	f.started(t)
	if n := len(evictions()); n != 2 {
		t.Errorf("%d evictions in all, want 2 (drained twice?)", n)
	}
	if !strings.Contains(f.out.String(), "shutdown under way, already drained for by ") {
		t.Errorf("the guard did not take the marker; log:\n%s", f.out)
	}
	if n := drain.Owner(f.node(t)); n == nil {
		t.Error("the cordon went as logind acted")
	}
}

// Cancelled: gnsh's cordon for the schedule goes, an admin's stays.
func TestScheduleCancelUndoesOnlyGnshCordon(t *testing.T) {
	for _, admin := range []bool{false, true} {
		t.Run(fmt.Sprint("admin ", admin), func(t *testing.T) {
			f := newScheduleFixture(t, admin)
			f.follow(t, time.Minute)
			f.schedule(t, "poweroff", time.Now().Add(30*time.Second))
			f.eventually(t, "the drain ahead of the schedule", func() bool {
				return strings.Contains(f.out.String(), "drained ahead of the scheduled poweroff")
			})
			if !f.node(t).Spec.Unschedulable {
				t.Fatal("not cordoned")
			}
			if _, err := f.d.ReadMarker(); err != nil {
				t.Fatalf("no marker: %v", err)
			}
			f.cancelSchedule(t)
			f.eventually(t, "the undo", func() bool { return strings.Contains(f.out.String(), "was cancelled; ") })
			if n := f.node(t); n.Spec.Unschedulable != admin {
				t.Errorf("unschedulable %v after the cancel; log:\n%s", n.Spec.Unschedulable, f.out)
			}
			if _, err := f.d.ReadMarker(); !os.IsNotExist(err) {
				t.Errorf("marker after the cancel: %v", err)
			}
		})
	}
}

// A drain that fails (say, a PDB) is not tried again for that schedule;
// one that found the drain lock held is, at the next look.
func TestFollowerDrainOutcomes(t *testing.T) {
	f := startFollower(t, func(f *followerFixture) { f.drainErr = &drainer.HeldError{} })
	at := s0.Add(3 * time.Minute)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	eventually(t, f.out, "the lock-held line", func() bool {
		return strings.Contains(f.out.String(), "not draining ahead of the scheduled reboot yet: ")
	})
	f.idle(t)
	f.mu.Lock()
	f.drainErr = errors.New("blocked by a PodDisruptionBudget")
	f.mu.Unlock()
	f.to(t, f.clk.Now())
	eventually(t, f.out, "the failed drain", func() bool { return strings.Contains(f.out.String(), "ended: blocked by a PodDisruptionBudget") })
	f.idle(t)
	n, _ := f.calls()
	for i := 0; i < 3; i++ {
		f.to(t, f.clk.Now().Add(DefaultScheduleReread))
	}
	if d, _ := f.calls(); len(d) != len(n) || len(n) < 2 {
		t.Errorf("drains %d then %d; want one retry after the held lock and none after the failure; log:\n%s", len(n), len(d), f.out)
	}
	// Its cordon (if any) still goes with the schedule.
	f.set(t, LogindSchedule{})
	f.to(t, f.clk.Now())
	if _, u := f.calls(); len(u) != 1 {
		t.Errorf("undos %q", u)
	}
}

// A cordon of gnsh's for a schedule cancelled while no follower ran: the
// follower undoes it once when it starts and nothing is scheduled.
func TestFollowerUndoesAnOrphanedCordonAtStart(t *testing.T) {
	f := startFollower(t, func(f *followerFixture) { f.orphan = true })
	if _, u := f.calls(); len(u) != 1 || u[0] != orphanWhy {
		t.Fatalf("undos %q; log:\n%s", u, f.out)
	}
	if !strings.Contains(f.out.String(), "gnsh: agent: "+orphanWhy+"; gnsh's cordon for it undone\n") {
		t.Errorf("log:\n%s", f.out)
	}
	f.mu.Lock()
	f.orphan = true // as if another one stood: the follower looks once only
	f.mu.Unlock()
	f.to(t, s0.Add(2*DefaultScheduleReread))
	if _, u := f.calls(); len(u) != 1 {
		t.Errorf("undos %q", u)
	}
}

// Nothing of gnsh's stands: nothing is said.
func TestFollowerNoOrphanSaysNothing(t *testing.T) {
	f := startFollower(t, nil)
	f.to(t, s0.Add(DefaultScheduleReread))
	if _, u := f.calls(); len(u) != 0 || f.out.String() != "" {
		t.Errorf("undos %q; log:\n%s", u, f.out)
	}
}

// A schedule within the drain timeout stands at the start: the cordon may
// serve it, and the look waits until nothing is scheduled. Its cancel then
// undoes the cordon through the follower's own undo, once.
func TestFollowerOrphanLookWaitsWhileScheduled(t *testing.T) {
	at := s0.Add(4 * time.Minute)
	f := startFollower(t, func(f *followerFixture) {
		f.orphan, f.wrapperAt = true, at
		f.ls = LogindSchedule{Type: "reboot", USec: usecOf(at)}
	})
	f.to(t, s0.Add(time.Second))
	if d, u := f.calls(); len(d) != 0 || len(u) != 0 {
		t.Fatalf("drains %+v, undos %q while the schedule stands; log:\n%s", d, u, f.out)
	}
	f.set(t, LogindSchedule{})
	f.to(t, f.clk.Now())
	f.to(t, f.clk.Now().Add(DefaultScheduleReread))
	if _, u := f.calls(); len(u) != 1 || !strings.HasSuffix(u[0], " was cancelled") {
		t.Errorf("undos %q; log:\n%s", u, f.out)
	}
}

// A schedule beyond the drain timeout stands at the start (say, one made
// again for the night after a cancel): the cordon serves nothing until its
// drain, so it goes now; the follower drains for that schedule in time.
func TestFollowerOrphanUndoneBeforeAFarSchedule(t *testing.T) {
	at := s0.Add(time.Hour)
	f := startFollower(t, func(f *followerFixture) {
		f.orphan = true
		f.ls = LogindSchedule{Type: "reboot", USec: usecOf(at)}
	})
	if d, u := f.calls(); len(d) != 0 || len(u) != 1 || u[0] != orphanWhy {
		t.Fatalf("drains %+v, undos %q; log:\n%s", d, u, f.out)
	}
	f.to(t, at.Add(-followerTimeout))
	f.drained(t, 1)
}

// Under the drain lock, logind is asked again: a wrapper that drained for
// a new schedule (and scheduled it) just before keeps its cordon.
func TestFollowerOrphanLookAsksAgainUnderTheLock(t *testing.T) {
	at := s0.Add(3 * time.Minute)
	f := startFollower(t, func(f *followerFixture) {
		f.orphan = true
		f.onUndo = func() {
			f.mu.Lock()
			f.ls, f.wrapperAt = LogindSchedule{Type: "reboot", USec: usecOf(at)}, at
			f.mu.Unlock()
		}
	})
	f.to(t, s0.Add(time.Second))
	if d, u := f.calls(); len(d) != 0 || len(u) != 0 {
		t.Errorf("drains %+v, undos %q; log:\n%s", d, u, f.out)
	}
}

// The drain lock held (the uncordon after boot, a wrapper's drain): the
// next look tries again. An API server that cannot be reached: one line,
// and again a Reread later.
func TestFollowerOrphanLookRetries(t *testing.T) {
	f := startFollower(t, func(f *followerFixture) { f.orphan, f.undoErr = true, &drainer.HeldError{} })
	f.mu.Lock()
	f.undoErr = errors.New("API server unreachable")
	f.mu.Unlock()
	f.to(t, s0.Add(DefaultSchedulePoll))
	f.to(t, f.clk.Now().Add(DefaultSchedulePoll))
	const line = "cannot check for gnsh's cordon of a cancelled scheduled shutdown (API server unreachable); trying again every 1m0s\n"
	if n := strings.Count(f.out.String(), line); n != 1 {
		t.Fatalf("%d failure lines; log:\n%s", n, f.out)
	}
	f.mu.Lock()
	f.undoErr = nil
	f.mu.Unlock()
	f.to(t, f.clk.Now().Add(DefaultSchedulePoll))
	if _, u := f.calls(); len(u) != 0 {
		t.Fatalf("tried again before a Reread: undos %q", u)
	}
	f.to(t, f.clk.Now().Add(DefaultScheduleReread))
	if _, u := f.calls(); len(u) != 1 || u[0] != orphanWhy {
		t.Errorf("undos %q; log:\n%s", u, f.out)
	}
}

// The agent was stopped (a package upgrade restarting gnsh.service, say)
// when the schedule it had drained for was cancelled without the wrapper:
// started again, it finds gnsh's cordon for a schedule of this boot with
// nothing scheduled and undoes it; an admin's cordon stays.
func TestScheduleCancelledWhileStoppedUndoneAtStart(t *testing.T) {
	for _, admin := range []bool{false, true} {
		t.Run(fmt.Sprint("admin ", admin), func(t *testing.T) {
			f := newScheduleFixture(t, admin)
			stop := f.follow(t, time.Minute)
			f.schedule(t, "reboot", time.Now().Add(30*time.Second))
			f.eventually(t, "the drain ahead of the schedule", func() bool {
				return strings.Contains(f.out.String(), "drained ahead of the scheduled reboot")
			})
			stop()
			f.cancelSchedule(t)
			gets := func() int { return f.cs.Requests("get", "nodes") }
			before := gets()
			f.follow(t, time.Minute)
			if admin {
				// Nothing of gnsh's to undo: the look reads the Node and
				// says nothing.
				f.eventually(t, "the look at the Node", func() bool { return gets() > before })
				if n := f.node(t); !n.Spec.Unschedulable || strings.Contains(f.out.String(), orphanWhy) {
					t.Fatalf("unschedulable %v; log:\n%s", n.Spec.Unschedulable, f.out)
				}
				return
			}
			f.eventually(t, "the undo", func() bool { return strings.Contains(f.out.String(), orphanWhy+"; gnsh's cordon for it undone") })
			if n := f.node(t); n.Spec.Unschedulable || drain.Owner(n) != nil {
				t.Errorf("still cordoned: %v; log:\n%s", n.Annotations, f.out)
			}
			if _, err := f.d.ReadMarker(); !os.IsNotExist(err) {
				t.Errorf("marker: %v", err)
			}
		})
	}
}

// The undo for a cancelled schedule finds a shutdown relying on the cordon
// (a reboot typed meanwhile, prepared by logind): the cordon stays, with
// one line, and the undo is not tried again.
func TestFollowerUndoLeavesCordonForShutdown(t *testing.T) {
	f, _ := startDrainedAhead(t)
	f.mu.Lock()
	f.undoErr = fmt.Errorf("%w: systemd-logind is preparing for shutdown", drainer.ErrShutdownPending)
	f.mu.Unlock()
	f.set(t, LogindSchedule{})
	f.to(t, f.clk.Now())
	f.to(t, f.clk.Now().Add(DefaultSchedulePoll))
	f.to(t, f.clk.Now().Add(DefaultSchedulePoll))
	if n := strings.Count(f.out.String(), "but gnsh's cordon stays: a shutdown may rely on the cordon: systemd-logind is preparing for shutdown"); n != 1 {
		t.Errorf("%d lines saying the cordon stays; log:\n%s", n, f.out)
	}
}

// No reboot slot came for the schedule (a SlotRefusal): the follower
// cancels that schedule, trying again while a gnsh command holds the drain
// lock, and never drains for it; the same time scheduled again afterwards
// is a new request, drained for.
func TestFollowerCancelsWithoutASlot(t *testing.T) {
	refusal := &drainer.SlotRefusal{Err: errors.New("no reboot slot within 4m54s: cluster limit 1: node2")}
	f := startFollower(t, func(f *followerFixture) {
		f.drainErr = refusal
		f.cancelErr = &drainer.HeldError{Holder: &drainer.Holder{PID: 42, Action: "reboot"}}
	})
	at := s0.Add(3 * time.Minute)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	eventually(t, f.out, "the wait for the lock", func() bool {
		return strings.Contains(f.out.String(), "no reboot slot for the scheduled reboot for "+at.Local().Format("2006-01-02 15:04:05 MST")+"; waiting for the drain lock to cancel it")
	})
	f.idle(t)
	f.mu.Lock()
	f.cancelErr = nil
	f.mu.Unlock()
	f.to(t, f.clk.Now())
	eventually(t, f.out, "the cancel", func() bool { return strings.Contains(f.out.String(), "cancelled the scheduled reboot for ") })
	f.idle(t)
	f.mu.Lock()
	cancels, ls := f.cancels, f.ls
	f.mu.Unlock()
	want := fmt.Sprintf("reboot@%d: %s", usecOf(at), refusal.Err)
	if len(cancels) < 2 || cancels[len(cancels)-1] != want || ls.Type != "" {
		t.Fatalf("cancels %q, schedule %+v", cancels, ls)
	}
	if d, u := f.calls(); len(d) != 1 || len(u) != 0 {
		t.Errorf("drains %+v, undos %q", d, u)
	}
	if !strings.Contains(f.out.String(), "cancelled the scheduled reboot for "+at.Local().Format("2006-01-02 15:04:05 MST")+": "+refusal.Err.Error()+
		"; schedule it again later, or free a slot with 'gnsh slots release --node NODE'\n") {
		t.Errorf("log:\n%s", f.out)
	}
	// The same time again, a slot free now: drained for.
	f.mu.Lock()
	f.drainErr = nil
	f.mu.Unlock()
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, f.clk.Now())
	eventually(t, f.out, "the drain for the new request", func() bool {
		d, _ := f.calls()
		return len(d) == 2 && strings.Contains(f.out.String(), "drained ahead of the scheduled reboot")
	})
}

// A refusal whose schedule changed meanwhile cancels nothing; one whose
// time came first lets it go (the guard drains then).
func TestFollowerRefusalSchedulesChanged(t *testing.T) {
	f := startFollower(t, func(f *followerFixture) {
		f.drainErr = &drainer.SlotRefusal{Err: errors.New("no reboot slot")}
		f.cancelErr = errors.New("logind: timeout")
	})
	at := s0.Add(3 * time.Minute)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	eventually(t, f.out, "the failed cancel", func() bool {
		return strings.Count(f.out.String(), "cancelling it failed: logind: timeout; trying again until its time") == 1
	})
	f.idle(t)
	f.to(t, at.Add(time.Second))
	eventually(t, f.out, "the give-up", func() bool {
		return strings.Contains(f.out.String(), "could not be cancelled before its time; it goes ahead")
	})
	if strings.Count(f.out.String(), "cancelling it failed") != 1 {
		t.Errorf("the same failure logged again:\n%s", f.out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.uncancel) != 1 || f.uncancel[0] != "reboot: no reboot slot" {
		t.Errorf("Uncancelled heard %q", f.uncancel)
	}
}

// Preempt stops a drain ahead of a schedule (here waiting, as for a
// reboot slot, until its context ends) and returns once it has ended.
func TestFollowerPreempt(t *testing.T) {
	clk := clocktesting.NewFakeClock(s0)
	at := s0.Add(3 * time.Minute)
	started, ended := make(chan struct{}), make(chan struct{})
	var drains atomic.Int32
	fl := &ScheduleFollower{
		Read: func(context.Context) (LogindSchedule, error) {
			return LogindSchedule{Type: "reboot", USec: usecOf(at)}, nil
		},
		File: filepath.Join(t.TempDir(), "scheduled"), DrainTimeout: followerTimeout,
		Drain: func(ctx context.Context, _ string, _ time.Time, _ time.Duration) error {
			if drains.Add(1) > 1 {
				return nil
			}
			close(started)
			<-ctx.Done()
			time.Sleep(50 * time.Millisecond) // its withdrawal
			close(ended)
			return ctx.Err()
		},
		Undo:  func(context.Context, string, func(context.Context) bool) (bool, error) { return false, nil },
		Out:   &syncBuffer{},
		Clock: clk,
	}
	if fl.Preempt(context.Background()) {
		t.Fatal("Preempt with no drain running")
	}
	fl.Resume()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = fl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no drain started")
	}
	if !fl.Preempt(context.Background()) {
		t.Fatal("Preempt found no drain")
	}
	select {
	case <-ended:
	default:
		t.Fatal("Preempt returned before the drain ended")
	}
	// Paused: no drain starts again, however often it looks (the
	// shutdown under way is the guard's), until Resume.
	for i := 0; i < 5; i++ {
		clk.Step(DefaultSchedulePoll)
		time.Sleep(10 * time.Millisecond)
	}
	if n := drains.Load(); n != 1 {
		t.Fatalf("%d drains started while paused", n)
	}
	fl.Resume()
	for end := time.Now().Add(20 * time.Second); drains.Load() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no drain again after Resume")
		}
		clk.Step(DefaultSchedulePoll)
	}
}

// A schedule made with --no-drain: the follower neither drains for it nor
// asks a slot (no cancel either).
func TestFollowerNoDrainNoted(t *testing.T) {
	at := s0.Add(3 * time.Minute)
	f := startFollower(t, func(f *followerFixture) {
		f.noDrainAt = at
		f.drainErr = &drainer.SlotRefusal{Err: errors.New("no reboot slot")}
	})
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	f.to(t, at.Add(-time.Minute))
	if d, _ := f.calls(); len(d) != 0 {
		t.Errorf("drained for a --no-drain schedule: %+v", d)
	}
	if strings.Count(f.out.String(), "with --no-drain: not draining for it") != 1 {
		t.Errorf("log:\n%s", f.out)
	}
}

// A drain that finds the drain lock held is tried again at the next look,
// not at once (no busy loop while a wrapper holds it), with one line.
func TestFollowerLockHeldNoSpin(t *testing.T) {
	f := startFollower(t, func(f *followerFixture) { f.drainErr = &drainer.HeldError{} })
	at := s0.Add(3 * time.Minute)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	time.Sleep(200 * time.Millisecond) // the clock stands still
	if d, _ := f.calls(); len(d) > 2 {
		t.Fatalf("%d drains with the clock standing still", len(d))
	}
	for i := 0; i < 3; i++ {
		f.to(t, f.clk.Now())
	}
	if n := strings.Count(f.out.String(), "not draining ahead of the scheduled reboot yet"); n != 1 {
		t.Errorf("%d lock-held lines:\n%s", n, f.out)
	}
}

// The follower's budget ends with no drain ahead of the schedule (the
// drain lock held by another gnsh until the schedule was too near): its
// reboot slot is asked for at once, and without one the schedule is
// cancelled; it used to go ahead with no slot, no cordon and no Event.
// With a slot (or none needed) the guard drains when logind acts.
func TestFollowerTooNearWithoutASlotCancels(t *testing.T) {
	refusal := &drainer.SlotRefusal{Err: errors.New("no reboot slot within 0s: cluster limit 1: node2")}
	f := startFollower(t, func(f *followerFixture) {
		f.drainErr = &drainer.HeldError{Holder: &drainer.Holder{PID: 42, Action: "reboot"}}
		f.slotErr = refusal
	})
	at := s0.Add(3 * time.Minute)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	f.to(t, at.Add(-2*time.Second)) // within the margin: too near
	eventually(t, f.out, "the cancel", func() bool { return strings.Contains(f.out.String(), "cancelled the scheduled reboot for ") })
	f.mu.Lock()
	asked, cancels, ls := f.slotAsked, f.cancels, f.ls
	f.mu.Unlock()
	if len(asked) != 1 || asked[0] != fmt.Sprintf("reboot@%d", usecOf(at)) || len(cancels) != 1 || ls.Type != "" {
		t.Fatalf("slot asked %q, cancels %q, schedule %+v\n%s", asked, cancels, ls, f.out)
	}
	if strings.Contains(f.out.String(), "too near to drain ahead of it") {
		t.Errorf("log:\n%s", f.out)
	}

	// A slot (or none needed): it goes ahead, the guard drains then.
	f = startFollower(t, nil)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, at.Add(-2*time.Second))
	eventually(t, f.out, "the too-near line", func() bool { return strings.Contains(f.out.String(), "too near to drain ahead of it") })
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.slotAsked) != 1 || len(f.cancels) != 0 {
		t.Errorf("slot asked %q, cancels %q", f.slotAsked, f.cancels)
	}
}

// A schedule too near whose cancel cannot be made before its time gets
// the GnshScheduleNotCancelled Event (Uncancelled).
func TestFollowerTooNearUncancelled(t *testing.T) {
	f := startFollower(t, func(f *followerFixture) {
		f.slotErr = &drainer.SlotRefusal{Err: errors.New("reboot slots: API server unreachable"), Required: true}
		f.cancelErr = errors.New("logind: timeout")
	})
	at := s0.Add(3 * time.Minute)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, at.Add(-2*time.Second))
	f.to(t, at.Add(time.Second))
	eventually(t, f.out, "the give-up", func() bool {
		return strings.Contains(f.out.String(), "could not be cancelled before its time; it goes ahead")
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.uncancel) != 1 {
		t.Errorf("Uncancelled heard %q", f.uncancel)
	}
}
