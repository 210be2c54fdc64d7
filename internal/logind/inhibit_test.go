package logind

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

// testCtx bounds a test's calls and waits; reaching it means the test
// failed, it is never what a test waits for.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dialFake starts a private bus with a fake logind and dials it.
func dialFake(t *testing.T, o logindtest.Options) (*logindtest.Bus, *logindtest.Logind, *Conn) {
	t.Helper()
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, o)
	return bus, ld, dial(t, bus)
}

func dial(t *testing.T, bus *logindtest.Bus) *Conn {
	t.Helper()
	c, err := Dial(testCtx(t), bus.Address(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitState(t *testing.T, ld *logindtest.Logind, what string, cond func(logindtest.State) bool) logindtest.State {
	t.Helper()
	st, err := ld.Wait(testCtx(t), cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v; state %+v", what, err, st)
	}
	return st
}

func releasedBy(who string) func(logindtest.State) bool {
	return func(st logindtest.State) bool {
		return slices.ContainsFunc(st.Released, func(i logindtest.Inhibitor) bool { return i.Who == who })
	}
}

func TestInhibit(t *testing.T) {
	for _, v := range []int{247, 252} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			kubelet := logindtest.Inhibitor{What: "shutdown", Who: KubeletWho, Why: KubeletWhy, Mode: "delay", UID: 0, PID: 1}
			_, ld, c := dialFake(t, logindtest.Options{Version: v, Inhibitors: []logindtest.Inhibitor{kubelet}})
			if !c.SupportsUnixFDs() {
				t.Fatal("Dial did not negotiate UNIX fd passing")
			}
			l := c.Logind()
			ctx := testCtx(t)
			f, err := l.Inhibit(ctx, "shutdown", "gnsh", "drain before shutdown", "delay")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if cloexec, err := isCloseOnExec(f); err != nil || !cloexec {
				t.Errorf("lock descriptor close-on-exec = %v (%v): children would inherit the lock", cloexec, err)
			}

			list, err := l.ListInhibitors(ctx)
			if err != nil {
				t.Fatal(err)
			}
			mine := FindInhibitors(list, "shutdown", "delay", "gnsh")
			want := handoff.Inhibitor{What: "shutdown", Who: "gnsh", Why: "drain before shutdown", Mode: "delay",
				UID: uint32(os.Geteuid()), PID: uint32(os.Getpid())}
			if len(mine) != 1 || mine[0] != want {
				t.Fatalf("gnsh's lock in %+v = %+v, want %+v", list, mine, want)
			}
			if k := FindInhibitors(list, "shutdown", "delay", KubeletWho); len(k) != 1 || k[0].Why != KubeletWhy {
				t.Errorf("kubelet's lock not found in %+v", list)
			}

			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			waitState(t, ld, "the release", releasedBy("gnsh"))
			list, err = l.ListInhibitors(ctx)
			if err != nil || len(FindInhibitors(list, "shutdown", "", "gnsh")) != 0 || len(list) != 1 {
				t.Fatalf("after Close: %+v %v", list, err)
			}
		})
	}
}

