package slots

// A crowd beyond the full queue (issue 20's 1,000 contenders): the nodes
// that found no place write nothing while it is full, and when a place
// frees they do not all write at once (each would conflict but one, over
// and over, as the 1,000-node bench did): each waits a random moment and
// decides again from what it then sees.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

func TestCrowdBeyondFullQueueJoinsOneByOne(t *testing.T) {
	const crowd = 6
	var askers []Request
	var late []*corev1.Node
	for i := range crowd {
		n := readyNode(fmt.Sprintf("late-%d", i), "")
		late = append(late, n)
		askers = append(askers, reqFor(n, 10, time.Minute))
	}
	c := fullLease(t, late...)
	var askersOn atomic.Bool // count the askers' writes only
	var writes, conflicts atomic.Int32
	c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if askersOn.Load() {
			writes.Add(1)
		}
		return false, nil, nil
	})
	// Conflicts are counted after casLeases' reactor answered: wrap it.
	c.ReactionChain = append([]k8stesting.Reactor{&countConflicts{on: &askersOn, n: &conflicts, next: c.ReactionChain}}, c.ReactionChain...)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	askersOn.Store(true)
	for _, r := range askers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second,
				senseFirst: 2 * time.Second}
			_, _, err := g.Acquire(ctx, r)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v, want it still waiting until cancelled", r.Entry.Node, err)
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	if n := writes.Load(); n != 0 {
		t.Errorf("%d writes by nodes that found the queue full", n)
	}
	// An admin frees one place (the first waiter's entry removed).
	askersOn.Store(false)
	admin := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second}
	freeFirstPlace(t, admin)
	askersOn.Store(true)
	// One of the crowd takes it; the queue is full again, and the others
	// wait on without a place.
	deadline := time.Now().Add(10 * time.Second)
	var joined []string
	for time.Now().Before(deadline) {
		got, _, err := admin.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		joined = joined[:0]
		for _, w := range got.Waiters {
			for _, r := range askers {
				if w.Node == r.Entry.Node {
					joined = append(joined, w.Node)
				}
			}
		}
		if len(joined) > 0 {
			if len(got.Waiters) != MaxWaiters {
				t.Errorf("%d waiters recorded, want %d", len(got.Waiters), MaxWaiters)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // the others' pauses end: they see the queue full
	askersOn.Store(false)
	cancel()
	wg.Wait()
	if len(joined) != 1 {
		t.Fatalf("joined: %v, want one of the crowd", joined)
	}
	// Without the pause every one of the crowd writes at once and all but
	// one conflict (5 of 6); spread over 2 s, two seldom write within the
	// same moment.
	if n := conflicts.Load(); n > 2 {
		t.Errorf("%d conflicts among %d nodes joining one free place", n, crowd)
	}
	t.Logf("%s joined; %d writes, %d conflicts by the crowd", joined[0], writes.Load(), conflicts.Load())
}

// countConflicts runs the chain after it and counts the updates of Leases
// answered 409 while on.
type countConflicts struct {
	on   *atomic.Bool
	n    *atomic.Int32
	next []k8stesting.Reactor
}

func (r *countConflicts) Handles(a k8stesting.Action) bool {
	return a.GetVerb() == "update" && a.GetResource().Resource == "leases"
}

func (r *countConflicts) React(a k8stesting.Action) (bool, runtime.Object, error) {
	for _, x := range r.next {
		if !x.Handles(a) {
			continue
		}
		handled, o, err := x.React(a)
		if !handled {
			continue
		}
		if r.on.Load() && apierrors.IsConflict(err) {
			r.n.Add(1)
		}
		return handled, o, err
	}
	return false, nil, nil
}

// A node beyond the full queue leaves the given-up rule to the queue's
// nodes: it watches no kubelet heartbeat (in the 1,000-node bench every
// one of them watched the heartbeat of every holder that went quiet,
// nearly 6,000 requests).
func TestBeyondFullQueueWatchesNoHeartbeat(t *testing.T) {
	late := readyNode("late", "")
	c := fullLease(t, late)
	// The holder goes quiet: its renewal period is 1 s.
	admin := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second}
	if _, err := admin.Update(context.Background(), func(r *Record) bool {
		r.Holders[0].Renew = 1
		return true
	}); err != nil {
		t.Fatal(err)
	}
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	_, v, err := g.Acquire(ctx, reqFor(late, 10, time.Minute))
	if !errors.Is(err, context.DeadlineExceeded) || !v.Unrecorded {
		t.Fatalf("got %v (unrecorded %v), want it still waiting without a place", err, v.Unrecorded)
	}
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "leases" && a.GetNamespace() == NodeLeaseNamespace {
			t.Fatalf("a node beyond the full queue read the kubelet heartbeats: %s %s/%s", a.GetVerb(), a.GetNamespace(), a.GetResource().Resource)
		}
	}
}

