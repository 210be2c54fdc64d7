package logindtest_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

// waitCtx bounds a test's waits on the fake; reaching it means the test
// failed, it is never what a test waits for.
func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// inhibit takes a lock over raw godbus and returns its descriptor.
func (f fixture) inhibit(t *testing.T, what, who, why, mode string) *os.File {
	t.Helper()
	var fd dbus.UnixFD
	if err := f.call("Inhibit", what, who, why, mode).Store(&fd); err != nil {
		t.Fatalf("Inhibit(%s, %s): %v", what, mode, err)
	}
	file := os.NewFile(uintptr(fd), "inhibitor")
	t.Cleanup(func() { _ = file.Close() })
	return file
}

func (f fixture) listInhibitors(t *testing.T) []logindtest.Inhibitor {
	t.Helper()
	var got []logindtest.Inhibitor
	if err := f.call("ListInhibitors").Store(&got); err != nil {
		t.Fatal(err)
	}
	return got
}

// wait waits until cond holds for the fake's state.
func (f fixture) wait(t *testing.T, what string, cond func(logindtest.State) bool) logindtest.State {
	t.Helper()
	st, err := f.logind.Wait(waitCtx(t), cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v; state %+v", what, err, st)
	}
	return st
}

func released(who string) func(logindtest.State) bool {
	return func(st logindtest.State) bool {
		return slices.ContainsFunc(st.Released, func(i logindtest.Inhibitor) bool { return i.Who == who })
	}
}

func TestInhibitLockLifetime(t *testing.T) {
	for _, v := range []int{219, 247, 252} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			static := logindtest.Inhibitor{What: "sleep", Who: "static", Why: "x", Mode: "block", UID: 7, PID: 8}
			f := start(t, logindtest.Options{Version: v, Inhibitors: []logindtest.Inhibitor{static}})
			lock := f.inhibit(t, "shutdown", "gnsh", "drain first", "delay")

			want := logindtest.Inhibitor{What: "shutdown", Who: "gnsh", Why: "drain first", Mode: "delay",
				UID: uint32(os.Geteuid()), PID: uint32(os.Getpid())}
			if got := f.listInhibitors(t); !slices.Equal(got, []logindtest.Inhibitor{static, want}) {
				t.Fatalf("ListInhibitors = %+v, want static then %+v", got, want)
			}
			if f.prop(t, "DelayInhibited") != "shutdown" || f.prop(t, "BlockInhibited") != "sleep" {
				t.Errorf("Delay/BlockInhibited = %v/%v", f.prop(t, "DelayInhibited"), f.prop(t, "BlockInhibited"))
			}
			if c := f.logind.Calls(); c[0].Member != "Inhibit" || c[0].Signature != "ssss" || c[0].Error != "" {
				t.Errorf("recorded %+v", c[0])
			}

			if err := lock.Close(); err != nil {
				t.Fatal(err)
			}
			st := f.wait(t, "the lock's release", released("gnsh"))
			if !slices.Equal(st.Released, []logindtest.Inhibitor{want}) || !slices.Equal(st.Inhibitors, []logindtest.Inhibitor{static}) {
				t.Errorf("after close: released %+v, held %+v", st.Released, st.Inhibitors)
			}
			if got := f.listInhibitors(t); !slices.Equal(got, []logindtest.Inhibitor{static}) {
				t.Errorf("ListInhibitors after close = %+v", got)
			}
			if f.prop(t, "DelayInhibited") != "" {
				t.Errorf("DelayInhibited after close = %v", f.prop(t, "DelayInhibited"))
			}
		})
	}
}

// A lock is held while any copy of the descriptor is open, as with
// logind's FIFO: closing one of two copies keeps it.
func TestInhibitLockHeldByEveryCopy(t *testing.T) {
	f := start(t, logindtest.Options{})
	a := f.inhibit(t, "shutdown", "first", "", "delay")
	f.inhibit(t, "shutdown:sleep", "second", "", "block") // a later lock, still held at the end
	dup, err := dupFile(a)
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	// The second lock was granted after the first: if closing one copy had
	// released the first, the release of "marker" would not be the first
	// one recorded.
	marker := f.inhibit(t, "idle", "marker", "", "block")
	_ = marker.Close()
	st := f.wait(t, "marker's release", released("marker"))
	if len(st.Released) != 1 || len(st.Inhibitors) != 2 {
		t.Fatalf("closing one copy released a lock: released %+v, held %+v", st.Released, st.Inhibitors)
	}
	_ = dup.Close()
	f.wait(t, "first's release", released("first"))
}

