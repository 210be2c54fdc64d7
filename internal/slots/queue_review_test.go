package slots

// Review of issue 21 (queued reboots): scratch tests; a failure is a
// finding (see the review report).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// The issue's own case: a fleet's unattended-upgrades asking at the same
// moment, each with no terminal, so each wrapper asks once (Wait 0,
// KeepPlace: queued). A crowd of writers conflicts; after conflictTries
// fresh decisions a request with no wait left ends in a WaitError whose
// entry never landed: Place 0, Ticket 0. The wrapper then says "no place
// yet (its queue is full ...)", which is false (the queue is nearly
// empty), and the request has no place in arrival order: the node agent
// joins at the back, behind nodes that asked after it.
func TestReviewCrowdQueuedAtOnceGetsPlaces(t *testing.T) {
	const n = 30
	ready := corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	objs := []runtime.Object{}
	for i := 0; i <= n; i++ {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node%d", i), UID: "u"}, Status: ready})
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema, Next: 1, Holders: []Entry{{Node: "node0", UID: "u", Boot: "b0", Phase: Draining, Renew: 10}}}.Encode(l)
	objs = append(objs, l)
	c := fake.NewClientset(objs...)
	casLeases(c)
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1, Settle: time.Second},
		Renew: 10 * time.Second, APITimeout: 5 * time.Second} // the default apiTimeout: conflicts are retried within it
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	start := make(chan struct{})
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			self, _ := c.CoreV1().Nodes().Get(context.Background(), fmt.Sprintf("node%d", i), metav1.GetOptions{})
			r := Request{Ask: Ask{Entry: Entry{Node: self.Name, UID: "u", Boot: fmt.Sprintf("b%d", i), Renew: 10}},
				Self: StateOf(self), Wait: 0, KeepPlace: true, Silent: true}
			<-start
			_, _, errs[i] = g.Acquire(context.Background(), r)
		}(i)
	}
	close(start)
	wg.Wait()
	rec, _, err := g.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	noPlace := 0
	for i := 1; i <= n; i++ {
		var we *WaitError
		if !errors.As(errs[i], &we) {
			t.Errorf("node%d: %v, want a WaitError", i, errs[i])
			continue
		}
		if _, in := rec.Waiter(fmt.Sprintf("node%d", i)); we.Place == 0 || !in {
			noPlace++
			t.Logf("node%d: WaitError place %d ticket %d (in the record: %v; err %v)", i, we.Place, we.Ticket, in, we.Err)
		}
	}
	t.Logf("%d waiters recorded of %d (MaxWaiters %d)", len(rec.Waiters), n, MaxWaiters)
	if noPlace > 0 {
		t.Errorf("%d of %d queued requests asked at once got no place, in a queue of %d (not full): their command says the queue is full, and their arrival order is lost", noPlace, n, len(rec.Waiters))
	}
}
