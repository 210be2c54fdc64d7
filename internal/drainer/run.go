package drainer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/slots"
)

// run is one drain attempt and, as handoff.Prepared, what stays of it until
// the hand-off is over: the lock, gnsh's cordon and the signal modes.
type run struct {
	d       *Drainer
	purpose purpose
	verb    string // reboot, poweroff, halt, kexec; "drain" for gnsh drain
	cfg     config.Config
	out     *progress

	kubeconfig string   // the kubeconfig found
	onNode     bool     // a kubeconfig was found: the signals' Drain mode is on
	sess       *session // nil until connected
	lock       *Lock    // held from before the cordon until Finish
	// cordoned: this run made gnsh's cordon, or may have (a cordon request
	// cut short by a signal or a timeout); undo checks the record first.
	cordoned bool
	// adopted: the annotation's text before this run took over gnsh's
	// cordon from an earlier boot (drain.Adopt), "" if it did not.
	adopted  string
	own      drain.Ownership
	draining bool // the drain (evictions) began
	// ahead: the agent's drain ahead of a schedule (own.When), which
	// changes nothing when gnsh's cordon for that schedule stands.
	ahead bool
	// agentDrainWait: when this run began to wait for the node agent's
	// drain (zero if it did not).
	agentDrainWait time.Time
	// agentKind: the kind of the last hold of the drain lock this run
	// waited on (waitForAgent), "" if it waited on none.
	agentKind string
	// agentTimeout is the config file's drainTimeout (before
	// --drain-timeout): the node agent's, which drains that long ahead of
	// a schedule.
	agentTimeout time.Duration
	res          *drain.Result
	err          error // the error behind the outcome
	// slot is the reboot slot held (internal/slots), nil without one;
	// forceQuorum is --force-quorum.
	slot        *slots.Slot
	forceQuorum bool
	// bypass is the holder entry the agent's drain for a shutdown that
	// bypassed gnsh wrote before its cordon (markBypass), zero if none.
	bypass slots.Entry
	// slotWaitMax bounds the wait for a slot of the agent's drain ahead
	// of a schedule (ahead): what is left before the schedule's time.
	slotWaitMax time.Duration
	// slotLine is said once the run holds the drain lock: why it goes on
	// without a slot.
	slotLine string
	// watch: the wrapper's note of this run, which shutdown -c reads (and,
	// for a schedule, the watch for its stop request); nil without one.
	watch *runWatch

	// req is the command's request (nil for gnsh drain and the agent's
	// own drains).
	req *legacy.Request
	// fromQueue: the node agent's run for a queued reboot (queue.go),
	// whose wait for a slot is queueWait; queued: the request this run
	// queued; queueLost: why one that would have been queued was not.
	fromQueue  *QueuedReboot
	queueWait  time.Duration
	queued     *QueuedReboot
	queuedHeld string // what held it back, in words
	queuedFull bool   // beyond a full queue
	// queuedOutside: queued outside the window (in words), not asked.
	queuedOutside string
	queueLost     string

	leaveDrain func() // leaves the signals' Drain mode
	leaveHold  func() // leaves Hold mode (during the hand-off)
}

func newRun(d *Drainer, p purpose, verb string) *run {
	return &run{d: d, purpose: p, verb: verb, cfg: config.Default(), out: newProgress(d.Stderr, d.TTY, "", d.clock()),
		leaveDrain: func() {}, leaveHold: func() {}}
}

// Output: every line starts with "gnsh: " and goes to stderr.
func (r *run) info(format string, args ...any) { r.out.printf(format, args...) }
func (r *run) warn(format string, args ...any) { r.out.printf("warning: "+format, args...) }
func (r *run) debug(format string, args ...any) {
	if r.d.debugOn(r.cfg) {
		r.out.printf("debug: "+format, args...)
	}
}

// loadConfig reads the config file and applies the command line's drain
// options.
func (r *run) loadConfig(req *legacy.Request) error {
	c, err := config.Load(r.d.configPath())
	r.cfg = c
	r.agentTimeout = c.DrainTimeout.D()
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		if ce.Kubeconfig != "" && r.d.Kubeconfig == "" && r.d.Connect == nil {
			// The kubeconfig an invalid file names: one refusal says
			// all that is to fix.
			if p, _ := r.d.kubeconfigProblem(r.d.configPath(), ce.Kubeconfig, ce.KubeconfigLine); p != nil {
				ce.Add(*p)
			}
		}
		return err
	case errors.Is(err, fs.ErrPermission):
		// Not root, most likely: a file the admin made 0600.
		return &configUnreadable{err}
	case err != nil:
		return err
	}
	if req != nil && req.Drain.Timeout > 0 {
		r.cfg.DrainTimeout = config.Duration(req.Drain.Timeout)
	}
	if req != nil && req.Drain.Force {
		r.cfg.ForceDrain = true
	}
	r.forceQuorum = req != nil && req.Drain.ForceQuorum
	return nil
}

// prepare drains (or for -f cordons) before the hand-off and applies the
// policy to how that went.
func (r *run) prepare(ctx context.Context, req *legacy.Request) (handoff.Prepared, error) {
	r.req = req
	if err := r.loadConfig(req); err != nil {
		o := badConfig
		if errors.As(err, new(*configUnreadable)) {
			o = notPermitted
		}
		return r.conclude(o, err)
	}
	if !r.cfg.Drain {
		r.debug("drain: false in %s: not draining", r.d.configPath())
		return nil, nil
	}
	if err := r.namedKubeconfig(); err != nil {
		// Before anything else, a schedule beyond the drain timeout
		// included: the node agent could not drain ahead of it either.
		return r.conclude(badConfig, err)
	}
	var when *time.Time
	if req.Force == 0 && req.When > 0 {
		if due := req.DueIn(r.d.now()); due > r.cfg.DrainTimeout.D() {
			if !r.isNode() {
				return r.conclude(notANode, kube.ErrNoKubeconfig)
			}
			r.tellFar(legacy.FromUsec(req.When), due)
			return nil, nil
		}
		t := legacy.FromUsec(req.When).UTC()
		when = &t
	}
	if r.purpose == forForce {
		// -f: the admin wants the machine down now. A best-effort cordon,
		// everything (connecting, cordon, Event) within one short budget.
		r.cfg.APITimeout = min(r.cfg.APITimeout, r.cfg.ForceCordonTimeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.ForceCordonTimeout.D())
		defer cancel()
	}
	o := r.attempt(ctx, when)
	if r.fromQueue != nil {
		o = r.queuedOutcome(ctx, o)
	}
	return r.conclude(o, r.err)
}