func TestInhibitValidation(t *testing.T) {
	for _, tt := range []struct {
		version          int
		what, mode, text string // text "" means accepted
	}{
		{252, "shutdown:sleep", "block", ""},
		{252, "handle-lid-switch:idle", "block", ""},
		{252, "", "block", "Invalid what specification "},
		{252, "shutdown:reboot", "delay", "Invalid what specification shutdown:reboot"},
		{252, "shutdown", "weak", "Invalid mode specification weak"},
		{252, "shutdown", "block-weak", "Invalid mode specification block-weak"},
		{257, "shutdown", "block-weak", ""},
		{252, "shutdown:idle", "delay", "Delay inhibitors only supported for shutdown and sleep"},
		{247, "handle-reboot-key", "block", "Invalid what specification handle-reboot-key"},
		{252, "handle-reboot-key", "block", ""},
	} {
		t.Run(fmt.Sprintf("%d/%s/%s", tt.version, tt.what, tt.mode), func(t *testing.T) {
			f := start(t, logindtest.Options{Version: tt.version})
			var fd dbus.UnixFD
			err := f.call("Inhibit", tt.what, "w", "y", tt.mode).Store(&fd)
			if tt.text == "" {
				if err != nil {
					t.Fatal(err)
				}
				_ = os.NewFile(uintptr(fd), "").Close()
				return
			}
			wantErr(t, err, logindtest.ErrorInvalidArgs, tt.text)
			if st := f.logind.State(); len(st.Inhibitors) != 0 {
				t.Errorf("refused lock registered: %+v", st.Inhibitors)
			}
		})
	}
}

// Locks taken with Inhibit count for block enforcement like static ones.
func TestInhibitBlockLockEnforced(t *testing.T) {
	f := start(t, logindtest.Options{Version: 257})
	lock := f.inhibit(t, "shutdown", "backup", "copying", "block")
	wantErr(t, f.call("PowerOff", false).Err, logindtest.ErrorAccessDenied, "Access denied due to active block inhibitor")
	_ = lock.Close()
	f.wait(t, "release", released("backup"))
	if err := f.call("PowerOff", false).Err; err != nil {
		t.Fatal(err)
	}
}

// timers replaces Options.After: the test sees each timer armed and fires
// it itself.
type timers struct{ armed chan timer }

type timer struct {
	d    time.Duration
	fire chan time.Time
}

func newTimers() *timers { return &timers{armed: make(chan timer, 10)} }

func (ts *timers) after(d time.Duration) <-chan time.Time {
	tm := timer{d, make(chan time.Time, 1)}
	ts.armed <- tm
	return tm.fire
}

func (ts *timers) next(t *testing.T) timer {
	t.Helper()
	select {
	case tm := <-ts.armed:
		return tm
	case <-waitCtx(t).Done():
		t.Fatal("no timer armed")
		return timer{}
	}
}

func started(st logindtest.State) bool { return st.ShutdownStarted }

