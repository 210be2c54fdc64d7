package drainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A wrapper's run for a shutdown notes itself in the lock directory while
// it runs (run.PID: its process, start time, request and what it is doing),
// so that shutdown -c can find a run still waiting for its reboot slot,
// for the node agent, or draining. Such a run for a schedule (shutdown -r
// +5, due within drainTimeout) would schedule its shutdown once done,
// after the cancel: shutdown -c asks it to stop (stop.PID, naming the run's
// process start time, so that a PID used again is not taken for it), and
// the run, which looks for that request every stopPoll, stops as a SIGINT
// would stop it (it withdraws from the queue of the reboot slots, undoes
// its cordon, frees its slot) and exits 1 saying so. A run for a shutdown
// at once is not a schedule, which systemd's shutdown -c does not cancel:
// the cancel only names it (Ctrl-C stops it).
const (
	runNotePrefix = "run."
	// runLockSuffix names the file a run holds an flock on for its life
	// (run.PID.flock): whether the run still runs is whether that lock is
	// held, which needs neither its PID nor the /proc of its PID
	// namespace, and ends when the process does, a zombie included.
	runLockSuffix = ".flock"
	stopPrefix    = "stop."
	// stopPoll is how often a run for a schedule looks for a stop request.
	stopPoll = 200 * time.Millisecond
)

// RunNote is the content of run.PID.
type RunNote struct {
	PID int `json:"pid"`
	// Start is the process's start time (field 22 of /proc/PID/stat).
	Start  uint64 `json:"start"`
	Action string `json:"action"`
	User   string `json:"user"`
	TTY    string `json:"tty,omitempty"`
	// When is the schedule's time; nil for a shutdown at once.
	When *time.Time `json:"when,omitempty"`
	// Phase is what the run is doing: "waiting for a reboot slot",
	// "draining node-1", …
	Phase string `json:"phase"`
}

// who is "alice on pts/0".
func (n RunNote) who() string {
	if n.TTY != "" {
		return n.User + " on " + n.TTY
	}
	return n.User
}

// request is "the reboot scheduled for 10:05:00", or "a reboot".
func (n RunNote) request() string {
	if n.When == nil {
		return "a " + n.Action
	}
	return "the " + n.Action + " scheduled for " + n.When.Local().Format("15:04:05")
}

// stopRequest is the content of stop.PID.
type stopRequest struct {
	Start uint64 `json:"start"` // the run's process start time
	By    string `json:"by"`    // who cancelled: "bob on pts/1"
}

// runWatch is a noted run's state: its note, and the stop request its
// watcher took, if any.
type runWatch struct {
	mu    sync.Mutex
	note  RunNote
	by    string // who stopped it; "" while nobody did
	phase string // the phase it was stopped in
	// unwatch stops the watcher (a no-op for a run at once).
	unwatch func()
	// lock is run.PID.flock, held (LOCK_EX) while the run runs; nil if
	// it could not be made.
	lock *os.File
}

// noteRun notes a wrapper's run for a shutdown and, for a schedule,
// watches for shutdown -c's stop request: the returned context ends when
// one comes. A note that cannot be written costs only that (a debug line).
func (r *run) noteRun(ctx context.Context, when *time.Time) context.Context {
	if r.purpose != forShutdown || r.d.Agent {
		return ctx
	}
	pid := os.Getpid()
	start, err := procStart(pid)
	if err != nil {
		r.debug("run note not written: %v", err)
		return ctx
	}
	w := r.d.who()
	r.watch = &runWatch{note: RunNote{PID: pid, Start: start, Action: r.verb, User: w.User, TTY: w.TTY, When: when, Phase: "connecting to the API server"},
		unwatch: func() {}}
	// The lock first, then the note: a note is never seen without it.
	if r.watch.lock, err = r.d.holdRunLock(pid); err != nil {
		r.debug("run lock not held: %v", err)
	}
	r.writeRunNote()
	if when == nil {
		return ctx
	}
	ctx, cancel := context.WithCancel(ctx)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(stopPoll) // another process asks, in real time
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if by, ok := r.d.takeStop(pid, start); ok {
				r.watch.mu.Lock()
				r.watch.by, r.watch.phase = by, r.watch.note.Phase
				r.watch.mu.Unlock()
				cancel()
				return
			}
		}
	}()
	var once sync.Once
	r.watch.unwatch = func() {
		once.Do(func() {
			close(done)
			<-finished
			cancel()
		})
	}
	return ctx
}

