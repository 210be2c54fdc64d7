package slots

// The queue the record keeps is bounded by count (MaxWaiters), not only by
// bytes: every node waiting watches the one Lease, so each write of a
// record that grew with the crowd cost every waiter in proportion to it
// (the 1,000-node bench collapsed so).

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestQueueRecordsAtMostMaxWaiters(t *testing.T) {
	ns := []NodeState{node("h")}
	for i := range MaxWaiters + 3 {
		s := node(fleetName(i))
		s.UID, s.Boot = types.UID("uid-"+s.Name), "boot-"+s.Name
		ns = append(ns, s)
	}
	w := world(ns...)
	rec := Record{Version: Schema, Holders: []Entry{holder("h", 0)}, Next: 1}
	for i := range MaxWaiters {
		v := Decide(rec, w, one, still{}, fleetAsk(i))
		if v.Admitted || v.Unrecorded || v.Place != i+1 || !v.Changed {
			t.Fatalf("%s: admitted %v, unrecorded %v, place %d, changed %v", fleetName(i), v.Admitted, v.Unrecorded, v.Place, v.Changed)
		}
		rec = v.Record
	}
	// The next one waits without a place, writing nothing.
	v := Decide(rec, w, one, still{}, fleetAsk(MaxWaiters))
	if v.Admitted || !v.Unrecorded || v.Changed || v.Place != 0 || len(v.Record.Waiters) != MaxWaiters {
		t.Fatalf("past the bound: admitted %v, unrecorded %v, changed %v, place %d, %d waiters", v.Admitted, v.Unrecorded, v.Changed, v.Place, len(v.Record.Waiters))
	}
	if s := names(v.Blocks); !strings.Contains(s, "the queue is full: 32 nodes wait") {
		t.Fatalf("blocks: %s", s)
	}
	// A recorded waiter still renews its place.
	v = Decide(rec, w, one, still{}, fleetAsk(MaxWaiters-1))
	if v.Unrecorded || v.Place != MaxWaiters {
		t.Fatalf("the last recorded waiter: unrecorded %v, place %d", v.Unrecorded, v.Place)
	}
	// One waiter gone (its Node deleted): a place frees, and the next
	// node joins at the end.
	delete(w.Nodes, fleetName(0))
	v = Decide(rec, w, one, still{}, fleetAsk(MaxWaiters+1))
	if v.Unrecorded || v.Place != MaxWaiters || !v.Changed {
		t.Fatalf("after a place freed: unrecorded %v, place %d, changed %v", v.Unrecorded, v.Place, v.Changed)
	}
	// The slot free and the queue full: a node beyond it is admitted
	// only where a new node would be (behind those that fit first).
	rec.Holders = nil
	v = Decide(rec, w, Limits{Max: 100}, still{}, fleetAsk(MaxWaiters+2))
	if !v.Admitted {
		t.Fatalf("a limit that lets everyone go: %s", names(v.Blocks))
	}
}
