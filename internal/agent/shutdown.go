package agent

// The shutdown guard: the agent's drain for shutdowns that bypass the
// wrapper (systemctl reboot, the power button, automation calling
// systemctl or logind directly). It holds a logind "delay" inhibitor lock
// on "shutdown" for as long as it runs. On PrepareForShutdown(true) it
// drains within logind's InhibitDelayMax (less a margin), unless the
// wrapper's drainer already did for this shutdown (its marker), and then
// releases the lock so that logind goes on. It never holds a shutdown up
// beyond that, and never refuses one: whatever the drain's outcome, the
// lock is released. On PrepareForShutdown(false) (the shutdown was
// cancelled) it takes the lock again and lifts the cordon its drain made.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/logind"
)

// Inhibitor lock the guard takes.
const (
	InhibitWho  = "gnsh"
	InhibitWhy  = "drain the node before shutdown"
	InhibitWhat = "shutdown"
)

// DrainBudget is how long the guard drains when logind waits for delay
// locks at most max: max less 10% or 2 s, whichever is larger; zero (no
// drain) when max is 2 s or less.
func DrainBudget(delayMax time.Duration) time.Duration {
	margin := max(delayMax/10, 2*time.Second)
	if delayMax <= margin {
		return 0
	}
	return delayMax - margin
}

// ShutdownGuard is the agent's drain for shutdowns that bypass the wrapper.
// Dial and Drain are required.
type ShutdownGuard struct {
	// Dial connects to the system bus.
	Dial func(ctx context.Context) (*logind.Conn, error)
	// Drain cordons and drains for action within budget; undo lifts the
	// cordon it made (for a cancelled shutdown); it is never nil.
	Drain func(ctx context.Context, action string, budget time.Duration) (undo func(why string), err error)
	// Drained, if set, reports whether the wrapper already drained for
	// the shutdown under way (the drainer's marker), with a phrase.
	Drained func() (what string, ok bool)
	// Forget, if set, drops that record when the shutdown is cancelled,
	// so that a later shutdown is drained for.
	Forget func()
	Out    io.Writer
	Status func(string)
	Clock  clock.Clock // for the reconnect backoff; clock.RealClock if nil

	// Reconnect backoff; DefaultInitialBackoff, DefaultMaxBackoff if zero.
	InitialBackoff, MaxBackoff time.Duration
}

func (g *ShutdownGuard) say(format string, args ...any) {
	if g.Out != nil {
		fmt.Fprintf(g.Out, "gnsh: agent: "+format+"\n", args...)
	}
}

func (g *ShutdownGuard) status(s string) {
	if g.Status != nil {
		g.Status(s)
	}
}

// Run guards shutdowns until ctx ends, reconnecting to the bus with backoff
// when it goes away. It returns ctx's error.
func (g *ShutdownGuard) Run(ctx context.Context) error {
	clk := g.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	initial, maxB := g.InitialBackoff, g.MaxBackoff
	if initial <= 0 {
		initial = DefaultInitialBackoff
	}
	if maxB <= 0 {
		maxB = DefaultMaxBackoff
	}
	backoff := initial
	lastErr := ""
	for ctx.Err() == nil {
		ok, err := g.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if ok {
			backoff, lastErr = initial, "" // it ran: start over
		}
		if msg := err.Error(); msg != lastErr {
			g.say("system bus: %v; connecting again", err)
			g.status("system bus: " + msg + "; connecting again")
			lastErr = msg
		}
		select {
		case <-ctx.Done():
		case <-clk.After(backoff):
		}
		backoff = min(2*backoff, maxB)
	}
	return ctx.Err()
}

