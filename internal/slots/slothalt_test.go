package slots

// Review finding 5 (issue 20): halt waited for a renewal in flight (up to
// 2×apiTimeout), outside the bound of the Keep or Release that called it.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// stuckLeases is a client whose Lease updates, once stuck is set, hang
// until their context ends (as client-go's do against an API server that
// does not answer) or release is closed.
type stuckLeases struct {
	kubernetes.Interface
	stuck   *atomic.Bool
	entered chan struct{}
	release chan struct{}
	byCtx   *atomic.Bool // the last stuck update ended with its context
}

func (c stuckLeases) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return stuckCoordination{c.Interface.CoordinationV1(), c}
}

type stuckCoordination struct {
	coordinationv1client.CoordinationV1Interface
	c stuckLeases
}

func (s stuckCoordination) Leases(ns string) coordinationv1client.LeaseInterface {
	return stuckLeaseClient{s.CoordinationV1Interface.Leases(ns), s.c}
}

type stuckLeaseClient struct {
	coordinationv1client.LeaseInterface
	c stuckLeases
}

func (l stuckLeaseClient) Update(ctx context.Context, o *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.c.stuck.Load() {
		select {
		case l.c.entered <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			l.c.byCtx.Store(true)
			return nil, ctx.Err()
		case <-l.c.release:
			return nil, context.DeadlineExceeded
		}
	}
	return l.LeaseInterface.Update(ctx, o, opts)
}

// A renewal in flight when the slot is halted (Keep, Release, Halt) is
// cancelled, not waited for: with an API server that does not answer,
// Keep used to wait 2×apiTimeout for it before its own bounded write.
// (The watchdog only ends a test that would otherwise wait an hour.)
func TestHaltCancelsTheRenewalInFlight(t *testing.T) {
	g, c := keeperRig(t, Entry{Node: "n", UID: "u", Boot: "b", Ticket: 1, Phase: Admitted, Renew: 1, Run: "r"})
	sc := stuckLeases{Interface: c, stuck: new(atomic.Bool), entered: make(chan struct{}, 1), release: make(chan struct{}), byCtx: new(atomic.Bool)}
	g.C, g.APITimeout = sc, time.Hour
	s := g.hold(Entry{Node: "n", UID: "u", Boot: "b", Ticket: 1, Phase: Admitted, Renew: 1, Run: "r"}, false)
	sc.stuck.Store(true)
	s.SetPhase(Draining) // a renewal at once, which hangs
	<-sc.entered
	halted := make(chan struct{})
	go func() { s.Halt(); close(halted) }()
	select {
	case <-halted:
	case <-time.After(5 * time.Second):
		close(sc.release)
		<-halted
	}
	if !sc.byCtx.Load() {
		t.Fatal("Halt waited for the renewal in flight instead of cancelling it")
	}
}

// Keep with its bound already spent writes nothing: the entry stands as
// last renewed (the node agent's keeper renews it as any).
func TestKeepTooLateIsSkipped(t *testing.T) {
	e := Entry{Node: "n", UID: "u", Boot: "b", Ticket: 1, Phase: Draining, Renew: 1, Run: "r"}
	g, c := keeperRig(t, e)
	g.Renew = time.Hour
	s := g.hold(e, false)
	c.ClearActions()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Keep(ctx, ShuttingDown); err == nil {
		t.Fatal("Keep past its bound reported written")
	}
	if h, _ := current(t, g).Holder("n"); h.Phase != Draining {
		t.Fatalf("written: %+v", h)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() != "get" {
			t.Fatalf("a write past the bound: %v", c.Actions())
		}
	}
}
