package drainer

import (
	"cmp"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/slots"
)

// gate is the reboot-slot gate of the run's configuration, over its
// session: Events on Nodes (when events are on), the waiting line on the
// progress line.
func (r *run) gate() *slots.Gate {
	g := slots.NewGate(r.sess.gateClient(), r.cfg)
	g.Kubeconfig = r.sess.gatePath
	g.Clock = r.d.clock()
	g.Event = func(ctx context.Context, node, typ, reason, msg string) {
		if !r.cfg.Events {
			return
		}
		if err := PostEvent(context.WithoutCancel(ctx), r.sess.c, node, typ, reason, msg, r.cfg.APITimeout.D()); err != nil {
			r.debug("event %s not posted: %v", reason, err)
		}
	}
	g.Status = r.out.live
	g.Debug = func(l string) { r.debug("%s", l) }
	// The gate's kubeconfig, named when its token is refused ("": the
	// default /etc/gnsh/kubeconfig).
	// The drain's kubeconfig is not where the gate's token goes: then too
	// the default is named.
	g.Kubeconfig = cmp.Or(r.sess.gatePath, r.cfg.Slots.Kubeconfig)
	if g.Kubeconfig == filepath.Join(r.d.KubeRoot, kube.GnshKubeconfig) || r.sess.gateShared {
		g.Kubeconfig = ""
	}
	return g
}