// queuedOutcome is the node agent's rule for its run of a queued reboot,
// stricter than a person's: it never goes on without its slot, nor once
// its ctx ended (the request withdrawn, the agent stopping). A person's
// reboot goes on when the API server fails (never wedge a node); a queued
// one waits for the API server instead (the agent asks again), and is
// given up at its end.
func (r *run) queuedOutcome(ctx context.Context, o outcome) outcome {
	switch {
	case o == interrupted:
		return o
	case ctx.Err() != nil:
		r.err = &queueStopped{err: context.Cause(ctx)}
		return queueRetry
	case o == drainedBefore:
		return o
	case o == drained || o == blocked && r.cfg.ForceDrain:
		if r.slot == nil && r.gated() {
			// Never without its slot (a Lease read failing under the
			// lock): undone, asked again.
			r.err = fmt.Errorf("no reboot slot of %s held", r.gate().Where())
			return queueRetry
		}
		return o
	}
	// Everything else asks again, its cordon undone: a wait that ran out,
	// a drain refused (PDBs), and also what a person's reboot would go
	// on through (the API server failing mid-drain, a dead kubelet): no
	// one is waiting at a terminal, and the pods must leave first.
	if r.err == nil {
		r.err = errors.New(o.String())
	}
	return queueRetry
}

// queueStopped: the agent's run of a queued reboot ended by its ctx.
type queueStopped struct{ err error }

func (e *queueStopped) Error() string {
	if errors.Is(e.err, slots.ErrWithdrawn) {
		return "withdrawn (shutdown -c, or a new request in its place)"
	}
	return "the node agent is stopping (" + e.err.Error() + "); it asks again once it runs"
}

// errString is err's text, "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
func (e *queueStopped) Unwrap() error { return e.err }

// namedKubeconfig checks the kubeconfig named by --kubeconfig or the
// config file, if one is, else gnsh's own /etc/gnsh/kubeconfig if it is
// the one found for the drain or (with the gate on) the gate's: a
// *kube.KubeconfigError when it cannot be used (a mistake in the
// configuration, as an invalid file is), else nil.
func (r *run) namedKubeconfig() error {
	if r.d.Connect != nil {
		return nil
	}
	loc := r.d.locator(r.cfg)
	path, err := loc.FindKubeconfig()
	if err == nil && r.cfg.Slots.Gate != config.GateOff {
		_, err = loc.GateKubeconfig(path)
	}
	if ke := (*kube.KubeconfigError)(nil); errors.As(err, &ke) {
		return err
	}
	return nil
}

// isNode reports whether a kubeconfig can be found, without asking the API
// server: a machine without one is not a Kubernetes node.
func (r *run) isNode() bool {
	if r.d.Connect != nil {
		return true
	}
	loc := r.d.locator(r.cfg)
	_, err := loc.FindKubeconfig()
	return !errors.Is(err, kube.ErrNoKubeconfig)
}

// attempt goes as far as it can: connect, read the Node, check it is this
// machine, take a reboot slot (waiting for one without the drain lock),
// lock, read the Node again, cordon, and (unless -f) drain. It returns the
// outcome; r.err holds the error behind it.
func (r *run) attempt(ctx context.Context, when *time.Time) outcome {
	if r.d.Connect == nil {
		loc := r.d.locator(r.cfg)
		path, err := loc.FindKubeconfig()
		if err != nil {
			return r.unslotted(classifyLocal(err), err)
		}
		r.kubeconfig = path
	}
	// A Kubernetes node: from here on SIGINT/SIGTERM stop the drain (and
	// undo its cordon), a dropped ssh session does not.
	ctx, r.leaveDrain = r.d.Signal.Drain(ctx)
	r.onNode = true
	if r.gated() {
		// The lock comes after the wait for a slot: one that could never
		// be taken (not root) refuses now, not after that wait.
		if err := r.d.lockUsable(); err != nil {
			return r.fail(notPermitted, err)
		}
	}
	// A wrapper's run notes itself, so that shutdown -c finds it (and
	// stops it, for a schedule: runnote.go).
	ctx = r.noteRun(ctx, when)
	s, err := r.d.connect(ctx, r.cfg, r.kubeconfig, r.out)
	if err != nil {
		return r.unslotted(r.classify(ctx, err), err)
	}
	r.sess = s
	r.out.node = s.node
	r.own = r.ownership(when)
	// The slot first, the drain lock after it: a run waiting for a slot
	// (up to slots.wait) holds no lock, so that the node agent can still
	// drain for a shutdown under way, or ahead of a schedule, meanwhile.
	// Everything that depends on the Node is decided again under the
	// lock, from a fresh read.
	asked := !r.gated() // no slot to ask for
	for try := 0; ; try++ {
		if !asked {
			n, o, out := r.readSelf(ctx)
			if n == nil {
				return r.unslotted(out, r.err)
			}
			// Drained for this very schedule already: no slot to ask for
			// (the one taken then is kept for it), unless that was read
			// before the lock and no longer holds under it.
			if try > 0 || !r.drainedFor(o) {
				r.notePhase("waiting for a reboot slot")
				if out, ok := r.takeSlot(ctx, n, o); !ok {
					return out
				}
				asked = true
			}
		}
		if out, ok := r.lockNode(ctx); !ok {
			return out
		}
		if r.slotLine != "" {
			// Said once the run goes on: a run refused for the lock does not.
			r.info("%s", r.slotLine)
			r.slotLine = ""
		}
		n, o, out := r.readSelf(ctx)
		if n == nil {
			// The API server answered the read before the lock: the slot
			// was taken, or none is needed (drained for already).
			return out
		}
		if r.drainedFor(o) {
			// Drained for this very schedule already (by the wrapper, which
			// took its slot then, or an earlier run of the agent): nothing
			// to do.
			return drainedBefore
		}
		if asked {
			switch st, out := r.slotStands(ctx, try >= 2); {
			case st == slotHeld:
				if r.bypasses() {
					r.markBypass(ctx, n, o)
				}
				return r.cordonAndDrain(ctx, n, o)
			case st == slotUnknown && out != drained:
				return out // refused: nothing cordoned
			case st == slotUnknown:
				return r.cordonAndDrain(ctx, n, o) // optional: without a slot
			}
		}
		// The slot is still to be asked for (the Node read before the lock
		// said drained for), or the slot was freed meanwhile (by the gnsh
		// that took it, by an admin): let go of the lock and of the slot,
		// and ask (again) without the lock.
		r.lock.Release()
		r.lock = nil
		if r.slot != nil {
			r.slot.Halt()
			r.slot = nil
		}
		if asked && try >= 2 {
			// Freed under it every time: never cordon without a slot.
			return r.fail(noSlot, fmt.Errorf("the reboot slot of %s was freed by someone else each of the %d times it was taken, before the cordon", r.sess.node, try+1))
		}
		asked = false
	}
}

