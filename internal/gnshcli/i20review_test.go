package gnshcli

// Review of issue 20's fixes: scratch tests (TestReview*).

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/slots"
)

// The node agent of a node that hosts an etcd member but carries no role
// label frees its slot after the reboot once the node is Ready and
// uncordoned, without waiting for its etcd member: its State lists the
// members only for a node guarded by its labels (slotkeeper.go), so the
// keeper never sees etcd-p not Ready. (Hole 1's "whoever asks": the agent
// is one who asks.)
func TestReviewKeeperUnlabelledEtcdHostWaitsForItsMember(t *testing.T) {
	etcd := func(node string, ready bool) *corev1.Pod {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-" + node, Namespace: "kube-system", Labels: map[string]string{"component": "etcd"},
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
	}
	p := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u-p"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "new"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	slots.Record{Version: slots.Schema, Next: 1, Holders: []slots.Entry{{Node: "p", UID: "u-p", Boot: "old", Phase: slots.ShuttingDown, Renew: 10, Action: "reboot", Who: "root"}}}.Encode(l)
	c := fake.NewClientset(p, l, etcd("p", false), etcd("c1", true), etcd("c3", true))
	cfg := config.Default()
	cfg.Slots.Settle = config.Duration(100 * time.Millisecond)
	dir := t.TempDir()
	d := &drainer.Drainer{BootID: "new", LockDir: filepath.Join(dir, "run"), KubeRoot: dir, ConfigPath: filepath.Join(dir, "config.yaml"),
		Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	keepSlots(ctx, d, cfg, func(context.Context) (kubernetes.Interface, kubernetes.Interface, string, error) {
		return c, c, "p", nil
	},
		func(string, ...any) {}, false)
	got, err := c.CoordinationV1().Leases("gnsh").Get(context.Background(), "reboot-slots", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := slots.Decode(got)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Holder("p"); !ok {
		t.Fatalf("p (hosts etcd-p, not Ready; no role label) had its slot freed by its agent after the reboot: the next etcd node may go while etcd-p is not back")
	}
}
