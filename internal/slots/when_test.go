package slots

// A second request on the same boot that joins the slot the node holds
// (shutdown -r +9 after +8): the slot's schedule ("when", which the node
// agent keeps the slot for while logind has it) changes only once the
// second request's schedule stands (issue 20, a suspicion confirmed).

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func whenRig(t *testing.T, at8 time.Time) (*Gate, Request) {
	t.Helper()
	n := readyNode("node1", "")
	c := fake.NewClientset(n)
	casLeases(c)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "node1", UID: n.UID, Boot: n.Status.NodeInfo.BootID, Ticket: 0,
		Phase: ShuttingDown, Renew: 10, When: &at8, Run: "first"}}}.Encode(l)
	if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1, Settle: time.Second},
		Renew: time.Hour, APITimeout: time.Second}
	return g, reqFor(n, 10, time.Second)
}

func whenOf(t *testing.T, g *Gate) *time.Time {
	t.Helper()
	h, ok := current(t, g).Holder("node1")
	if !ok {
		t.Fatal("node1 holds no slot")
	}
	return h.When
}

func TestJoiningRequestChangesWhenOnlyOnceItStands(t *testing.T) {
	at8, at9 := time.Date(2026, 1, 1, 10, 8, 0, 0, time.UTC), time.Date(2026, 1, 1, 10, 9, 0, 0, time.UTC)

	// Refused after it joined (cancelled, its drain failed, logind
	// refused its schedule): the drainer halts a slot it shares, and the
	// slot's schedule is still +8, which logind still has.
	g, r := whenRig(t, at8)
	r.Entry.When = &at9
	s, v, err := g.Acquire(context.Background(), r)
	if err != nil || !v.Already || !s.Before {
		t.Fatalf("joining: %v %+v", err, v)
	}
	s.Halt()
	if w := whenOf(t, g); w == nil || !w.Equal(at8) {
		t.Fatalf("refused request: the slot's schedule is %v, want %s (the schedule that stands)", w, at8)
	}

	// Its schedule handed to logind: kept, the slot's schedule is +9.
	g, r = whenRig(t, at8)
	r.Entry.When = &at9
	s, _, err = g.Acquire(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Keep(context.Background(), ShuttingDown); err != nil {
		t.Fatal(err)
	}
	if w := whenOf(t, g); w == nil || !w.Equal(at9) {
		t.Fatalf("handed off: the slot's schedule is %v, want %s", w, at9)
	}

	// A shutdown at once handed off over a scheduled one's slot: no
	// schedule any more.
	g, r = whenRig(t, at8)
	s, _, err = g.Acquire(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Keep(context.Background(), ShuttingDown); err != nil {
		t.Fatal(err)
	}
	if w := whenOf(t, g); w != nil {
		t.Fatalf("at once: the slot's schedule is %v, want none", w)
	}
}
