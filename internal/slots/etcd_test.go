package slots

// etcd members wherever they run (issue 20, holes 1 and 3): a node that
// hosts an etcd member is guarded as a control-plane node is, whoever
// asks; and a node waiting behind a control-plane or etcd holder frees
// that holder's slot once it is back and settled, as it does any other's.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Role labels as the installers set them.
var (
	rke2EtcdOnly = map[string]string{"node-role.kubernetes.io/etcd": "true"}
	k3sServer    = map[string]string{"node-role.kubernetes.io/control-plane": "true", "node-role.kubernetes.io/master": "true", "node-role.kubernetes.io/etcd": "true"}
	kubeadmCP    = map[string]string{"node-role.kubernetes.io/control-plane": ""}
	kubeadmOld   = map[string]string{"node-role.kubernetes.io/master": ""}
)

// labelled is a Ready Node with labels, on boot "b-NAME".
func labelled(name string, l map[string]string) *corev1.Node {
	n := readyNode(name, "")
	n.Labels = map[string]string{}
	for k, v := range l {
		n.Labels[k] = v
	}
	return n
}

// etcdPod is a static etcd pod's mirror as kubeadm and RKE2 make it.
func etcdPod(node string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-" + node, Namespace: metav1.NamespaceSystem,
			Labels:      map[string]string{"component": "etcd", "tier": "control-plane"},
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// etcdRig is a cluster of objs (Nodes, pods) with the Lease holding
// holders, and a gate of limit max over it.
func etcdRig(t *testing.T, max int, holders []Entry, objs ...runtime.Object) (*Gate, *fake.Clientset) {
	t.Helper()
	c := fake.NewClientset(objs...)
	casLeases(c)
	if holders != nil {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
		Record{Version: Schema, Next: int64(len(holders)), Holders: holders}.Encode(l)
		if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: Limits{Max: max}, Renew: time.Second, APITimeout: time.Second}
	return g, c
}

// held is n's holder entry for a shutdown under way on its current boot.
func held(n *corev1.Node, ticket int64) Entry {
	return Entry{Node: n.Name, UID: n.UID, Boot: n.Status.NodeInfo.BootID, Ticket: ticket, Phase: Draining, Action: "reboot", Who: "root", Renew: 1}
}

func acquire(t *testing.T, g *Gate, n *corev1.Node, wait time.Duration) (Verdict, error) {
	t.Helper()
	s, v, err := g.Acquire(context.Background(), reqFor(n, 1, wait))
	if s != nil {
		s.Halt()
	}
	return v, err
}

// Hole 1, as the issue found it: RKE2's etcd-only nodes carry
// node-role.kubernetes.io/etcd=true and a static etcd pod, no
// control-plane label. With maxUnavailable 2, e2 must not be admitted
// while e1 holds a slot (one of the three members would be left... two
// of three down); with 1, e1 must not be admitted while etcd-e3 is not
// Ready.
func TestEtcdOnlyNodeIsGuarded(t *testing.T) {
	e1, e2, e3 := labelled("e1", rke2EtcdOnly), labelled("e2", rke2EtcdOnly), labelled("e3", rke2EtcdOnly)
	cp := labelled("cp", kubeadmCP)
	t.Run("one at a time", func(t *testing.T) {
		g, _ := etcdRig(t, 2, []Entry{held(e1, 0)}, e1, e2, e3, cp, etcdPod("e1", true), etcdPod("e2", true), etcdPod("e3", true))
		_, err := acquire(t, g, e2, 500*time.Millisecond)
		var we *WaitError
		if !errors.As(err, &we) || !strings.Contains(err.Error(), "control plane limit 1: e1 (holds a slot") {
			t.Fatalf("e2 (etcd-only) asked while e1 (etcd-only) holds a slot, maxUnavailable 2: got %v, want a refusal naming e1", err)
		}
	})
	t.Run("quorum", func(t *testing.T) {
		g, _ := etcdRig(t, 1, nil, e1, e2, e3, cp, etcdPod("e1", true), etcdPod("e2", true), etcdPod("e3", false))
		_, err := acquire(t, g, e1, 500*time.Millisecond)
		var we *WaitError
		if !errors.As(err, &we) || !strings.Contains(err.Error(), "etcd would lose its quorum: etcd-e3 (not Ready)") {
			t.Fatalf("e1 (etcd-only) asked with etcd-e3 not Ready: got %v, want a refusal by the quorum guard", err)
		}
	})
	t.Run("a worker is not guarded", func(t *testing.T) {
		w := readyNode("w", "")
		g, _ := etcdRig(t, 2, []Entry{held(e1, 0)}, e1, e2, e3, w, etcdPod("e1", true), etcdPod("e2", true), etcdPod("e3", false))
		if _, err := acquire(t, g, w, 500*time.Millisecond); err != nil {
			t.Fatalf("worker w: %v", err)
		}
	})
}

// The labels of each layout: kubeadm's control-plane label (and its
// master label before 1.20), RKE2's and k3s's (value "true"), the etcd
// role alone; a role label set to "false" is not that role.
func TestStateOfRoles(t *testing.T) {
	for _, c := range []struct {
		name    string
		labels  map[string]string
		guarded bool
	}{
		{"kubeadm control plane", kubeadmCP, true},
		{"kubeadm before 1.20", kubeadmOld, true},
		{"k3s server", k3sServer, true},
		{"RKE2 etcd-only", rke2EtcdOnly, true},
		{"worker", map[string]string{"node-role.kubernetes.io/worker": "true"}, false},
		{"etcd role false", map[string]string{"node-role.kubernetes.io/etcd": "false"}, false},
	} {
		if got := StateOf(labelled("n", c.labels)).ControlPlane; got != c.guarded {
			t.Errorf("%s (%v): guarded %v, want %v", c.name, c.labels, got, c.guarded)
		}
	}
}

// Hole 3: a control-plane node back on a new boot, Ready, uncordoned, its
// etcd member Ready, whose agent does not free its slot: a worker waiting
// behind it frees it two renewal periods after it settled, as it would
// any other holder's, and takes the slot.
func TestWorkerFreesSettledControlPlaneHolder(t *testing.T) {
	c1, c2, c3, w := labelled("c1", kubeadmCP), labelled("c2", kubeadmCP), labelled("c3", kubeadmCP), readyNode("w", "")
	h := held(c1, 0)
	h.Boot, h.Phase = "b-c1-before", ShuttingDown // c1 is back on a new boot
	g, c := etcdRig(t, 1, []Entry{h}, c1, c2, c3, w, etcdPod("c1", true), etcdPod("c2", true), etcdPod("c3", true))
	var lists atomic.Int32
	c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		return false, nil, nil
	})
	v, err := acquire(t, g, w, 8*time.Second)
	if err != nil {
		t.Fatalf("worker w behind c1, back and settled (renewal 1 s, settle 0): %v", err)
	}
	if len(v.Reclaimed) != 1 || v.Reclaimed[0].Entry.Node != "c1" || !strings.Contains(v.Reclaimed[0].Why, "back on a new boot") {
		t.Fatalf("admitted, freeing %+v; want c1 freed as back and settled", v.Reclaimed)
	}
	if lists.Load() == 0 {
		t.Fatalf("c1 freed without its etcd member read")
	}
}

