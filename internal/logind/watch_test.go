package logind

import (
	"errors"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

func watch(t *testing.T, c *Conn) *ShutdownWatch {
	t.Helper()
	w, err := c.Logind().WatchPrepareForShutdown(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(testCtx(t)) })
	return w
}

// next returns the next value, failing if the watch ended or nothing came.
func next(t *testing.T, w *ShutdownWatch) bool {
	t.Helper()
	select {
	case v, ok := <-w.C():
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return v
	case <-testCtx(t).Done():
		t.Fatal("no PrepareForShutdown")
		return false
	}
}

// ended waits for C to close and returns Err.
func ended(t *testing.T, w *ShutdownWatch) error {
	t.Helper()
	for {
		select {
		case _, ok := <-w.C():
			if !ok {
				return w.Err()
			}
		case <-testCtx(t).Done():
			t.Fatal("watch did not end")
			return nil
		}
	}
}

func TestWatchOrder(t *testing.T) {
	_, ld, c := dialFake(t, logindtest.Options{Version: 257}) // 257 also sends ...WithMetadata: ignored
	w := watch(t, c)
	seq := []bool{true, false, true, true, false}
	for _, v := range seq {
		ld.EmitPrepareForShutdown(v)
	}
	for i, want := range seq {
		if got := next(t, w); got != want {
			t.Fatalf("value %d = %v, want %v (sent %v)", i, got, want, seq)
		}
	}
}

// The agent's cycle against a fake that waits for delay locks as logind
// does: lock, PrepareForShutdown(true), release, shutdown started before
// the delay ran out; the shutdown fails, PrepareForShutdown(false), the
// lock may be taken again.
func TestWatchAgentCycle(t *testing.T) {
	for _, v := range []int{247, 252} {
		t.Run(map[int]string{247: "bullseye", 252: "bookworm"}[v], func(t *testing.T) {
			_, ld, c := dialFake(t, logindtest.Options{Version: v, WaitForDelayLocks: true,
				After: func(time.Duration) <-chan time.Time { return nil }}) // the delay never runs out
			l := c.Logind()
			ctx := testCtx(t)
			w := watch(t, c)
			lock, err := l.Inhibit(ctx, "shutdown", "gnsh", "drain", "delay")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Shutdown(ctx, "Reboot", false); err != nil { // the fake's Reboot: records only
				t.Fatal(err)
			}
			if !next(t, w) {
				t.Fatal("first value false")
			}
			if p, err := l.PreparingForShutdown(ctx); err != nil || !p {
				t.Fatalf("PreparingForShutdown = %v, %v", p, err)
			}
			if ld.State().ShutdownStarted {
				t.Fatal("shutdown started while the lock is held")
			}
			_ = lock.Close()
			if st := waitState(t, ld, "shutdown start", func(s logindtest.State) bool { return s.ShutdownStarted }); st.DelayTimedOut {
				t.Errorf("delay timed out: %+v", st)
			}

			ld.CancelShutdown()
			if next(t, w) {
				t.Fatal("second value true")
			}
			lock, err = l.Inhibit(ctx, "shutdown", "gnsh", "drain", "delay")
			if err != nil {
				t.Fatalf("lock after PrepareForShutdown(false): %v", err)
			}
			lock.Close()
		})
	}
}

// A PrepareForShutdown from anyone but logind is no shutdown: neither the
// match rule nor the watch lets it through, even when another, broader
// rule on the same connection (kubelet's has no sender) brings it in.
func TestWatchIgnoresForgedSignals(t *testing.T) {
	for _, broad := range []bool{false, true} {
		t.Run(map[bool]string{false: "own rule", true: "with a broad rule"}[broad], func(t *testing.T) {
			bus, ld, c := dialFake(t, logindtest.Options{})
			w := watch(t, c)
			// Everything dbus-daemon routes to this connection.
			routed := make(chan *dbus.Signal, 100)
			c.conn.Signal(routed)
			if broad {
				if err := c.conn.AddMatchSignal(dbus.WithMatchInterface(Login1Manager),
					dbus.WithMatchMember("PrepareForShutdown"), dbus.WithMatchObjectPath(Login1Path)); err != nil {
					t.Fatal(err)
				}
			}
			forger := bus.Connect(t)
			if err := forger.Emit(Login1Path, Login1Manager+".PrepareForShutdown", true); err != nil {
				t.Fatal(err)
			}
			// A round trip: dbus-daemon has routed the forged signal before
			// it answers, so it is queued ahead of logind's.
			var id string
			if err := forger.BusObject().Call("org.freedesktop.DBus.GetId", 0).Store(&id); err != nil {
				t.Fatal(err)
			}
			ld.EmitPrepareForShutdown(false)
			if next(t, w) {
				t.Fatal("forged PrepareForShutdown(true) delivered")
			}
			if broad {
				return
			}
			for s := range routed {
				if s.Name == Login1Manager+".PrepareForShutdown" {
					if s.Body[0] != false {
						t.Fatal("the match rule let the forged signal through to the connection")
					}
					break
				}
			}
		})
	}
}

// The watch follows org.freedesktop.login1 to whoever owns it: none at the
// start, then a logind, then a restarted one with a new unique name.
func TestWatchFollowsOwner(t *testing.T) {
	bus := logindtest.StartBus(t)
	c := dial(t, bus)
	w := watch(t, c)
	first := bus.StartLogind(t, logindtest.Options{})
	first.EmitPrepareForShutdown(true)
	if !next(t, w) {
		t.Fatal("from the first logind: false")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := bus.StartLogind(t, logindtest.Options{})
	second.EmitPrepareForShutdown(false)
	if next(t, w) {
		t.Fatal("from the second logind: true")
	}
}

func TestWatchStop(t *testing.T) {
	_, ld, c := dialFake(t, logindtest.Options{})
	w := watch(t, c)
	ld.EmitPrepareForShutdown(true)
	if !next(t, w) {
		t.Fatal("false")
	}
	if err := w.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := ended(t, w); err != nil {
		t.Fatalf("Err after Stop = %v", err)
	}
	if err := w.Stop(testCtx(t)); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	// The connection is still fine, and a new watch works.
	w2 := watch(t, c)
	ld.EmitPrepareForShutdown(false)
	if next(t, w2) {
		t.Fatal("new watch: true")
	}
}

// The agent learns that the bus is gone from the watch and from Conn.Done.
func TestWatchDisconnected(t *testing.T) {
	bus, _, c := dialFake(t, logindtest.Options{})
	w := watch(t, c)
	if err := bus.Close(); err != nil { // dbus-daemon exits
		t.Fatal(err)
	}
	if err := ended(t, w); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Err = %v, want ErrDisconnected", err)
	}
	select {
	case <-c.Done():
	case <-testCtx(t).Done():
		t.Fatal("Conn.Done not closed")
	}
	if err := w.Stop(testCtx(t)); err != nil {
		t.Errorf("Stop on a dead connection: %v", err)
	}
	if _, err := c.Logind().WatchPrepareForShutdown(testCtx(t)); err == nil {
		t.Error("a new watch on a dead connection succeeded")
	}
}