// gated reports whether this run takes a reboot slot (internal/slots)
// before its cordon: a shutdown through the wrapper, and the node agent's
// drain ahead of a schedule, when the gate is on. -f, gnsh drain and the
// agent's drain for a shutdown already under way (systemctl reboot, the
// power button: nothing can refuse it now; its cordon counts against
// others) take none.
func (r *run) gated() bool {
	return r.cfg.Slots.Gate != config.GateOff && r.purpose == forShutdown && (!r.d.Agent || r.ahead || r.fromQueue != nil)
}

// readSelf reads this node's Node and checks that it is this machine; it
// also returns gnsh's record of the cordon that stands, if any. On a
// failure the Node is nil, the outcome names the failure and r.err holds
// the error.
func (r *run) readSelf(ctx context.Context) (*corev1.Node, *drain.Ownership, outcome) {
	s := r.sess
	n, err := s.readNode(ctx, r.cfg.APITimeout.D())
	if err == nil {
		err = ctx.Err() // a signal while the answer was on its way
	}
	if err != nil {
		return nil, nil, r.fail(r.classify(ctx, err), err)
	}
	if same, why := kube.SameMachine(n, r.d.hostID()); !same {
		return nil, nil, r.fail(otherMachine, &kube.OtherMachineError{Node: s.node, Why: why})
	} else if why != "" {
		r.debug("%s: %s", s.node, why)
	}
	return n, drain.Owner(n), drained
}

// drainedFor reports whether o, gnsh's record of the cordon that stands,
// is the agent's drain ahead of this very schedule, finished.
func (r *run) drainedFor(o *drain.Ownership) bool {
	return r.forThis(o) && o.Drained != nil
}

// forThis reports whether o is gnsh's cordon for the schedule this
// drain ahead of a schedule is for, made in this boot.
func (r *run) forThis(o *drain.Ownership) bool {
	return r.ahead && o != nil && o.When != nil && o.When.Equal(*r.own.When) && o.BootID == r.own.BootID
}

// unslotted is the outcome of a failure before a reboot slot was taken
// (nothing cordoned yet): with slots.gate: required a gated shutdown is
// refused when it cannot take a slot, whatever stopped it before the
// gate (the API server, the Node); optional goes on as the policy says.
func (r *run) unslotted(o outcome, err error) outcome {
	if r.gated() && r.cfg.Slots.Gate == config.GateRequired {
		switch o {
		case apiFailed, notRegistered, otherMachine:
			return r.fail(gateDown, &gateUnreached{err})
		}
	}
	return r.fail(o, err)
}

// gateUnreached is the reason a required gate could not be used: the
// failure before it.
type gateUnreached struct{ err error }

func (e *gateUnreached) Error() string { return e.err.Error() }
func (e *gateUnreached) Unwrap() error { return e.err }

// lockNode takes the drain lock: a wrapper that finds the node agent
// holding it waits for the agent, within the agent's own bound, rather
// than refuse.
func (r *run) lockNode(ctx context.Context) (outcome, bool) {
	var err error
	if r.lock, err = r.d.lock(r.verb, r.sess.node, true, deadline(ctx)); err != nil {
		var held *HeldError
		if !errors.As(err, &held) || !held.Holder.agent() || r.d.Agent || r.purpose == forForce {
			return r.lockFailed(classifyLocal(err), err), false
		}
		// The node agent is busy (bookkeeping, or a drain of its own):
		// wait for it, within its own bound, rather than refuse.
		if r.lock, err = r.waitForAgent(ctx, held.Holder); err != nil {
			if r.agentKind == HolderAgent && r.slot != nil && !r.slot.Before {
				// Only the agent's bookkeeping held the lock (an uncordon
				// after boot): nothing relies on this run's own slot, which
				// end frees at once, as for any shutdown that does not
				// happen.
				return r.fail(r.classify(ctx, err), err), false
			}
			return r.lockFailed(r.classify(ctx, err), err), false
		}
	}
	return drained, true
}

