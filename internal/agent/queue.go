package agent

// The queue runner: the agent's part of a queued reboot (drainer's
// queue.go). A reboot asked by automation that found no slot free at once
// (or a far schedule whose drain ahead got none in time) is written to a
// file in /run/gnsh; the runner carries it: it keeps the node's place in
// the Lease's queue, waits for the slot (within the maintenance window,
// never before the time asked), and once admitted drains and hands off to
// logind as the wrapper would. The file survives the agent's restart and
// nothing else: a request of another boot is dropped when read. Removing
// the file (shutdown -c) withdraws the request: the runner's wait, or its
// drain, stops. A request not admitted by its Until is given up.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/slots"
)

// Window is a maintenance window (internal/window): the opening that holds
// t, or the next one after it.
type Window interface {
	Next(t time.Time) (open, close time.Time)
	String() string
}

// Defaults of the QueueRunner.
const (
	// DefaultQueuePoll is how often the queue file is looked at (a stat
	// and a small read, no API request).
	DefaultQueuePoll = 2 * time.Second
	// DefaultQueueRetry is the pause after a queued run was refused for
	// another reason than a wait that ran out (its drain blocked, the
	// drain lock held, the gate unavailable), before it asks again.
	DefaultQueueRetry = time.Minute
)

// QueueRunner carries this node's queued reboot. Read, Reboot and Remove
// are required.
type QueueRunner struct {
	// Read reads the queued reboot (nil: none; drainer.ReadQueued).
	Read func() (*drainer.QueuedReboot, error)
	// Save writes q back (its place, as the last wait left it) if it is
	// still the one queued (drainer.SaveQueued).
	Save func(q *drainer.QueuedReboot) error
	// Remove removes q if it is still the one queued.
	Remove func(q *drainer.QueuedReboot) bool
	// Reboot asks for q's slot for at most wait and, once admitted,
	// drains and hands off to logind: nil once handed off. Cancelling
	// ctx withdraws it.
	Reboot func(ctx context.Context, q *drainer.QueuedReboot, wait time.Duration) error
	// GiveUp records a request given up (a Warning Event).
	GiveUp func(ctx context.Context, q *drainer.QueuedReboot, why string)
	// Window, if set, holds queued reboots to it. Lead is how long
	// before the window closes the last admission may come (the drain
	// timeout: a node admitted then goes down before the close).
	Window Window
	Lead   time.Duration
	Out    io.Writer
	Status func(string)
	Clock  clock.WithTicker // clock.RealClock if nil
	// Poll and Retry: DefaultQueuePoll and DefaultQueueRetry if zero.
	Poll, Retry time.Duration
}

func (q *QueueRunner) clock() clock.WithTicker {
	if q.Clock == nil {
		return clock.RealClock{}
	}
	return q.Clock
}

func (q *QueueRunner) say(format string, args ...any) {
	if q.Out != nil {
		fmt.Fprintf(q.Out, "gnsh: agent: "+format+"\n", args...)
	}
}

func (q *QueueRunner) status(s string) {
	if q.Status != nil {
		q.Status(s)
	}
}

// same reports whether a and b are the same request.
func same(a, b *drainer.QueuedReboot) bool { return drainer.SameQueued(a, b) }

