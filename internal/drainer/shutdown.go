package drainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/legacy"
)

// MarkerName is the file, in the lock directory (/run/gnsh), that a
// wrapper's drain writes right before it hands a shutdown to logind: the
// node agent, seeing PrepareForShutdown(true), then knows that this
// shutdown was drained for and does not drain a second time.
const MarkerName = "drained"

// Marker is the content of MarkerName.
type Marker struct {
	BootID string    `json:"bootID"`
	Action string    `json:"action"`
	Time   time.Time `json:"time"`
	// Deadline, for a drain ahead of a scheduled shutdown (the wrapper's
	// for a near schedule, the agent's for a far one), is the time logind
	// acts: PrepareForShutdown comes then, maybe long after Time.
	Deadline *time.Time `json:"deadline,omitempty"`
	// NoDrain: the shutdown was asked with --no-drain, which promises no
	// drain at all: the node agent leaves it alone as it does a drained
	// one.
	NoDrain bool `json:"noDrain,omitempty"`
}

// writeMarker writes the marker for a drained shutdown (deadline: the
// schedule's time, for a drain ahead of one). A failure costs only a
// second drain by the agent, so it is a debug line.
func (d *Drainer) writeMarker(action string, deadline *time.Time) error {
	data, err := json.Marshal(Marker{BootID: d.bootID(), Action: action, Time: d.now().UTC(), Deadline: deadline})
	if err != nil {
		return err
	}
	return d.writeRunFile(MarkerName, data)
}

// NoDrainInFlight bounds how long the mark of a --no-drain request counts
// for the node agent without logind's word that it took the request: the
// hand-off after the mark is a few bus calls (logind's methods, the wall
// message, the shutdown or schedule call, its retry as a plain reboot or
// with the older method), each bounded by handoff.DefaultCallTimeout;
// logind sends PrepareForShutdown(true) during the last. A mark older than
// that was left by a command killed before it finished (SIGKILL, a crash):
// counted for longer, it would keep the agent from draining a later
// shutdown that bypasses gnsh.
const NoDrainInFlight = 5 * handoff.DefaultCallTimeout

// noDrainRun is the Prepared of a shutdown asked at once with
// --no-drain: its hand-off is held against SIGINT and SIGTERM (cut in
// half, it would leave the mark), and a refused one puts back the marker
// it replaced (a drain's ahead of a schedule, which still stands).
type noDrainRun struct {
	d     *Drainer
	mark  []byte // the mark as written
	prev  []byte // the marker it replaced; nil for none
	leave func()
}

func (n noDrainRun) Finish(_ context.Context, err error) {
	defer n.leave()
	if err == nil {
		return
	}
	// Only while the mark is still this command's: another gnsh may have
	// written its own since.
	if cur, rerr := n.d.readRunBytes(MarkerName); rerr != nil || !bytes.Equal(cur, n.mark) {
		return
	}
	if n.prev == nil {
		n.d.RemoveMarker()
		return
	}
	if werr := n.d.writeRunFile(MarkerName, n.prev); werr != nil {
		n.d.RemoveMarker()
	}
}

// noteNoDrain marks a shutdown asked at once with --no-drain (not a dry
// run, not -f, which never asks logind) on a Kubernetes node whose config
// drains: without the mark, the node agent would drain it when logind
// sends PrepareForShutdown, as it does every shutdown that did not come
// through gnsh. It returns the Prepared that holds the hand-off against
// signals and takes the mark away if the hand-off fails; nil when nothing
// was marked. The mark counts for the agent for NoDrainInFlight at most.
func (d *Drainer) noteNoDrain(req *legacy.Request) handoff.Prepared {
	if req.When != 0 || req.DryRun || req.Force != 0 {
		return nil
	}
	r := newRun(d, forShutdown, req.Action.String())
	if r.loadConfig(nil) != nil || !r.cfg.Drain || !r.isNode() {
		return nil
	}
	// Held before the mark is written: a signal between the two would
	// leave it.
	leave := d.Signal.Hold("handing the " + req.Action.String() + " to the system")
	prev, perr := d.readRunBytes(MarkerName)
	if perr != nil {
		prev = nil
	}
	data, err := json.Marshal(Marker{BootID: d.bootID(), Action: req.Action.String(), Time: d.now().UTC(), NoDrain: true})
	if err == nil {
		err = d.writeRunFile(MarkerName, data)
	}
	if err != nil {
		leave()
		r.debug("--no-drain: cannot note it for the node agent (%v): it may drain this shutdown", err)
		return nil
	}
	return noDrainRun{d: d, mark: data, prev: prev, leave: leave}
}

