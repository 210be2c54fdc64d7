package slots

// Review finding 6 (issue 20): the bypass write's answer lost.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// bypassRig: n1 and n2 Ready, n2 holding the only slot; the Lease's
// updates land and lose their answer while lose says so.
func bypassRig(t *testing.T, lose func() bool) (*Gate, *fake.Clientset, Entry) {
	t.Helper()
	n1, n2 := readyNode("n1", ""), readyNode("n2", "")
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	Record{Version: Schema, Next: 4, Holders: []Entry{{Node: "n2", UID: n2.UID, Boot: "b-n2", Ticket: 3, Phase: Draining, Renew: 10}}}.Encode(l)
	c := fake.NewClientset(n1, n2, l)
	casLeasesLosing(c, func(verb string) bool { return verb == "update" && lose() })
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: 1}, Renew: time.Hour, APITimeout: time.Second}
	return g, c, Entry{Node: "n1", UID: n1.UID, Boot: "b-n1", Action: "reboot", Renew: 10}
}

// The bypass write lands and its answer is lost: the record read back
// shows the holder with this request's Run, which Bypass adopts (a Slot,
// no error), renewing and keeping it as any.
func TestBypassLostAnswerReadBack(t *testing.T) {
	var lost atomic.Bool
	lost.Store(true)
	g, _, e := bypassRig(t, func() bool { return lost.Swap(false) })
	s, err := g.Bypass(context.Background(), e)
	if err != nil || s == nil {
		t.Fatalf("the bypass holder landed, its answer lost: %v %v", s, err)
	}
	rec := current(t, g)
	h, ok := rec.Holder("n1")
	if !ok || !h.Bypass || h.Run == "" || s.Entry().Run != h.Run || s.Entry().Ticket != h.Ticket {
		t.Fatalf("adopted %+v, record %+v", s.Entry(), rec)
	}
	if err := s.Keep(context.Background(), ShuttingDown); err != nil {
		t.Fatal(err)
	}
	if h, _ := current(t, g).Holder("n1"); h.Phase != ShuttingDown || h.Run != s.Entry().Run {
		t.Fatalf("not kept: %+v", h)
	}
}

// The answer lost and the record unreadable then: the error says the
// entry may stand, and names it (its Run is the holder's), so that its
// writer can free it.
func TestBypassLostAnswerUnread(t *testing.T) {
	var lost atomic.Bool
	lost.Store(true)
	g, c, e := bypassRig(t, func() bool { return lost.Swap(false) })
	var landed atomic.Bool
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if landed.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		landed.Store(true)
		return false, nil, nil
	})
	s, err := g.Bypass(context.Background(), e)
	var u *UnconfirmedError
	if s != nil || !errors.As(err, &u) || !apierrors.IsTimeout(err) {
		t.Fatalf("%v %v", s, err)
	}
	landed.Store(false)
	h, ok := current(t, g).Holder("n1")
	if !ok || u.Entry.Run != h.Run || u.Entry.Node != "n1" || u.Entry.Boot != "b-n1" {
		t.Fatalf("named %+v, holder %+v", u.Entry, h)
	}
}

// A write refused (a 4xx) did not land: no read back, the error as is.
func TestBypassRefusedIsNotReadBack(t *testing.T) {
	g, c, e := bypassRig(t, func() bool { return false })
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(leasesGVR.GroupResource(), "reboot-slots", errors.New("no"))
	})
	c.ClearActions()
	s, err := g.Bypass(context.Background(), e)
	var u *UnconfirmedError
	if s != nil || !apierrors.IsForbidden(err) || errors.As(err, &u) {
		t.Fatalf("%v %v", s, err)
	}
	gets := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	if gets != 1 {
		t.Fatalf("%d reads for a refused write: %v", gets, c.Actions())
	}
}
