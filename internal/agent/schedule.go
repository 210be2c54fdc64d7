package agent

// The schedule follower: the agent's drain ahead of a shutdown that logind
// has scheduled (shutdown -r +N, shutdown -r 02:00) for later than the
// drain timeout, which the wrapper does not drain for. It follows logind's
// ScheduledShutdown property, which logind never announces with
// PropertiesChanged (checked on 247 and 252), and logind's file
// /run/systemd/shutdown/scheduled, present while a schedule stands. The
// file is only looked at (a stat every Poll, no bus traffic); the property
// is read over the bus when the file appeared, changed or went away, and
// every Reread in any case. drainTimeout before the deadline it drains, as
// the wrapper does for a schedule within the drain timeout (the same
// cordon record), within what is left before logind acts less a margin;
// once per schedule, and not if the wrapper already did. When the schedule
// is cancelled, or moved beyond the drain timeout, it undoes gnsh's cordon
// for it (never an admin's). A dry run (shutdown -k) looks like a real
// schedule to logind's readers: the wrapper notes it (drainer.DryRunAt)
// and the follower leaves it alone. The drain leaves the marker with the
// schedule's deadline, so the shutdown guard does not drain again when
// logind acts.
//
// A follower that was not running when a schedule was cancelled (the agent
// stopped or restarting, and the cancel not made through the wrapper, whose
// shutdown -c undoes the cordon itself) did not see it go. So once, at its
// first look with nothing scheduled within the drain timeout (a schedule
// beyond it is drained for again in time), it undoes gnsh's cordon for a
// schedule of this boot if one stands: such a cordon serves no shutdown
// now, and nothing else would lift it before the next boot.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/logind"
)

// Defaults of the ScheduleFollower.
const (
	// DefaultScheduleFile is logind's record of a standing schedule.
	DefaultScheduleFile = "/run/systemd/shutdown/scheduled"
	DefaultSchedulePoll = 2 * time.Second
	// DefaultScheduleReread bounds how long a schedule the file did not
	// show (a logind that writes none) goes unseen.
	DefaultScheduleReread = time.Minute
	// DefaultScheduleMargin is how long before logind acts the drain
	// ahead of a schedule must have ended.
	DefaultScheduleMargin = 5 * time.Second
)

// LogindSchedule is what logind says about scheduled shutdowns.
type LogindSchedule struct {
	Type      string // ScheduledShutdown's type: reboot, poweroff, …; "" for none
	USec      uint64 // ScheduledShutdown's time (logind.ScheduledTime)
	Preparing bool   // PreparingForShutdown: a shutdown is under way
}

// ReadLogindSchedule reads ScheduledShutdown and PreparingForShutdown over
// the bus at address, each call bounded by ctx.
func ReadLogindSchedule(ctx context.Context, address string) (LogindSchedule, error) {
	var s LogindSchedule
	conn, err := logind.Dial(ctx, address, false)
	if err != nil {
		return s, fmt.Errorf("system bus %s: %w", address, err)
	}
	defer conn.Close()
	l := conn.Logind()
	if s.Preparing, err = l.PreparingForShutdown(ctx); err != nil {
		return s, err
	}
	s.Type, s.USec, err = l.ScheduledShutdown(ctx)
	return s, err
}