// writeRunFile writes name in the lock directory (root's alone, 0700): a
// temporary file made 0600 with O_EXCL|O_NOFOLLOW, renamed over name.
func (d *Drainer) writeRunFile(name string, data []byte) error {
	dir := d.lockDir()
	if err := ensureLockDir(dir); err != nil {
		return err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d", name, os.Getpid()))
	_ = os.Remove(tmp)
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, lockFileMode)
	if err != nil {
		return &os.PathError{Op: "open", Path: tmp, Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// readRunBytes reads name in the lock directory, never following a
// symlink, without its final newline (as writeRunFile was given it).
func (d *Drainer) readRunBytes(name string) ([]byte, error) {
	f, err := openRunFile(d.lockDir(), name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<16))
	return bytes.TrimSuffix(b, []byte("\n")), err
}

// readRunFile decodes the JSON in name in the lock directory, never
// following a symlink.
func (d *Drainer) readRunFile(name string, v any) error {
	f, err := openRunFile(d.lockDir(), name)
	if err != nil {
		return err
	}
	defer f.Close()
	return json.NewDecoder(f).Decode(v)
}

// DryRunName is the file, in the lock directory, where the wrapper notes
// a dry run (shutdown -k TIME) it had logind schedule: logind shows it as
// a real schedule, and the node agent must not drain ahead of it.
const DryRunName = "dry-run"

// (It also notes a schedule made with --no-drain, NoDrain: one schedule
// stands at a time, and a new request accepted by logind replaces the
// note, Accepted.)
type dryRun struct {
	BootID  string `json:"bootID"`
	USec    uint64 `json:"usec"`
	NoDrain bool   `json:"noDrain,omitempty"`
	// Asked is a --no-drain schedule noted right before it is asked of
	// logind (the agent must never see it without its note), beside the
	// note of the schedule that stands: that one stays until logind has
	// accepted the new request, which a refusal leaves standing.
	Asked *dryRun `json:"asked,omitempty"`
	// Noted is when Asked was noted (Unix microseconds): a request
	// logind refused, or a command killed during it, leaves Asked, which
	// then stands for no schedule at all.
	Noted int64 `json:"noted,omitempty"`
}

// NoteDryRun is handoff.DryRunNoter: on a Kubernetes node (a kubeconfig
// is found; elsewhere nothing changes) it notes the dry run scheduled for
// usec. A failure only costs a drain by the agent ahead of it.
func (d *Drainer) NoteDryRun(usec uint64) {
	d.noteSchedule(func(dr *dryRun) { *dr = dryRun{BootID: d.bootID(), USec: usec} })
}

// NoteNoDrain is handoff.NoDrainNoter: as NoteDryRun, for a shutdown to be
// scheduled with --no-drain, which the node agent then leaves alone (no
// drain, no reboot slot); noted before logind is asked, beside the note of
// the schedule that stands (Accepted drops that one). A failure costs that
// drain, and the gate.
func (d *Drainer) NoteNoDrain(usec uint64) {
	d.noteSchedule(func(dr *dryRun) {
		if dr.BootID != d.bootID() {
			*dr = dryRun{BootID: d.bootID()}
		}
		dr.Asked = &dryRun{BootID: d.bootID(), USec: usec, NoDrain: true, Noted: d.now().UnixMicro()}
	})
}

// Accepted is handoff.AcceptNoter: logind took req, which replaced the
// schedule that stood. A --no-drain schedule's note is now the only one;
// any other request drops the notes (a dry run is noted by NoteDryRun).
func (d *Drainer) Accepted(req *legacy.Request) {
	if !req.DryRun {
		// logind took a new request: it replaces a queued one, as a new
		// schedule replaces the one before (its place goes with it).
		// The same action scheduled again (unattended-upgrades asks each
		// day) keeps the queued one and its place: whichever comes first
		// reboots the node, which ends the other.
		if q, err := d.ReadQueued(); err == nil && q != nil && !(req.When > 0 && q.Action == req.Action.String()) && d.RemoveQueued(q) {
			r := newRun(d, forShutdown, q.Action)
			_ = r.loadConfig(nil)
			r.info("the queued %s is replaced by this %s", q.What(), req.Action)
			d.journal(journalInfo, fmt.Sprintf("the queued %s is replaced by a %s that systemd-logind accepted", q.What(), req.Action))
			r.withdrawPlace(context.Background(), q)
		}
	}
	switch {
	case req.DryRun:
	case req.When > 0 && req.Drain.Skip:
		d.noteSchedule(func(dr *dryRun) { *dr = dryRun{BootID: d.bootID(), USec: req.When, NoDrain: true} })
	default:
		d.forgetDryRun()
	}
}

// noteSchedule changes the note, on a Kubernetes node.
func (d *Drainer) noteSchedule(change func(*dryRun)) {
	r := newRun(d, forShutdown, "note")
	if r.loadConfig(nil) != nil || !r.cfg.Drain || !r.isNode() {
		return
	}
	var dr dryRun
	_ = d.readRunFile(DryRunName, &dr)
	change(&dr)
	data, _ := json.Marshal(dr)
	_ = d.writeRunFile(DryRunName, data)
}

// DryRunAt reports whether the wrapper noted, in this boot, that the
// schedule for at is a dry run. (For the node agent.)
func (d *Drainer) DryRunAt(at time.Time) bool {
	var dr dryRun
	return d.readRunFile(DryRunName, &dr) == nil && dr.BootID == d.bootID() && dr.USec == uint64(at.UnixMicro()) && !dr.NoDrain
}

// NoDrainDue reports whether the wrapper noted, in this boot, a schedule
// made with --no-drain whose time came within maxAge (or is at most a
// minute ahead): logind acting on it is that shutdown, which the node
// agent must not drain. It returns the schedule's time. A schedule only
// asked, not yet accepted (Asked), counts while its request may be in
// flight (NoDrainInFlight), as for one due at once: a request logind
// refused leaves its note, which must not keep the agent from draining a
// shutdown that bypasses gnsh at that time.
func (d *Drainer) NoDrainDue(maxAge time.Duration) (time.Time, bool) {
	var dr dryRun
	if d.readRunFile(DryRunName, &dr) != nil {
		return time.Time{}, false
	}
	now := d.now()
	for _, n := range []*dryRun{&dr, dr.Asked} {
		if n == nil || !n.NoDrain || n.BootID == "" || n.BootID != d.bootID() || n.USec == 0 {
			continue
		}
		if n == dr.Asked {
			if since := now.Sub(time.UnixMicro(n.Noted)); n.Noted == 0 || since < -time.Minute || since > NoDrainInFlight {
				continue
			}
		}
		at := time.UnixMicro(int64(n.USec))
		if late := now.Sub(at); late >= -time.Minute && late <= maxAge {
			return at, true
		}
	}
	return time.Time{}, false
}

// NoDrainAt reports whether the wrapper noted, in this boot, that the
// schedule for at was made with --no-drain (or is being asked so). (For
// the node agent.)
func (d *Drainer) NoDrainAt(at time.Time) bool {
	var dr dryRun
	if d.readRunFile(DryRunName, &dr) != nil {
		return false
	}
	for _, n := range []*dryRun{&dr, dr.Asked} {
		if n != nil && n.BootID == d.bootID() && n.USec == uint64(at.UnixMicro()) && n.NoDrain {
			return true
		}
	}
	return false
}

// forgetDryRun drops the notes: logind accepted a real request, or
// cancelled.
func (d *Drainer) forgetDryRun() { _ = os.Remove(filepath.Join(d.lockDir(), DryRunName)) }

// ReadMarker reads the marker in the lock directory; os.ErrNotExist if
// there is none. (For the node agent.)
func (d *Drainer) ReadMarker() (Marker, error) {
	var m Marker
	err := d.readRunFile(MarkerName, &m)
	return m, err
}

// RemoveMarker removes the marker: the shutdown it was written for did not
// happen (a refused hand-off, a cancelled shutdown).
func (d *Drainer) RemoveMarker() {
	_ = os.Remove(filepath.Join(d.lockDir(), MarkerName))
}

// DrainedFor reports whether the marker says that gnsh drained, in this
// boot, for the shutdown now under way: no longer than maxAge ago, or, for
// a drain ahead of a scheduled shutdown, no longer than maxAge after that
// schedule's time (logind acts then; a cancelled or moved schedule takes
// its marker away). A marker from the future by more than a minute does
// not count. The mark of a --no-drain request (NoDrain) says nothing was
// drained: it counts only while that request may be in flight
// (NoDrainInFlight), never for a shutdown that follows a command killed
// before its hand-off.
func (d *Drainer) DrainedFor(maxAge time.Duration) (Marker, bool) {
	m, err := d.ReadMarker()
	if err != nil || m.BootID == "" || m.BootID != d.bootID() {
		return m, false
	}
	if m.NoDrain {
		maxAge = min(maxAge, NoDrainInFlight)
	}
	now := d.now()
	age := now.Sub(m.Time)
	switch {
	case age < -time.Minute:
		return m, false
	case age <= maxAge:
		return m, true
	}
	return m, m.Deadline != nil && now.Sub(*m.Deadline) <= maxAge
}

// ScheduleDrained reports whether the marker says that gnsh drained, in
// this boot, ahead of the shutdown scheduled for at (the wrapper for a
// near schedule, or the agent).
func (d *Drainer) ScheduleDrained(at time.Time) bool {
	m, err := d.ReadMarker()
	return err == nil && m.BootID != "" && m.BootID == d.bootID() && m.Deadline != nil && m.Deadline.Equal(at)
}

// ShutdownDrain is what a DrainForShutdown leaves: gnsh's cordon, if it
// made one, which Undo lifts if the shutdown is cancelled.
type ShutdownDrain struct {
	r *run
}

// Cordoned reports whether the drain made gnsh's cordon (or may have).
func (s *ShutdownDrain) Cordoned() bool { return s != nil && s.r.cordoned }

// Undo lifts the cordon this drain made, and only if its record is still
// this drain's (as after a refused hand-off), and frees the holder entry
// it wrote for a shutdown that bypassed gnsh. Bounded by 4×apiTimeout.
func (s *ShutdownDrain) Undo(why string) {
	if s == nil {
		return
	}
	s.r.undo(why)
	s.r.freeBypass(why)
}

// ErrDrainBudget is what DrainForShutdown returns when the budget ran out.
var ErrDrainBudget = errors.New("the drain did not finish within the shutdown's delay")

// DrainForShutdown is the node agent's drain for a shutdown that bypassed
// the wrapper (systemctl reboot, the power button): logind already sent
// PrepareForShutdown(true), so nothing can refuse it. It cordons at once
// and drains as a wrapper's drain does, under the drain lock, within
// budget (connecting, every request and the Events included); any outcome
// other than drained only ends the drain, reported as the error, and the
// cordon stays (the agent lifts it after the boot). The lock is released
// before it returns. The returned ShutdownDrain is never nil.
func (d *Drainer) DrainForShutdown(ctx context.Context, action string, budget time.Duration) (*ShutdownDrain, error) {
	return d.drainWithin(ctx, action, nil, budget)
}

// ErrAlreadyDrained is what DrainForSchedule returns when gnsh's cordon
// for that very schedule already stands and a drain under it finished
// (its record's drained): the wrapper, or an earlier run of the agent.
var ErrAlreadyDrained = errors.New("gnsh's cordon for this scheduled shutdown already stands, drained")

// DrainForSchedule is the node agent's drain ahead of a shutdown
// (action) that logind has scheduled for at: the same drain, lock, Events
// and cordon record as the wrapper's for a schedule due within
// drainTimeout (Ownership.When = at), so that shutdown -c through the
// wrapper undoes it and the agent lifts it after the boot. It ends within
// budget, as DrainForShutdown; a drained node gets the marker, with at as
// its Deadline, so that the shutdown guard does not drain again when logind
// acts. If gnsh's cordon for this schedule already stands in this boot
// and its record says a drain under it finished, it changes nothing but
// the marker and returns ErrAlreadyDrained; one whose drain was cut short
// (a signal, an API failure) is drained again under that cordon. The lock
// is released before it returns.
func (d *Drainer) DrainForSchedule(ctx context.Context, action string, at time.Time, budget time.Duration) (*ShutdownDrain, error) {
	at = at.UTC()
	return d.drainWithin(ctx, action, &at, budget)
}

func (d *Drainer) drainWithin(ctx context.Context, action string, when *time.Time, budget time.Duration) (*ShutdownDrain, error) {
	r := newRun(d, forShutdown, action)
	r.ahead = when != nil
	sd := &ShutdownDrain{r: r}
	if err := r.loadConfig(nil); err != nil {
		return sd, err
	}
	if !r.cfg.Drain {
		return sd, errors.New("drain: false in " + d.configPath())
	}
	if budget <= 0 {
		return sd, ErrDrainBudget
	}
	r.cfg.DrainTimeout = min(r.cfg.DrainTimeout, config.Duration(budget))
	r.cfg.APITimeout = min(r.cfg.APITimeout, config.Duration(budget))
	// A drain ahead of a schedule waits for a reboot slot within its
	// budget, less a moment: when none comes, the agent cancels the
	// schedule before its time (SlotRefusal).
	r.slotWaitMax = budget - slotRefusalSlack
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	o := r.attempt(ctx, when)
	r.lock.Release()
	r.lock = nil
	r.leaveDrain()
	// The slot stays held whatever the drain's outcome: the schedule (or
	// the shutdown under way) still takes the node down. The node agent's
	// keeper renews it while that schedule stands, and frees it once the
	// schedule is cancelled or the node is back. The entry written for a
	// shutdown that bypassed gnsh is kept within the budget (logind waits
	// no longer): a late Keep is skipped, the keeper renews it as it stands.
	keepWithin := context.Background()
	if r.bypasses() {
		keepWithin = ctx
	}
	r.keepSlot(keepWithin)
	if when != nil && (o == drained || o == drainedBefore) {
		if err := d.writeMarker(action, when); err != nil {
			r.debug("marker %s not written: %v", MarkerName, err)
		}
	}
	switch {
	case o == drained:
		return sd, nil
	case o == drainedBefore:
		return sd, ErrAlreadyDrained
	case o == noSlot, o == gateDown:
		return sd, r.slotRefusal(o)
	case ctx.Err() == context.DeadlineExceeded:
		return sd, fmt.Errorf("%w (%s): %v", ErrDrainBudget, budget, r.err)
	case r.err != nil:
		return sd, fmt.Errorf("%s: %w", o, r.err)
	}
	return sd, errors.New(o.String())
}

// SlotForSchedule is the node agent's last word on a schedule its drain
// ahead could not serve in time (the schedule too near when it was seen,
// or the drain lock held by another gnsh until then): it asks at once,
// without waiting and without a drain, for the reboot slot of the
// shutdown (action) scheduled for at, as that drain would have. A slot
// taken (or the node's own already) stays for the schedule, the keeper
// renewing it; a *SlotRefusal means none could be had (the limits, or
// slots.gate: required and the gate cannot be used): the schedule must
// not go ahead. nil too when none is needed (the gate off, or optional
// and unusable: a line says so). Bounded by ctx.
func (d *Drainer) SlotForSchedule(ctx context.Context, action string, at time.Time) error {
	at = at.UTC()
	r := newRun(d, forShutdown, action)
	r.ahead = true
	if err := r.loadConfig(nil); err != nil {
		return err
	}
	if !r.cfg.Drain || !r.gated() {
		return nil
	}
	s, err := d.connect(ctx, r.cfg, "", r.out)
	if err != nil {
		return r.slotRefusal(r.unslotted(r.classify(ctx, err), err))
	}
	r.sess = s
	r.out.node = s.node
	r.own = r.ownership(&at)
	n, o, out := r.readSelf(ctx)
	if n == nil {
		return r.slotRefusal(r.unslotted(out, r.err))
	}
	out, ok := r.takeSlot(ctx, n, o)
	r.keepSlot(context.Background())
	if !ok {
		return r.slotRefusal(out)
	}
	return nil
}

// slotRefusal is the error of an attempt that ended with o: a
// *SlotRefusal for no slot (noSlot, gateDown), else the attempt's error.
func (r *run) slotRefusal(o outcome) error {
	switch {
	case o == noSlot, o == gateDown:
		return &SlotRefusal{Err: r.err, Required: o == gateDown}
	case r.err != nil:
		return fmt.Errorf("%s: %w", o, r.err)
	}
	return nil
}

// slotRefusalSlack is how much of its budget a drain ahead of a schedule
// keeps back from the wait for a reboot slot.
const slotRefusalSlack = time.Second

// SlotRefusal is what DrainForSchedule returns when no reboot slot came
// within its budget (or the gate cannot be used and slots.gate is
// required): nothing was cordoned, and the schedule must not go ahead (the
// agent cancels it, CancelSchedule).
type SlotRefusal struct {
	Err      error
	Required bool // the gate could not be used, and slots.gate is required
}

func (e *SlotRefusal) Error() string {
	if e.Required {
		return fmt.Sprintf("reboot slots: %v (slots.gate: required)", e.Err)
	}
	return e.Err.Error()
}

func (e *SlotRefusal) Unwrap() error { return e.Err }

// CancelSchedule is the node agent's answer to a SlotRefusal: it cancels
// the shutdown (action) scheduled for at through cancel (logind's
// CancelScheduledShutdown, which cancel makes only while that very
// schedule stands: false if it changed meanwhile) and, if cancelled,
// posts a Warning Event on the Node saying why. With deferTo (slots.queue
// is not never) the request is not dropped: it is queued (queue.go) for
// the agent, which reboots the node when a slot comes, never before at;
// the Event says so (GnshRebootDeferred). The cancel comes first and
// needs neither the API server nor the drain lock (a wrapper waiting for
// a slot holds it, maybe past the schedule's time); the Event follows,
// bounded by 2×apiTimeout.
func (d *Drainer) CancelSchedule(ctx context.Context, action string, at time.Time, why string, deferTo bool,
	cancel func(ctx context.Context) (bool, error)) (bool, error) {
	cancelled, err := cancel(ctx)
	if err != nil || !cancelled {
		return false, err
	}
	r := newRun(d, forShutdown, "cancel")
	cfgErr := r.loadConfig(nil)
	var q *QueuedReboot
	if deferTo {
		now := d.now().UTC()
		when := at.UTC()
		queueFor := r.cfg.Slots.QueueFor.D()
		if cfgErr != nil {
			queueFor = config.Default().Slots.QueueFor.D()
		}
		// Who made the schedule, logind does not say: the request is
		// the agent's, as its drain ahead of the schedule was.
		w := d.who()
		q = &QueuedReboot{ID: newQueueID(), BootID: d.bootID(), Command: "shutdown", Action: action, User: w.User, TTY: w.TTY,
			Why: "deferred: its drain ahead got no reboot slot in time", Since: now.Truncate(time.Second),
			NotBefore: &when, Until: now.Add(queueFor).Truncate(time.Second), Deferred: true}
		if prev, _ := d.ReadQueued(); prev != nil && prev.Action == action && prev.Ticket > 0 {
			q.Ticket = prev.Ticket // a request queued before keeps its place
		}
		if err := d.WriteQueued(q); err != nil {
			r.warn("the %s scheduled for %s could not be queued (%v): it is cancelled", action, at.Local().Format(time.RFC3339), err)
			q = nil
		} else {
			d.journal(journalInfo, fmt.Sprintf("the %s scheduled for %s got no reboot slot in time (%s): logind's schedule is cancelled, the %s queued until %s",
				action, at.Local().Format(time.RFC3339), oneLine(why), action, q.Until.Local().Format(time.RFC3339)))
		}
	}
	if cfgErr != nil || !r.cfg.Events {
		return true, nil
	}
	ectx, stop := context.WithTimeout(context.WithoutCancel(ctx), 2*r.cfg.APITimeout.D())
	defer stop()
	s, err := d.connect(ectx, r.cfg, "", r.out)
	if err != nil {
		r.debug("no Event for the cancelled schedule: %v", err)
		return true, nil
	}
	r.sess = s
	if q != nil {
		r.event(ectx, "Normal", ReasonRebootDeferred, "The %s scheduled for %s got no reboot slot in time (%s): deferred, queued until %s; the node agent reboots this node when a slot is free",
			action, at.UTC().Format(time.RFC3339), why, q.Until.Format(time.RFC3339))
		return true, nil
	}
	r.event(ectx, "Warning", ReasonScheduleCancelled, "The %s scheduled for %s was cancelled by the node agent: %s",
		action, at.UTC().Format(time.RFC3339), why)
	return true, nil
}

// ScheduleUncancelled posts a Warning Event on the Node: a schedule no
// reboot slot came for could not be cancelled before its time (logind or
// the drain's own requests too slow), so the node goes down without a
// slot. Bounded by ctx and apiTimeout; a failure is a debug line.
func (d *Drainer) ScheduleUncancelled(ctx context.Context, action string, at time.Time, why string) {
	r := newRun(d, forShutdown, "cancel")
	if err := r.loadConfig(nil); err != nil || !r.cfg.Events {
		return
	}
	s, err := d.connect(ctx, r.cfg, "", r.out)
	if err != nil {
		r.debug("no Event for the uncancelled schedule: %v", err)
		return
	}
	r.sess = s
	r.event(ctx, "Warning", ReasonScheduleUncancelled, "The %s scheduled for %s goes ahead without a reboot slot: it could not be cancelled before its time (%s)",
		action, at.UTC().Format(time.RFC3339), why)
}

// IsSlotRefusal reports whether err is a SlotRefusal.
func IsSlotRefusal(err error) bool {
	var sr *SlotRefusal
	return errors.As(err, &sr)
}

// IsLockHeld reports whether err is another gnsh holding the drain lock.
func IsLockHeld(err error) bool {
	var held *HeldError
	return errors.As(err, &held)
}

// UndoScheduleCordon is the node agent's undo when a scheduled shutdown it
// drained for (or found drained for) was cancelled, or moved beyond the
// drain timeout: under the drain lock, it lifts gnsh's own cordon made
// for a scheduled shutdown in this boot (Ownership.When set, this boot's
// ID; never an admin's cordon, nor one for another request), drops the
// marker and posts GnshUncordoned. It reports whether it uncordoned; a
// *HeldError means a drain runs: try again later. Bounded by 4×apiTimeout.
//
// Once the lock is held, a non-nil pending is asked, then Relies about the
// record that stands (a shutdown under way, systemd stopping, the very
// schedule the record was made for, or one due within drainTimeout): if
// either says a shutdown may rely on the cordon, nothing changes and the
// error wraps ErrShutdownPending.
func (d *Drainer) UndoScheduleCordon(ctx context.Context, why string, pending func(context.Context) bool) (bool, error) {
	r := newRun(d, forShutdown, "cancel")
	if err := r.loadConfig(nil); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, 4*r.cfg.APITimeout.D())
	defer cancel()
	s, err := d.connect(ctx, r.cfg, "", r.out)
	if err != nil {
		return false, err
	}
	r.sess = s
	boot := d.bootID()
	only := func(o *drain.Ownership) bool { return o.When != nil && o.BootID == boot }
	// Most looks find no such cordon: they need not take the lock, which
	// a shutdown typed meanwhile would wait for.
	n, err := s.readNode(ctx, r.cfg.APITimeout.D())
	if err != nil {
		return false, err
	}
	if o := drain.Owner(n); o == nil || !only(o) {
		// No cordon for it: the marker of that schedule's drain goes.
		if pending == nil || !pending(ctx) {
			d.RemoveMarker()
		}
		return false, nil
	}
	undone, rec, err := d.undoUnderLock(ctx, r, "undo the cordon for a cancelled schedule", only, func(ctx context.Context) (string, error) {
		if pending != nil && pending(ctx) {
			return "a shutdown is due within drainTimeout", nil
		}
		return "", nil
	}, nil)
	if undone {
		r.event(ctx, "Normal", ReasonUncordoned, "%s; gnsh's cordon for the %s requested by %s uncordoned by the node agent", why, rec.Request(), rec.Requester())
	}
	return undone, err
}

// ErrShutdownPending is what the agent's undos return when a shutdown may
// rely on the cordon (Relies): nothing changed.
var ErrShutdownPending = errors.New("a shutdown may rely on the cordon")

// Relies says whether a shutdown may rely on gnsh's cordon record rec
// (a phrase, "" for none): one under way (systemd-logind preparing, systemd
// stopping the system), the very schedule rec was made for (rec.When), or
// one due within drainTimeout. An error means it cannot be told (logind
// unreachable): nothing is undone then. (gnsh agent asks logind and
// systemd; nil asks nothing.)
type Relies func(ctx context.Context, rec *drain.Ownership, drainTimeout time.Duration) (string, error)

// undoUnderLock takes the drain lock (as the agent's bookkeeping), reads
// the record that stands and, if only accepts it and neither extra (if
// set) nor d.Relies says a shutdown may rely on it, undoes exactly that
// record's cordon, drops the marker (a drain it recorded is void now) and
// releases the lock. settled, if set, runs under the lock once the record
// is undone or no longer stands. It returns the record it undid.
func (d *Drainer) undoUnderLock(ctx context.Context, r *run, action string, only drain.Only,
	extra func(context.Context) (string, error), settled func()) (bool, *drain.Ownership, error) {
	s := r.sess
	lock, err := d.lock(action, s.node, false, deadline(ctx))
	if err != nil {
		return false, nil, err
	}
	defer lock.Release()
	n, err := s.readNode(ctx, r.cfg.APITimeout.D())
	if err != nil {
		return false, nil, err
	}
	rec := drain.Owner(n)
	if rec == nil || !only(rec) {
		if settled != nil {
			settled()
		}
		return false, nil, nil
	}
	for _, ask := range []func(context.Context) (string, error){extra, func(ctx context.Context) (string, error) {
		if d.Relies == nil {
			return "", nil
		}
		return d.Relies(ctx, rec, r.cfg.DrainTimeout.D())
	}} {
		if ask == nil {
			continue
		}
		switch what, err := ask(ctx); {
		case err != nil:
			return false, nil, fmt.Errorf("cannot tell whether a shutdown relies on gnsh's cordon: %w", err)
		case what != "":
			return false, nil, fmt.Errorf("%w: %s", ErrShutdownPending, what)
		}
	}
	undone, err := drain.Uncordon(ctx, s.c, s.node, func(o *drain.Ownership) bool { return sameRecord(rec, o) }, s.check)
	if undone {
		d.RemoveMarker()
		r.lifecycle(ctx, drain.Lifecycle{Reason: drain.ConditionReasonUncordoned, Message: "gnsh's cordon undone by the node agent (" + action + ")"})
	}
	if err == nil && settled != nil {
		settled()
	}
	return undone, rec, err
}
