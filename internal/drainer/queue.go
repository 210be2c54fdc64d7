package drainer

// Queued reboots: a reboot that gets no slot at once, asked by automation
// (slots.queue), is not refused: it keeps its place in the Lease's queue
// and the node agent carries it (a file in the lock directory, of this
// boot only), drains and hands off to logind when the slot comes, as the
// wrapper would. The agent's drain ahead of a far schedule that got no
// slot in time queues the same way (deferred), once logind's schedule is
// cancelled.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/slots"
	"github.com/gnsh/gnsh/internal/window"
)

// QueueName is the file, in the lock directory (root's alone, 0600), that
// holds this node's queued reboot. /run is a tmpfs: a reboot ends it; its
// boot ID says so where /run is not.
const QueueName = "queued"

// Events of queued reboots.
const (
	ReasonRebootQueued   = "GnshRebootQueued"
	ReasonRebootDeferred = "GnshRebootDeferred"
	ReasonRebootGivenUp  = "GnshRebootGivenUp"
	// ReasonRebootWithdrawn: shutdown -c withdrew a queued reboot.
	ReasonRebootWithdrawn = "GnshRebootWithdrawn"
)

// QueuedReboot is a queued request, as the wrapper (or the agent's drain
// ahead of a schedule) wrote it for the node agent.
type QueuedReboot struct {
	// ID names this request (random): a request withdrawn and made again
	// within the same second is another one.
	ID     string    `json:"id"`
	BootID string    `json:"bootID"`
	Node   string    `json:"node"`
	UID    types.UID `json:"uid"`
	// The request: what the agent hands off once admitted (at once:
	// never before NotBefore).
	Command string            `json:"command"` // shutdown, reboot, poweroff, halt
	Action  string            `json:"action"`  // reboot, poweroff, halt, kexec
	Wall    []string          `json:"wall,omitempty"`
	NoWall  bool              `json:"noWall,omitempty"`
	ParamOp legacy.ParamOp    `json:"paramOp,omitempty"`
	Param   string            `json:"param,omitempty"`
	Drain   legacy.DrainFlags `json:"drain"`
	User    string            `json:"user"`
	TTY     string            `json:"tty,omitempty"`
	// Why it was queued rather than waited for in the command
	// ("no terminal on stdin and stderr", "slots.queue: always", "a
	// schedule no slot came for").
	Why   string    `json:"why,omitempty"`
	Since time.Time `json:"since"`
	// NotBefore: the time asked for (a schedule), before which it never
	// goes; Until: given up if not admitted by then (slots.queueFor).
	NotBefore *time.Time `json:"notBefore,omitempty"`
	Until     time.Time  `json:"until"`
	// Ticket is its place in arrival order in the Lease's queue (0: none
	// given yet); Place its place when last seen (0: beyond a full queue).
	Ticket int64 `json:"ticket,omitempty"`
	Place  int   `json:"place,omitempty"`
	// Deferred: the agent queued it for a schedule whose drain ahead got
	// no slot in time (logind's schedule was cancelled).
	Deferred bool `json:"deferred,omitempty"`
	// Window is slots.window when it was queued ("" for none), for the
	// lines that show it.
	Window string `json:"window,omitempty"`
	// HandingOff: the agent has drained for it and is handing it to
	// logind: too late to withdraw.
	HandingOff bool `json:"handingOff,omitempty"`
}

// Requester is who asked, for messages.
func (q *QueuedReboot) Requester() string {
	if q.TTY != "" {
		return q.User + " on " + q.TTY
	}
	return q.User
}

// Request is the legacy request the agent hands off for q: the same
// action, wall message and drain options, now. The reboot parameter is
// left alone (ParamKeep): the command that queued q set it already (a
// QueuedError keeps it), and the agent could not write it anyway
// (gnsh.service makes /run/systemd read-only for it). ParamOp and Param
// stay in the record for display. A record written by an older gnsh
// whose command had the parameter put back is handed off without it.
func (q *QueuedReboot) Request() *legacy.Request {
	req := &legacy.Request{Command: q.Command, Prog: q.Command, Wall: q.Wall, NoWall: q.NoWall,
		ParamOp: legacy.ParamKeep, Drain: q.Drain}
	req.Action = legacy.Reboot
	for _, a := range []legacy.Action{legacy.PowerOff, legacy.Reboot, legacy.Halt, legacy.Kexec} {
		if a.String() == q.Action {
			req.Action = a
		}
	}
	req.Drain.Skip = false
	return req
}

