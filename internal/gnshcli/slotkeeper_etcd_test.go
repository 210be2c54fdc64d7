package gnshcli

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/slots"
)

// The node agent of a node with no role label frees its slot after the
// reboot (Ready, uncordoned, settled) only if it knows the node hosts no
// etcd member: with the pods of kube-system not readable it keeps the slot
// (in doubt, guarded); with them readable and no etcd pod on it, it frees
// the slot, having listed only its own node's pods.
func TestKeeperUnlabelledNodeEtcdInDoubt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		podsFail bool
		freed    bool
	}{
		{"pods not readable", true, false},
		{"no etcd pod on it", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u-p"},
				Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "new"},
					Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
			slots.Record{Version: slots.Schema, Next: 1, Holders: []slots.Entry{{Node: "p", UID: "u-p", Boot: "old", Phase: slots.ShuttingDown, Renew: 10, Action: "reboot", Who: "root"}}}.Encode(l)
			c := fake.NewClientset(p, l)
			var selectors []string
			c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				selectors = append(selectors, a.(k8stesting.ListAction).GetListRestrictions().Fields.String())
				if tc.podsFail {
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				}
				return false, nil, nil
			})
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
			if _, held := rec.Holder("p"); held == tc.freed {
				t.Fatalf("p (no role label), back and settled, %s: its slot still held: %v; want %v", tc.name, held, !tc.freed)
			}
			for _, s := range selectors {
				if s != "spec.nodeName=p" {
					t.Fatalf("p's agent listed pods with field selector %q; want only its own node's (%v)", s, selectors)
				}
			}
		})
	}
}