func TestInhibitErrors(t *testing.T) {
	_, ld, c := dialFake(t, logindtest.Options{Version: 252})
	l := c.Logind()
	ctx := testCtx(t)
	var be *handoff.BusError
	_, err := l.Inhibit(ctx, "shutdown", "gnsh", "", "sometimes")
	if !errors.As(err, &be) || be.Name != handoff.ErrInvalidArgs || be.Message != "Invalid mode specification sometimes" {
		t.Fatalf("bad mode: %v", err)
	}
	if err := l.ShutdownWithFlags(ctx, "Reboot", 0); err != nil {
		t.Fatal(err)
	}
	_, err = l.Inhibit(ctx, "shutdown", "gnsh", "", "delay")
	if !errors.As(err, &be) || be.Name != handoff.ErrOperationInProgress {
		t.Fatalf("Inhibit during a shutdown: %v", err)
	}
	ld.SetError("Inhibit", dbus.NewError(handoff.ErrAccessDenied, []any{"Access denied"}))
	if _, err := l.Inhibit(ctx, "sleep", "gnsh", "", "delay"); !errors.As(err, &be) || be.Name != handoff.ErrAccessDenied {
		t.Fatalf("injected error: %v", err)
	}
	if st := ld.State(); len(st.Inhibitors) != 0 {
		t.Errorf("refused locks registered: %+v", st.Inhibitors)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Inhibit(cancelled, "sleep", "gnsh", "", "delay"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

// Without fd passing the reply could not carry the lock: Inhibit must not
// even ask (logind would grant a lock nobody can release).
func TestInhibitNeedsUnixFDs(t *testing.T) {
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{})
	path := strings.TrimPrefix(strings.Split(bus.Address(), ",")[0], "unix:path=")
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// A plain io.ReadWriteCloser: godbus's generic transport, no fd passing.
	gc, err := dbus.NewConn(struct{ net.Conn }{nc})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if err := gc.Auth([]dbus.Auth{dbus.AuthExternal(fmt.Sprint(os.Getuid()))}); err != nil {
		t.Fatal(err)
	}
	if err := gc.Hello(); err != nil {
		t.Fatal(err)
	}
	c := &Conn{conn: gc}
	if c.SupportsUnixFDs() {
		t.Fatal("generic transport claims fd passing")
	}
	if _, err := c.Logind().Inhibit(testCtx(t), "shutdown", "gnsh", "", "delay"); !errors.Is(err, ErrNoUnixFDs) {
		t.Fatalf("err %v, want ErrNoUnixFDs", err)
	}
	if calls := ld.Calls(); len(calls) != 0 {
		t.Errorf("Inhibit reached logind: %+v", calls)
	}
	// The connection itself works.
	if _, err := c.Logind().ListInhibitors(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// A reply that comes after the caller gave up still carries a granted
// lock; it must be released, not leaked.
func TestInhibitLateReplyIsReleased(t *testing.T) {
	_, ld, c := dialFake(t, logindtest.Options{})
	release := ld.HoldReplies("Inhibit")
	defer release()
	ctx, cancel := context.WithCancel(testCtx(t))
	res := make(chan error, 1)
	go func() {
		f, err := c.Logind().Inhibit(ctx, "shutdown", "late", "", "delay")
		if f != nil {
			f.Close()
		}
		res <- err
	}()
	waitState(t, ld, "the lock to be granted", func(st logindtest.State) bool { return len(st.Inhibitors) == 1 })
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("Inhibit returned %v, want the context's error", err)
	}
	if len(ld.State().Released) != 0 {
		t.Fatal("released before the reply was sent")
	}
	release()
	waitState(t, ld, "the late lock's release", releasedBy("late"))
}

func TestProperties(t *testing.T) {
	_, ld, c := dialFake(t, logindtest.Options{Version: 252, InhibitDelayMax: 3 * time.Second})
	l := c.Logind()
	ctx := testCtx(t)
	if d, err := l.InhibitDelayMax(ctx); err != nil || d != 3*time.Second {
		t.Fatalf("InhibitDelayMax = %v, %v", d, err)
	}
	ld.SetInhibitDelayMax(90 * time.Second)
	if d, err := l.InhibitDelayMax(ctx); err != nil || d != 90*time.Second {
		t.Fatalf("InhibitDelayMax after change = %v, %v", d, err)
	}
	if p, err := l.PreparingForShutdown(ctx); err != nil || p {
		t.Fatalf("PreparingForShutdown = %v, %v", p, err)
	}
	if err := l.Shutdown(ctx, "PowerOff", false); err != nil {
		t.Fatal(err)
	}
	if p, err := l.PreparingForShutdown(ctx); err != nil || !p {
		t.Fatalf("PreparingForShutdown after PowerOff = %v, %v", p, err)
	}

	// v219 has no ScheduledShutdown: a bus error the agent can recognise.
	_, _, c219 := dialFake(t, logindtest.Options{Version: 219})
	_, _, err := c219.Logind().ScheduledShutdown(ctx)
	var be *handoff.BusError
	if !errors.As(err, &be) || be.Name != "org.freedesktop.DBus.Error.UnknownProperty" {
		t.Fatalf("v219 ScheduledShutdown: %v", err)
	}
	if d, err := c219.Logind().InhibitDelayMax(ctx); err != nil || d != 5*time.Second {
		t.Fatalf("v219 InhibitDelayMax = %v, %v", d, err)
	}
}

func TestScheduledTime(t *testing.T) {
	at := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	for usec, want := range map[uint64]time.Time{
		0:                          {},
		math.MaxUint64:             {},
		1 << 63:                    {},
		uint64(at.UnixMicro()):     at,
		uint64(math.MaxInt64):      time.UnixMicro(math.MaxInt64),
		uint64(at.UnixMicro() + 1): at.Add(time.Microsecond),
	} {
		got, ok := ScheduledTime(usec)
		if ok != !want.IsZero() || !got.Equal(want) {
			t.Errorf("ScheduledTime(%d) = %v, %v; want %v", usec, got, ok, want)
		}
	}
}

func TestFindInhibitors(t *testing.T) {
	list := []handoff.Inhibitor{
		{What: "shutdown:sleep", Who: "backup", Mode: "block"},
		{What: "shutdown", Who: KubeletWho, Mode: "delay"},
		{What: "sleep", Who: KubeletWho, Mode: "delay"},
		{What: "handle-power-key:shutdownx", Who: "x", Mode: "block"},
	}
	if got := FindInhibitors(list, "shutdown", "", ""); len(got) != 2 || got[0].Who != "backup" || got[1].Who != KubeletWho {
		t.Errorf("any shutdown lock: %+v", got)
	}
	if got := FindInhibitors(list, "shutdown", "delay", KubeletWho); len(got) != 1 || got[0].What != "shutdown" {
		t.Errorf("kubelet's delay lock: %+v", got)
	}
	if got := FindInhibitors(list, "idle", "", ""); got != nil {
		t.Errorf("idle: %+v", got)
	}
}