// notePhase records what the noted run does now.
func (r *run) notePhase(phase string) {
	if r.watch == nil {
		return
	}
	r.watch.mu.Lock()
	r.watch.note.Phase = phase
	r.watch.mu.Unlock()
	r.writeRunNote()
}

func (r *run) writeRunNote() {
	r.watch.mu.Lock()
	data, err := json.Marshal(r.watch.note)
	r.watch.mu.Unlock()
	if err == nil {
		err = r.d.writeRunFile(runNotePrefix+strconv.Itoa(r.watch.note.PID), data)
	}
	if err != nil {
		r.debug("run note not written: %v", err)
	}
}

// stoppedBy is who stopped this run through shutdown -c ("" for nobody).
func (r *run) stoppedBy() string {
	if r.watch == nil {
		return ""
	}
	r.watch.mu.Lock()
	defer r.watch.mu.Unlock()
	return r.watch.by
}

// unwatch ends the watch for a stop request (the run is past its drain: a
// request that comes now is for logind's cancel to answer) and reports who
// stopped the run, if anyone did.
func (r *run) unwatch() string {
	if r.watch == nil {
		return ""
	}
	r.watch.unwatch()
	return r.stoppedBy()
}

// forgetRun removes the run's note: it is over.
func (r *run) forgetRun() {
	if r.watch == nil {
		return
	}
	r.watch.unwatch()
	name := runNotePrefix + strconv.Itoa(r.watch.note.PID)
	_ = os.Remove(filepath.Join(r.d.lockDir(), name))
	if r.watch.lock != nil {
		_ = os.Remove(filepath.Join(r.d.lockDir(), name+runLockSuffix))
		_ = r.watch.lock.Close()
	}
	r.watch = nil
}

// holdRunLock holds an exclusive flock on run.PID.flock (lockFile: 0600,
// never through a symlink), released when the process ends.
func (d *Drainer) holdRunLock(pid int) (*os.File, error) {
	f, err := lockFile(d.lockDir(), runNotePrefix+strconv.Itoa(pid)+runLockSuffix, unix.LOCK_EX)
	if err != nil && f != nil {
		f.Close() // held: another process of this PID's (none should be)
		f = nil
	}
	return f, err
}

// takeStop takes a stop request for the run of process pid (started at
// start): it removes the request, which tells shutdown -c that it was
// taken, and returns who asked.
func (d *Drainer) takeStop(pid int, start uint64) (string, bool) {
	name := stopPrefix + strconv.Itoa(pid)
	var req stopRequest
	if d.readRunFile(name, &req) != nil || req.Start != start {
		return "", false
	}
	_ = os.Remove(filepath.Join(d.lockDir(), name))
	return req.By, true
}

// runNotes are the notes of the wrapper's runs that still run; a note
// whose process has ended (killed: SIGKILL, the OOM killer) is removed.
func (d *Drainer) runNotes() []RunNote {
	entries, err := os.ReadDir(d.lockDir())
	if err != nil {
		return nil
	}
	var notes []RunNote
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), runNotePrefix) {
			continue
		}
		var n RunNote
		if d.readRunFile(e.Name(), &n) != nil || e.Name() != runNotePrefix+strconv.Itoa(n.PID) {
			continue
		}
		if !d.runAlive(n) {
			_ = os.Remove(filepath.Join(d.lockDir(), e.Name()))
			_ = os.Remove(filepath.Join(d.lockDir(), e.Name()+runLockSuffix))
			continue
		}
		notes = append(notes, n)
	}
	return notes
}

// RunsPending describes the wrapper's runs of this node that still run
// (each noted itself before it asked for a reboot slot): the node agent
// never frees a slot of this boot while one does, for it may be that
// run's, taken and not yet under the drain lock.
func (d *Drainer) RunsPending() []string {
	var s []string
	for _, n := range d.runNotes() {
		s = append(s, fmt.Sprintf("pid %d (%s by %s)", n.PID, n.request(), n.who()))
	}
	return s
}