// takeSlot waits for a reboot slot (internal/slots) before the lock and
// the cordon of a gated run (gated): ok to go on, else the outcome that
// ends the attempt. The agent's drain ahead of a schedule waits at most
// until slotWaitMax (its budget, less a moment for cancelling the schedule
// when none comes). n is the Node as just read, o gnsh's record of a
// cordon that stands.
func (r *run) takeSlot(ctx context.Context, n *corev1.Node, o *drain.Ownership) (outcome, bool) {
	if !r.gated() {
		return drained, true
	}
	g := r.gate()
	wait := r.cfg.SlotWait()
	if r.ahead {
		wait = max(0, min(wait, r.slotWaitMax))
	}
	// A request queued when no slot is free at once (queue.go) asks once;
	// the node agent's run for a queued one waits as long as it was
	// given. Either keeps its place when the wait runs out.
	queueWhy := r.queueWhy()
	if queueWhy != "" {
		wait = 0
		if win, _ := r.cfg.QueueWindow(); win != nil && !win.Contains(r.d.now()) {
			// Outside the window: queued without asking (a free slot
			// would let it go now); its place in arrival order kept by
			// a ticket, for the node agent to ask with once it opens.
			return r.enqueueOutside(ctx, slots.StateOf(n), g, win, queueWhy)
		}
	}
	if r.fromQueue != nil {
		wait = r.queueWait
	}
	req := slots.Request{
		Ask: slots.Ask{Entry: slots.Entry{Node: n.Name, UID: n.UID, Boot: r.own.BootID, Action: r.verb, Who: r.own.Requester(),
			Since: r.d.now().UTC().Truncate(time.Second), Renew: int64(r.cfg.Slots.Renew.D() / time.Second),
			WasUnschedulable: cordonStays(n, o), When: r.own.When, Queued: queueWhy != "" || r.fromQueue != nil},
			ForceQuorum: r.forceQuorum},
		Self: slots.StateOf(n), Wait: wait, KeepPlace: queueWhy != "" || r.fromQueue != nil ||
			r.ahead && r.cfg.Slots.Queue != config.QueueNever,
		StayOnCancel: r.fromQueue != nil, Silent: queueWhy != "",
	}
	if q := r.fromQueue; q != nil {
		req.Entry.Since = q.Since
		req.Ticket, req.HasTicket = q.Ticket, q.Ticket > 0
		// shutdown -c removes the request, then its place: a run that
		// finds its place gone does not write it back unless the request
		// still stands (the runner notices the withdrawal only at its
		// next look at the file).
		req.Stands = func() bool {
			cur, err := r.d.ReadQueued()
			return err != nil || SameQueued(cur, q)
		}
	}
	start := r.d.now()
	s, v, err := g.Acquire(ctx, req)
	r.out.done()
	var we *slots.WaitError
	var ue *slots.UnavailableError
	switch {
	case err == nil:
	case errors.As(err, &we) && queueWhy != "" && !slots.Broken(err) && !slots.Unreadable(err) && ctx.Err() == nil:
		return r.enqueue(ctx, slots.StateOf(n), we, queueWhy)
	case errors.As(err, &ue) && queueWhy != "" && r.cfg.Slots.Gate == config.GateRequired && ctx.Err() == nil &&
		!apierrors.IsForbidden(err) && !apierrors.IsNotFound(err):
		// The API server failing at its one ask, the gate required: the
		// node agent waits it out (a queued reboot never goes without
		// its slot), rather than refuse what automation asked.
		return r.enqueue(ctx, slots.StateOf(n), &slots.WaitError{Err: err}, queueWhy)
	case errors.Is(err, slots.ErrWithdrawn) && r.fromQueue != nil:
		// Withdrawn before the runner's look said so: nothing written.
		return r.fail(queueRetry, &queueStopped{err: err}), false
	case errors.As(err, &we) && r.fromQueue != nil:
		// The agent asks again (its place kept) while the request stands.
		r.fromQueue.Ticket, r.fromQueue.Place = max(we.Ticket, r.fromQueue.Ticket), we.Place
		return r.fail(noSlot, err), false
	case errors.As(err, &we):
		return r.fail(noSlot, err), false
	case r.fromQueue != nil && ctx.Err() == nil:
		// A queued reboot never goes without its slot: an unavailable
		// gate (the API server down, these credentials refused) is
		// waited out by the agent until the request is given up.
		return r.fail(gateDown, err), false
	case r.ahead && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The agent's budget ended while it waited (its wait and the
		// budget differ by the requests around the wait): no slot came
		// before the schedule's time all the same.
		return r.fail(noSlot, &slots.WaitError{Waited: r.d.now().Sub(start), Err: err}), false
	case ctx.Err() != nil:
		return r.fail(r.classify(ctx, err), err), false
	case errors.As(err, &ue) && r.cfg.Slots.Gate == config.GateRequired:
		return r.fail(gateDown, err), false
	case errors.As(err, &ue) && kubeletIdentity(err):
		// The kubelet's credentials cannot use the gate (the Node
		// authorizer): with the default optional gate that is the
		// normal case of a node without gnsh's own identity. One plain
		// line, not a warning: the reboot goes on as configured (said
		// once the drain lock is held).
		r.slotLine = kubeletGateLine
		r.debug("reboot slots: %v", err)
		return drained, true
	default:
		r.ungated(ctx, err)
		return drained, true
	}
	r.slot = s
	s.OnLost(func(m string) { r.warn("%s", m) })
	waited := r.d.now().Sub(start).Round(time.Second)
	switch {
	case v.Already:
		r.info("%s already holds a reboot slot of %s", n.Name, g.Where())
	case waited >= time.Second:
		r.info("took a reboot slot of %s after waiting %s", g.Where(), waited)
	default:
		r.debug("took a reboot slot of %s", g.Where())
	}
	if v.QuorumWarning != "" {
		r.warn("%s", v.QuorumWarning)
	}
	if r.forceQuorum && (req.Self.ControlPlane || v.Guarded) {
		r.warn("--force-quorum: the etcd quorum guard was not applied to this control-plane or etcd node")
	}
	return drained, true
}

