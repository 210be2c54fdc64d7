package nodefacts

import (
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/slots"
)

// gnsh doctor reads the Node with the drain's kubeconfig (the kubelet's)
// and the slots with the gate's (gnsh's own /etc/gnsh/kubeconfig), and
// names each (issue 22).
func TestDoctorTwoIdentities(t *testing.T) {
	const tokenKubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\n" +
		"users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "u1"}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	slots.Record{Version: slots.Schema, Next: 2, Holders: []slots.Entry{{Node: "node9", UID: "u9", Boot: "b", Phase: slots.Draining, Renew: 10}}}.Encode(l)
	drainC, gateC := fake.NewClientset(n), fake.NewClientset(n.DeepCopy(), l)
	root := tree(t, map[string]string{"/etc/kubernetes/kubelet.conf": tokenKubeconfig, "/etc/gnsh/kubeconfig": tokenKubeconfig,
		"/etc/gnsh/config.yaml": "node: node1\n"})
	for _, f := range []string{kube.KubeletKubeconfig, kube.GnshKubeconfig} {
		if err := os.Chmod(root+f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var asked []string
	connect := func(path string, _ time.Duration) (kubernetes.Interface, *rest.Config, error) {
		asked = append(asked, strings.TrimPrefix(path, root))
		if strings.HasSuffix(path, kube.GnshKubeconfig) {
			return gateC, &rest.Config{}, nil
		}
		return drainC, &rest.Config{}, nil
	}
	s := &Sources{Root: root, Getenv: envOf(nil), Kube: KubeOptions{Connect: connect, HostID: &kube.HostID{}}}
	r := &Report{}
	gatherKube(testCtx(t), s, &r.Kubeconfig, &r.Node, &r.Drain, &r.Slots, r.Access)
	if r.Kubeconfig.Path != root+kube.KubeletKubeconfig || r.Kubeconfig.Fallback || r.Slots.Kubeconfig != root+kube.GnshKubeconfig {
		t.Fatalf("drain %q (fallback %v), gate %q", r.Kubeconfig.Path, r.Kubeconfig.Fallback, r.Slots.Kubeconfig)
	}
	if len(r.Slots.Holders) != 1 || r.Slots.Holders[0] != "node9 (draining)" {
		t.Errorf("the slots not read with the gate's identity: %+v (asked %v)", r.Slots, asked)
	}
	for _, a := range drainC.Actions() {
		if a.GetResource().Resource == "leases" {
			t.Errorf("the drain's identity read the slots: %v", a)
		}
	}
	if c := CheckKubeconfig(r); !strings.Contains(c.Message, "drain: "+root+kube.KubeletKubeconfig) || !strings.Contains(c.Message, "gate: "+root+kube.GnshKubeconfig) {
		t.Errorf("kubeconfig check %+v", c)
	}
}