// What is one line about q for messages: "reboot asked by root at
// 02:00:04 (place 3)".
func (q *QueuedReboot) What() string {
	if q.Deferred && q.NotBefore != nil {
		return fmt.Sprintf("%s scheduled for %s (deferred at %s)", q.Action, q.NotBefore.Local().Format("2006-01-02 15:04:05"), q.Since.Local().Format("15:04:05"))
	}
	s := fmt.Sprintf("%s asked by %s at %s", q.Action, q.Requester(), q.Since.Local().Format("2006-01-02 15:04:05"))
	if q.NotBefore != nil {
		s += ", for " + q.NotBefore.Local().Format("15:04:05")
	}
	return s
}

// QueuedError is what the command returns for a queued reboot: its line,
// and exit status 0 (the request was accepted, as systemd accepts one).
type QueuedError struct{ Msg string }

func (e *QueuedError) Error() string { return e.Msg }

// ExitCode is 0: the request stands.
func (e *QueuedError) ExitCode() int { return 0 }

// KeepRebootParam is true: the reboot parameter the command set stays for
// the hand-off the node agent makes later (handoff.RebootParamKeeper).
func (e *QueuedError) KeepRebootParam() bool { return true }

// queueLockName is the flock that orders the writers of QueueName: the
// wrapper queueing, the agent saving its place, shutdown -c removing it.
const queueLockName = "queued.flock"

