package slots

// Fixes of the review of issue 20, findings 1 and 8: a node that hosts an
// etcd member without the labels that say so is guarded when it asks, and
// in doubt (its node's pods not readable) it is guarded too; the quorum
// counts one member per node, and a member on a node that is not a Node as
// down.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// A node with no role label whose pods cannot be listed cannot tell
// whether it hosts an etcd member: it is held back as a control-plane
// node whose members are unknown, and admitted once the pods can be read
// and show none on it.
func TestEtcdHostUnknownIsGuarded(t *testing.T) {
	c1, p, c3 := labelled("c1", kubeadmCP), readyNode("p", ""), labelled("c3", kubeadmCP)
	t.Run("pods never readable", func(t *testing.T) {
		g, c := etcdRig(t, 2, []Entry{held(c1, 0)}, c1, p, c3, etcdPod("c1", true), etcdPod("p", true), etcdPod("c3", true))
		c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		})
		_, err := acquire(t, g, p, 500*time.Millisecond)
		var we *WaitError
		if !errors.As(err, &we) || !strings.Contains(err.Error(), "its members (unknown") {
			t.Fatalf("p (no role label, its pods not readable) asked while c1 holds a slot, maxUnavailable 2: got %v; want a refusal, its etcd quorum unknown", err)
		}
	})
	t.Run("readable later, none on it", func(t *testing.T) {
		g, c := etcdRig(t, 2, []Entry{held(c1, 0)}, c1, p, c3, etcdPod("c1", true), etcdPod("c3", true))
		var lists atomic.Int32
		c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if lists.Add(1) <= 2 {
				return true, nil, apierrors.NewServiceUnavailable("etcd is down")
			}
			return false, nil, nil
		})
		if _, err := acquire(t, g, p, 8*time.Second); err != nil {
			t.Fatalf("p (no role label, no etcd pod; its pods readable after %d failures): %v; want admitted beside c1", 2, err)
		}
	})
}

// --force-quorum on a node that hosts an etcd member without its labels
// saying so overrides its guard, and says so as on a control-plane node:
// the verdict is Guarded and the Event is posted.
func TestEtcdHostForceQuorumSaid(t *testing.T) {
	e1, p, e3 := labelled("e1", kubeadmCP), readyNode("p", ""), labelled("e3", kubeadmCP)
	g, _ := etcdRig(t, 1, nil, e1, p, e3, etcdPod("e1", true), etcdPod("p", true), etcdPod("e3", false))
	var mu sync.Mutex
	var reasons []string
	g.Event = func(_ context.Context, node, _, reason, _ string) {
		mu.Lock()
		defer mu.Unlock()
		reasons = append(reasons, node+" "+reason)
	}
	r := reqFor(p, 1, time.Second)
	r.ForceQuorum = true
	s, v, err := g.Acquire(context.Background(), r)
	if err != nil {
		t.Fatalf("p with --force-quorum, etcd-e3 not Ready: %v", err)
	}
	s.Halt()
	mu.Lock()
	defer mu.Unlock()
	if !v.Guarded || !strings.Contains(strings.Join(reasons, ","), "p "+ReasonQuorumOverride) {
		t.Fatalf("p (hosts etcd-p, no role label) admitted with --force-quorum: Guarded %v, Events %v; want Guarded and %s", v.Guarded, reasons, ReasonQuorumOverride)
	}
}

// A node has one etcd member however many pods claim it (an old mirror
// pod beside a new one): five members, e3 and e4 not Ready, two pods each
// on e2 and e5. e1 must wait: e2 and e5 alone are 2 of 5. Counting pods,
// 4 of 7 would remain.
func TestEtcdOneMemberPerNode(t *testing.T) {
	w := world(node("e1", cp), node("e2", cp), node("e3", cp), node("e4", cp), node("e5", cp))
	w.setEtcd([]Member{
		{Pod: "etcd-e1", Node: "e1", Ready: true},
		{Pod: "etcd-e2", Node: "e2", Ready: true}, {Pod: "etcd-e2-old", Node: "e2", Ready: true},
		{Pod: "etcd-e3", Node: "e3"}, {Pod: "etcd-e4", Node: "e4"},
		{Pod: "etcd-e5", Node: "e5", Ready: true}, {Pod: "etcd-e5-old", Node: "e5", Ready: true},
	})
	if v := Decide(Record{}, w, Limits{Max: 3}, still{}, ask("e1")); v.Admitted {
		t.Fatalf("e1 admitted with 2 of 5 etcd members left (two pods each on e2 and e5)")
	}
	// A node whose pods disagree: its member is not Ready.
	w = world(node("e1", cp), node("e2", cp))
	w.setEtcd([]Member{{Pod: "etcd-e2-old", Node: "e2", Ready: true}, {Pod: "etcd-e2", Node: "e2"}, {Pod: "etcd-e1", Node: "e1", Ready: true}})
	if len(w.Etcd) != 2 || w.Etcd[0].Ready || w.Etcd[0].Pod != "etcd-e2" {
		t.Fatalf("e2 with one pod Ready and one not: members %+v; want one member for e2, etcd-e2 not Ready", w.Etcd)
	}
}

// A pod on a node that is not a Node counts as a member that is down, and
// the refusal names it.
func TestEtcdPhantomMemberNamed(t *testing.T) {
	w := world(node("e1", cp), node("e2", cp))
	w.setEtcd([]Member{{Pod: "etcd-e1", Node: "e1", Ready: true}, {Pod: "etcd-e2", Node: "e2", Ready: true}, {Pod: "etcd-old", Node: "old", Ready: true}})
	v := Decide(Record{}, w, Limits{Max: 3}, still{}, ask("e1"))
	if v.Admitted {
		t.Fatalf("e1 admitted: 1 of 3 members left if etcd-old (its node not a Node) is down")
	}
	var said []string
	for _, b := range v.Blocks {
		if b.Limit == LimitQuorum {
			for _, o := range b.Out {
				said = append(said, o.Node+" ("+o.Why+")")
			}
		}
	}
	if strings.Join(said, ", ") != "etcd-old (its node old is not a Node)" {
		t.Fatalf("quorum block says %q; want etcd-old named, its node not a Node", said)
	}
}
