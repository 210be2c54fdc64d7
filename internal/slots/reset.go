package slots

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// ReasonReset is the Event (a Warning, on the Lease) of a reset.
const ReasonReset = "GnshSlotsReset"

// ResetCommand is the command that resets a record that cannot be read:
// the messages that refuse on such a record name it.
const ResetCommand = "gnsh slots reset"

// Unreadable reports whether err (a *WaitError too) says the record
// cannot be read: broken (not valid JSON) or written by a newer gnsh.
// Either refuses every reboot, whatever slots.gate says.
func Unreadable(err error) bool {
	return Broken(err) || errors.As(cause(err), new(*NewerError))
}

// Broken reports whether err (a *WaitError too) says the record is not
// valid (ResetCommand starts a new one).
func Broken(err error) bool { return errors.Is(cause(err), errBadRecord) }

// cause is the API server's error a *WaitError ended with, else err.
func cause(err error) error {
	var we *WaitError
	if errors.As(err, &we) && we.Err != nil {
		return we.Err
	}
	return err
}

// Reset is what a reset found and replaced.
type Reset struct {
	// None: there is no Lease; nothing was written.
	None bool
	// UID is the Lease's (what its Event refers to).
	UID types.UID
	// Size is the annotation's length, in bytes, as it was replaced.
	Size int
	// Unread is why the record could not be read (nil: it could, and
	// force reset it).
	Unread error
	// Holders and Waiters are the record's, when it could be read.
	Holders, Waiters []Entry
}

// Lost says what the reset threw away, in a few words.
func (r Reset) Lost() string {
	if r.Unread != nil {
		var newer *NewerError
		if errors.As(r.Unread, &newer) {
			return fmt.Sprintf("a version %d record of a newer gnsh (%d bytes), not read", newer.Version, r.Size)
		}
		return fmt.Sprintf("a record that could not be read (%d bytes): who held or waited for a slot is unknown", r.Size)
	}
	var hs, ws []string
	for _, h := range r.Holders {
		hs = append(hs, fmt.Sprintf("%s (%s, %s by %s)", h.Node, h.Phase, h.Action, h.Who))
	}
	for _, w := range r.Waiters {
		ws = append(ws, w.Node)
	}
	if len(hs)+len(ws) == 0 {
		return "an empty record"
	}
	return fmt.Sprintf("%d holder(s) [%s], %d waiter(s) [%s]", len(hs), strings.Join(hs, ", "), len(ws), strings.Join(ws, ", "))
}

// ReadableError: the record reads; resetting it needs force.
type ReadableError struct {
	Where            string
	Holders, Waiters int
	Newer            *NewerError // it is a newer gnsh's: not broken
}

func (e *ReadableError) Error() string {
	if e.Newer != nil {
		return fmt.Sprintf("the slots record of %s is not broken: %v; or, to throw away a newer gnsh's record all the same, '%s --force'",
			e.Where, e.Newer, ResetCommand)
	}
	return fmt.Sprintf("the slots record of %s reads (%d holding a slot, %d waiting): nothing reset; 'gnsh slots release --node NODE' frees one node's slot, '%s --force' frees them all",
		e.Where, e.Holders, e.Waiters, ResetCommand)
}

// Reset replaces the record with an empty one (every slot free, nobody
// waiting): only a record that cannot be read (not valid JSON), unless
// force (a readable one, or a newer gnsh's). It writes with a
// compare-and-swap on the version it judged, so that it never throws away
// a record someone repaired or wrote meanwhile: after a conflict it reads
// and judges again (bounded by ctx). Without a Lease it writes nothing
// (None).
func (g *Gate) Reset(ctx context.Context, force bool) (Reset, error) {
	backoff := 10 * time.Millisecond
	for {
		l, err := g.get(ctx)
		if err != nil {
			return Reset{}, err
		}
		if l == nil {
			return Reset{None: true}, nil
		}
		rec, err := Decode(l)
		var newer *NewerError
		switch {
		case err == nil && !force:
			return Reset{}, &ReadableError{Where: g.Where(), Holders: len(rec.Holders), Waiters: len(rec.Waiters)}
		case errors.As(err, &newer) && !force:
			return Reset{}, &ReadableError{Where: g.Where(), Newer: newer}
		case err != nil && !Unreadable(err):
			return Reset{}, err
		}
		r := Reset{UID: l.UID, Size: len(l.Annotations[Annotation]), Unread: err, Holders: rec.Holders, Waiters: rec.Waiters}
		// Tickets go on from a readable record's; a new record starts
		// them again, as a Lease made anew does.
		fresh := Record{Version: Schema}
		if err == nil {
			fresh.Next = rec.Next
		}
		_, err = g.put(ctx, l, fresh)
		switch {
		case err == nil:
			return r, nil
		case !apierrors.IsConflict(err) && !apierrors.IsNotFound(err):
			return Reset{}, err
		}
		t := g.clock().NewTimer(jitter(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return Reset{}, ctx.Err()
		case <-t.C():
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