// A node that finds the queue full reads no Node until a place may be had
// (the 1,000-node bench's arrival: a thousand lists of every Node, most
// only to wait, made the API server too slow to answer hundreds of first
// reads); once a place frees it lists them and joins.
func TestFullQueueListsNoNodesUntilAPlaceFrees(t *testing.T) {
	late := readyNode("late", "")
	c := fullLease(t, late)
	lists := func() (n int) {
		for _, a := range c.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
				n++
			}
		}
		return n
	}
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second,
		senseFirst: 100 * time.Millisecond}
	var lines []string
	var mu sync.Mutex
	g.Status = func(s string) { mu.Lock(); lines = append(lines, s); mu.Unlock() }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := g.Acquire(ctx, reqFor(late, 10, time.Minute))
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	if n := lists(); n != 0 {
		t.Fatalf("%d lists of the Nodes by a node that found the queue full", n)
	}
	mu.Lock()
	if len(lines) == 0 || !strings.Contains(lines[0], "the queue is full: 32 nodes wait, 32 at most") {
		t.Errorf("waiting lines: %q", lines)
	}
	mu.Unlock()
	admin := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second}
	freeFirstPlace(t, admin)
	if _, ok := awaitWaiter(t, admin, "late", 5*time.Second); !ok {
		t.Fatal("a place freed, and the node beyond the queue did not take it")
	}
	if n := lists(); n != 1 {
		t.Errorf("%d lists of the Nodes, want 1 (once a place could be had)", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v", err)
	}
}

// A full queue of dead waiters (none renews): a node beyond it, watching
// the Lease alone, sees their silence pass its bound, reads the Nodes,
// drops them and joins (the queue's own nodes, who would drop them, are
// the dead ones).
func TestFullQueueOfDeadWaitersIsDropped(t *testing.T) {
	late := readyNode("late", "")
	c := fullLease(t, late)
	admin := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second}
	if _, err := admin.Update(context.Background(), func(r *Record) bool {
		for i := range r.Waiters {
			r.Waiters[i].Renew = 1 // silent past their bound within seconds
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: one, Renew: 10 * time.Second, APITimeout: time.Second,
		senseFirst: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := g.Acquire(ctx, reqFor(late, 10, time.Minute))
		done <- err
	}()
	rec, ok := awaitWaiter(t, admin, "late", 15*time.Second)
	if !ok {
		t.Fatalf("a queue of dead waiters (%d) held a node beyond it for 15 s", len(rec.Waiters))
	}
	t.Logf("%d waiters left", len(rec.Waiters))
	cancel()
	<-done
}

// awaitWaiter reads the record until node is a waiter in it, at most
// within: the record last read, and whether it is.
func awaitWaiter(t *testing.T, admin *Gate, node string, within time.Duration) (Record, bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rec, _, err := admin.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := rec.Waiter(node); ok {
			return rec, true
		}
		if time.Now().After(deadline) {
			return rec, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
