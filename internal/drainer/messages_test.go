package drainer

import (
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/slots"
)

// A refusal the etcd quorum guard held back names --force-quorum; one the
// other limits held back does not.
func TestNoSlotNamesForceQuorum(t *testing.T) {
	r := newRun(newDrainer(t, nil, "").Drainer, forShutdown, "reboot")
	quorum := &slots.WaitError{Waited: time.Minute, Blocks: []slots.Block{{Limit: slots.LimitQuorum, Max: 3,
		Out: []slots.Out{{Node: "etcd-cp-2", Why: "not Ready"}}}}}
	if msg := r.tell(noSlot, verdict{}, quorum); !strings.Contains(msg, "or override the etcd quorum guard with --force-quorum") {
		t.Errorf("%q", msg)
	}
	cluster := &slots.WaitError{Waited: time.Minute, Blocks: []slots.Block{{Limit: slots.LimitCluster, Max: 1,
		Out: []slots.Out{{Node: "node2", Why: "NotReady"}}}}}
	if msg := r.tell(noSlot, verdict{}, cluster); strings.Contains(msg, "force-quorum") {
		t.Errorf("%q", msg)
	}
}