// session is one connection to the bus: it returns (whether the lock was
// taken, why it ended).
func (g *ShutdownGuard) session(ctx context.Context) (bool, error) {
	conn, err := g.Dial(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	l := conn.Logind()
	w, err := l.WatchPrepareForShutdown(ctx)
	if err != nil {
		return false, fmt.Errorf("watching PrepareForShutdown: %w", err)
	}
	defer w.Stop(context.Background())
	var lock *os.File
	release := func() {
		if lock != nil {
			_ = lock.Close()
			lock = nil
		}
	}
	defer release()
	take := func() error {
		f, err := l.Inhibit(ctx, InhibitWhat, InhibitWho, InhibitWhy, "delay")
		if err != nil {
			return err
		}
		lock = f
		return nil
	}
	if err := take(); err != nil {
		var be *handoff.BusError
		if !errors.As(err, &be) || be.Name != "org.freedesktop.login1.OperationInProgress" {
			return false, fmt.Errorf("taking the delay lock: %w", err)
		}
		// A shutdown is already under way: too late to delay it.
		g.say("systemd-logind is already shutting down; too late to drain")
	}
	// A PrepareForShutdown(true) sent before the watch began is missed.
	if preparing, err := l.PreparingForShutdown(ctx); err == nil && preparing && lock == nil {
		g.status("systemd-logind is shutting down")
	}
	if lock != nil {
		g.say("holding a delay lock on shutdown, to drain before shutdowns that bypass gnsh")
		g.status("holding a delay lock on shutdown; idle")
	}
	var undo func(string)
	for {
		select {
		case <-ctx.Done():
			return lock != nil, ctx.Err()
		case <-conn.Done():
			return lock != nil, errors.New("the system bus connection was lost")
		case start, open := <-w.C():
			if !open {
				if err := w.Err(); err != nil {
					return lock != nil, err
				}
				return lock != nil, errors.New("the PrepareForShutdown watch ended")
			}
			if start {
				if lock == nil {
					continue // not ours to delay
				}
				undo = g.prepare(ctx, l)
				release()
				g.say("released the delay lock: systemd-logind goes on with the shutdown")
				g.status("shutdown under way; delay lock released")
				continue
			}
			// Cancelled: hold the lock again, then lift the drain's cordon.
			if lock == nil {
				if err := take(); err != nil {
					return false, fmt.Errorf("taking the delay lock again: %w", err)
				}
			}
			g.say("the shutdown was cancelled; holding the delay lock again")
			if g.Forget != nil {
				g.Forget()
			}
			if undo != nil {
				undo("the shutdown was cancelled")
				undo = nil
			}
			g.status("holding a delay lock on shutdown; idle")
		}
	}
}

// prepare drains for the shutdown under way, unless the wrapper did; it
// returns the undo of the drain's cordon, or nil.
func (g *ShutdownGuard) prepare(ctx context.Context, l *logind.Logind) func(string) {
	if g.Drained != nil {
		if what, ok := g.Drained(); ok {
			g.say("shutdown under way, %s", what)
			return nil
		}
	}
	action := "reboot" // what the record says when logind does not tell
	if typ, usec, err := l.ScheduledShutdown(ctx); err == nil && usec == 0 && typ != "" {
		switch typ {
		case "poweroff", "halt", "kexec":
			action = typ
		case "soft-reboot":
			// The same rule as the schedule follower's: a soft reboot
			// keeps the boot ID, so the uncordon after boot would never
			// take gnsh's cordon for one of an earlier boot. Not drained
			// for (the kubelet's own shutdown manager still sees
			// PrepareForShutdown).
			g.say("a soft-reboot is under way: not draining for it (it keeps this boot's ID; gnsh(8))")
			return nil
		}
	}
	maxDelay, err := l.InhibitDelayMax(ctx)
	if err != nil {
		g.say("reading InhibitDelayMaxUSec: %v; not draining", err)
		return nil
	}
	budget := DrainBudget(maxDelay)
	if budget <= 0 {
		g.say("shutdown under way, but systemd-logind waits only %s for delay locks: not draining", maxDelay)
		return nil
	}
	g.say("shutdown under way that bypassed gnsh: draining within %s (InhibitDelayMaxSec %s)", budget.Round(time.Millisecond), maxDelay)
	g.status("draining for a shutdown that bypassed gnsh")
	go g.kubeletToo(ctx, l) // beside the drain: it must not take from its time
	undo, err := g.Drain(ctx, action, budget)
	if err != nil {
		g.say("drain for the shutdown ended: %v", err)
	}
	return undo
}