// ... but never on a guess: its etcd member not Ready, or the etcd pods
// not readable, the holder is not settled.
func TestWorkerKeepsUnsettledControlPlaneHolder(t *testing.T) {
	c1, c2, c3, w := labelled("c1", kubeadmCP), labelled("c2", kubeadmCP), labelled("c3", kubeadmCP), readyNode("w", "")
	h := held(c1, 0)
	h.Boot, h.Phase = "b-c1-before", ShuttingDown
	for _, tc := range []struct {
		name      string
		c1Ready   bool
		forbidden bool
	}{
		{"its etcd pod not Ready", false, false},
		{"the pods not readable", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, c := etcdRig(t, 1, []Entry{h}, c1, c2, c3, w, etcdPod("c1", tc.c1Ready), etcdPod("c2", true), etcdPod("c3", true))
			if tc.forbidden {
				c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("RBAC: no"))
				})
			}
			_, err := acquire(t, g, w, 3500*time.Millisecond)
			var we *WaitError
			if !errors.As(err, &we) || !strings.Contains(err.Error(), "cluster limit 1: c1 (holds a slot") {
				t.Fatalf("got %v; want c1's slot kept", err)
			}
		})
	}
}

// A worker judging nothing of etcd's never lists the etcd members: behind
// a control-plane holder still on the boot that took the slot, or a
// worker holder back on a new boot. Its one list is of its own node's
// pods of kube-system (whether it hosts a member).
func TestWorkerListsEtcdOnlyToJudgeAHolder(t *testing.T) {
	c1, w, x := labelled("c1", kubeadmCP), readyNode("w", ""), readyNode("x", "")
	hx := held(x, 1)
	hx.Boot = "b-x-before"
	g, c := etcdRig(t, 2, []Entry{held(c1, 0), hx}, c1, w, x, etcdPod("c1", true))
	g.Limits.Settle = time.Hour // x is back, and not settled long enough
	var lists, members atomic.Int32
	c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		if a.(k8stesting.ListAction).GetListRestrictions().Fields.String() != "spec.nodeName=w" {
			members.Add(1)
		}
		return false, nil, nil
	})
	if _, err := acquire(t, g, w, 2*time.Second); err == nil {
		t.Fatalf("w admitted beside c1 and x, maxUnavailable 2")
	}
	if members.Load() != 0 || lists.Load() != 1 {
		t.Fatalf("w listed the pods of kube-system %d times, %d of them not only its own node's, with nothing of etcd's to judge; want one, of its own", lists.Load(), members.Load())
	}
}