// ScheduleFollower drains ahead of logind's scheduled shutdowns. Read,
// Drain and Undo are required.
type ScheduleFollower struct {
	// Read reads logind's schedule (ReadLogindSchedule). When it fails
	// (no bus, a v219 logind without the property) the file stands in.
	Read func(ctx context.Context) (LogindSchedule, error)
	// File is logind's schedule file (DefaultScheduleFile if "").
	File string
	// DrainTimeout: the drain starts this long before the deadline.
	DrainTimeout time.Duration
	// Drained, if set, reports whether gnsh already drained for the
	// schedule at (the marker: the wrapper, for a near schedule).
	Drained func(at time.Time) bool
	// DryRun, if set, reports whether the schedule for at is a dry run
	// (shutdown -k) that the wrapper noted (drainer.DryRunAt): logind's
	// readers show a dry run as a real schedule.
	DryRun func(at time.Time) bool
	// NoDrain, if set, reports whether the schedule for at was made with
	// --no-drain (drainer.NoDrainAt): the follower neither drains for it
	// nor asks a reboot slot, as the wrapper would not have.
	NoDrain func(at time.Time) bool
	// Drain drains ahead of the shutdown action scheduled for at, within
	// budget (drainer.DrainForSchedule).
	Drain func(ctx context.Context, action string, at time.Time, budget time.Duration) error
	// Undo lifts gnsh's cordon for a schedule of this boot and drops the
	// marker (drainer.UndoScheduleCordon); a non-nil pending is asked
	// under the drain lock first, and true there means a shutdown that
	// the cordon may serve is due: nothing is undone.
	Undo func(ctx context.Context, why string, pending func(context.Context) bool) (bool, error)
	// Cancel, if set, cancels the schedule (type and usec as logind
	// shows it) for which no reboot slot came (Drain returned a
	// drainer.SlotRefusal), why being that refusal: it must cancel only
	// while that very schedule stands (false, nil when it changed). A
	// failure is tried again at the next look, until the schedule's time.
	Cancel func(ctx context.Context, typ string, usec uint64, at time.Time, why string) (bool, error)
	// Slot, if set, asks at once (no wait, no drain) for the reboot slot
	// of the schedule at when the follower's budget for it ends before a
	// drain could take one (drainer.SlotForSchedule): the schedule was too
	// near when seen, or the drain lock was held by another gnsh until
	// then. A drainer.SlotRefusal is handled as Drain's: the schedule is
	// cancelled (or, failing that before its time, Uncancelled is told).
	Slot func(ctx context.Context, action string, at time.Time) error
	// Uncancelled, if set, records (a Warning Event) that a schedule no
	// reboot slot came for could not be cancelled before its time.
	Uncancelled func(ctx context.Context, action string, at time.Time, why string)
	// Defers: Cancel queues the request (slots.queue is not never): the
	// node agent reboots the node once a slot comes; the line says so.
	Defers bool
	Out    io.Writer
	Status func(string)
	Clock  clock.Clock // clock.RealClock if nil

	// Timing; the DefaultSchedule… constants if zero.
	Poll, Reread, Margin time.Duration

	mu          sync.Mutex
	running     *drainRun // the drain under way, for Preempt
	pausedUntil time.Time // Preempt: no drain starts before (zero: none)
	retry       bool      // Resume: drain again for a schedule tried
}

// preemptPause bounds a Preempt's pause when no Resume comes (the
// shutdown under way neither happened nor was cancelled).
const preemptPause = 10 * time.Minute

// Preempt stops the drain ahead of a schedule, if one runs, waits within
// ctx until it has ended (its lock released), and starts none until
// Resume (at most preemptPause): a shutdown under way (the shutdown
// guard's drain) needs the drain lock that drain holds while it drains
// (its wait for a reboot slot holds none, and has nothing left to wait
// for: the shutdown under way is not gated). It reports whether it
// stopped one.
func (f *ScheduleFollower) Preempt(ctx context.Context) bool {
	f.mu.Lock()
	r := f.running
	f.pausedUntil = f.clock().Now().Add(preemptPause)
	f.mu.Unlock()
	if r == nil {
		return false
	}
	r.cancel()
	select {
	case <-r.finished:
	case <-ctx.Done():
	}
	return true
}

// Resume ends Preempt's pause: the shutdown under way was cancelled, and
// a schedule that still stands is drained for (and gated) again.
func (f *ScheduleFollower) Resume() {
	f.mu.Lock()
	f.pausedUntil, f.retry = time.Time{}, true
	f.mu.Unlock()
}

func (f *ScheduleFollower) clock() clock.Clock {
	if f.Clock == nil {
		return clock.RealClock{}
	}
	return f.Clock
}

