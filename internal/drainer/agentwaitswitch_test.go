package drainer

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// Noticed by the review of issue 20: SIGINT while a reboot waits for the
// node agent's bookkeeping (an uncordon after boot) frees the reboot's
// slot at once, judged on the hold seen at the last poll of the drain
// lock (every agentWaitPoll). Between two polls the agent may have given
// way to a drain of its own (a shutdown that bypassed gnsh), which found
// the node holding a slot and relies on it: the wrapper freed it under
// that drain. The signal's decision is now made on the hold as it stands:
// the slot is freed at once only when the bookkeeping hold last seen still
// stands; anything else leaves it to the agent's keeper. The wrapper's
// clock is a fake one that never moves, so that no poll comes between the
// switch and the signal.
func TestInterruptedWaitForAgentSeesTheHoldNow(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	w := &syncBuffer{}
	d.Stderr = w
	d.Clock = clocktesting.NewFakeClock(time.Now())
	a := agentDrainer(t, f, d)
	l, err := a.lock("uncordon after boot", "node1", false, time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var drainLock *Lock
	defer func() { drainLock.Release() }()
	go func() {
		for !strings.Contains(w.String(), "waiting for the node agent") {
			time.Sleep(time.Millisecond)
		}
		// The bookkeeping ends; the agent's drain for a systemctl
		// reboot takes the lock before the wrapper looks again.
		l.Release()
		var err error
		if drainLock, err = a.lock("reboot", "node1", true, time.Now().Add(30*time.Second)); err != nil {
			t.Error(err)
		}
		d.Signal.Deliver(syscall.SIGINT)
	}()
	err = d.handOff(t, reboot(), nil)
	var intr *Interrupted
	if !errors.As(err, &intr) {
		t.Fatalf("%v\n%s", err, w)
	}
	if _, held := slotRecord(t, f).Holder("node1"); !held {
		t.Fatalf("the slot the agent's drain relies on was freed after SIGINT: %+v\n%s", slotRecord(t, f), w)
	}
	if got := strings.Join(f.reasons(), " "); strings.Contains(got, "GnshSlotReleased") {
		t.Errorf("events %q", got)
	}
}
