package slots

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkDecideQueue: one waiter's decision in a queue of 100 behind 5
// holders among 1,000 Nodes, which each waiter makes on each change of the
// Lease (go test -bench DecideQueue ./internal/slots/).
func BenchmarkDecideQueue(b *testing.B) {
	var ns []NodeState
	for i := range 1000 {
		ns = append(ns, node(fmt.Sprintf("n%04d", i)))
	}
	w := world(ns...)
	rec := Record{Version: Schema, Next: 105}
	for i := range 105 {
		e := Entry{Node: ns[i].Name, UID: ns[i].UID, Boot: ns[i].Boot, Ticket: int64(i), Since: time.Now(), Renew: 10}
		if i < 5 {
			e.Phase = Draining
			rec.Holders = append(rec.Holders, e)
		} else {
			rec.Waiters = append(rec.Waiters, e)
		}
	}
	a := Ask{Entry: rec.Waiters[len(rec.Waiters)-1]}
	for b.Loop() {
		if v := Decide(rec, w, Limits{Max: 5}, still{}, a); v.Admitted {
			b.Fatal("admitted")
		}
	}
}