// paused reports whether Preempt holds drains back now, and takes a
// Resume's retry.
func (f *ScheduleFollower) paused(now time.Time) (paused, retry bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	retry, f.retry = f.retry, false
	return now.Before(f.pausedUntil), retry
}

// schedule is a scheduled shutdown that stands.
type schedule struct {
	action string
	at     time.Time
	usec   uint64
}

func (s *schedule) key() string { return s.action + "@" + strconv.FormatUint(s.usec, 10) }

// when is the deadline for a line.
func (s *schedule) when() string { return s.at.Local().Format("2006-01-02 15:04:05 MST") }

// drainActions are the scheduled types the follower drains for: those
// that end this boot (a soft-reboot keeps the boot ID, so the agent would
// never lift the cordon).
var drainActions = []string{"reboot", "poweroff", "halt", "kexec"}

// fileStamp tells whether the schedule file changed.
type fileStamp struct {
	exists bool
	ino    uint64
	size   int64
	mtime  time.Time
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	st := fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = uint64(sys.Ino)
	}
	return st
}

// readScheduleFile parses logind's schedule file (USEC=, MODE=; v219's
// shutdownd also wrote DRY_RUN=1): ok is false when there is none.
func readScheduleFile(path string) (typ string, usec uint64, dry, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, false, false
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "USEC":
			usec, _ = strconv.ParseUint(v, 10, 64)
		case "MODE":
			typ = v
		case "DRY_RUN":
			dry = v == "1"
		}
	}
	return typ, usec, dry, typ != ""
}

// follow is the follower's state.
type follow struct {
	f   *ScheduleFollower
	clk clock.Clock

	cur       *schedule // the schedule that stands, as last read
	preparing bool      // logind is preparing for (or carrying out) a shutdown
	readErr   string    // the last read error logged
	ignored   string    // the key of the schedule last said to be ignored

	tried string    // the key of the schedule drained for (or given up on)
	resp  *schedule // the schedule whose cordon this follower answers for
	undo  string    // why, while an undo waits for the drain lock
	held  bool      // the lock-held line was logged

	// orphans: the look for gnsh's cordon of a schedule cancelled before
	// this follower started is still to be made (at the next look with
	// nothing scheduled within the drain timeout), not before orphansAt.
	orphans   bool
	orphansAt time.Time
	orphanErr string // the last failure of that look, logged

	drain *drainRun // the drain under way
	// notBefore: no drain starts before (a drain found the lock held: it
	// tries again at the next look, not at once).
	notBefore time.Time
	drainHeld bool // the last drain found the lock held (its line logged)

	// refused: the schedule no reboot slot came for, while its cancel is
	// still to be made (why: the refusal).
	refused   *schedule
	why       string
	fix       string // what an admin can do about it (drainer.NoSlotFix)
	cancelErr string // the last failure of its cancel, logged
}

type drainRun struct {
	s        *schedule
	cancel   context.CancelFunc
	done     chan error
	finished chan struct{} // closed once Drain returned
}

func (f *ScheduleFollower) say(format string, args ...any) {
	if f.Out != nil {
		fmt.Fprintf(f.Out, "gnsh: agent: "+format+"\n", args...)
	}
}

func (f *ScheduleFollower) status(s string) {
	if f.Status != nil {
		f.Status(s)
	}
}

// Run follows logind's schedule until ctx ends; it returns ctx's error. A
// drain under way then ends with ctx (and Run waits for it).
func (f *ScheduleFollower) Run(ctx context.Context) error {
	w := &follow{f: f, clk: f.Clock, orphans: true}
	if w.clk == nil {
		w.clk = clock.RealClock{}
	}
	poll := orDefault(f.Poll, DefaultSchedulePoll)
	reread := orDefault(f.Reread, DefaultScheduleReread)
	file := f.file()
	var stamp fileStamp
	var lastRead time.Time
	first := true
	for {
		now := w.clk.Now()
		if st := stampOf(file); first || st != stamp || now.Sub(lastRead) >= reread {
			first, stamp, lastRead = false, st, now
			w.observe(ctx, file)
		}
		w.act(ctx)
		wait := poll
		if s := w.cur; s != nil && w.drain == nil && s.key() != w.tried {
			// Wake up when its drain is due, not up to Poll later.
			if d := s.at.Add(-f.DrainTimeout).Sub(w.clk.Now()); d > 0 && d < wait {
				wait = d
			}
		}
		var done <-chan error
		if w.drain != nil {
			done = w.drain.done
		}
		select {
		case <-ctx.Done():
			if w.drain != nil {
				w.drain.cancel()
				<-w.drain.done
			}
			return ctx.Err()
		case err := <-done:
			w.drained(ctx, err)
		case <-w.clk.After(wait):
		}
	}
}

