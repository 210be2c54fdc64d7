package slots

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A queued reboot (KeepPlace) whose wait runs out keeps its waiter entry
// where it stands, and the WaitError says where; the same node asking
// again in the same boot (the node agent, carrying the request) finds
// that entry and keeps its ticket. Without KeepPlace the entry goes.
func TestKeepPlaceLeavesTheWaiterEntry(t *testing.T) {
	for _, keep := range []bool{false, true} {
		g, _, r := gateRig(t)
		r.Wait, r.KeepPlace = 0, keep
		_, _, err := g.Acquire(context.Background(), r)
		var we *WaitError
		if !errors.As(err, &we) {
			t.Fatalf("keep %v: got %v, want a WaitError", keep, err)
		}
		rec, _, err := g.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		w, in := rec.Waiter("node1")
		if in != keep {
			t.Fatalf("keep %v: waiter entry in the record: %v (%+v)", keep, in, rec.Waiters)
		}
		if !keep {
			if we.Place != 0 || we.Ticket != 0 {
				t.Fatalf("withdrawn, yet the WaitError says place %d ticket %d", we.Place, we.Ticket)
			}
			continue
		}
		if we.Place != 1 || we.Ticket != w.Ticket {
			t.Fatalf("WaitError says place %d ticket %d, the record has ticket %d first", we.Place, we.Ticket, w.Ticket)
		}
		// The agent asks on in the same boot, with the ticket: the same
		// entry, the same place.
		r2 := r
		r2.Entry.Run = ""
		r2.Ask.Ticket, r2.Ask.HasTicket = we.Ticket, true
		r2.Wait = 1500 * time.Millisecond
		_, _, err = g.Acquire(context.Background(), r2)
		var we2 *WaitError
		if !errors.As(err, &we2) || we2.Ticket != we.Ticket || we2.Place != 1 {
			t.Fatalf("asked again: %v (ticket %d, place %d), want the same ticket %d at place 1", err, we2.Ticket, we2.Place, we.Ticket)
		}
	}
}
