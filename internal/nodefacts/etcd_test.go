package nodefacts

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gnsh/gnsh/internal/kube"
)

// The doctor reviews the etcd pods' list for every node the gate guards
// as a control-plane node: RKE2's etcd-only servers (labelled etcd
// alone) and kubeadm's before 1.20 (labelled master) too; refused, the
// gate is unavailable there (issue 20, hole 1).
func TestGatherSlotsReviewsEtcdOfEveryGuardedNode(t *testing.T) {
	const etcd = "list pods (component=etcd) in kube-system"
	for _, l := range []map[string]string{{"node-role.kubernetes.io/etcd": "true"}, {"node-role.kubernetes.io/master": ""}} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: l}}
		rv := &fakeReviewer{user: "u", allowed: map[string]bool{}}
		for _, exists := range []bool{false, true} {
			for _, q := range SlotRequests("gnsh", "reboot-slots", true, exists) {
				rv.allowed[q.String()] = q.Resource != "pods"
			}
		}
		for _, q := range GnshRequests("node1", true) {
			rv.allowed[q.String()] = true
		}
		root := tree(t, map[string]string{"/etc/kubernetes/kubelet.conf": "apiVersion: v1\nkind: Config\n", "/etc/gnsh/config.yaml": "node: node1\n"})
		s := &Sources{Root: root, Getenv: envOf(nil), Kube: KubeOptions{Connect: connectTo(fake.NewClientset(n)), Reviewer: rv, HostID: &kube.HostID{}}}
		r := &Report{Access: &AccessFacts{}}
		gatherKube(testCtx(t), s, &r.Kubeconfig, &r.Node, &r.Drain, &r.Slots, r.Access)
		var seen []string
		for _, q := range rv.seen {
			seen = append(seen, q.String())
		}
		if !slices.Contains(seen, etcd) {
			t.Errorf("%v: %s not reviewed: %q", l, etcd, seen)
		}
		if c := CheckSlots(r); c.Verdict != Fail || !strings.Contains(c.Message, "but not "+etcd+", so etcd's quorum cannot be judged") {
			t.Errorf("%v: %+v", l, c)
		}
	}
}