// file is logind's schedule file.
func (f *ScheduleFollower) file() string {
	if f.File == "" {
		return DefaultScheduleFile
	}
	return f.File
}

// read reads logind's schedule within 10 s; if that fails (its error is
// returned), the schedule file stands in.
func (f *ScheduleFollower) read(ctx context.Context, file string) (LogindSchedule, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ls, err := f.Read(rctx)
	cancel()
	if err != nil {
		ls = LogindSchedule{}
		if typ, usec, dry, ok := readScheduleFile(file); ok && !dry {
			ls.Type, ls.USec = typ, usec
		}
	}
	return ls, err
}

// parseSchedule is the schedule that stands (nil for none, a dry run, or
// one due never) and whether a shutdown is under way.
func parseSchedule(ls LogindSchedule) (s *schedule, preparing bool) {
	switch at, ok := logind.ScheduledTime(ls.USec); {
	case ls.Type == "", strings.HasPrefix(ls.Type, "dry-"):
		// Nothing, or a dry run (shutdown -k): nothing happens then.
	case !ok && ls.USec == 0:
		return nil, true // v251+: an immediate action under way
	case !ok:
		// Due never (past year 294247): as good as none.
	default:
		s = &schedule{action: ls.Type, at: at, usec: ls.USec}
	}
	return s, ls.Preparing
}

// observe reads logind's schedule (or, failing that, the file) and logs
// what changed.
func (w *follow) observe(ctx context.Context, file string) {
	f := w.f
	ls, err := f.read(ctx, file)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		if msg := err.Error(); msg != w.readErr {
			f.say("reading systemd-logind's scheduled shutdown: %v; following %s alone", err, file)
			w.readErr = msg
		}
	} else {
		w.readErr = ""
	}
	s, preparing := parseSchedule(ls)
	w.preparing = preparing
	switch {
	case s == nil:
	case !slices.Contains(drainActions, s.action):
		if s.key() != w.ignored {
			f.say("a %s is scheduled for %s: not draining for it (not a shutdown of this boot)", s.action, s.when())
			w.ignored = s.key()
		}
		s = nil
	case f.DryRun != nil && f.DryRun(s.at):
		if s.key() != w.ignored {
			f.say("a dry run (shutdown -k) is scheduled for %s: nothing to drain for", s.when())
			f.status("idle: a dry run (shutdown -k) is scheduled for " + s.when())
			w.ignored = s.key()
		}
		s = nil
	case f.NoDrain != nil && f.NoDrain(s.at):
		if s.key() != w.ignored {
			f.say("a %s is scheduled for %s with --no-drain: not draining for it", s.action, s.when())
			f.status(fmt.Sprintf("idle: a %s is scheduled for %s with --no-drain", s.action, s.when()))
			w.ignored = s.key()
		}
		s = nil
	}
	switch {
	case s != nil && (w.cur == nil || w.cur.key() != s.key()):
		start := s.at.Add(-f.DrainTimeout)
		if start.After(w.clk.Now()) && s.key() != w.tried {
			f.say("a %s is scheduled for %s: draining at %s (drainTimeout %s before it)", s.action, s.when(),
				start.Local().Format("2006-01-02 15:04:05 MST"), f.DrainTimeout)
			f.status(fmt.Sprintf("a %s is scheduled for %s: draining at %s", s.action, s.when(), start.Local().Format("15:04:05")))
		} else {
			f.say("a %s is scheduled for %s, within drainTimeout (%s)", s.action, s.when(), f.DrainTimeout)
		}
	case s == nil && w.cur != nil:
		if !w.preparing {
			// Gone: the same time scheduled again is a new request.
			w.tried = ""
		}
		switch {
		case w.preparing:
			f.say("the scheduled %s for %s is under way", w.cur.action, w.cur.when())
		case w.resp == nil && w.drain == nil:
			// Else the undo's line says it.
			f.say("the scheduled %s for %s was cancelled", w.cur.action, w.cur.when())
			f.status("idle: the scheduled " + w.cur.action + " was cancelled")
		}
	}
	w.cur = s
}

