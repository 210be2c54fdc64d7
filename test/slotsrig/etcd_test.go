package slotsrig_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gnsh/gnsh/internal/slots"
)

// RKE2's layout on the real API server, with gnsh's own identity
// (rbac.yaml): three etcd-only servers (labelled
// node-role.kubernetes.io/etcd=true alone, each with a static etcd pod)
// and a worker (issue 20, holes 1 and 3).
//
//   - maxUnavailable 2: e2 is not admitted while e1 holds a slot (one
//     etcd node at a time);
//   - e1 back on a new boot, Ready, its etcd pod Ready, its agent not
//     freeing the slot: the worker waiting behind it (maxUnavailable 1)
//     frees it, two renewal periods after settling, and takes the slot;
//   - etcd-e3 not Ready: e1 is refused by the quorum guard.
func testEtcdOnly(t *testing.T, r *rig) {
	ctx := ctxFor(t, 3*time.Minute)
	two := slots.Limits{Max: 2, Settle: 2 * time.Second}
	one := slots.Limits{Max: 1, Settle: 2 * time.Second}
	etcdOnly := map[string]string{"node-role.kubernetes.io/etcd": "true"}
	var es []*corev1.Node
	for _, n := range []string{"e1", "e2", "e3"} {
		es = append(es, r.node(t, n, etcdOnly))
		r.etcdPod(t, n, true)
	}
	w := r.node(t, "w", nil)

	s1, _, err := r.gate(t, es[0].Name, two).Acquire(ctx, request(es[0], 5*time.Second))
	if err != nil {
		t.Fatalf("e1: %v", err)
	}
	if err := s1.Keep(ctx, slots.ShuttingDown); err != nil {
		t.Fatal(err)
	}
	s, _, err := r.gate(t, es[1].Name, two).Acquire(ctx, request(es[1], 2*time.Second))
	var we *slots.WaitError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "control plane limit 1: e1 (holds a slot") {
		if s != nil {
			s.Halt()
		}
		t.Fatalf("e2 while e1 (both etcd-only) holds a slot, maxUnavailable 2: %v", err)
	}

	// e1 reboots; its agent does not free the slot.
	r.setStatus(t, "e1", false, "boot-1")
	r.etcdPod(t, "e1", false)
	r.setStatus(t, "e1", true, "boot-2")
	r.etcdPod(t, "e1", true)
	start := time.Now()
	sw, v, err := r.gate(t, w.Name, one).Acquire(ctx, request(w, time.Minute))
	if err != nil {
		t.Fatalf("w behind e1, back and settled: %v", err)
	}
	t.Logf("w admitted after %s, freeing %+v", time.Since(start).Round(100*time.Millisecond), v.Reclaimed)
	if len(v.Reclaimed) != 1 || v.Reclaimed[0].Entry.Node != "e1" || !strings.Contains(v.Reclaimed[0].Why, "back on a new boot") {
		t.Errorf("w admitted, freeing %+v; want e1 freed as back and settled", v.Reclaimed)
	}
	if err := sw.Release(ctx, "test"); err != nil {
		t.Fatal(err)
	}

	r.etcdPod(t, "e3", false)
	s, _, err = r.gate(t, "e1", one).Acquire(ctx, request(r.getNode(t, "e1"), 2*time.Second))
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "etcd would lose its quorum: etcd-e3 (not Ready)") {
		if s != nil {
			s.Release(context.Background(), "test")
		}
		t.Fatalf("e1 with etcd-e3 not Ready: %v", err)
	}
}

// A node with no role label that hosts an etcd pod (its labels removed, a
// layout gnsh does not know), on the real API server with gnsh's own
// identity: while c1 (control-plane, etcd-c1) holds a slot, maxUnavailable
// 2, p is refused by the control plane limit, as a labelled etcd node is
// (review of issue 20, finding 1); a worker with no etcd pod is admitted
// beside c1.
func testEtcdUnlabelled(t *testing.T, r *rig) {
	ctx := ctxFor(t, 3*time.Minute)
	two := slots.Limits{Max: 2, Settle: 2 * time.Second}
	c1 := r.node(t, "c1", map[string]string{"node-role.kubernetes.io/control-plane": ""})
	r.node(t, "c3", map[string]string{"node-role.kubernetes.io/control-plane": ""})
	p, w := r.node(t, "p", nil), r.node(t, "w", nil)
	for _, n := range []string{"c1", "p", "c3"} {
		r.etcdPod(t, n, true)
	}
	s1, _, err := r.gate(t, c1.Name, two).Acquire(ctx, request(c1, 5*time.Second))
	if err != nil {
		t.Fatalf("c1: %v", err)
	}
	defer s1.Release(context.Background(), "test")
	s, _, err := r.gate(t, p.Name, two).Acquire(ctx, request(p, 2*time.Second))
	var we *slots.WaitError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "control plane limit 1: c1 (holds a slot") {
		if s != nil {
			s.Halt()
		}
		t.Fatalf("p (etcd-p, no role label) while c1 holds a slot, maxUnavailable 2: %v", err)
	}
	sw, _, err := r.gate(t, w.Name, two).Acquire(ctx, request(w, 5*time.Second))
	if err != nil {
		t.Fatalf("w (no etcd pod) beside c1, maxUnavailable 2: %v", err)
	}
	if err := sw.Release(ctx, "test"); err != nil {
		t.Fatal(err)
	}
}
