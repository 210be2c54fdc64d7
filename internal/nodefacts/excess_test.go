package nodefacts

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gnsh/gnsh/internal/kube"
)

// gnsh doctor asks whether the gate's ServiceAccount still has the rights
// an earlier rbac.yaml granted (gnsh:drain, gnsh:events), which kubectl
// apply of this one does not take back, and fails when it has any,
// naming the commands that delete them. Another identity (an admin's)
// is not judged by them; a review that failed is not known, not granted.
func TestGatherSlotsExcessRights(t *testing.T) {
	worker := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}
	for _, tt := range []struct {
		name    string
		user    string
		allow   []string // of ExcessRequests, by String
		errs    []string
		verdict Verdict
		msg     string
		fix     string
	}{
		{name: "none", user: gateServiceAccount, verdict: OK, msg: "gnsh/reboot-slots answers"},
		{name: "gnsh:drain left", user: gateServiceAccount, allow: []string{"patch nodes", "create pods/eviction"}, verdict: Fail,
			msg: "; 0 held, 0 waiting; this node: none; these credentials may also patch nodes, create pods/eviction, which the gate never does: " +
				"a token taken from any node can cordon and drain every node (an earlier gnsh's rbac.yaml granted them)",
			fix: "delete what grants them (as a cluster admin): kubectl delete clusterrole,clusterrolebinding gnsh:drain --ignore-not-found; " +
				"kubectl -n default delete role,rolebinding gnsh:events --ignore-not-found; or run the Ansible role gnsh again"},
		{name: "gnsh:events left", user: gateServiceAccount, allow: []string{"create events in default"}, verdict: Fail,
			msg: "these credentials may also create events in default, which the gate never does"},
		{name: "an admin's identity", user: "kubernetes-admin", allow: []string{"patch nodes", "create pods/eviction", "create events in default"},
			verdict: OK, msg: "gnsh/reboot-slots answers as kubernetes-admin"},
		{name: "review failed", user: gateServiceAccount, errs: []string{"patch nodes"}, verdict: Warn,
			msg: "not known whether these credentials may make every request of the gate (patch nodes: etcdserver: request timed out)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rv := &fakeReviewer{user: tt.user, allowed: map[string]bool{}, errs: map[string]error{}}
			for _, q := range SlotRequests("gnsh", "reboot-slots", false, false) {
				rv.allowed[q.String()] = true
			}
			// (The drain's requests are left refused: the fake answers
			// both identities, and two of them read as excess ones.)
			for _, q := range tt.allow {
				rv.allowed[q] = true
			}
			for _, q := range tt.errs {
				rv.errs[q] = errors.New("etcdserver: request timed out")
			}
			root := tree(t, map[string]string{"/etc/kubernetes/kubelet.conf": "apiVersion: v1\nkind: Config\n", "/etc/gnsh/config.yaml": "node: node1\n"})
			s := &Sources{Root: root, Getenv: envOf(nil), Kube: KubeOptions{Connect: connectTo(fake.NewClientset(worker)), Reviewer: rv,
				HostID: &kube.HostID{}}}
			r := &Report{Access: &AccessFacts{}}
			gatherKube(testCtx(t), s, &r.Kubeconfig, &r.Node, &r.Drain, &r.Slots, r.Access)
			for _, q := range ExcessRequests() {
				if !slices.Contains(rv.seen, q) {
					t.Errorf("%s not reviewed", q)
				}
			}
			c := CheckSlots(r)
			if c.Verdict != tt.verdict || !strings.Contains(c.Message, tt.msg) || !strings.Contains(c.Fix, tt.fix) {
				t.Errorf("got %+v\nwant %s …%s… fix …%s…", c, tt.verdict, tt.msg, tt.fix)
			}
		})
	}
}