// act starts the drain when a schedule's time has come, and the undo when
// the schedule it drained for was cancelled or moved away.
func (w *follow) act(ctx context.Context) {
	f := w.f
	now := w.clk.Now()
	if w.preparing {
		return // logind acts now: the guard's turn, and the cordon stays
	}
	if w.refused != nil {
		w.tryCancel(ctx)
	}
	s := w.cur
	// Cancelled, or moved beyond the drain timeout: the cordon for the
	// schedule goes. (Moved within it, the cordon serves the new one.)
	far := s == nil || s.at.Sub(now) > f.DrainTimeout
	if r := w.drain; r != nil {
		if far && w.undo == "" {
			r.cancel() // its end comes through Run, then the undo
			w.undoFor(r.s, s)
		}
		return
	}
	if w.resp != nil && far && w.undo == "" {
		w.undoFor(w.resp, s)
	}
	if w.undo != "" {
		w.tryUndo(ctx)
		if w.undo != "" {
			return
		}
	}
	if far && w.orphans && w.resp == nil && !now.Before(w.orphansAt) {
		w.undoOrphan(ctx)
	}
	paused, retry := f.paused(now)
	if retry {
		w.tried = ""
	}
	if s == nil || far || s.key() == w.tried || paused || now.Before(w.notBefore) {
		return
	}
	if f.Drained != nil && f.Drained(s.at) {
		f.say("the scheduled %s for %s was drained for already (by gnsh's wrapper)", s.action, s.when())
		w.tried, w.resp = s.key(), s
		return
	}
	budget := min(f.DrainTimeout, s.at.Sub(now)-orDefault(f.Margin, DefaultScheduleMargin))
	if budget <= 0 {
		w.tried = s.key()
		if w.tooNear(ctx, s) {
			return // no slot for it: cancelled, or being
		}
		f.say("the scheduled %s for %s is too near to drain ahead of it; the shutdown guard drains when systemd-logind acts", s.action, s.when())
		return
	}
	f.say("draining ahead of the scheduled %s for %s, within %s", s.action, s.when(), budget.Round(time.Millisecond))
	f.status(fmt.Sprintf("draining ahead of the scheduled %s for %s", s.action, s.when()))
	dctx, cancel := context.WithCancel(ctx)
	r := &drainRun{s: s, cancel: cancel, done: make(chan error, 1), finished: make(chan struct{})}
	w.drain = r
	f.mu.Lock()
	f.running = r
	f.mu.Unlock()
	go func() {
		err := f.Drain(dctx, s.action, s.at, budget)
		f.mu.Lock()
		if f.running == r {
			f.running = nil
		}
		f.mu.Unlock()
		close(r.finished)
		r.done <- err
	}()
}

