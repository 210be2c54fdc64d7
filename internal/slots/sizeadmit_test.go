package slots

// Admissions past the record's bound (review of issue 20, finding 4):
// joins stopped at 200 KiB, but nothing bounded admissions beside them
// but maxUnavailable: with a large limit the record passed the 256 KiB a
// Lease's annotations hold, and the API server then refused every write
// of it, renewals and releases included.

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// heldFleet is a record of as many holders (admitted fleet nodes) as the
// admission bound lets in, filled directly, and the fleet's world.
func heldFleet(t *testing.T, n int) (Record, World, int) {
	t.Helper()
	ns := []NodeState{}
	for i := range n {
		s := node(fleetName(i))
		s.UID, s.Boot = types.UID("uid-"+fleetName(i)), "boot-"+fleetName(i)
		ns = append(ns, s)
	}
	rec := Record{Version: Schema}
	k := 0
	for ; k < n; k++ {
		h := fleetAsk(k).Entry
		h.Ticket, h.Phase = rec.Next, Admitted
		next := rec
		next.Holders = append(rec.Holders[:len(rec.Holders):len(rec.Holders)], h)
		if footprint(next) > MaxHeldBytes {
			break
		}
		rec = next
		rec.Next++
	}
	if k >= n {
		t.Fatalf("%d holders fit: no bound reached", k)
	}
	return rec, world(ns...), k
}

func TestAdmissionsStopAtTheRecordsBound(t *testing.T) {
	rec, w, k := heldFleet(t, 1200)
	lim := Limits{Max: 5000}
	t.Logf("%d holders, %d bytes", k, len(rec.encode()))
	// A new node that every limit lets out: it waits, unrecorded,
	// nothing written, and says why.
	v := Decide(rec, w, lim, still{}, fleetAsk(k))
	if v.Admitted || v.Changed || !v.Unrecorded || v.Place != 0 {
		t.Fatalf("%s: admitted %v, changed %v, unrecorded %v, place %d (record %d bytes)", fleetName(k), v.Admitted, v.Changed, v.Unrecorded, v.Place, len(v.Record.encode()))
	}
	if s := names(v.Blocks); !strings.Contains(s, "the slots record is full") || strings.Contains(s, "queue is full") {
		t.Fatalf("blocks: %s", s)
	}
	// A recorded waiter keeps its place and waits.
	wr := rec
	we := fleetAsk(k).Entry
	we.Ticket, we.Renew = wr.Next, 30
	wr.Waiters = []Entry{we}
	wr.Next++
	v = Decide(wr, w, lim, still{}, fleetAsk(k))
	if v.Admitted || v.Unrecorded || v.Place != 1 || !strings.Contains(names(v.Blocks), "the slots record is full") {
		t.Fatalf("recorded waiter: admitted %v, unrecorded %v, place %d, %s", v.Admitted, v.Unrecorded, v.Place, names(v.Blocks))
	}
	// Every holder grows as far as a holder grows (its phase, its
	// schedule, the warned mark, a beat of many digits), and a holder the
	// node agent writes whatever the limits (a shutdown that bypassed
	// gnsh) comes in: the Lease still holds the record.
	grown := rec.clone()
	when := time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.FixedZone("x", -(9*3600+30*60)))
	for i := range grown.Holders {
		h := &grown.Holders[i]
		h.Phase, h.When, h.Warned, h.Beat = ShuttingDown, &when, true, 1<<50
	}
	b := fleetAsk(k + 1).Entry
	b.Ticket, b.Phase, b.Bypass, b.Who = grown.Next, Draining, true, "systemctl"
	grown.Holders = append(grown.Holders, b)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	grown.Encode(l)
	if sz := len(Annotation) + len(l.Annotations[Annotation]); sz > 256<<10 {
		t.Fatalf("holders grown: %d bytes of annotations, over the 262144 a Lease holds", sz)
	}
	// A slot freed (its Node gone): the node is admitted.
	delete(w.Nodes, fleetName(0))
	v = Decide(rec, w, lim, still{}, fleetAsk(k))
	if !v.Admitted {
		t.Fatalf("after a slot was freed: %s", names(v.Blocks))
	}
}
