package drainer

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/slots"
)

// The node agent's keeper (as gnshcli.slotNeeded runs it: the drain lock,
// then free) and a wrapper's reboot, after an earlier run of this boot was
// killed right after its admission (its entry freed by the keeper at Beat
// 0): the keeper never frees the new run's slot as that old one's, and the
// wrapper never cordons without a slot. (Found by a review: the keeper's
// silence clock was one for the node, not one per entry.)
func TestKeeperAndWrapperAfterAKilledRun(t *testing.T) {
	const rtt = 20 * time.Millisecond
	f := newFakeNode(false, nil, "web-1")
	numberLeases(f)
	d := newDrainer(t, f, "apiTimeout: 1s\nslots:\n  renew: 1s\n  wait: 20s\n")
	out := &syncBuffer{}
	d.Stderr = out
	a := agentDrainer(t, f, d)

	// Whether node1 held a slot when its cordon was written.
	var mu sync.Mutex
	var atCordon []string
	f.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		l, err := f.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), "gnsh", "reboot-slots")
		held := "no Lease"
		if err == nil {
			rec, _ := slots.Decode(l.(*coordinationv1.Lease))
			if h, ok := rec.Holder("node1"); ok {
				held = "held, ticket " + strconv.FormatInt(h.Ticket, 10)
			} else {
				held = "NOT held"
			}
		}
		mu.Lock()
		atCordon = append(atCordon, held)
		mu.Unlock()
		return false, nil, nil
	})

	// Each request takes a round trip (the Event a taker posts too).
	f.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		time.Sleep(rtt)
		return false, nil, nil
	})
	// The earlier run: admitted (Beat 0), killed before its first renewal.
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	slots.Record{Version: slots.Schema, Next: 1, Holders: []slots.Entry{{Node: "node1", Boot: "boot-1", Ticket: 0,
		Phase: slots.Admitted, Action: "reboot", Renew: 1, Run: "killed"}}}.Encode(l)
	if _, err := f.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &slots.Gate{C: f, Namespace: "gnsh", Name: "reboot-slots", Renew: time.Second, APITimeout: time.Second}
	var freedMu sync.Mutex
	var frees []time.Time
	k := &slots.Keeper{Gate: g, Node: "node1", Boot: "boot-1", Settle: time.Second,
		Needed: func(ctx context.Context, h slots.Entry, free func() error) (bool, string, error) {
			// gnshcli.slotNeeded, no shutdown pending (Relies "").
			lk, err := a.AcquireLock("reboot slot check", "node1", time.Now().Add(5*time.Second))
			var held *HeldError
			if errors.As(err, &held) {
				return true, held.Error(), nil
			}
			if err != nil {
				return true, "", err
			}
			defer lk.Release()
			freedMu.Lock()
			frees = append(frees, time.Now())
			freedMu.Unlock()
			return false, "", free()
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := slotRecord(t, f).Holder("node1"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed run's slot was never freed")
		}
	}
	time.Sleep(1500 * time.Millisecond)

	start := time.Now()
	p, err := d.Prepare(context.Background(), reboot())
	freedMu.Lock()
	var since []time.Duration
	for _, at := range frees {
		if at.After(start) {
			since = append(since, at.Sub(start))
		}
	}
	freedMu.Unlock()
	mu.Lock()
	t.Logf("keeper frees after the reboot began: %v; node1's slot when cordoned: %v; Prepare: %v", since, atCordon, err)
	mu.Unlock()
	t.Logf("wrapper:\n%s", out)
	if p != nil {
		_, held := slotRecord(t, f).Holder("node1")
		t.Logf("ready to hand off; node1 holds a slot now: %v; cordoned: %v", held, f.node(t).Spec.Unschedulable)
		mu.Lock()
		for _, s := range atCordon {
			if s == "NOT held" {
				t.Errorf("cordoned (and drained, about to hand off) while node1 held no slot")
			}
		}
		mu.Unlock()
		p.Finish(context.Background(), errors.New("test: not handed off"))
	}
}
