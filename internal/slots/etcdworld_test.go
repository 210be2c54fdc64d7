package slots

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Decide from a World: a labelled etcd node whose static pod is not seen
// (not started yet, its mirror pod not made) while the other members are
// pods is a member that is not Ready: two pods of three members do not
// make an etcd of two, which no guard would keep.
func TestEtcdLabelledNodeWithoutPod(t *testing.T) {
	ns := []NodeState{StateOf(labelled("e1", rke2EtcdOnly)), StateOf(labelled("e2", rke2EtcdOnly)), StateOf(labelled("e3", rke2EtcdOnly))}
	w := World{Nodes: map[string]NodeState{}}
	for _, n := range ns {
		w.Nodes[n.Name] = n
	}
	w.setEtcd([]Member{{Pod: "etcd-e1", Node: "e1", Ready: true}, {Pod: "etcd-e2", Node: "e2", Ready: true}})
	a := Ask{Entry: Entry{Node: "e1", UID: types.UID("u-e1"), Boot: "b-e1", Renew: 10}}
	v := Decide(Record{}, w, Limits{Max: 3}, still{}, a)
	if v.Admitted || names(v.Blocks) != "etcd would lose its quorum: etcd on e3 (labelled etcd, no etcd pod seen) (--force-quorum overrides)" {
		t.Fatalf("%+v: %s", v, names(v.Blocks))
	}
}

// A node that hosts an etcd pod but carries no role label is guarded too
// where the pods are read: a control-plane node asking counts it in the
// control plane's limit.
func TestEtcdPodHostIsGuarded(t *testing.T) {
	w := World{Nodes: map[string]NodeState{}}
	for _, n := range []*corev1.Node{labelled("c1", kubeadmCP), readyNode("p", ""), labelled("c3", kubeadmCP)} {
		w.Nodes[n.Name] = StateOf(n)
	}
	w.setEtcd([]Member{{Pod: "etcd-c1", Node: "c1", Ready: true}, {Pod: "etcd-p", Node: "p", Ready: true}, {Pod: "etcd-c3", Node: "c3", Ready: true}})
	rec := Record{Next: 1, Holders: []Entry{{Node: "p", UID: "u-p", Boot: "b-p", Phase: Draining, Renew: 10}}}
	v := Decide(rec, w, Limits{Max: 3}, still{}, Ask{Entry: Entry{Node: "c1", UID: "u-c1", Boot: "b-c1", Renew: 10}})
	if v.Admitted || !strings.Contains(names(v.Blocks), "control plane limit 1: p (holds a slot") {
		t.Fatalf("%+v: %s", v, names(v.Blocks))
	}
}