// lockFailed ends a run that could not take the drain lock. A reboot slot
// it took is left held, no longer renewed, never freed: another gnsh on
// this node (a second wrapper, which shares the node's slot, or the node
// agent's drain) may rely on it; the agent's keeper frees it once nothing
// does, and without an agent other nodes do once its renewals have
// stopped. (lockNode frees its own slot instead when only the agent's
// bookkeeping held the lock.)
func (r *run) lockFailed(o outcome, err error) outcome {
	if r.slot != nil {
		r.slot.Halt()
		r.slot = nil
		r.debug("the reboot slot of %s is left held, no longer renewed (another gnsh on this node may rely on it): the node agent frees it once nothing does", r.sess.node)
	}
	return r.fail(o, err)
}

// cordonAndDrain cordons n (as read under the lock; o is gnsh's record of
// the cordon that stands) and, unless -f, drains.
func (r *run) cordonAndDrain(ctx context.Context, n *corev1.Node, o *drain.Ownership) outcome {
	s := r.sess
	if r.forThis(o) {
		// gnsh's cordon for this schedule stands, but the drain under it
		// was cut short (a signal, an API failure): the drain resumes
		// under that cordon, which stays for the schedule whatever this
		// drain's outcome.
		r.info("gnsh's cordon of %s for the %s scheduled for %s stands, but its drain did not finish: draining again",
			s.node, o.Action, o.When.Local().Format("15:04:05"))
		r.notePhase("draining " + s.node)
		return r.drain(ctx)
	}
	if r.purpose != forMaintenance && (!n.Spec.Unschedulable || o != nil && o.BootID != r.own.BootID) {
		// Before the cordon, or before taking over gnsh's cordon of an
		// earlier boot (adopt): if this process is killed from here on,
		// the node agent finds out whose cordon it was. (Any other cordon
		// that stands keeps its own note, or is not gnsh's.)
		r.noteCordon(s.node)
	}
	// Until the answer is in, the cordon may or may not have been made.
	r.cordoned = !n.Spec.Unschedulable
	made, err := drain.Cordon(ctx, s.c, n, r.own, s.check)
	if err == nil {
		r.cordoned = made
		err = ctx.Err()
	}
	if err != nil {
		return r.fail(r.classify(ctx, err), err)
	}
	r.slotPhase(slots.Draining)
	r.notePhase("draining " + s.node)
	switch {
	case r.purpose == forForce:
		if made {
			r.info("cordoned %s; %s -f does not drain", s.node, r.verb)
		}
		r.event(ctx, "Warning", ReasonHandOff, "%s -f requested by %s: no drain", r.verb, r.own.Requester())
		return drained
	case !made:
		r.sayAlreadyCordoned(n)
		if r.purpose == forShutdown && o != nil && o.BootID == r.own.BootID && o.Drained != nil &&
			!r.agentDrainWait.IsZero() && !o.Drained.Before(r.agentDrainWait.Add(-time.Second)) {
			// The node agent's drain (ahead of a schedule, or for a
			// shutdown under way), which this command waited for, finished
			// under gnsh's standing cordon: its outcome counts. (An older
			// drained does not: pods may have come since, bound directly
			// or tolerating the cordon.)
			r.info("%s was drained by gnsh at %s (for the %s requested by %s); not draining again",
				s.node, o.Drained.Local().Format("15:04:05"), o.Request(), o.Requester())
			return drained
		}
		r.adopt(ctx, n)
	}
	return r.drain(ctx)
}

// agentWaitPoll is how often a wrapper waiting for the node agent tries
// the drain lock again.
const agentWaitPoll = 100 * time.Millisecond

// agentWaitSlack is how long past the agent's own bound (Holder.Until) a
// wrapper still waits for it.
const agentWaitSlack = 10 * time.Second

// waitForAgent waits until the node agent (held) releases the drain lock,
// and takes it: the agent's hold is bounded (Holder.Until: its budget, or
// its requests' timeouts), so a shutdown typed while the agent undoes a
// cordon, uncordons after boot or drains is never refused for it. It says
// whom it waits for. It gives up (the *HeldError) once the lock is still
// held agentWaitSlack past the holder's bound (taken as a duration when the
// hold is seen, so that a clock step does not move it; renewed for each
// new hold of the agent's), at most drainTimeout + 1 minute in all, or at
// once when another wrapper takes the lock; SIGINT ends the wait (ctx).
func (r *run) waitForAgent(ctx context.Context, held *Holder) (*Lock, error) {
	start := r.d.now()
	maxEnd := start.Add(r.cfg.DrainTimeout.D() + time.Minute)
	var limit time.Time
	var cur Holder
	see := func(h *Holder) {
		cur, limit = *h, maxEnd
		r.agentKind = h.Kind
		if !h.Until.IsZero() {
			if end := r.d.now().Add(h.Until.Sub(r.d.now()) + agentWaitSlack); end.Before(limit) {
				limit = end
			}
		}
		if h.Kind == HolderAgentDrain && r.agentDrainWait.IsZero() {
			r.agentDrainWait = r.d.now()
		}
	}
	see(held)
	r.notePhase("waiting for the node agent")
	what := "to finish: " + held.Action
	switch {
	case held.Kind == HolderAgentDrain && r.verb == "cancel":
		what = "to end its drain of " + r.sess.node + " (" + held.Action + ") for the cancelled schedule"
	case held.Kind == HolderAgentDrain:
		what = "to finish its drain of " + r.sess.node + " (" + held.Action + "); its outcome counts for this " + r.verb
	}
	r.info("waiting for the node agent (gnsh.service, pid %d) %s; at most until %s", held.PID, what, limit.Local().Format("15:04:05"))
	t := r.d.clock().NewTicker(agentWaitPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.lastLook(cur)
			return nil, ctx.Err()
		case <-t.C():
		}
		l, err := r.d.lock(r.verb, r.sess.node, true, deadline(ctx))
		var again *HeldError
		switch {
		case err == nil:
			r.info("the node agent is done (%s); going on", r.d.now().Sub(start).Round(100*time.Millisecond))
			return l, nil
		case !errors.As(err, &again):
			return nil, err
		case !again.Holder.agent():
			r.agentKind = again.Holder.Kind
			return nil, err // another wrapper took it meanwhile
		case again.Holder.PID != cur.PID || !again.Holder.Since.Equal(cur.Since):
			see(again.Holder) // a new hold of the agent's
		}
		if !r.d.now().Before(limit) {
			return nil, err
		}
	}
}

