package slots

// The record's size (issue 20): it lives in one annotation of the Lease,
// and a Lease's annotations hold 256 KiB at most, about 900 entries. A
// fleet whose every node asks at once must not push it past that: a
// waiter that cannot be recorded waits unrecorded and asks again; it is
// never admitted unrecorded; admissions go in up to MaxHeldBytes
// (sizeadmit_test.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// recordBound is the bound gnsh(8) states: 200 KiB of JSON.
const recordBound = 200 << 10

// fleetName is node i of a large fleet, with a name as long as many are.
func fleetName(i int) string { return fmt.Sprintf("worker-%04d.pool-a.example.internal", i) }

// fleetAsk is node i asking, as a wrapper does.
func fleetAsk(i int) Ask {
	n := fleetName(i)
	return Ask{Entry: Entry{Node: n, UID: types.UID("uid-" + n), Boot: "boot-" + n, Action: "reboot", Who: "root (pts/0)",
		Since: time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC), Renew: 10, Run: fmt.Sprintf("%016x", i)}}
}

func encodedSize(t *testing.T, r Record) int {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// fullQueue is a fleet of n nodes, node "h" holding the only slot, and a
// record with as many waiters as fit in under the bound less room for
// two more (filled directly: a thousand decisions would take long).
func fullQueue(t *testing.T, n int) (Record, World, int) {
	t.Helper()
	ns := []NodeState{node("h")}
	for i := range n {
		s := node(fleetName(i))
		s.UID, s.Boot = types.UID("uid-"+s.Name), "boot-"+s.Name
		ns = append(ns, s)
	}
	w := world(ns...)
	rec := Record{Version: Schema, Holders: []Entry{holder("h", 0)}, Next: 1}
	size := encodedSize(t, rec)
	k := 0
	for ; k < n; k++ {
		e := fleetAsk(k).Entry
		e.Ticket, e.Renew, e.Beat = rec.Next, 30, 12
		b, _ := json.Marshal(e)
		if size+2*(len(b)+1) > recordBound {
			break
		}
		size += len(b) + 1
		rec.Waiters = append(rec.Waiters, e)
		rec.Next++
	}
	if k >= n {
		t.Fatalf("%d waiters fit: no bound reached", k)
	}
	return rec, w, k
}

func TestRecordBoundRefusesJoinsOnly(t *testing.T) {
	rec, w, k := fullQueue(t, 1000)
	t.Logf("%d waiters recorded (%d bytes)", k, encodedSize(t, rec))
	// The rest ask, one after the other: the first ones may still join;
	// then the queue is full.
	full := -1
	for i := k; i < k+5; i++ {
		v := Decide(rec, w, one, still{}, fleetAsk(i))
		if v.Admitted {
			t.Fatalf("%s admitted: %s", fleetName(i), names(v.Blocks))
		}
		if sz := encodedSize(t, v.Record); sz > recordBound {
			t.Fatalf("%s: the record would be %d bytes, over the bound %d", fleetName(i), sz, recordBound)
		}
		if _, in := v.Record.Waiter(fleetName(i)); in {
			rec = v.Record
			continue
		}
		if v.Changed || v.Place != 0 || !strings.Contains(names(v.Blocks), "the queue is full") {
			t.Fatalf("%s unrecorded: changed %v, place %d, %s", fleetName(i), v.Changed, v.Place, names(v.Blocks))
		}
		if full < 0 {
			full = i
		}
	}
	if full < 0 {
		t.Fatal("nobody was refused a place: the record grows without bound")
	}
	// A recorded waiter renews (asks again) as ever.
	v := Decide(rec, w, one, still{}, fleetAsk(3))
	if v.Place != 4 {
		t.Fatalf("a recorded waiter: place %d, %s", v.Place, names(v.Blocks))
	}
	// h's slot freed (its Node gone): the first waiter is admitted, its
	// entry replacing its waiter's.
	delete(w.Nodes, "h")
	v = Decide(rec, w, one, still{}, fleetAsk(0))
	if !v.Admitted {
		t.Fatalf("the first waiter: %s", names(v.Blocks))
	}
	// An unrecorded node is admitted where a new node would be (with a
	// limit that lets everyone go): an admission always goes in.
	v = Decide(rec, w, Limits{Max: 5000}, still{}, fleetAsk(full))
	if !v.Admitted {
		t.Fatalf("%s: %s", fleetName(full), names(v.Blocks))
	}
	if _, in := v.Record.Holder(fleetName(full)); !in {
		t.Fatal("admitted unrecorded")
	}
}

// Through the gate: a node refused a place waits (writing nothing) and
// asks again; at the end of its wait the refusal says the queue is full.
func TestRecordBoundWaitsUnrecorded(t *testing.T) {
	rec, w, k := fullQueue(t, 1000)
	for i := k; i < 1000; i++ { // fill it to the brim
		k = i
		v := Decide(rec, w, one, still{}, fleetAsk(i))
		if _, in := v.Record.Waiter(fleetName(i)); !in {
			break
		}
		rec = v.Record
	}
	objs := []runtime.Object{readyNode("h", "")}
	for _, e := range rec.Waiters { // the waiters' Nodes, so that none is dropped as gone
		n := readyNode(e.Node, "")
		n.UID, n.Status.NodeInfo.BootID = e.UID, e.Boot
		objs = append(objs, n)
	}
	c := fake.NewClientset(objs...)
	casLeases(c)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	rec.Holders[0].UID, rec.Holders[0].Boot = "u-h", "b-h"
	rec.Encode(l)
	if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int32
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		writes.Add(1)
		return false, nil, nil
	})
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: time.Second, APITimeout: time.Second}
	var lines []string
	g.Status = func(s string) { lines = append(lines, s) }
	a := fleetAsk(k)
	n := readyNode(a.Entry.Node, "")
	r := reqFor(n, 1, 1500*time.Millisecond)
	_, _, err := g.Acquire(context.Background(), r)
	var we *WaitError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "the queue is full") {
		t.Fatalf("got %v, want a refusal saying the queue is full", err)
	}
	if writes.Load() != 0 {
		t.Errorf("%d writes of the record by a node with no place in it", writes.Load())
	}
	if len(lines) == 0 || !strings.Contains(lines[0], "full") {
		t.Errorf("waiting lines: %q", lines)
	}
	t.Logf("%v", err)
}
