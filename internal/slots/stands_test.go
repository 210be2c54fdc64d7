package slots

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A waiting request whose waiter entry is removed by another (shutdown -c
// withdrawing a queued reboot: the request first, its entry next) writes
// it back only while the request stands (Request.Stands): withdrawn, the
// wait ends with ErrWithdrawn and nothing is written; standing (the entry
// dropped by mistake), the entry comes back with its ticket.
func TestWaiterEntryGoneIsWrittenBackOnlyIfTheRequestStands(t *testing.T) {
	for _, stands := range []bool{false, true} {
		g, _, r := gateRig(t)
		var still atomic.Bool
		still.Store(true)
		r.Wait, r.KeepPlace, r.StayOnCancel = time.Minute, true, true
		r.Stands = still.Load
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan error, 1)
		go func() { _, _, err := g.Acquire(ctx, r); done <- err }()
		waiter := func() (Entry, bool) {
			t.Helper()
			rec, _, err := g.Read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return rec.Waiter("node1")
		}
		var ticket int64
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if w, in := waiter(); in {
				ticket = w.Ticket
				break
			}
			if time.Now().After(end) {
				t.Fatal("never joined the queue")
			}
		}
		still.Store(stands)
		if _, err := g.Update(context.Background(), func(rec *Record) bool { rec.RemoveWaiter("node1"); return true }); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			w, in := waiter()
			if in && !stands {
				t.Fatalf("withdrawn: its entry was written back (ticket %d)", w.Ticket)
			}
			if in {
				if w.Ticket != ticket {
					t.Errorf("standing: written back with ticket %d, had %d", w.Ticket, ticket)
				}
				cancel(ErrWithdrawn)
				<-done
				break
			}
			select {
			case err := <-done:
				if stands || !errors.Is(err, ErrWithdrawn) {
					t.Fatalf("stands %v: the wait ended with %v", stands, err)
				}
			default:
				if time.Now().After(end) {
					t.Fatalf("stands %v: neither written back nor ended", stands)
				}
				continue
			}
			break
		}
		cancel(nil)
	}
}
