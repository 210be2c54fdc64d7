package drainer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A node without kubelet.conf drains with gnsh's own kubeconfig, the
// gate's identity (issue 22): said once, first; and the cordon the
// narrowed rbac.yaml refuses (403) says exactly that, and the fix, not a
// generic "may not drain".
func TestFallbackCordonForbidden(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/vm" {
			n := corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "vm", UID: "u"},
				Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{MachineID: "machine-1", BootID: "boot-1"}}}
			_ = json.NewEncoder(w).Encode(n)
			return
		}
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
			Message: `nodes "vm" is forbidden: User "system:serviceaccount:kube-system:gnsh" cannot patch resource "nodes"`})
	}))
	defer srv.Close()
	d := newDrainer(t, nil, "apiTimeout: 2s\nslots: {gate: off}\n")
	d.Hostname = func() (string, error) { return "vm", nil }
	kc := filepath.Join(d.KubeRoot, "etc", "gnsh", "kubeconfig")
	if err := os.MkdirAll(filepath.Dir(kc), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %q, insecure-skip-tls-verify: true}\n"+
		"users:\n- name: u\n  user: {token: abc}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n", srv.URL)
	if err := os.WriteFile(kc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.handOff(t, reboot(), nil); err != nil {
		t.Fatal(err)
	}
	want := "gnsh: " + fallbackLine(d.KubeRoot) + "\n" +
		"gnsh: warning: the identity in " + kc + " is the reboot-slot gate's and may not drain (403 Forbidden: " +
		`nodes "vm" is forbidden: User "system:serviceaccount:kube-system:gnsh" cannot patch resource "nodes"): ` +
		"set kubeconfig in /etc/gnsh/config.yaml to this node's kubelet kubeconfig (gnsh found none at /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig); " +
		"rebooting without draining\n"
	if got := d.stderr.String(); got != want {
		t.Fatalf("stderr\n%q\nwant\n%q", got, want)
	}
	// Said once per process: gnsh drain, in the same process, does not
	// say the fallback again.
	d.stderr.Reset()
	_ = d.DrainCommand(t.Context(), 0, false, os.Stdout)
	if strings.Contains(d.stderr.String(), "draining with gnsh's own") {
		t.Errorf("the fallback said twice: %q", d.stderr.String())
	}
}