func TestWaitForDelayLocksReleased(t *testing.T) {
	for _, v := range []int{247, 257} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			ts := newTimers()
			f := start(t, logindtest.Options{Version: v, WaitForDelayLocks: true, After: ts.after, InhibitDelayMax: 30 * time.Second})
			ch := signals(t, f.conn)
			kubelet := f.inhibit(t, "shutdown", "kubelet", "k", "delay")
			gnsh := f.inhibit(t, "shutdown", "gnsh", "g", "delay")

			if err := f.call("Reboot", false).Err; err != nil {
				t.Fatal(err)
			}
			if v >= 255 {
				nextSignal(t, ch) // PrepareForShutdownWithMetadata
			}
			if s := nextSignal(t, ch); s.Name != logindtest.LogindInterface+".PrepareForShutdown" || s.Body[0] != true {
				t.Fatalf("signal %+v", s)
			}
			if tm := ts.next(t); tm.d != 30*time.Second {
				t.Errorf("delay timer armed for %v, want InhibitDelayMax", tm.d)
			}
			wantErr(t, f.call("Inhibit", "shutdown", "late", "", "delay").Err, logindtest.ErrorOperationInProgress,
				"The operation inhibition has been requested for is already running")
			if err := f.call("Inhibit", "sleep", "other", "", "delay").Err; err != nil {
				t.Errorf("a sleep lock is still allowed: %v", err)
			}
			if st := f.logind.State(); st.ShutdownStarted || !st.PreparingForShutdown || st.Action != "reboot" {
				t.Fatalf("state while locks are held: %+v", st)
			}

			_ = gnsh.Close()
			f.wait(t, "gnsh's release", released("gnsh"))
			if f.logind.State().ShutdownStarted {
				t.Fatal("shutdown started while kubelet's lock is held")
			}
			_ = kubelet.Close()
			st := f.wait(t, "shutdown start", started)
			if st.DelayTimedOut || len(st.Released) != 2 || st.ShutdownStartedAt.IsZero() {
				t.Errorf("state %+v", st)
			}
		})
	}
}

func TestWaitForDelayLocksTimeout(t *testing.T) {
	ts := newTimers()
	kubelet := logindtest.Inhibitor{What: "shutdown", Who: "kubelet", Why: "k", Mode: "delay"}
	f := start(t, logindtest.Options{WaitForDelayLocks: true, After: ts.after, Inhibitors: []logindtest.Inhibitor{kubelet}})
	f.logind.SetInhibitDelayMax(2 * time.Second)
	if err := f.call("PowerOffWithFlags", uint64(0)).Err; err != nil {
		t.Fatal(err)
	}
	tm := ts.next(t)
	if tm.d != 2*time.Second {
		t.Errorf("timer %v, want 2s", tm.d)
	}
	if f.logind.State().ShutdownStarted {
		t.Fatal("started before the timer fired")
	}
	tm.fire <- time.Now()
	if st := f.wait(t, "shutdown start", started); !st.DelayTimedOut || st.Action != "poweroff" {
		t.Errorf("state %+v", st)
	}
}

func TestWaitForDelayLocksNoneHeldAndCancel(t *testing.T) {
	f := start(t, logindtest.Options{Version: 252, WaitForDelayLocks: true})
	ch := signals(t, f.conn)
	f.inhibit(t, "shutdown", "blocker", "", "block") // root ignores it (no ROOT_CHECK_INHIBITORS)
	if err := f.call("HaltWithFlags", uint64(0)).Err; err != nil {
		t.Fatal(err)
	}
	if st := f.logind.State(); !st.ShutdownStarted || st.DelayTimedOut { // no delay lock: at once
		t.Fatalf("state %+v", st)
	}
	nextSignal(t, ch)

	if !f.logind.CancelShutdown() {
		t.Fatal("CancelShutdown found nothing in progress")
	}
	if s := nextSignal(t, ch); s.Body[0] != false {
		t.Fatalf("signal %+v, want PrepareForShutdown(false)", s)
	}
	if st := f.logind.State(); st.ShutdownStarted || st.PreparingForShutdown || st.Action != "" || st.ScheduledType != "" {
		t.Errorf("state after cancel %+v", st)
	}
	f.inhibit(t, "shutdown", "again", "", "delay") // may be taken again
	if f.logind.CancelShutdown() {
		t.Error("second CancelShutdown reported a shutdown")
	}
}

