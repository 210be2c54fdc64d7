package slots

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// The keeper renews a slot of this boot that its taker no longer renews
// at the entry's own period when that is shorter than the agent's: the
// agent started with renew: 30s, the config then edited to renew: 10s
// without restarting it; the wrapper wrote renewSeconds 10 and handed off.
// Others free a holder silent for 3 of the entry's periods (30 s), so the
// keeper must beat well within that. Time is a fake clock, stepped a
// second at a time once the keeper waits on it.
func TestKeeperRenewsAtTheEntrysPeriod(t *testing.T) {
	h := Entry{Node: "node1", UID: "u1", Boot: "b", Phase: ShuttingDown, Renew: 10}
	g, _ := keeperRig(t, h)
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	g.Clock, g.Renew = fc, 30*time.Second
	k := &Keeper{Gate: g, Node: "node1", Boot: "b", Settle: time.Second,
		Needed: func(context.Context, Entry, func() error) (bool, string, error) {
			return true, "a shutdown is scheduled", nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	start := fc.Now()
	lastBeat, lastAt := int64(0), start
	var worst time.Duration
	for fc.Since(start) < 2*time.Minute {
		eventually(t, "the keeper waits on its timer", fc.HasWaiters)
		fc.Step(time.Second)
		// Let a renewal started by this step land before reading.
		eventually(t, "the keeper waits on its timer again", fc.HasWaiters)
		e, ok := current(t, g).Holder("node1")
		if !ok {
			t.Fatal("the slot was freed")
		}
		if e.Beat != lastBeat {
			lastBeat, lastAt = e.Beat, fc.Now()
		}
		worst = max(worst, fc.Since(lastAt))
	}
	if limit := 3 * h.renewPeriod(); worst >= limit {
		t.Fatalf("silent for %s between the keeper's renewals (agent renew %s, entry renewSeconds %d): others free a slot silent for %s",
			worst, g.Renew, h.Renew, limit)
	}
	if lastBeat == 0 {
		t.Fatal("never renewed")
	}
}
