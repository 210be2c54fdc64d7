package signals

import (
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fake replaces os/signal and kill(2): send delivers a signal as the
// runtime would while a mode is active, or "kills" the process otherwise.
type fake struct {
	mu      sync.Mutex
	ch      chan<- os.Signal
	active  bool
	raised  []syscall.Signal
	lines   []string
	resetCt int
}

func newFake() (*Handler, *fake) {
	f := &fake{}
	h := New(func(l string) { f.mu.Lock(); f.lines = append(f.lines, l); f.mu.Unlock() })
	h.notify = func(c chan<- os.Signal, _ ...os.Signal) { f.mu.Lock(); f.ch, f.active = c, true; f.mu.Unlock() }
	h.reset = func(...os.Signal) { f.mu.Lock(); f.active = false; f.resetCt++; f.mu.Unlock() }
	h.raise = func(s syscall.Signal) { f.mu.Lock(); f.raised = append(f.raised, s); f.mu.Unlock() }
	return h, f
}

// send delivers sig as the runtime would: to the handler while a mode is
// active (synchronously, as its loop would), else as the default action.
func (f *fake) send(t *testing.T, h *Handler, sig syscall.Signal) {
	t.Helper()
	f.mu.Lock()
	active := f.active
	if !active {
		f.raised = append(f.raised, sig)
	}
	f.mu.Unlock()
	if active {
		h.handle(sig)
	}
}

func (f *fake) said() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.lines, "\n")
}

// The real path: the runtime delivers to the channel, the loop acts.
func TestLoopDeliversToTheDrain(t *testing.T) {
	h, f := newFake()
	ctx, leave := h.Drain(context.Background())
	defer leave()
	f.ch <- syscall.SIGINT
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT on the channel did not cancel the drain")
	}
	if h.Caught() != syscall.SIGINT {
		t.Fatalf("caught %v", h.Caught())
	}
}

func TestDefaultModeInstallsNothing(t *testing.T) {
	h, f := newFake()
	f.send(t, h, syscall.SIGINT)
	if f.ch != nil || len(f.raised) != 1 || h.Mode() != Default {
		t.Fatalf("default mode handled a signal: %+v", f)
	}
}

func TestDrainCancelsOnFirstInterrupt(t *testing.T) {
	h, f := newFake()
	ctx, leave := h.Drain(context.Background())
	f.send(t, h, syscall.SIGHUP)
	f.send(t, h, syscall.SIGHUP) // reported once
	f.send(t, h, syscall.SIGPIPE)
	if ctx.Err() != nil || h.Caught() != 0 {
		t.Fatal("SIGHUP/SIGPIPE interrupted the drain")
	}
	if got := f.said(); strings.Count(got, "SIGHUP") != 1 || strings.Count(got, "SIGPIPE") != 1 {
		t.Fatalf("said %q", got)
	}
	f.send(t, h, syscall.SIGTERM)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not cancel the drain")
	}
	if h.Caught() != syscall.SIGTERM {
		t.Fatalf("caught %v", h.Caught())
	}
	f.send(t, h, syscall.SIGINT) // a second one is reported, not dropped
	if !strings.Contains(f.said(), "SIGINT received again") {
		t.Fatalf("said %q", f.said())
	}
	leave()
	leave() // idempotent
	if f.active || f.resetCt != 1 || h.Mode() != Default {
		t.Fatalf("not back to default: %+v", f)
	}
	f.send(t, h, syscall.SIGINT)
	if len(f.raised) != 1 {
		t.Fatalf("raised %v", f.raised)
	}
}

func TestHoldReportsAndKeepsGoing(t *testing.T) {
	h, f := newFake()
	ctx, leaveDrain := h.Drain(context.Background())
	leaveHold := h.Hold("handing the reboot to systemd-logind")
	if h.Mode() != Hold {
		t.Fatal(h.Mode())
	}
	f.send(t, h, syscall.SIGINT)
	f.send(t, h, syscall.SIGTERM)
	if ctx.Err() != nil || h.Caught() != 0 {
		t.Fatal("a held signal interrupted")
	}
	if h.Held() != syscall.SIGINT {
		t.Fatalf("Held() = %v, want the first held signal, SIGINT", h.Held())
	}
	if got := f.said(); strings.Count(got, "while handing the reboot to systemd-logind; not interrupting") != 2 {
		t.Fatalf("said %q", got)
	}
	leaveHold()
	if h.Mode() != Drain || !f.active {
		t.Fatal("leaving Hold did not return to Drain")
	}
	leaveDrain()
	if h.Mode() != Default || f.active {
		t.Fatal("not back to default")
	}
}

func TestRaceAtLeaveGetsDefaultAction(t *testing.T) {
	h, f := newFake()
	_, leave := h.Drain(context.Background())
	leave()
	h.handle(syscall.SIGTERM) // queued before the reset took effect
	h.handle(syscall.SIGPIPE) // never re-raised: it would kill for a socket write
	if len(f.raised) != 1 || f.raised[0] != syscall.SIGTERM {
		t.Fatalf("raised %v", f.raised)
	}
}

func TestNilHandler(t *testing.T) {
	var h *Handler
	ctx, leave := h.Drain(context.Background())
	h.Hold("x")()
	leave()
	if ctx.Err() != nil || h.Caught() != 0 || h.Mode() != Default {
		t.Fatal("nil handler did something")
	}
}

// Nested Drain modes (the agent's life, a drain inside it): SIGTERM stops
// both, not only the innermost.
func TestInterruptStopsNestedDrains(t *testing.T) {
	h, f := newFake()
	outer, leaveOuter := h.Drain(context.Background())
	defer leaveOuter()
	inner, leaveInner := h.Drain(outer)
	f.send(t, h, syscall.SIGTERM)
	leaveInner()
	if inner.Err() == nil || outer.Err() == nil {
		t.Fatalf("inner %v, outer %v", inner.Err(), outer.Err())
	}
}
