package integration

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/test/internal/kwok"
)

// TestSlotsRevokedGateToken (issue 22): the gate's token is revoked (it
// was bound to a Node that was then deleted: the real API server answers
// 401) while the drain goes with the node's own kubelet credentials. With
// slots.gate: optional the reboot is drained and handed off, with one
// warning line that names the token's kubeconfig and the fix; with
// required it is refused (exit 1), saying so, and gnsh leaves the node
// neither cordoned nor drained.
func TestSlotsRevokedGateToken(t *testing.T) {
	k := startCluster(t)
	k.gnshIdentity(t) // rbac.yaml applied: the token is refused for itself, not for want of a role
	ctx := ctxFor(t, 3*time.Minute)
	if _, err := k.admin.CoreV1().Nodes().Create(ctx, kwok.Node("revoked-ghost", 100), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(k.cp.Kubectl(t, nil, "-n", "kube-system", "create", "token", "gnsh", "--duration=1h",
		"--bound-object-kind=Node", "--bound-object-name=revoked-ghost"))
	kc := k.cp.TokenKubeconfig(t, token)
	gate := clientFor(t, kc)
	if _, err := gate.CoordinationV1().Leases("gnsh").Get(ctx, "reboot-slots", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("the bound token before its Node is deleted: %v", err)
	}
	if err := k.admin.CoreV1().Nodes().Delete(ctx, "revoked-ghost", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err := gate.CoordinationV1().Leases("gnsh").Get(ctx, "reboot-slots", metav1.GetOptions{})
		if apierrors.IsUnauthorized(err) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the token bound to a deleted Node is still accepted: %v", err)
		}
	}

	for _, sc := range []struct{ gate, node string }{{"optional", "revoked-opt"}, {"required", "revoked-req"}} {
		t.Run(sc.gate, func(t *testing.T) {
			n := k.newNode(t, sc.node)
			n.replicaSet("web", 1, podOpts{})
			n.waitRunning(1)
			bus := logindtest.StartBus(t)
			ld := bus.StartLogind(t, logindtest.Options{Version: 252})
			cfg := writeConfig(t, config("node: "+n.name, gated("slots: {gate: "+sc.gate+", maxUnavailable: 1, queue: never}", kc)))
			r := gnshRun(t, bus, k.nodeEnv(t, n.name, cfg), "reboot")
			for _, l := range strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n") {
				if !strings.HasPrefix(l, "gnsh: ") {
					t.Errorf("a line not prefixed gnsh: %q", l)
				}
			}
			var about []string // the lines about the token
			for _, l := range strings.Split(r.Stderr, "\n") {
				if strings.Contains(l, "401") {
					about = append(about, l)
				}
			}
			if len(about) != 1 || !strings.Contains(about[0], kc) || !strings.Contains(about[0], "gnsh token install") ||
				!strings.Contains(about[0], "expired or was revoked") {
				t.Errorf("want one line naming the token's kubeconfig %s, that it expired or was revoked, and the fix; got %q", kc, about)
			}
			if sc.gate == "optional" {
				if r.Code != 0 {
					t.Fatalf("exit %d, want 0 (the gate optional)", r.Code)
				}
				wantLines(t, r.Stderr, "gnsh: warning: reboot slots not checked: the API server refuses these credentials (401 Unauthorized) for the Lease gnsh/reboot-slots: "+
					"the gate's token in "+kc+" expired or was revoked …; going on without a slot (slots.gate: optional)")
				wantHandOff(t, "", ld.Calls(), "RebootWithFlags")
				n.wantCordon("reboot")
				if left := len(n.pods()); left != 0 {
					t.Errorf("%d pods left: not drained", left)
				}
				return
			}
			if r.Code != 1 {
				t.Errorf("exit %d, want 1 (refused: the gate required)", r.Code)
			}
			if !strings.Contains(r.Stderr, "reboot refused (slots.gate: required in "+cfg+")") {
				t.Errorf("the refusal does not say why:\n%s", r.Stderr)
			}
			noLogind(t, ld)
			n.wantCordon("")
			if left := len(n.pods()); left != 1 {
				t.Errorf("%d pods left, want 1: drained though refused", left)
			}
		})
	}
}
