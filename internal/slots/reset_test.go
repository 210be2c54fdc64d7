package slots

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// resetRig is a Lease whose annotation is raw, with another annotation
// beside it, on a compare-and-swap fake.
func resetRig(t *testing.T, raw string) (*Gate, *fake.Clientset) {
	t.Helper()
	c := fake.NewClientset()
	casLeases(c)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh",
		Annotations: map[string]string{Annotation: raw, "example.com/other": "kept"}}}
	if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Renew: 10 * time.Second, APITimeout: time.Second}, c
}

func leaseOf(t *testing.T, c *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := c.CoordinationV1().Leases("gnsh").Get(context.Background(), "reboot-slots", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

const readable = `{"version":1,"next":7,"holders":[{"node":"a","uid":"ua","boot":"b","ticket":5,"phase":"draining","action":"reboot","who":"bob","since":"2026-11-27T11:00:00Z","beat":3,"renewSeconds":10}],"waiters":[{"node":"c","uid":"uc","boot":"b","ticket":6,"since":"2026-11-27T11:01:00Z","beat":0,"renewSeconds":30}]}`

// A broken record is replaced by an empty one; the Lease's other
// annotations stay; what was lost is its size.
func TestResetBrokenRecord(t *testing.T) {
	raw := `{"version":1,"holders":[{"node":"a"`
	g, c := resetRig(t, raw)
	if _, _, err := g.Read(context.Background()); !Broken(err) || !strings.Contains(err.Error(), "'gnsh slots reset' (admin credentials) starts a new one") {
		t.Fatalf("read: %v", err)
	}
	r, err := g.Reset(context.Background(), false)
	if err != nil || r.None || r.Size != len(raw) || !Broken(r.Unread) {
		t.Fatalf("reset: %+v, %v", r, err)
	}
	if lost := r.Lost(); !strings.Contains(lost, fmt.Sprintf("could not be read (%d bytes)", len(raw))) {
		t.Errorf("lost: %s", lost)
	}
	l := leaseOf(t, c)
	rec, err := Decode(l)
	if err != nil || len(rec.Holders)+len(rec.Waiters) != 0 || l.Annotations["example.com/other"] != "kept" || l.Spec.HolderIdentity != nil {
		t.Fatalf("after: %+v %v %v", rec, err, l.Annotations)
	}
}

// A readable record is reset only with force (its tickets go on); a newer
// gnsh's is not broken: upgrade, or force.
func TestResetReadableNeedsForce(t *testing.T) {
	g, c := resetRig(t, readable)
	_, err := g.Reset(context.Background(), false)
	var re *ReadableError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "reads (1 holding a slot, 1 waiting): nothing reset") ||
		!strings.Contains(err.Error(), "'gnsh slots reset --force' frees them all") {
		t.Fatalf("without force: %v", err)
	}
	if leaseOf(t, c).Annotations[Annotation] != readable {
		t.Fatal("written without force")
	}
	r, err := g.Reset(context.Background(), true)
	if err != nil || r.Unread != nil || len(r.Holders) != 1 || len(r.Waiters) != 1 {
		t.Fatalf("force: %+v %v", r, err)
	}
	if lost := r.Lost(); lost != "1 holder(s) [a (draining, reboot by bob)], 1 waiter(s) [c]" {
		t.Errorf("lost: %s", lost)
	}
	if rec, err := Decode(leaseOf(t, c)); err != nil || rec.Next != 7 || len(rec.Holders)+len(rec.Waiters) != 0 {
		t.Fatalf("after: %+v %v", rec, err)
	}

	newer := `{"version":2,"whatever":true}`
	g, c = resetRig(t, newer)
	if _, err := g.Reset(context.Background(), false); !errors.As(err, &re) || re.Newer == nil ||
		!strings.Contains(err.Error(), "upgrade gnsh on this node") {
		t.Fatalf("newer without force: %v", err)
	}
	if leaseOf(t, c).Annotations[Annotation] != newer {
		t.Fatal("a newer gnsh's record written without force")
	}
	r, err = g.Reset(context.Background(), true)
	if err != nil || !strings.Contains(r.Lost(), "a version 2 record of a newer gnsh") {
		t.Fatalf("newer, force: %+v %v", r, err)
	}
}

// The reset is a compare-and-swap on the broken version: a record an
// admin repaired between its read and its write is kept.
func TestResetKeepsARecordRepairedMeanwhile(t *testing.T) {
	g, c := resetRig(t, `not json`)
	var once atomic.Bool
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if once.CompareAndSwap(false, true) {
			// The repair lands first (kubectl edit, another admin).
			o, err := c.Tracker().Get(leasesGVR, "gnsh", "reboot-slots")
			if err != nil {
				t.Error(err)
				return false, nil, nil
			}
			l := o.(*coordinationv1.Lease).DeepCopy()
			l.Annotations[Annotation] = readable
			l.ResourceVersion = "999"
			if err := c.Tracker().Update(leasesGVR, l, l.Namespace); err != nil {
				t.Error(err)
			}
		}
		return false, nil, nil
	})
	_, err := g.Reset(context.Background(), false)
	var re *ReadableError
	if !errors.As(err, &re) || re.Holders != 1 {
		t.Fatalf("got %v, want the repaired record left as it is", err)
	}
	if got := leaseOf(t, c).Annotations[Annotation]; got != readable {
		t.Fatalf("the repaired record was overwritten: %s", got)
	}
}

// No Lease: nothing to reset, nothing made.
func TestResetNoLease(t *testing.T) {
	c := fake.NewClientset()
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", APITimeout: time.Second}
	if r, err := g.Reset(context.Background(), true); err != nil || !r.None {
		t.Fatalf("%+v %v", r, err)
	}
	if l, _ := c.CoordinationV1().Leases("gnsh").List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatal("a Lease was made")
	}
}