// slotStands reports whether the slot this run holds still stands, read
// under the lock, before the cordon: one it shares (the node held it
// when this run asked: a second wrapper's, the node agent's, an earlier
// schedule's) may have been freed by its taker while this run waited for
// the drain lock, and one of its own by an admin (gnsh slots release) or
// by a node that found it stale. Either way it asks again (slotFreed).
// A read that fails is made again within apiTimeout; a slot still not
// confirmed then is no slot (slotUnknown): the gate counts as unavailable
// at this point: the outcome that ends the run (slots.gate: required), or
// drained with the slot let go (optional: the run goes on without one, as
// with any unavailable gate). A record that cannot be read refuses
// (noSlot) whatever slots.gate says. It never counts as standing:
// meanwhile it may have been freed and given to another node.
func (r *run) slotStands(ctx context.Context, last bool) (st slotState, o outcome) {
	if r.slot == nil {
		return slotHeld, drained
	}
	g := r.gate()
	rec, unreadable, err := r.readRecord(ctx, g)
	if unreadable {
		// Broken, or a newer gnsh's: whose slots it holds is unknown, so
		// refused whatever slots.gate says, as before the slot is taken.
		// The slot is only let go: a record that cannot be read cannot
		// be changed either.
		r.slot.Halt()
		r.slot = nil
		return slotUnknown, r.fail(noSlot, &slots.WaitError{Err: err})
	}
	if err != nil {
		ue := g.Unavailable(err)
		r.slot.Halt()
		if r.cfg.Slots.Gate == config.GateRequired || r.fromQueue != nil || ctx.Err() != nil {
			// Refused: end lets go of the slot (it frees it if the API
			// server lets it, and says so if not) and of the lock.
			if ctx.Err() != nil {
				return slotUnknown, r.fail(r.classify(ctx, err), err)
			}
			return slotUnknown, r.fail(gateDown, ue)
		}
		r.ungated(ctx, ue)
		r.slot = nil
		return slotUnknown, drained
	}
	me := r.slot.Entry()
	if h, ok := rec.Holder(me.Node); ok && h.UID == me.UID && h.Boot == me.Boot && h.Ticket == me.Ticket {
		return slotHeld, drained
	}
	again := "; asking for one again"
	if last {
		again = ""
	}
	if r.slot.Before {
		r.info("the reboot slot of %s in %s was freed meanwhile by the gnsh that took it%s", me.Node, g.Where(), again)
	} else {
		r.info("the reboot slot of %s in %s was freed by someone else before the cordon ('gnsh slots release', or a node that found it stale)%s", me.Node, g.Where(), again)
	}
	return slotFreed, drained
}

// ungated says that the run goes on without a reboot slot because the
// gate is unavailable (err) and slots.gate is optional: the warning line,
// and the same text as a Warning Event on the Node, so that an admin
// watching the cluster learns that the node went down ungated. The Event
// is posted with the credentials that just failed: best effort, bounded
// by apiTimeout, a failure is a debug line (r.event). Not for the
// kubelet's own credentials (kubeletGateLine), the normal case of a node
// without gnsh's identity.
func (r *run) ungated(ctx context.Context, err error) {
	r.warn("reboot slots not checked: %v; going on without a slot (slots.gate: optional)", err)
	r.event(ctx, "Warning", ReasonSlotNotChecked, "%s requested by %s: reboot slots not checked: %v; going on without a slot (slots.gate: optional)",
		r.own.Request(), r.own.Requester(), err)
}

// slotState is what slotStands found.
type slotState int

const (
	slotHeld    slotState = iota // the slot stands (or none is held)
	slotFreed                    // freed meanwhile: ask again
	slotUnknown                  // not confirmed: no slot (the gate unavailable)
)

// readRecord reads the slots record, again after a failure (a moment's
// 5xx as etcd changes leader), within apiTimeout in all. unreadable: the
// Lease was read, but its record cannot be (broken, or a newer gnsh's),
// which no second read mends.
func (r *run) readRecord(ctx context.Context, g *slots.Gate) (rec slots.Record, unreadable bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.APITimeout.D())
	defer cancel()
	pause := 100 * time.Millisecond
	for {
		rec, _, err := g.Read(rctx)
		if slots.Unreadable(err) {
			return rec, true, err
		}
		if err == nil || rctx.Err() != nil {
			return rec, false, err
		}
		r.debug("reboot slot of %s not confirmed: %v; reading it again", r.sess.node, err)
		t := r.d.clock().NewTimer(pause)
		select {
		case <-rctx.Done():
			t.Stop()
			return rec, false, err
		case <-t.C():
		}
		pause = min(2*pause, time.Second)
	}
}