func TestScheduledShutdownFires(t *testing.T) {
	now := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	at := uint64(now.Add(90 * time.Second).UnixMicro())
	for _, tt := range []struct {
		name   string
		typ    string
		cancel bool
	}{
		{"reboot", "reboot", false},
		{"dry run", "dry-poweroff", false},
		{"cancelled", "halt", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTimers()
			f := start(t, logindtest.Options{Version: 252, WaitForDelayLocks: true, After: ts.after,
				Now: func() time.Time { return now }})
			ch := signals(t, f.conn)
			if err := f.call("ScheduleShutdown", tt.typ, at).Err; err != nil {
				t.Fatal(err)
			}
			tm := ts.next(t)
			if tm.d != 90*time.Second {
				t.Errorf("schedule timer %v, want 90s", tm.d)
			}
			if tt.cancel {
				if err := f.call("CancelScheduledShutdown").Err; err != nil {
					t.Fatal(err)
				}
			}
			tm.fire <- now
			switch {
			case tt.cancel:
				// Nothing may happen; a marker signal shows that no
				// PrepareForShutdown came before it.
				f.logind.EmitPrepareForShutdown(false)
			case tt.typ == "dry-poweroff":
				f.wait(t, "the schedule to clear", func(st logindtest.State) bool { return st.ScheduledType == "" })
				f.logind.EmitPrepareForShutdown(false)
			default:
				st := f.wait(t, "shutdown start", started)
				if st.Action != "reboot" || st.ShutdownStartedAt != now {
					t.Errorf("state %+v", st)
				}
			}
			want := !tt.cancel && tt.typ == "reboot"
			if s := nextSignal(t, ch); s.Body[0] != want {
				t.Errorf("first signal %v, want PrepareForShutdown(%v)", s.Body, want)
			}
		})
	}
}

// A schedule too far out for time.Time, or in the past, is handled as
// logind does: never, or at once.
func TestScheduledShutdownExtremes(t *testing.T) {
	ts := newTimers()
	f := start(t, logindtest.Options{WaitForDelayLocks: true, After: ts.after})
	if err := f.call("ScheduleShutdown", "reboot", uint64(1<<63)).Err; err != nil {
		t.Fatal(err)
	}
	if err := f.call("ScheduleShutdown", "poweroff", uint64(1)).Err; err != nil {
		t.Fatal(err)
	}
	if tm := ts.next(t); tm.d != 0 {
		t.Fatalf("timer %v: the far schedule armed one, or the past one is not immediate", tm.d)
	} else {
		tm.fire <- time.Now()
	}
	if st := f.wait(t, "shutdown start", started); st.Action != "poweroff" {
		t.Errorf("state %+v", st)
	}
}

func TestTestControls(t *testing.T) {
	f := start(t, logindtest.Options{Version: 257})
	ch := signals(t, f.conn)
	f.logind.SetPreparingForShutdown(true)
	f.logind.SetInhibitDelayMax(90 * time.Second)
	if f.prop(t, "PreparingForShutdown") != true || f.prop(t, "InhibitDelayMaxUSec") != uint64(90_000_000) {
		t.Errorf("properties %v %v", f.prop(t, "PreparingForShutdown"), f.prop(t, "InhibitDelayMaxUSec"))
	}
	f.logind.EmitPrepareForShutdown(true)
	if s := nextSignal(t, ch); s.Name != logindtest.LogindInterface+".PrepareForShutdownWithMetadata" {
		t.Errorf("first signal %s", s.Name)
	}
	if s := nextSignal(t, ch); s.Name != logindtest.LogindInterface+".PrepareForShutdown" || s.Body[0] != true {
		t.Errorf("second signal %+v", s)
	}
	if st := f.logind.State(); st.Action != "" || !st.PreparingForShutdown {
		t.Errorf("EmitPrepareForShutdown changed the state: %+v", st)
	}
}

func TestHoldReplies(t *testing.T) {
	f := start(t, logindtest.Options{})
	release := f.logind.HoldReplies("CanReboot")
	call := f.obj().Go(logindtest.LogindInterface+".CanReboot", 0, nil)
	// The call has been handled, only its reply waits.
	f.wait(t, "the call", func(logindtest.State) bool { return len(f.logind.Calls()) == 1 })
	if err := f.call("CanPowerOff").Err; err != nil {
		t.Fatalf("other members are not held: %v", err)
	}
	select {
	case <-call.Done:
		t.Fatal("held reply arrived")
	default:
	}
	release()
	release()
	if c := <-call.Done; c.Err != nil || c.Body[0] != "yes" {
		t.Fatalf("released reply %+v", c)
	}
}