// Run carries queued reboots until ctx ends.
func (q *QueueRunner) Run(ctx context.Context) error {
	poll, retry := q.Poll, q.Retry
	if poll <= 0 {
		poll = DefaultQueuePoll
	}
	if retry <= 0 {
		retry = DefaultQueueRetry
	}
	var told *drainer.QueuedReboot // the request whose wait was last said
	var toldWhat string
	var readErr string
	var notBefore time.Time // no run before (a pause after a refusal)
	fails := 0              // refusals in a row: each doubles the pause
	heldSaid := ""          // the drain lock held: said once
	for {
		cur, err := q.Read()
		switch {
		case err != nil:
			if err.Error() != readErr {
				readErr = err.Error()
				q.say("the queued reboot cannot be read: %v; looking again every %s", err, poll)
			}
		case cur == nil:
			if told != nil {
				// Withdrawn while it waited for its time or window.
				q.say("the queued %s was withdrawn", told.Action)
				q.status("the queued " + told.Action + " was withdrawn")
			}
			told, readErr = nil, ""
		default:
			readErr = ""
			if !same(cur, told) {
				toldWhat, notBefore, fails = "", time.Time{}, 0
				q.say("queued: %s (%s); %s", cur.What(), cur.Why, cur.PlaceLine())
			}
			told = cur
			now := q.clock().Now()
			start, end, why := q.when(cur, now)
			switch {
			case !now.Before(cur.Until):
				q.giveUp(ctx, cur, fmt.Sprintf("not admitted by %s (slots.queueFor)", cur.Until.Local().Format(time.RFC3339)))
				told = nil
				continue
			case q.Window != nil && !start.Before(cur.Until):
				// Nothing can happen before it is given up: said now,
				// not at its end, a night later.
				q.giveUp(ctx, cur, fmt.Sprintf("the window %s does not open again before %s (slots.queueFor)", q.Window, cur.Until.Local().Format(time.RFC3339)))
				told = nil
				continue
			case now.Before(notBefore):
				start, why = notBefore, "asks again"
			}
			if start.After(now) {
				if why != toldWhat {
					toldWhat = why
					q.say("the queued %s %s at %s", cur.Action, why, start.Local().Format(time.RFC3339))
				}
				q.status(fmt.Sprintf("a queued %s %s at %s", cur.Action, why, start.Local().Format("Mon 15:04:05")))
				break
			}
			toldWhat = ""
			q.status(fmt.Sprintf("a queued %s waits for a reboot slot (%s)", cur.Action, cur.PlaceLine()))
			err := q.runOne(ctx, cur, end.Sub(now), poll)
			switch {
			case err == nil:
				q.say("the queued %s was handed off", cur.Action)
				q.Remove(cur)
				told = nil
				q.status("")
				continue
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, errWithdrawn):
				q.say("the queued %s was withdrawn", cur.Action)
				told = nil
				q.status("the queued " + cur.Action + " was withdrawn")
				continue
			}
			var we *slotWait
			if errors.As(err, &we) {
				// Its wait ran out (the window closed, or it is given
				// up at the next look); its place is kept.
				if q.Save != nil {
					_ = q.Save(cur)
				}
				continue
			}
			msg := strings.TrimPrefix(err.Error(), "gnsh: ")
			if !strings.HasPrefix(msg, "the queued ") {
				msg = "the queued " + cur.Action + " was not handed off: " + msg
			}
			pause := poll
			if drainer.IsLockHeld(err) {
				// Another gnsh holds the drain lock for a moment (an undo,
				// the uncordon after boot): asked again soon, said once.
				if msg != heldSaid {
					q.say("%s; asking again every %s meanwhile", msg, pause)
				}
				heldSaid = msg
			} else {
				fails++
				pause = min(retry<<min(fails-1, 5), 30*time.Minute)
				q.say("%s; asking again in %s", msg, pause)
			}
			notBefore = q.clock().Now().Add(pause)
			toldWhat = "asks again"
		}
		t := q.clock().NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// when is when cur may run (start), until when its wait for a slot may
// last (end), and in words why it waits until start. Within a window, the
// wait ends Lead before the window closes (a node admitted then is down
// before the close); an opening too short for that is skipped.
func (q *QueueRunner) when(cur *drainer.QueuedReboot, now time.Time) (start, end time.Time, why string) {
	start, end = now, cur.Until
	if cur.NotBefore != nil && cur.NotBefore.After(start) {
		start, why = *cur.NotBefore, "is due"
	}
	if q.Window == nil {
		return start, end, why
	}
	t := start
	for range 16 {
		open, close := q.Window.Next(t)
		if open.IsZero() {
			break // never open
		}
		if open.After(start) {
			start, why = open, "waits for the window "+q.Window.String()+", which opens"
		}
		if last := close.Add(-q.Lead); last.After(start) {
			end = minTime(end, last)
			return start, end, why
		}
		t = close
	}
	// No opening it could use: it waits past its end, and is given up.
	return maxTime(start, cur.Until), end, "waits for the window " + q.Window.String() + ", which opens"
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// errWithdrawn: the request was removed or replaced while it ran.
var errWithdrawn = errors.New("withdrawn")

// slotWait marks a run whose wait for a slot ran out.
type slotWait struct{ err error }

func (e *slotWait) Error() string { return e.err.Error() }
func (e *slotWait) Unwrap() error { return e.err }

// runOne runs cur for at most wait, stopped when the file no longer holds
// it (shutdown -c, a new request in its place).
func (q *QueueRunner) runOne(ctx context.Context, cur *drainer.QueuedReboot, wait time.Duration, poll time.Duration) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	withdrawn := make(chan struct{})
	done := make(chan struct{})
	go func() {
		t := q.clock().NewTicker(poll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C():
			}
			if now, err := q.Read(); err == nil && !same(now, cur) {
				close(withdrawn)
				cancel(slots.ErrWithdrawn) // its place goes too
				return
			}
		}
	}()
	err := q.Reboot(rctx, cur, wait)
	close(done)
	select {
	case <-withdrawn:
		if err != nil {
			return errWithdrawn
		}
	default:
		if err != nil && errors.Is(err, slots.ErrWithdrawn) {
			// The run found the request withdrawn before this look did
			// (its place gone, the file no longer holding it).
			if now, rerr := q.Read(); rerr == nil && !same(now, cur) {
				return errWithdrawn
			}
		}
	}
	if err != nil && drainer.IsSlotWait(err) {
		return &slotWait{err}
	}
	return err
}

// giveUp ends a request not admitted in time.
func (q *QueueRunner) giveUp(ctx context.Context, cur *drainer.QueuedReboot, why string) {
	if !q.Remove(cur) {
		return
	}
	q.say("warning: the queued %s is given up: %s; run it again, or raise slots.queueFor", cur.What(), why)
	q.status("")
	if q.GiveUp != nil {
		q.GiveUp(ctx, cur, why)
	}
}
