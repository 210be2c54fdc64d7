package drainer

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// slowLeases is a client whose Lease updates take delay (when slow says
// so) as a slow API server's do seen from client-go: the answer comes
// after delay, or the call ends with its context (client-go ends a
// request whose context is done; a fake's reactor cannot see the
// context, and would hold every caller for the whole delay).
type slowLeases struct {
	kubernetes.Interface
	delay time.Duration
	slow  func() bool
}

func (c slowLeases) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return slowCoordination{c.Interface.CoordinationV1(), c}
}

type slowCoordination struct {
	coordinationv1client.CoordinationV1Interface
	c slowLeases
}

func (s slowCoordination) Leases(ns string) coordinationv1client.LeaseInterface {
	return slowLeaseClient{s.CoordinationV1Interface.Leases(ns), s.c}
}

type slowLeaseClient struct {
	coordinationv1client.LeaseInterface
	c slowLeases
}

func (l slowLeaseClient) Update(ctx context.Context, o *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.c.slow() {
		t := time.NewTimer(l.c.delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return l.LeaseInterface.Update(ctx, o, opts)
}