// runAlive reports whether the process that wrote n still runs: its
// run.PID.flock is held. Without one (an older gnsh's note, or one whose
// lock could not be made) its process is looked up by PID and start time.
func (d *Drainer) runAlive(n RunNote) bool {
	f, held, exists, err := probeFlock(d.lockDir(), runNotePrefix+strconv.Itoa(n.PID)+runLockSuffix)
	if f != nil {
		f.Close()
	}
	if exists {
		return held // an flock that fails otherwise: not held
	}
	state, start, err := procStat(n.PID)
	return err == nil && start == n.Start && state != "Z" // a zombie has ended
}

// stopWaitMax bounds how long shutdown -c waits for a run it asked to stop
// (it withdraws from the queue and undoes its cordon, each bounded by the
// API timeout) or that hands its schedule to logind (a few D-Bus calls).
func stopWaitMax(apiTimeout time.Duration) time.Duration {
	return max(4*apiTimeout+5*time.Second, 30*time.Second)
}

// stopRuns is shutdown -c's first step, before logind's cancel: each run
// for a schedule still waiting for its reboot slot or draining is asked to
// stop, and waited for (bounded), so that it never schedules its shutdown
// after the cancel; logind's cancel that follows cancels one that was
// already being handed off. A run for a shutdown at once is only named.
func (c *cancelRun) stopRuns(ctx context.Context) {
	r := newRun(c.d, forShutdown, "cancel")
	_ = r.loadConfig(nil) // the defaults are bound enough
	by := c.d.who()
	who := RunNote{User: by.User, TTY: by.TTY}.who()
	for _, n := range c.d.runNotes() {
		if n.When == nil {
			r.info("%s (pid %d, by %s) is %s: it is not scheduled, so shutdown -c does not stop it; interrupt it (Ctrl-C where it runs, or kill -INT %d)",
				n.request(), n.PID, n.who(), n.Phase, n.PID)
			continue
		}
		data, _ := json.Marshal(stopRequest{Start: n.Start, By: who})
		name := stopPrefix + strconv.Itoa(n.PID)
		if err := c.d.writeRunFile(name, data); err != nil {
			r.warn("cannot ask pid %d (%s by %s, %s) to stop (%v): it will schedule its %s when done; interrupt it (kill -INT %d), then run shutdown -c again",
				n.PID, n.request(), n.who(), n.Phase, err, n.Action, n.PID)
			continue
		}
		ended := c.waitRun(ctx, n, stopWaitMax(r.cfg.APITimeout.D()))
		taken := !c.d.stopPending(name)
		if !taken {
			_ = os.Remove(filepath.Join(c.d.lockDir(), name))
		}
		switch {
		case taken && ended:
			r.info("stopped pid %d: %s by %s, which was %s; it scheduled nothing", n.PID, n.request(), n.who(), n.Phase)
		case taken:
			r.warn("pid %d (%s by %s) took the stop but has not ended yet; it schedules nothing", n.PID, n.request(), n.who())
		case ended:
			// It was past its drain, handing its schedule to logind: the
			// cancel that follows cancels that schedule.
		default:
			r.warn("pid %d (%s by %s, %s) did not answer the stop; if it schedules its %s after this cancel, run shutdown -c again",
				n.PID, n.request(), n.who(), n.Phase, n.Action)
		}
	}
}

// stopPending reports whether the stop request name is still there (not
// taken).
func (d *Drainer) stopPending(name string) bool {
	_, err := os.Lstat(filepath.Join(d.lockDir(), name))
	return !errors.Is(err, os.ErrNotExist)
}

// waitRun waits until the run of n has ended (its note gone, or its
// process), at most max; ctx ends the wait too. It reports whether it
// ended.
func (c *cancelRun) waitRun(ctx context.Context, n RunNote, max time.Duration) bool {
	path := filepath.Join(c.d.lockDir(), runNotePrefix+strconv.Itoa(n.PID))
	end := time.Now().Add(max)
	for {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) || !c.d.runAlive(n) {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stoppedError is the error of a run for a schedule that shutdown -c stopped.
type stoppedError struct {
	By    string // who cancelled
	Phase string // what the run was doing then
}

func (e *stoppedError) Error() string { return fmt.Sprintf("cancelled by %s (shutdown -c)", e.By) }
