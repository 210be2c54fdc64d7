package kube

// On k3s and rke2 there is no /etc/kubernetes/kubelet.conf: the kubelet's
// kubeconfig is under /var/lib/rancher. The drain must take it, not
// gnsh's own /etc/gnsh/kubeconfig (the gate's identity, which the
// narrowed rbac.yaml refuses every drain write: an upgraded k3s node with
// a gate token would reboot undrained). Issue 22.

import (
	"os"
	"path/filepath"
	"testing"
)

const validKC = "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: https://10.0.0.1:6443\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\ncurrent-context: c\n"

func TestK3sRKE2DrainWithKubeletKubeconfig(t *testing.T) {
	put := func(t *testing.T, root string, paths ...string) {
		for _, p := range paths {
			full := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(validKC), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, kubelet := range []string{K3sKubeletKubeconfig, RKE2KubeletKubeconfig} {
		root := t.TempDir()
		put(t, root, kubelet, GnshKubeconfig)
		l := &Locator{Root: root, Getenv: func(string) string { return "" }}
		got, err := l.FindKubeconfig()
		if err != nil {
			t.Fatal(err)
		}
		if got != filepath.Join(root, kubelet) || l.Fallback() {
			t.Fatalf("the drain's kubeconfig %s (fallback %v), want the kubelet's %s", got, l.Fallback(), kubelet)
		}
		if !IsKubeletKubeconfig(root, got) {
			t.Errorf("IsKubeletKubeconfig(%s) false", got)
		}
		// The gate still takes gnsh's own.
		if g, err := l.GateKubeconfig(got); err != nil || g != filepath.Join(root, GnshKubeconfig) {
			t.Errorf("gate's kubeconfig %s, %v", g, err)
		}
	}
	// Order: kubeadm's, k3s's, rke2's.
	root := t.TempDir()
	put(t, root, KubeletKubeconfig, K3sKubeletKubeconfig, RKE2KubeletKubeconfig)
	l := &Locator{Root: root, Getenv: func(string) string { return "" }}
	for _, want := range KubeletKubeconfigs() {
		got, err := l.FindKubeconfig()
		if err != nil || got != filepath.Join(root, want) {
			t.Fatalf("FindKubeconfig %s, %v; want %s", got, err, want)
		}
		if err := os.Remove(got); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.FindKubeconfig(); err != ErrNoKubeconfig {
		t.Fatalf("none left: %v", err)
	}
}
