package slots

import "context"

// BypassWho is who asked, in a holder written for a shutdown that
// bypassed gnsh (Entry.Bypass): gnsh was not asked, and logind does not
// say who was. Waiting lines and gnsh slots show "reboot by " and it.
const BypassWho = "systemctl or logind (bypassed gnsh)"

// Bypass records node e.Node as a holder for a shutdown that bypassed
// gnsh's commands (systemctl reboot, the power button), before the node
// agent cordons for it: such a shutdown is under way and cannot be
// refused, but written first (a compare-and-swap, as every change) it is
// seen by every admission from then on, and one decided before it
// conflicts and is decided again seeing it. It is written whatever the
// limits (it counts even over them). A holder of this node's boot (e.UID,
// e.Boot) already there stands for it: nothing is written, and the Slot is
// nil. A holder of an earlier boot (still settling) gives way to it, as
// to any admission. The Slot is renewed until Keep or Release, as any.
func (g *Gate) Bypass(ctx context.Context, e Entry) (*Slot, error) {
	e.Run = newRun()
	e.Phase, e.Beat, e.Bypass, e.Who = Admitted, 0, true, BypassWho
	var held bool
	_, err := g.Update(ctx, func(rec *Record) bool {
		held = false
		if h, ok := rec.Holder(e.Node); ok && h.UID == e.UID && h.Boot == e.Boot {
			held = true
			return false
		}
		e.Ticket = rec.Next
		rec.Next++
		// Its own waiter entry (a wrapper of this boot waiting for a
		// slot) stays: that wrapper finds the node holding one.
		rec.Holders = append(without(rec.Holders, e.Node), e)
		return true
	})
	if err != nil || held {
		return nil, err
	}
	return g.hold(e, false), nil
}
