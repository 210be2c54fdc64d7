package drainer

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// --force-quorum on a node with no role label that hosts an etcd pod: the
// gate guards it as a control-plane node, so the override is said as on
// one (review of issue 20, finding 1: guarded exactly as a control-plane
// node is). Three members, etcd-c3 not Ready: without the override node1
// would wait.
func TestForceQuorumSaidOnUnlabelledEtcdHost(t *testing.T) {
	f := newFakeNode(false, nil)
	ctx := context.Background()
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	for _, name := range []string{"c1", "c3"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
			Status: corev1.NodeStatus{Conditions: ready}}
		if _, err := f.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for node, ok := range map[string]bool{"node1": true, "c1": true, "c3": false} {
		st := corev1.ConditionFalse
		if ok {
			st = corev1.ConditionTrue
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-" + node, Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "etcd"},
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
		if _, err := f.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	d := newDrainer(t, f, "")
	req := reboot()
	req.Drain.ForceQuorum = true
	p, err := d.prepare(t, req)
	if err != nil || p == nil {
		t.Fatalf("node1 (etcd-node1, no role label) with --force-quorum, etcd-c3 not Ready: %v; said %q", err, d.stderr.String())
	}
	if !strings.Contains(d.stderr.String(), "--force-quorum: the etcd quorum guard was not applied") {
		t.Fatalf("node1 (etcd-node1, no role label) took its slot with --force-quorum; said %q, want the override said", d.stderr.String())
	}
}