// lastLook is waitForAgent's look at the drain lock when a signal ends
// the wait: the hold last seen (cur, at the last poll, up to
// agentWaitPoll ago) may have given way since, the agent's bookkeeping to
// a drain of its own for a shutdown that bypassed gnsh, which found the
// node holding a slot and relies on it. agentKind stays cur's only if
// that very hold (its PID, Since and kind) still stands, so that no other
// hold came between; otherwise it is "" (unknown), and lockNode leaves
// the slot to the agent's keeper, which frees it once nothing relies on
// it. A lock found free is let go at once.
func (r *run) lastLook(cur Holder) {
	l, err := r.d.lock(r.verb, r.sess.node, true, time.Time{})
	var held *HeldError
	if errors.As(err, &held) && held.Holder != nil && held.Holder.PID == cur.PID &&
		held.Holder.Since.Equal(cur.Since) && held.Holder.Kind == cur.Kind {
		return
	}
	l.Release()
	r.agentKind = ""
}

// adopt takes over gnsh's cordon left from an earlier boot, so that the
// node agent does not lift it (drain.Adopt); a failure only costs that, so
// it is a debug line.
func (r *run) adopt(ctx context.Context, n *corev1.Node) {
	adopted, err := drain.Adopt(ctx, r.sess.c, n, r.own, r.sess.check)
	switch {
	case err != nil:
		r.debug("%v", err)
	case adopted:
		r.adopted = n.Annotations[drain.CordonAnnotation]
		r.info("gnsh's cordon of %s from an earlier boot now stands for this %s", n.Name, r.own.Request())
	}
}

// drain evicts and waits, with Events, progress and a one-line summary.
func (r *run) drain(ctx context.Context) outcome {
	s, timeout := r.sess, r.cfg.DrainTimeout.D()
	r.draining = true
	// The timeout as the journal gives it: the agent drains within what
	// is left before a schedule, a time to the nanosecond.
	r.event(ctx, "Normal", ReasonDrainStarted, "Draining before %s requested by %s (timeout %s)", r.own.Request(), r.own.Requester(), timeout.Round(time.Millisecond))
	r.lifecycle(ctx, drain.Lifecycle{InProgress: true, Reason: drain.ConditionReasonDraining,
		Message: fmt.Sprintf("gnsh drains before %s requested by %s", r.own.Request(), r.own.Requester())})
	start := r.d.now()
	stopTicks := r.out.ticking()
	res, err := drain.Drain(ctx, s.c, drain.Options{
		Node: s.node, Timeout: timeout, GracePeriod: r.cfg.PodGracePeriod,
		UnreachableAfter: r.cfg.UnreachableAfter.D(),
		// strictDrain: a wrapper's shutdown and gnsh drain are refused
		// without evicting anything, as kubectl drain; --force-drain (or
		// forceDrain) of a shutdown and the node agent (whose shutdown
		// goes ahead whatever this drain does) evict the rest and name
		// the pods left. gnsh drain shuts nothing down: forceDrain is
		// not for it.
		Strict:    r.cfg.StrictDrain,
		EvictRest: (r.cfg.ForceDrain && r.purpose != forMaintenance) || r.d.Agent && r.fromQueue == nil,
		Clock:     r.d.clock(),
		Progress:  r.out.update,
		Warn:      func(l string) { r.out.printf("evicting %s", l) },
	})
	stopTicks()
	r.res = res
	elapsed := r.d.now().Sub(start).Round(100 * time.Millisecond)
	if err == nil {
		r.markDrained(ctx)
		r.info("drained %s in %s: %s", s.node, elapsed, summary(res))
		r.event(ctx, "Normal", ReasonDrainFinished, "Drained in %s: %s", elapsed, summary(res))
		r.lifecycle(ctx, drain.Lifecycle{Drained: true, Reason: drain.ConditionReasonDrained,
			Message: fmt.Sprintf("drained by gnsh in %s before %s requested by %s: %s", elapsed, r.own.Request(), r.own.Requester(), summary(res))})
		return drained
	}
	o := r.classify(ctx, err)
	switch o {
	case interrupted:
		intr := &Interrupted{Sig: r.d.Signal.Caught()}
		err = intr
		r.event(ctx, "Warning", ReasonDrainFailed, "Drain %s after %s; gnsh's cordon is undone", intr.what(), elapsed)
	case cancelled:
		r.event(ctx, "Warning", ReasonDrainFailed, "Drain stopped after %s: the %s scheduled by %s was cancelled by %s (shutdown -c); gnsh's cordon is undone",
			elapsed, r.verb, r.own.Requester(), r.stoppedBy())
	case apiFailed: // the API server would not take the Event either
	default:
		r.event(ctx, "Warning", ReasonDrainFailed, "Drain failed after %s: %v", elapsed, err)
	}
	if o != interrupted {
		r.info("drain of %s stopped after %s: %s", s.node, elapsed, progressOf(res))
	}
	if o != apiFailed {
		r.lifecycle(ctx, drain.Lifecycle{Reason: drain.ConditionReasonDrainFailed, Message: fmt.Sprintf("gnsh's drain stopped after %s: %v", elapsed, err)})
	}
	return r.fail(o, err)
}