// cordonStays reports whether n is cordoned by a cordon that stays after
// the boot (an admin's, a gnsh drain's: not gnsh's cordon for a shutdown,
// which the node agent lifts): the slot is then freed once the node is
// back and Ready, cordoned or not.
func cordonStays(n *corev1.Node, o *drain.Ownership) bool {
	return n.Spec.Unschedulable && (o == nil || !slices.Contains(drain.ShutdownActions, o.Action))
}

// kubeletGateLine is what a shutdown says when the gate is optional and
// the kubelet's credentials cannot use it.
const kubeletGateLine = "reboot slots not checked: the kubelet's credentials may not use the gate (Node authorizer); " +
	"it needs gnsh's own identity (gnsh's rbac.yaml applied and its ServiceAccount's kubeconfig in /etc/gnsh/kubeconfig, " +
	"which the Ansible role does when given an admin kubeconfig, gnsh_kubectl_kubeconfig; 'gnsh doctor' says how on this node); " +
	"going on without a slot (slots.gate: optional)"

// kubeletIdentity reports whether a gate error is the Node authorizer
// refusing a kubelet's credentials.
func kubeletIdentity(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), `"system:node:`)
}

// slotPhase records the holder's phase (with its next renewal).
func (r *run) slotPhase(p slots.Phase) {
	if r.slot != nil {
		r.slot.SetPhase(p)
	}
}

// keepSlot leaves the slot held after a hand-off, its phase
// shutting-down: the node agent frees it after the next boot (or others
// do, internal/slots). Bounded by 2×apiTimeout and by bound (the agent's
// drain for a shutdown that bypassed gnsh: what is left of its budget);
// a Keep too late for bound is skipped, the entry left as last renewed
// (the node agent's keeper renews it while the shutdown is under way, and
// frees it after the boot).
func (r *run) keepSlot(bound context.Context) {
	if r.slot == nil {
		return
	}
	ctx, cancel := context.WithTimeout(bound, 2*r.cfg.APITimeout.D())
	defer cancel()
	if err := r.slot.Keep(ctx, slots.ShuttingDown); err != nil {
		r.debug("reboot slot: phase not written: %v", err)
	}
	r.slot = nil
}

// releaseSlot frees the slot of a shutdown that does not happen; a slot
// the node held before this run asked (a schedule's, or its last boot's)
// is left to its taker, or to the node agent.
func (r *run) releaseSlot(why string) {
	if r.slot == nil {
		return
	}
	if r.slot.Before {
		r.slot.Halt()
		r.slot = nil
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.cfg.APITimeout.D())
	defer cancel()
	if err := r.slot.Release(ctx, why); err != nil {
		r.warn("the reboot slot of %s was not freed (%v): it is freed once others see no renewal from it, or by 'gnsh slots release --node %s'",
			r.sess.node, err, r.sess.node)
	} else {
		r.debug("reboot slot freed: %s", why)
	}
	r.slot = nil
}

// freeSlotOf frees the reboot slot this boot of n holds (shutdown -c: the
// schedule it was taken for is gone), a bounded best effort: the node
// agent, or any node that finds the slot stale, frees it otherwise.
func (r *run) freeSlotOf(ctx context.Context, n *corev1.Node, why string) {
	if r.cfg.Slots.Gate == config.GateOff {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*r.cfg.APITimeout.D())
	defer cancel()
	g := r.gate()
	boot := r.d.bootID()
	freed, err := g.Free(ctx, func(h slots.Entry) bool { return h.Node == n.Name && h.UID == n.UID && h.Boot == boot })
	switch {
	case err != nil && !kubeletIdentity(err):
		r.debug("reboot slot of %s not freed: %v", n.Name, err)
	case len(freed) > 0:
		g.Event(ctx, n.Name, "Normal", slots.ReasonReleased, "Freed the reboot slot of "+g.Where()+": "+why)
		r.info("the reboot slot of %s in %s is freed", n.Name, g.Where())
	}
}