// k3s's embedded etcd runs in the k3s process: no etcd pods. Its members
// are the Nodes labelled etcd, each as Ready as its Node: two of them
// cannot keep a majority, which is said (as for two etcd pods).
func TestK3sEmbeddedEtcdMembers(t *testing.T) {
	k1, k2, a := labelled("k1", k3sServer), labelled("k2", k3sServer), readyNode("a", "")
	g, _ := etcdRig(t, 1, nil, k1, k2, a, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns-1", Namespace: metav1.NamespaceSystem}, Spec: corev1.PodSpec{NodeName: "a"}})
	v, err := acquire(t, g, k1, time.Second)
	if err != nil || !strings.Contains(v.QuorumWarning, "etcd has 2 member(s), one of them on k1") {
		t.Fatalf("k1 of a 2-member embedded etcd: %v, warning %q", err, v.QuorumWarning)
	}
}

// The node agent of an etcd-only server (RKE2) frees its slot after the
// reboot only once its etcd member is Ready again, as a control-plane
// node's does (its State as gnsh agent reads it: the members listed for
// a guarded node).
func TestKeeperWaitsForEtcdOnlyMember(t *testing.T) {
	n := labelled("e1", rke2EtcdOnly)
	n.Status.NodeInfo.BootID = "new"
	h := Entry{Node: "e1", UID: n.UID, Boot: "old", Phase: ShuttingDown, Renew: 1}
	g, _ := keeperRig(t, h)
	var ready atomic.Bool
	k := &Keeper{Gate: g, Node: "e1", Boot: "new", Settle: 100 * time.Millisecond,
		State: func(context.Context) (NodeState, []Member, bool, error) {
			st := StateOf(n)
			if !st.ControlPlane {
				return st, nil, false, nil
			}
			return st, []Member{{Pod: "etcd-e1", Node: "e1", Ready: ready.Load()}, {Pod: "etcd-e2", Node: "e2", Ready: true}}, true, nil
		},
		Needed: func(context.Context, Entry, func() error) (bool, string, error) { return true, "", nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = k.Run(ctx) }()
	eventually(t, "phase back", func() bool { e, ok := current(t, g).Holder("e1"); return ok && e.Phase == Back })
	time.Sleep(500 * time.Millisecond)
	if _, ok := current(t, g).Holder("e1"); !ok {
		t.Fatal("e1's slot freed while its etcd pod is not Ready")
	}
	ready.Store(true)
	eventually(t, "freed", func() bool { _, ok := current(t, g).Holder("e1"); return !ok })
}