// underQueueLock runs f holding the queue's lock (waiting for it at most
// a second: each holder only reads or writes one small file).
func (d *Drainer) underQueueLock(f func() error) error {
	var l *os.File
	var err error
	for i := 0; i < 40; i++ {
		if l, err = lockFile(d.lockDir(), queueLockName, unix.LOCK_EX); !errors.Is(err, syscall.EWOULDBLOCK) {
			break
		}
		l.Close()
		time.Sleep(25 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer l.Close()
	return f()
}

// WriteQueued writes q for the node agent (root's lock directory, 0600, no
// symlink followed), in place of any request queued before.
func (d *Drainer) WriteQueued(q *QueuedReboot) error {
	b, err := json.Marshal(q)
	if err != nil {
		return err
	}
	return d.underQueueLock(func() error { return d.writeRunFile(QueueName, b) })
}

// SaveQueued writes q back (its place and ticket, as its last wait left
// them) only if it is still the request queued: never one withdrawn
// meanwhile.
func (d *Drainer) SaveQueued(q *QueuedReboot) error {
	b, err := json.Marshal(q)
	if err != nil {
		return err
	}
	return d.underQueueLock(func() error {
		cur, err := d.ReadQueued()
		if err != nil || !SameQueued(cur, q) {
			return err
		}
		return d.writeRunFile(QueueName, b)
	})
}

// SameQueued reports whether a and b are the same queued request.
func SameQueued(a, b *QueuedReboot) bool {
	return a != nil && b != nil && a.ID == b.ID && a.Since.Equal(b.Since) && a.Action == b.Action && a.BootID == b.BootID
}

// newQueueID is a random name for one queued request.
func newQueueID() string { return fmt.Sprintf("%016x", rand.Uint64()) }

// ReadQueued reads this node's queued reboot: nil without one. One made in
// another boot is removed and reported as none (the reboot it asked for
// has happened, or the node was power-cycled: it is not made again).
func (d *Drainer) ReadQueued() (*QueuedReboot, error) { return d.readQueued(true) }

// PeekQueued is ReadQueued changing nothing (gnsh status).
func (d *Drainer) PeekQueued() (*QueuedReboot, error) { return d.readQueued(false) }

func (d *Drainer) readQueued(drop bool) (*QueuedReboot, error) {
	var q QueuedReboot
	err := d.readRunFile(QueueName, &q)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", filepath.Join(d.lockDir(), QueueName), err)
	case q.BootID != d.bootID():
		if drop {
			_ = os.Remove(filepath.Join(d.lockDir(), QueueName))
		}
		return nil, nil
	}
	return &q, nil
}

// RemoveQueued removes the queued reboot if it is still q (nil: whatever
// stands): true if it removed one.
func (d *Drainer) RemoveQueued(q *QueuedReboot) bool {
	removed := false
	_ = d.underQueueLock(func() error {
		cur, err := d.ReadQueued()
		if err != nil || cur == nil || q != nil && !SameQueued(cur, q) {
			return err
		}
		removed = os.Remove(filepath.Join(d.lockDir(), QueueName)) == nil
		return nil
	})
	return removed
}

// IsSlotWait reports whether a refusal is a wait for a reboot slot that ran
// out (the queued request stands: it asks again).
func IsSlotWait(err error) bool {
	var r *Refusal
	var we *slots.WaitError
	return errors.As(err, &r) && errors.As(r.Err, &we) && !slots.Broken(we) && !slots.Unreadable(we)
}

// queueWhy says why this run queues rather than waits when no slot comes
// at once ("" for a run that waits): a wrapper's gated shutdown on a node
// whose agent runs, per slots.queue (auto: no person at a terminal).
func (r *run) queueWhy() string {
	if r.d.Agent || r.fromQueue != nil || r.purpose != forShutdown || r.forceQuorum {
		return ""
	}
	why := ""
	var flags legacy.DrainFlags
	if r.req != nil {
		flags = r.req.Drain
	}
	switch {
	case flags.NoQueue:
		return ""
	case flags.Queue:
		why = "--queue"
	case r.cfg.Slots.Queue == config.QueueAlways:
		why = "slots.queue: always"
	case r.cfg.Slots.Queue == config.QueueAuto:
		if r.d.Automated == nil {
			return ""
		}
		auto, reason := r.d.Automated()
		if !auto {
			return ""
		}
		why = reason
	default:
		return ""
	}
	if held, state, _ := AgentState(r.d.lockDir()); !held || state != AgentGuarding {
		// Nothing would carry it: it waits in the command as before, and
		// says why once refused (queueLost).
		switch {
		case !held:
			r.queueLost = "it was not queued: the node agent is not running ('systemctl enable --now gnsh.service')"
		case state == AgentStarting:
			r.queueLost = "it was not queued: the node agent is starting; run it again in a moment"
		case state == AgentNoKubeconfig:
			r.queueLost = "it was not queued: the node agent has not found this node's kubeconfig yet ('systemctl status gnsh')"
		default:
			r.queueLost = "it was not queued: the node agent is older and carries no queued reboots; upgrade gnsh and restart it"
		}
		return ""
	}
	return why
}

// enqueue hands a reboot that got no slot at once (we) to the node agent:
// its place kept, the request written, an Event and a journal line.
func (r *run) enqueue(ctx context.Context, n slots.NodeState, we *slots.WaitError, why string) (outcome, bool) {
	q := &QueuedReboot{ID: newQueueID(), BootID: r.d.bootID(), Node: n.Name, UID: n.UID, Command: r.req.Command, Action: r.verb,
		Wall: r.req.Wall, NoWall: r.req.NoWall, ParamOp: r.req.ParamOp, Param: r.req.Param, Drain: r.req.Drain,
		User: r.own.User, TTY: r.own.TTY, Why: why, Since: r.d.now().UTC().Truncate(time.Second),
		NotBefore: r.own.When, Until: r.d.now().UTC().Add(r.cfg.Slots.QueueFor.D()).Truncate(time.Second),
		Ticket: we.Ticket, Place: we.Place}
	if win, _ := r.cfg.QueueWindow(); win != nil {
		q.Window = win.String()
	}
	if err := r.d.WriteQueued(q); err != nil {
		// Not queued after all: refused as a wait that ran out is, its
		// place withdrawn.
		r.withdrawPlace(ctx, q)
		return r.fail(noSlot, fmt.Errorf("%w; and it could not be queued for the node agent: %v", we, err)), false
	}
	r.queued, r.queuedHeld, r.queuedFull = q, oneLine(blocksText(we)), queueFull(we)
	state := fmt.Sprintf("no slot free now (%s); %s", r.queuedHeld, placeText(q.Place, r.gate().Where(), r.queuedFull))
	if len(we.Blocks) == 0 {
		state = fmt.Sprintf("not asked (%s); %s", r.queuedHeld, placeText(q.Place, r.gate().Where(), false))
	}
	if r.queuedOutside != "" {
		state = "not asked " + r.queuedOutside
	}
	r.event(ctx, "Normal", ReasonRebootQueued, "%s queued for a reboot slot of %s (%s): %s; the node agent reboots this node when one is, or gives up at %s",
		q.What(), r.gate().Where(), why, state, q.Until.Format(time.RFC3339))
	r.d.journal(journalInfo, fmt.Sprintf("gnsh: %s: queued, %s (%s)", q.What(), state, why))
	return queued, false
}

// enqueueOutside queues a request made outside the window (win) without
// asking for a slot: a ticket reserved for its place in arrival order (a
// failure costs only that order), the request written for the agent.
func (r *run) enqueueOutside(ctx context.Context, n slots.NodeState, g *slots.Gate, win *window.Window, why string) (outcome, bool) {
	open, _ := win.Next(r.d.now())
	if until := r.d.now().Add(r.cfg.Slots.QueueFor.D()); !open.Before(until) || open.IsZero() {
		// Sure to be given up: refused now, saying why (nothing written).
		return r.fail(noSlot, fmt.Errorf("asked outside the window %s, which does not open before slots.queueFor (%s) would give it up; "+
			"widen the window, or raise slots.queueFor past its next opening", win, r.cfg.Slots.QueueFor.D())), false
	}
	var ticket int64
	if prev, _ := r.d.ReadQueued(); prev != nil && prev.Ticket > 0 && prev.Action == r.verb {
		// Asked again (unattended-upgrades asks each day): the place it
		// has stays.
		ticket = prev.Ticket
	} else {
		tctx, cancel := context.WithTimeout(ctx, 2*r.cfg.APITimeout.D())
		t, err := g.ReserveTicket(tctx)
		cancel()
		if err != nil {
			r.debug("no ticket reserved in %s (%v): its place is taken when the window opens", g.Where(), err)
		}
		ticket = t
	}
	r.queuedOutside = fmt.Sprintf("outside the window %s (it opens %s)", win, open.Local().Format("Mon 15:04 MST"))
	return r.enqueue(ctx, n, &slots.WaitError{Ticket: ticket}, why)
}

// placeText is a queued reboot's place in words.
func placeText(place int, where string, full bool) string {
	switch {
	case place > 0:
		return fmt.Sprintf("place %d in %s", place, where)
	case full:
		return fmt.Sprintf("no place yet in %s (its queue is full: the node agent joins it when a place frees)", where)
	}
	return fmt.Sprintf("no place yet in %s (the node agent asks for one)", where)
}

// tellQueued is the command's one line for a queued reboot.
func (r *run) tellQueued() string {
	q := r.queued
	window := ""
	if win, _ := r.cfg.QueueWindow(); win != nil {
		window = " within the window " + win.String()
	}
	held := ""
	if r.queuedHeld != "" {
		held = " (" + r.queuedHeld + ")"
	}
	if r.queuedOutside != "" {
		return fmt.Sprintf("gnsh: queued: %s; the node agent drains this node and hands the %s to systemd-logind once it is open and a reboot slot is free, or gives up at %s ('shutdown -c' withdraws it)",
			r.queuedOutside, q.Action, q.Until.Local().Format("Mon 15:04 MST"))
	}
	what := "no reboot slot is free now" + held
	if strings.HasPrefix(r.queuedHeld, "the gate did not answer") {
		what = r.queuedHeld
	}
	return fmt.Sprintf("gnsh: queued: %s; %s; the node agent drains this node and hands the %s to systemd-logind once one is free%s, or gives up at %s ('shutdown -c' withdraws it)",
		what, placeText(q.Place, r.gate().Where(), r.queuedFull), q.Action, window, q.Until.Local().Format("Mon 15:04 MST"))
}

// blocksText is what held a wait back, in words; the API server's answer
// when nothing was decided.
func blocksText(we *slots.WaitError) string {
	var s []string
	for _, b := range we.Blocks {
		s = append(s, b.String())
	}
	if len(s) == 0 && we.Err != nil {
		return "the gate did not answer: " + we.Err.Error()
	}
	return strings.Join(s, "; ")
}

// queueFull reports whether the wait ended beyond a full queue.
func queueFull(we *slots.WaitError) bool {
	for _, b := range we.Blocks {
		if b.Limit == slots.LimitQueueFull {
			return true
		}
	}
	return false
}

// QueuedPreparer is the handoff.Preparer of the node agent's run for q:
// the wrapper's drain, its reboot slot asked for with q's place for at
// most wait (refused when none comes: the agent asks again), never
// queued again. It drains under ctx, which the withdrawal of q or the
// agent's stop ends: the runner it prepares for must be given a context
// that does not end so (context.WithoutCancel), so that a hand-off, once
// prepared, is never cut into the fallbacks (starting the target,
// reboot(2)) by that end. Prepared under an ended ctx, it refuses and
// undoes what it did.
func (d *Drainer) QueuedPreparer(ctx context.Context, q *QueuedReboot, wait time.Duration) handoff.Preparer {
	return queuedPreparer{ctx: ctx, d: d, q: q, wait: wait}
}

type queuedPreparer struct {
	ctx  context.Context
	d    *Drainer
	q    *QueuedReboot
	wait time.Duration
}

func (p queuedPreparer) Prepare(_ context.Context, req *legacy.Request) (handoff.Prepared, error) {
	r := newRun(p.d, forShutdown, req.Action.String())
	r.fromQueue, r.queueWait = p.q, p.wait
	prep, err := r.prepare(p.ctx, req)
	if err != nil {
		return nil, err
	}
	var stopped *queueStopped
	switch {
	case p.ctx.Err() != nil:
		// Ended as the drain did: nothing is handed off.
		stopped = &queueStopped{err: context.Cause(p.ctx)}
	case !p.d.markHandingOff(p.q):
		// Withdrawn (or replaced) as the drain ended: the agent looks at
		// the file only every few seconds.
		stopped = &queueStopped{err: slots.ErrWithdrawn}
	}
	if stopped != nil {
		if prep != nil {
			prep.Finish(context.WithoutCancel(p.ctx), stopped)
		}
		return nil, &Refusal{Msg: "gnsh: the queued " + r.verb + " was not handed off: " + stopped.Error(), Err: stopped}
	}
	return prep, nil
}

// journal priorities.
const (
	journalInfo = iota
	journalWarning
)

// journal writes line to the system journal (Drainer.Journal), for the
// refusals and queued reboots of commands whose own output nobody may read
// (unattended-upgrades logs only its exit status).
func (d *Drainer) journal(prio int, line string) {
	if d.Journal != nil {
		d.Journal(prio == journalWarning, strings.TrimPrefix(line, "gnsh: "))
	}
}

// QueuedGivenUp records a queued reboot given up (why): a Warning Event on
// the Node and a journal line, each a bounded best effort.
func (d *Drainer) QueuedGivenUp(ctx context.Context, q *QueuedReboot, why string) {
	d.journal(journalWarning, fmt.Sprintf("the queued %s is given up: %s; run it again, or raise slots.queueFor", q.What(), why))
	r := newRun(d, forShutdown, q.Action)
	if err := r.loadConfig(nil); err != nil {
		return
	}
	ectx, stop := context.WithTimeout(context.WithoutCancel(ctx), 2*r.cfg.APITimeout.D())
	defer stop()
	if !r.withdrawPlace(ectx, q) && r.sess == nil {
		s, err := d.connect(ectx, r.cfg, "", r.out)
		if err != nil {
			r.debug("no Event for the queued %s given up: %v", q.Action, err)
			return
		}
		r.sess = s
	}
	r.event(ectx, "Warning", ReasonRebootGivenUp, "The queued %s is given up: %s; run it again, or raise slots.queueFor", q.What(), why)
}

// withdrawQueued is shutdown -c for a queued reboot: the request goes (the
// node agent, seeing it gone, stops its wait or its drain, which lets go
// of the place and the slot), and its place in the queue is withdrawn here
// too, a bounded best effort (others drop an entry no longer renewed).
func (c *cancelRun) withdrawQueued(ctx context.Context) {
	q, err := c.d.ReadQueued()
	if err != nil || q == nil {
		return
	}
	r := newRun(c.d, forShutdown, q.Action)
	_ = r.loadConfig(nil)
	if q.HandingOff {
		r.info("too late to withdraw the queued %s: the node agent has drained the node and is handing it to systemd-logind", q.What())
		return
	}
	if !c.d.RemoveQueued(q) {
		return
	}
	r.info("the queued %s is withdrawn", q.What())
	c.d.journal(journalInfo, fmt.Sprintf("the queued %s is withdrawn by %s (shutdown -c)", q.What(), c.d.who().User))
	if r.withdrawPlace(ctx, q) {
		r.event(ctx, "Normal", ReasonRebootWithdrawn, "The queued %s was withdrawn by %s (shutdown -c)", q.What(), c.d.who().User)
	}
}

// withdrawPlace removes q's waiter entry from the Lease's queue (a request
// withdrawn, given up, or not written), a bounded best effort: others drop
// an entry no longer renewed. It connects if the run has no session yet,
// and reports whether it has one (for an Event).
func (r *run) withdrawPlace(ctx context.Context, q *QueuedReboot) bool {
	if r.cfg.Slots.Gate == config.GateOff {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*r.cfg.APITimeout.D())
	defer cancel()
	if r.sess == nil {
		s, err := r.d.connect(ctx, r.cfg, "", r.out)
		if err != nil {
			r.debug("its place in the queue is left to lapse: %v", err)
			return false
		}
		r.sess = s
	}
	node := q.Node
	if node == "" { // a deferred schedule's: this node
		node = r.sess.node
	}
	_, err := r.gate().Update(ctx, func(rec *slots.Record) bool {
		w, ok := rec.Waiter(node)
		if !ok || w.Boot != q.BootID || q.UID != "" && w.UID != q.UID {
			return false
		}
		rec.RemoveWaiter(node)
		return true
	})
	if err != nil {
		r.debug("its place in the queue is left to lapse: %v", err)
	}
	return true
}

// QueuedLine is handoff.QueueShower: shutdown --show's line about this
// node's queued reboot, "" for none.
func (d *Drainer) QueuedLine() string {
	q, err := d.ReadQueued()
	if err != nil || q == nil {
		return ""
	}
	return "gnsh: " + q.Line()
}

// Line says where q stands, for shutdown --show and gnsh status.
func (q *QueuedReboot) Line() string {
	place := q.PlaceLine()
	window := ""
	if q.Window != "" {
		window = " within the window " + q.Window
	}
	return fmt.Sprintf("queued: %s, waiting for a reboot slot%s (%s); given up at %s; 'shutdown -c' withdraws it",
		q.What(), window, place, q.Until.Local().Format("2006-01-02 15:04:05 MST"))
}

// markHandingOff marks q, if it is still the request queued, as being
// handed off (shutdown -c then says it is too late); false if it was
// withdrawn or replaced.
func (d *Drainer) markHandingOff(q *QueuedReboot) bool {
	ok := false
	_ = d.underQueueLock(func() error {
		cur, err := d.ReadQueued()
		if err != nil || !SameQueued(cur, q) {
			return err
		}
		m := *cur
		m.HandingOff = true
		b, err := json.Marshal(&m)
		if err != nil {
			return err
		}
		if err := d.writeRunFile(QueueName, b); err != nil {
			return err
		}
		ok = true
		return nil
	})
	return ok
}

// PlaceLine is q's place in the queue in words, as last seen.
func (q *QueuedReboot) PlaceLine() string {
	if q.Place == 0 {
		return "no place in the queue yet"
	}
	return fmt.Sprintf("place %d in the queue when last seen", q.Place)
}