// markDrained records in gnsh's cordon record of this boot that the drain
// finished (drain.MarkDrained), so that a later drain for the same
// schedule knows it need not run again. Not worth more than a debug line:
// without it that drain runs again, and finds nothing left to evict.
func (r *run) markDrained(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.APITimeout.D())
	defer cancel()
	boot := r.own.BootID
	if _, err := drain.MarkDrained(ctx, r.sess.c, r.sess.node, func(o *drain.Ownership) bool { return o.BootID == boot }, r.d.now(), r.sess.check); err != nil {
		r.debug("%v", err)
	}
}

func (r *run) fail(o outcome, err error) outcome {
	r.err = err
	return o
}

// classify names the outcome of an error from the cluster.
func (r *run) classify(ctx context.Context, err error) outcome {
	var nr *drain.NodeNotReadyError
	var be *drain.BlockedError
	switch {
	case r.d.Signal.Caught() != 0 && ctx.Err() != nil:
		return interrupted
	case r.stoppedBy() != "" && ctx.Err() != nil:
		return cancelled
	case errors.As(err, &be):
		return blocked
	case errors.As(err, &nr):
		return kubeletDown
	case apierrors.IsNotFound(err):
		return notRegistered
	case errors.As(err, new(*kube.OtherMachineError)):
		return otherMachine
	case errors.As(err, new(*kube.NodeNameError)):
		return notRegistered
	}
	if o := classifyLocal(err); o != apiFailed {
		return o
	}
	return apiFailed
}

// classifyLocal names the outcome of an error that did not come from the
// API server: no kubeconfig, one that cannot be read, the lock. Anything
// else counts as the API server failing.
func classifyLocal(err error) outcome {
	var held *HeldError
	var unreadable *kube.UnreadableError
	switch {
	case errors.Is(err, kube.ErrNoKubeconfig):
		return notANode
	case errors.As(err, new(*kube.KubeconfigError)):
		return badConfig
	case errors.As(err, &held):
		return lockHeld
	case errors.As(err, &unreadable), errors.Is(err, fs.ErrPermission), errors.As(err, new(*lockError)):
		return notPermitted
	}
	return apiFailed
}

// conclude applies the policy to the outcome: it tells the admin, undoes
// the cordon where the policy says so, and either returns the run as
// handoff.Prepared (proceed) or the error that refuses the command.
func (r *run) conclude(o outcome, err error) (handoff.Prepared, error) {
	if r.onNode && r.purpose != forMaintenance {
		// From here the hand-off (a few bounded D-Bus calls, or reboot(2))
		// is not cut in half by a signal; Finish (or end) leaves this
		// mode. Entered before Caught is read, so that a SIGINT that came
		// as the drain ended is not lost: it still stops the command.
		r.leaveHold = r.d.Signal.Hold("handing the " + r.verb + " to the system")
	}
	if sig := r.d.Signal.Caught(); sig != 0 && o != interrupted {
		o, err = interrupted, &Interrupted{Sig: sig}
	}
	if by := r.unwatch(); by != "" && o != interrupted {
		// shutdown -c stopped this run for a schedule (or asked as its
		// drain ended): nothing is scheduled.
		o, err = cancelled, &stoppedError{By: by, Phase: r.watch.phase}
	}
	if r.queued != nil && o != queued {
		// Stopped (a signal, shutdown -c) as it was queued: not queued.
		r.d.RemoveQueued(r.queued)
		r.queued = nil
	}
	if o == queued {
		r.end()
		return nil, &QueuedError{Msg: safeLines(r.tellQueued())}
	}
	v := decide(o, r.purpose, r.cfg.ForceDrain)
	if v.undo {
		r.undo(r.undoReason(o))
	}
	// Each line made safe (oneLine): a refusal quotes the cluster's text.
	msg := safeLines(r.tell(o, v, err))
	if !v.proceed {
		if r.purpose == forShutdown && !r.d.Agent && r.onNode {
			// The journal keeps it: the caller may be a service whose
			// log drops the command's words (unattended-upgrades); and an
			// Event, for whoever watches the cluster, where the drain
			// posted none.
			line := fmt.Sprintf("%s requested by %s refused: %s", r.verb, r.ownership(nil).Requester(), strings.ReplaceAll(strings.TrimPrefix(msg, "gnsh: "), "\ngnsh: ", "; "))
			r.d.journal(journalWarning, line)
			if !r.draining && o != interrupted {
				r.event(context.Background(), "Warning", ReasonRefused, "%s", oneLine(line))
			}
		}
		r.end()
		if o == interrupted { // only ever with a caught signal
			return nil, &Interrupted{Sig: r.d.Signal.Caught(), Msg: msg}
		}
		return nil, &Refusal{Msg: msg, Err: err}
	}
	if msg != "" {
		r.warn("%s", msg)
	}
	r.notePhase("handing the " + r.verb + " to systemd-logind")
	if r.purpose == forShutdown {
		if o == drained {
			// Right before the hand-off: the node agent, seeing
			// PrepareForShutdown(true), does not drain again.
			if err := r.d.writeMarker(r.verb, r.own.When); err != nil {
				r.debug("marker %s not written: %v", MarkerName, err)
			}
			r.event(context.Background(), "Normal", ReasonHandOff, "%s requested by %s: drained, handing off to systemd-logind", r.verb, r.own.Requester())
		} else if o != apiFailed {
			r.event(context.Background(), "Warning", ReasonHandOff, "%s requested by %s: %s; handing off to systemd-logind", r.verb, r.own.Requester(), o.eventText())
		}
	}
	if !r.onNode || r.purpose == forMaintenance {
		r.end()
		return nil, nil
	}
	return r, nil
}

