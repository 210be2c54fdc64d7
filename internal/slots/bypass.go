package slots

import (
	"context"
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

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
//
// A write whose answer was lost (a timeout, a broken connection, a 5xx)
// may have landed: the record is read back (within ctx) and a holder with
// this request's Run is adopted as written. When that read fails too, the
// error is an *UnconfirmedError naming the entry that may stand.
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
	if err != nil && maybeWritten(err) {
		rec, _, rerr := g.Read(ctx)
		if rerr != nil {
			return nil, &UnconfirmedError{Entry: e, Err: err}
		}
		if h, ok := rec.Holder(e.Node); ok && h.UID == e.UID && h.Boot == e.Boot {
			if h.Run == e.Run {
				return g.hold(h, false), nil
			}
			return nil, nil // another of this boot's stands for it
		}
	}
	if err != nil || held {
		return nil, err
	}
	return g.hold(e, false), nil
}

// UnconfirmedError is a write whose answer was lost and whose outcome
// could not be read back: Entry (its Run this request's own) may stand in
// the record.
type UnconfirmedError struct {
	Entry Entry
	Err   error
}

func (e *UnconfirmedError) Error() string { return e.Err.Error() }
func (e *UnconfirmedError) Unwrap() error { return e.Err }

// maybeWritten reports whether a write that failed with err may have
// landed all the same: its answer was lost on the way (the context's end,
// a broken connection) or the API server gave up waiting for storage (a
// timeout, a 5xx). A 4xx other than 408 is a write refused.
func maybeWritten(err error) bool {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		c := st.Status().Code
		return c == 0 || c == http.StatusRequestTimeout || c >= http.StatusInternalServerError
	}
	return true
}
