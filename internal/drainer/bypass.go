package drainer

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/slots"
)

// bypasses reports whether this run is the node agent's drain for a
// shutdown that bypassed gnsh's commands (systemctl reboot, the power
// button) with the gate on: it takes no slot (nothing can refuse that
// shutdown), but records the node as a holder before its cordon
// (markBypass).
func (r *run) bypasses() bool {
	return r.cfg.Slots.Gate != config.GateOff && r.purpose == forShutdown && r.d.Agent && !r.ahead
}

// markBypass writes this node into the slots record as a holder that
// counts whatever the limits (slots.Gate.Bypass), under the drain lock,
// before the cordon: an admission on another node decided before this
// write conflicts with it and is decided again, seeing this node out.
// Best effort within apiTimeout (bypassBound): the shutdown is under way whatever
// happens, so a failure is a warning (the kubelet's credentials, which
// cannot use the gate, a debug line) and the drain goes on. The slot is
// renewed while the drain runs and kept (shutting-down) after it, as a
// wrapper's: the keeper frees it after the boot, or once the shutdown is
// cancelled (ShutdownDrain.Undo frees it first). A write whose answer was
// lost is read back and adopted when it landed (slots.Gate.Bypass); when
// that cannot be told, the entry that may stand is remembered all the
// same, so that Undo frees it.
func (r *run) markBypass(ctx context.Context, n *corev1.Node, o *drain.Ownership) {
	g := r.gate()
	ctx, cancel := context.WithTimeout(ctx, bypassBound(ctx, r.cfg.APITimeout.D()))
	defer cancel()
	s, err := g.Bypass(ctx, slots.Entry{Node: n.Name, UID: n.UID, Boot: r.own.BootID, Action: r.verb,
		Since: r.d.now().UTC().Truncate(time.Second), Renew: int64(r.cfg.Slots.Renew.D() / time.Second),
		WasUnschedulable: cordonStays(n, o)})
	var u *slots.UnconfirmedError
	switch {
	case err != nil && kubeletIdentity(err):
		r.debug("reboot slots: %v", g.Unavailable(err))
	case errors.As(err, &u):
		r.bypass = u.Entry
		r.warn("this %s (it bypassed gnsh) may not be recorded in the reboot slots of %s (the answer to its write was lost, and the record could not be read back: %v): other nodes may be admitted while it drains ('gnsh slots' shows whether %s holds a slot); draining all the same",
			r.verb, g.Where(), u.Err, n.Name)
	case err != nil:
		r.warn("this %s (it bypassed gnsh) is not recorded in the reboot slots of %s (%v): other nodes may be admitted while it drains; draining all the same",
			r.verb, g.Where(), g.Unavailable(err))
	case s == nil:
		r.debug("%s already holds a reboot slot of %s: it stands for this %s", n.Name, g.Where(), r.verb)
	default:
		r.slot = s
		r.bypass = s.Entry()
		s.OnLost(func(m string) { r.warn("%s", m) })
		r.info("recorded %s as out in the reboot slots of %s before its cordon (this %s bypassed gnsh: it takes no slot, and counts)", n.Name, g.Where(), r.verb)
	}
}

// bypassBound is how long markBypass may take before the cordon: the
// API timeout, and at most a quarter of what is left of the drain's
// budget (logind's InhibitDelayMaxSec, 3 s of drain by default), so that
// a slow Lease leaves the drain most of it.
func bypassBound(ctx context.Context, apiTimeout time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return min(apiTimeout, time.Until(dl)/4)
	}
	return apiTimeout
}

// freeBypass frees the holder entry markBypass wrote (or may have), if
// it is still that one (its Run): the shutdown it was written for was
// cancelled. Bounded by
// 2×apiTimeout; a failure is a debug line (the keeper frees it once
// nothing relies on it).
func (r *run) freeBypass(why string) {
	if r.bypass.Node == "" || r.sess == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.cfg.APITimeout.D())
	defer cancel()
	g := r.gate()
	me := r.bypass
	freed, err := g.Free(ctx, func(h slots.Entry) bool {
		return h.Node == me.Node && h.UID == me.UID && h.Boot == me.Boot && h.Run == me.Run
	})
	switch {
	case err != nil:
		r.debug("reboot slot of %s not freed: %v", me.Node, err)
	case len(freed) > 0:
		g.Event(ctx, me.Node, "Normal", slots.ReasonReleased, "Freed the reboot slot of "+g.Where()+": "+why)
		r.info("the reboot slot of %s in %s is freed", me.Node, g.Where())
	}
	r.bypass = slots.Entry{}
}
