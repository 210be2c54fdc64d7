package drainer

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 20: SIGINT while a reboot waits for the node agent's drain lock,
// its own slot taken, only stopped renewing the slot (the agent's keeper
// freed it later, once nothing relied on it), where gnsh(8) and
// docs/reboot-slots.md say a slot is freed by the command at once when
// the shutdown does not happen. While the agent only does bookkeeping
// (the uncordon after boot) nothing of the agent's relies on the slot: it
// is freed at once. While the agent drains, its drain may rely on it (it
// found the node holding a slot, and shares it): it is left to the agent,
// as the docs now say.
func TestInterruptedWaitForAgentFreesTheSlot(t *testing.T) {
	for _, c := range []struct {
		name  string
		drain bool // the agent holds the lock for a drain
		freed bool
	}{
		{"bookkeeping", false, true},
		{"agent drains", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeNode(false, nil, "web-1")
			d := newDrainer(t, f, "")
			w := &syncBuffer{}
			d.Stderr = w
			a := agentDrainer(t, f, d)
			l, err := a.lock("uncordon after boot", "node1", c.drain, time.Now().Add(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			go func() {
				for !strings.Contains(w.String(), "waiting for the node agent") {
					time.Sleep(time.Millisecond)
				}
				d.Signal.Deliver(syscall.SIGINT)
			}()
			err = d.handOff(t, reboot(), nil)
			var intr *Interrupted
			if !errors.As(err, &intr) {
				t.Fatalf("%v\n%s", err, w)
			}
			_, held := slotRecord(t, f).Holder("node1")
			if held == c.freed {
				t.Fatalf("slot held %v after SIGINT: %+v\n%s", held, slotRecord(t, f), w)
			}
			if got := strings.Join(f.reasons(), " "); c.freed != strings.Contains(got, "GnshSlotReleased") {
				t.Errorf("events %q", got)
			}
			if f.node(t).Spec.Unschedulable {
				t.Error("cordoned")
			}
		})
	}
}