// tooNear is the end of the follower's budget for schedule s with no
// drain ahead of it: its reboot slot is asked for at once (Slot), and
// without one s is refused as after a drain that got none (cancelled, or
// the Event that it could not be). It reports whether s was refused.
func (w *follow) tooNear(ctx context.Context, s *schedule) bool {
	f := w.f
	if f.Slot == nil {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := f.Slot(sctx, s.action, s.at)
	cancel()
	switch {
	case drainer.IsSlotRefusal(err):
		if f.Cancel == nil {
			f.say("no reboot slot for the scheduled %s for %s: %v", s.action, s.when(), err)
			return true
		}
		w.refused, w.why, w.fix = s, err.Error(), drainer.NoSlotFix(err)
		w.tryCancel(ctx)
		return true
	case err != nil:
		f.say("the scheduled %s for %s: its reboot slot could not be asked for (%v)", s.action, s.when(), err)
	}
	return false
}

// tryCancel cancels the schedule no reboot slot came for, while it
// stands and its time has not come; while a gnsh command holds the drain
// lock it tries again at the next look.
func (w *follow) tryCancel(ctx context.Context) {
	f, s := w.f, w.refused
	switch {
	case w.preparing, !w.clk.Now().Before(s.at):
		f.say("no reboot slot for the scheduled %s for %s (%s), and it could not be cancelled before its time; it goes ahead", s.action, s.when(), w.why)
		if f.Uncancelled != nil {
			uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			f.Uncancelled(uctx, s.action, s.at, w.why)
			cancel()
		}
		w.refused, w.cancelErr = nil, ""
		return
	case w.cur == nil || w.cur.key() != s.key():
		f.say("no reboot slot for the scheduled %s for %s (%s); that schedule is gone, nothing to cancel", s.action, s.when(), w.why)
		w.refused, w.cancelErr = nil, ""
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cancelled, err := f.Cancel(cctx, s.action, s.usec, s.at, w.why)
	cancel()
	switch {
	case err != nil:
		msg := fmt.Sprintf("no reboot slot for the scheduled %s for %s (%s); cancelling it failed: %v; trying again until its time", s.action, s.when(), w.why, err)
		if drainer.IsLockHeld(err) {
			msg = fmt.Sprintf("no reboot slot for the scheduled %s for %s; waiting for the drain lock to cancel it: %v", s.action, s.when(), err)
		}
		if msg != w.cancelErr {
			f.say("%s", msg)
			w.cancelErr = msg
		}
		return
	case cancelled && f.Defers:
		f.say("deferred the scheduled %s for %s: %s; logind's schedule is cancelled and the %s queued: this agent drains the node and hands the %s to systemd-logind when a reboot slot is free ('shutdown -c' withdraws it)",
			s.action, s.when(), w.why, s.action, s.action)
		f.status(fmt.Sprintf("deferred the scheduled %s for %s: no reboot slot in time", s.action, s.when()))
		w.cur, w.tried = nil, ""
	case cancelled:
		f.say("cancelled the scheduled %s for %s: %s; %s", s.action, s.when(), w.why, w.fix)
		f.status(fmt.Sprintf("idle: cancelled the scheduled %s for %s: no reboot slot", s.action, s.when()))
		// Gone: the same time scheduled again is a new request.
		w.cur, w.tried = nil, ""
	default:
		f.say("no reboot slot for the scheduled %s for %s (%s); the schedule changed meanwhile, nothing cancelled", s.action, s.when(), w.why)
	}
	w.refused, w.cancelErr = nil, ""
}

// undoFor notes that the cordon for old must go: the schedule now is cur.
func (w *follow) undoFor(old, cur *schedule) {
	if cur == nil {
		w.undo = fmt.Sprintf("the scheduled %s for %s was cancelled", old.action, old.when())
	} else {
		w.undo = fmt.Sprintf("the scheduled %s for %s was moved to %s", old.action, old.when(), cur.when())
	}
}

// drained takes the end of the drain.
func (w *follow) drained(ctx context.Context, err error) {
	f, r := w.f, w.drain
	w.drain = nil
	r.cancel()
	s := r.s
	heldBefore := w.drainHeld
	w.drainHeld = false
	switch {
	case w.undo != "":
		// Cancelled or moved meanwhile: the undo follows.
		w.resp = s
		w.tried = s.key()
		f.say("drain ahead of the scheduled %s for %s stopped: %s", s.action, s.when(), w.undo)
		return
	case err == nil:
		f.say("drained ahead of the scheduled %s for %s", s.action, s.when())
		f.status(fmt.Sprintf("drained ahead of the scheduled %s for %s", s.action, s.when()))
	case errors.Is(err, drainer.ErrAlreadyDrained):
		f.say("the scheduled %s for %s was drained for already: %v", s.action, s.when(), err)
	case drainer.IsLockHeld(err):
		if !heldBefore {
			f.say("not draining ahead of the scheduled %s yet: %v", s.action, err)
		}
		w.drainHeld = true
		w.notBefore = w.clk.Now().Add(orDefault(f.Poll, DefaultSchedulePoll))
		return // tried again at the next look
	case drainer.IsSlotRefusal(err):
		// Nothing was cordoned; the schedule must not take the node down
		// beside the nodes that hold the slots.
		w.tried = s.key()
		if f.Cancel == nil {
			f.say("no reboot slot for the scheduled %s for %s: %v", s.action, s.when(), err)
			return
		}
		w.refused, w.why, w.fix = s, err.Error(), drainer.NoSlotFix(err)
		w.tryCancel(ctx)
		return
	default:
		f.say("drain ahead of the scheduled %s for %s ended: %v", s.action, s.when(), err)
		f.status(fmt.Sprintf("drain ahead of the scheduled %s for %s ended: %v", s.action, s.when(), err))
	}
	w.tried, w.resp = s.key(), s
}

// tryUndo lifts the cordon for the schedule that went away; while a drain
// holds the lock it waits (one line) and tries again at the next look.
func (w *follow) tryUndo(ctx context.Context) {
	f := w.f
	undone, err := f.Undo(ctx, w.undo, nil)
	switch {
	case drainer.IsLockHeld(err):
		if !w.held {
			f.say("%s; waiting for the drain lock to undo gnsh's cordon: %v", w.undo, err)
			w.held = true
		}
		return
	case errors.Is(err, drainer.ErrShutdownPending):
		// A shutdown under way (or due) now relies on the cordon: it stays.
		f.say("%s, but gnsh's cordon stays: %v", w.undo, err)
	case err != nil:
		f.say("%s, but undoing gnsh's cordon failed (%v); run 'gnsh uncordon --only-if-ours'", w.undo, err)
	case undone:
		f.say("%s; gnsh's cordon for it undone", w.undo)
		f.status("idle: " + w.undo + "; uncordoned")
	default:
		f.say("%s; no cordon of gnsh's for it stands", w.undo)
	}
	w.undo, w.held, w.resp = "", false, nil
}

// orphanWhy is why undoOrphan undoes a cordon.
const orphanWhy = "no shutdown is scheduled (one was cancelled while the node agent was not running)"

// undoOrphan looks once for gnsh's cordon of a schedule of this boot while
// nothing is scheduled within the drain timeout: one cancelled (or moved
// away) while no follower ran.
// Whether a shutdown is due is asked again under the drain lock, from
// logind: a wrapper may have drained for a new schedule meanwhile. While a
// drain holds the lock it tries again at the next look; after any other
// failure, once a Reread later.
func (w *follow) undoOrphan(ctx context.Context) {
	f := w.f
	pending := func(ctx context.Context) bool {
		ls, _ := f.read(ctx, f.file())
		s, preparing := parseSchedule(ls)
		return preparing || s != nil && s.at.Sub(w.clk.Now()) <= f.DrainTimeout
	}
	undone, err := f.Undo(ctx, orphanWhy, pending)
	switch {
	case drainer.IsLockHeld(err):
		return
	case errors.Is(err, drainer.ErrShutdownPending):
		// Not an orphan: a shutdown relies on it.
	case err != nil:
		every := orDefault(f.Reread, DefaultScheduleReread)
		if msg := err.Error(); msg != w.orphanErr {
			f.say("cannot check for gnsh's cordon of a cancelled scheduled shutdown (%v); trying again every %s", err, every)
			w.orphanErr = msg
		}
		w.orphansAt = w.clk.Now().Add(every)
		return
	case undone:
		f.say("%s; gnsh's cordon for it undone", orphanWhy)
		f.status("idle: uncordoned: " + orphanWhy)
	}
	w.orphans = false
}