// Finish is handoff.Prepared: a refused hand-off (or a failed reboot(2)
// after -f) leaves the machine running, so gnsh's cordon is undone, still
// under the lock.
func (r *run) Finish(ctx context.Context, err error) {
	r.leaveHold()
	if err != nil {
		r.d.RemoveMarker() // that shutdown did not happen
	}
	if err != nil && (r.cordoned || r.adopted != "") {
		r.undo("the " + r.verb + " was not handed off")
		r.event(ctx, "Warning", ReasonDrainFailed, "%s requested by %s was not handed off: %v", r.verb, r.d.who().User, err)
	}
	if err == nil {
		r.keepSlot(context.Background())
	}
	r.end()
}

// end frees a reboot slot still held (no shutdown follows), releases the
// lock and leaves the signal modes.
func (r *run) end() {
	r.releaseSlot("the " + r.verb + " did not happen")
	r.forgetRun()
	r.lock.Release()
	r.lock = nil
	r.leaveHold()
	r.leaveDrain()
}

// undo removes the cordon this run made, held against signals (it is
// bounded), with a fresh context: the drain's own may be cancelled.
func (r *run) undo(why string) {
	if r.sess != nil && !r.cordoned && r.adopted != "" {
		r.giveBack(why)
		return
	}
	if !r.cordoned || r.sess == nil {
		return
	}
	defer r.d.Signal.Hold("undoing gnsh's cordon of " + r.sess.node)()
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.cfg.APITimeout.D())
	defer cancel()
	// Only the cordon whose record is this run's: not an admin's, nor one
	// an earlier gnsh made (say, for a schedule).
	undone, err := drain.Uncordon(ctx, r.sess.c, r.sess.node, r.mine, r.sess.check)
	switch {
	case err != nil:
		r.warn("%s, but uncordoning %s failed (%v); run 'gnsh uncordon --only-if-ours' when the API server answers", why, r.sess.node, err)
	case undone:
		r.cordoned = false
		r.d.forgetNote(func(n CordonNote) bool { return r.mine(&n.Own) })
		r.info("%s; %s uncordoned", why, r.sess.node)
		r.lifecycle(ctx, drain.Lifecycle{Reason: drain.ConditionReasonUncordoned, Message: why})
	}
}

// giveBack is the undo of a run that took over gnsh's cordon from an
// earlier boot: the record goes back to that boot's, so that the node
// agent lifts the cordon after this boot as it would have (the shutdown
// it was taken over for did not happen).
func (r *run) giveBack(why string) {
	defer r.d.Signal.Hold("giving back gnsh's cordon of " + r.sess.node)()
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.cfg.APITimeout.D())
	defer cancel()
	back, err := drain.GiveBack(ctx, r.sess.c, r.sess.node, r.mine, r.adopted, r.sess.check)
	switch {
	case err != nil:
		r.warn("%s, but giving gnsh's cordon of %s back to the earlier boot's record failed (%v); it stays until 'gnsh uncordon --only-if-ours'", why, r.sess.node, err)
	case back:
		r.adopted = ""
		r.info("%s; gnsh's cordon of %s stands for the earlier boot again: the node agent lifts it once the Node is Ready", why, r.sess.node)
	}
}

// mine reports whether a cordon record is the one this run wrote.
func (r *run) mine(o *drain.Ownership) bool { return sameRecord(&r.own, o) }

func (r *run) ownership(when *time.Time) drain.Ownership {
	w := r.d.who()
	if q := r.fromQueue; q != nil {
		// The agent's run for a queued reboot: asked by whoever queued it.
		w = Requester{User: q.User, TTY: q.TTY}
	}
	return drain.Ownership{Action: r.verb, User: w.User, TTY: w.TTY, Time: r.d.now().UTC().Truncate(time.Second),
		BootID: r.d.bootID(), When: when}
}

func (r *run) event(ctx context.Context, typ, reason, format string, args ...any) {
	if r.sess == nil || !r.cfg.Events {
		return
	}
	// Not worth more than a debug line: the drain goes on without it.
	if err := r.sess.event(ctx, r.cfg.APITimeout.D(), typ, reason, format, args...); err != nil {
		r.debug("event %s not posted: %v", reason, err)
	}
}

// lifecycle writes the Node lifecycle conditions (KEP-5683) when
// nodeConditions is on: bounded by apiTimeout, even after ctx ended (an
// interrupted drain still says so); a failure is a debug line.
func (r *run) lifecycle(ctx context.Context, l drain.Lifecycle) {
	if !r.cfg.NodeConditions || r.sess == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.APITimeout.D())
	defer cancel()
	if err := drain.SetLifecycle(ctx, r.sess.c, r.sess.node, l, r.d.now()); err != nil {
		r.debug("node conditions not written: %v", err)
	}
}

// cancelRun is shutdown -c: before logind cancels, it stops a run for a
// schedule that still waits for its reboot slot or drains (stopRuns);
// after logind cancelled a schedule, gnsh undoes the cordon it made for
// that schedule (and only that one) and frees this boot's reboot slot.
type cancelRun struct {
	d   *Drainer
	req *legacy.Request
}

var _ handoff.CancelReporter = (*cancelRun)(nil)

// Finish is handoff.Prepared. The runner calls FinishCancel instead; told
// only that the call went through, not that logind cancelled anything,
// this leaves gnsh's cordon and slot to the node agent.
func (c *cancelRun) Finish(ctx context.Context, err error) { c.FinishCancel(ctx, false, err) }

