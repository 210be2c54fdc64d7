package drainer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/slots"
)

// shutdown -c removes the queued request, then its waiter entry. The node
// agent's run for that request learns of the withdrawal only at its
// runner's next look at the file (every 2 s): a run that reads the Lease
// meanwhile (it was just starting, or its watch showed the entry gone)
// must not write the entry back, or the place of a request nobody will
// take up stands in the queue until the runner's look. Here the run
// starts after shutdown -c, its ctx not ended (the runner has not looked
// yet): it ends as withdrawn, writing nothing.
func TestQueuedRunDoesNotWriteBackAWithdrawnPlace(t *testing.T) {
	f, d, ag, q := queuedFor(t, "")
	if err := d.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	if _, in := slotRecord(t, f).Waiter("node1"); in {
		t.Fatalf("shutdown -c left its place: %+v", slotRecord(t, f))
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() {
		p, err := ag.QueuedPreparer(ctx, q, 20*time.Second).Prepare(context.Background(), q.Request())
		if p != nil {
			p.Finish(context.Background(), errors.New("test"))
		}
		done <- err
	}()
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if w, in := slotRecord(t, f).Waiter("node1"); in {
			t.Errorf("the agent's run wrote back the place of the withdrawn request (ticket %d, beat %d)", w.Ticket, w.Beat)
			cancel(slots.ErrWithdrawn) // as the runner's next look would
			<-done
			return
		}
		select {
		case err := <-done:
			if !errors.Is(err, slots.ErrWithdrawn) || !strings.Contains(err.Error(), "withdrawn (shutdown -c") {
				t.Errorf("the run of a withdrawn request: %v, want a refusal saying it was withdrawn", err)
			}
			if _, in := slotRecord(t, f).Waiter("node1"); in {
				t.Errorf("its place stands: %+v", slotRecord(t, f))
			}
			if f.node(t).Spec.Unschedulable {
				t.Error("node1 cordoned")
			}
			return
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("the run neither ended nor wrote; agent stderr:\n%s", ag.stderr)
		}
	}
}
