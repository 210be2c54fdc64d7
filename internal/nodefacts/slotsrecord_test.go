package nodefacts

import (
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/slots"
)

// A slots record that cannot be read refuses every reboot whatever
// slots.gate says: gnsh doctor fails, naming the record and its real fix
// (the reset for a broken one, an upgrade for a newer gnsh's), never
// "reboots go on without a slot" and rbac.yaml.
func TestCheckSlotsUnreadableRecord(t *testing.T) {
	for _, tt := range []struct{ name, raw, cause, msg, fix string }{
		{"broken", `{"version":1,"holders":[`, CauseRecord,
			"the slots record in Lease gnsh/reboot-slots (annotation gnsh.io/slots) is not a valid record (",
			"gnsh slots reset (admin credentials) starts a new record: every slot free, nobody waiting"},
		{"newer", `{"version":2}`, CauseNewer,
			"the slots record is version 2, written by a newer gnsh (this one writes 1)",
			"upgrade gnsh on this node"},
	} {
		for _, gate := range []string{"optional", "required"} {
			t.Run(tt.name+" "+gate, func(t *testing.T) {
				n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "u1"}}
				l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh",
					Annotations: map[string]string{slots.Annotation: tt.raw}}}
				root := tree(t, map[string]string{"/etc/kubernetes/kubelet.conf": "apiVersion: v1\nkind: Config\n",
					"/etc/gnsh/config.yaml": "node: node1\nslots: {gate: " + gate + "}\n"})
				s := &Sources{Root: root, Getenv: envOf(nil), Kube: KubeOptions{Connect: connectTo(fake.NewClientset(n, l)), HostID: &kube.HostID{}}}
				r := &Report{}
				gatherKube(testCtx(t), s, &r.Kubeconfig, &r.Node, &r.Drain, &r.Slots, r.Access)
				c := CheckSlots(r)
				want := "gate " + gate + ": every reboot is refused (but with --no-drain or -f): the slots record cannot be read: " + tt.msg
				if r.Slots.Cause != tt.cause || c.Verdict != Fail || !strings.HasPrefix(c.Message, want) || c.Fix != tt.fix {
					t.Errorf("slots %+v\ncheck %+v\nwant fail %s… fix %s", r.Slots, c, want, tt.fix)
				}
				if strings.Contains(c.Message+c.Fix, "rbac.yaml") || strings.Contains(c.Message, "go on without a slot") {
					t.Errorf("the gate's access blamed: %+v", c)
				}
			})
		}
	}
}