// FinishCancel is handoff.CancelReporter. gnsh's cordon for a schedule and
// this boot's reboot slot go only when logind cancelled a schedule and no
// shutdown is under way (logind preparing one, systemd stopping: Relies);
// otherwise, they may serve a shutdown, and are left to the node agent,
// whose keeper and orphan watcher free them once nothing relies on them.
func (c *cancelRun) FinishCancel(ctx context.Context, cancelled bool, err error) {
	// A queued reboot is gnsh's alone (logind has nothing of it): it is
	// withdrawn whatever logind answered.
	c.withdrawQueued(ctx)
	if err != nil {
		return
	}
	// No schedule stands now, whatever logind answered: the note of a dry
	// run or of a --no-drain schedule goes.
	c.d.forgetDryRun()
	r := newRun(c.d, forShutdown, "cancel")
	cfgErr := r.loadConfig(nil)
	// The marker of a drain for the cancelled schedule goes with it, once
	// no shutdown is under way (one that is may rely on it). Asked only
	// when there is a marker: on a machine that is not a Kubernetes node
	// there is none, and shutdown -c asks logind nothing more than
	// systemd's does.
	settled := func(underWay func() string) {
		if _, err := c.d.ReadMarker(); cancelled && err == nil && underWay() == "" {
			c.d.RemoveMarker()
		}
	}
	ask := func() string { return c.underWay(ctx, r) }
	if c.req.Drain.Skip || cfgErr != nil || !r.cfg.Drain || !r.isNode() {
		settled(ask)
		return
	}
	n, o, ok := c.scheduleCordon(ctx, r)
	switch {
	case !ok:
		// No cordon of gnsh's for a schedule: at most the marker.
		settled(ask)
		return
	case !cancelled:
		// Nothing this command cancelled: a shutdown may rely on it.
		r.info("no scheduled shutdown was cancelled (none stood): gnsh's cordon of %s for the %s scheduled for %s is left to the node agent, which lifts it (and frees the reboot slot) once nothing relies on it",
			n.Name, o.Action, o.When.Local().Format("15:04:05"))
		return
	}
	s := r.sess
	// Under the lock: not while a drain runs (a run for the schedule was
	// stopped before logind's cancel; another may be under way).
	lock, err := c.d.lock("cancel", s.node, false, time.Time{})
	var held *HeldError
	if errors.As(err, &held) && held.Holder.agent() {
		// The node agent: it sees the cancel too (its drain ahead of the
		// schedule ends, and it undoes that cordon itself); wait for it.
		lock, err = r.waitForAgent(ctx, held.Holder)
		held = nil
		errors.As(err, &held)
	}
	if held != nil {
		r.warn("%v. If it drains for the cancelled schedule (a gnsh that did not take the stop), interrupt %s (SIGINT), which undoes its cordon; else gnsh's cordon of %s for that schedule stays while it runs, and the node agent lifts it once nothing relies on it",
			held, held.pid(), s.node)
		return
	}
	if err != nil {
		r.warn("cannot check %s for gnsh's cordon (%v); 'gnsh uncordon --only-if-ours' undoes it", s.node, err)
		return
	}
	defer lock.Release()
	// Under the lock: a shutdown handed off meanwhile (a reboot after the
	// schedule) has released it, and may rely on both.
	underWay := c.underWay(ctx, r)
	settled(func() string { return underWay })
	if underWay != "" {
		r.info("the scheduled %s was cancelled, but %s: gnsh's cordon of %s and its reboot slot are left to the node agent, which lifts them once nothing relies on them",
			o.Action, underWay, s.node)
		return
	}
	// Under the lock, so not the slot of a drain still running.
	r.freeSlotOf(ctx, n, "the scheduled "+o.Action+" was cancelled by "+c.d.who().User)
	ctx, cancel := context.WithTimeout(ctx, 2*r.cfg.APITimeout.D())
	defer cancel()
	undone, err := drain.Uncordon(ctx, s.c, s.node, func(o *drain.Ownership) bool { return o.When != nil }, s.check)
	switch {
	case err != nil:
		r.warn("the scheduled shutdown was cancelled, but uncordoning %s failed (%v); run 'gnsh uncordon --only-if-ours'", s.node, err)
	case undone:
		r.info("the scheduled shutdown was cancelled; %s uncordoned", s.node)
		r.event(ctx, "Normal", ReasonUncordoned, "Scheduled shutdown cancelled by %s; uncordoned", c.d.who().User)
		r.lifecycle(ctx, drain.Lifecycle{Reason: drain.ConditionReasonUncordoned, Message: "the scheduled shutdown was cancelled by " + c.d.who().User})
	}
}

// scheduleCordon connects (r.sess) and reads this node's Node: ok when
// gnsh's cordon for a schedule stands (o, its record). A failure is a
// warning.
func (c *cancelRun) scheduleCordon(ctx context.Context, r *run) (*corev1.Node, *drain.Ownership, bool) {
	s, err := c.d.connect(ctx, r.cfg, "", r.out)
	if err != nil {
		r.warn("cannot check the node for gnsh's cordon (%v); 'gnsh uncordon --only-if-ours' undoes it", err)
		return nil, nil, false
	}
	r.sess = s
	n, err := s.readNode(ctx, r.cfg.APITimeout.D())
	if err != nil {
		r.warn("cannot check %s for gnsh's cordon (%v); 'gnsh uncordon --only-if-ours' undoes it", s.node, err)
		return nil, nil, false
	}
	o := drain.Owner(n)
	if o == nil || o.When == nil {
		return nil, nil, false // not gnsh's cordon for a schedule
	}
	return n, o, true
}

// underWay says whether a shutdown is under way now (Relies: logind
// preparing one, systemd stopping the system, an immediate action in
// logind's ScheduledShutdown), as a phrase; "" for none. One that cannot
// be told counts as under way.
func (c *cancelRun) underWay(ctx context.Context, r *run) string {
	if c.d.Relies == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*r.cfg.APITimeout.D())
	defer cancel()
	why, err := c.d.Relies(ctx, nil, r.cfg.DrainTimeout.D())
	if err != nil {
		return fmt.Sprintf("whether a shutdown is under way cannot be told (%v)", err)
	}
	return why
}
