package gnshcli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/internal/gatetoken"
	"github.com/gnsh/gnsh/internal/gatetoken/claims/claimstest"
)

func withStdin(t *testing.T, s string, tty bool) {
	t.Helper()
	old := tokenStdin
	tokenStdin = func() (io.Reader, bool) { return strings.NewReader(s), tty }
	t.Cleanup(func() { tokenStdin = old })
}

// writeKubeletConf writes a kubelet.conf under root naming server and CA
// data (no client certificate).
func writeKubeletConf(t *testing.T, root string) {
	t.Helper()
	writeKubeletKubeconfig(t, filepath.Join(root, "etc/kubernetes/kubelet.conf"), "https://10.0.0.1:6443", "Q0EK")
}

// writeKubeletKubeconfig writes a kubelet's kubeconfig at path naming
// server and the CA data caB64 (base64), with a token, no certificate.
func writeKubeletKubeconfig(t *testing.T, path, server, caB64 string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	data := "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: " + server + "\n    certificate-authority-data: " + caB64 + "\n" +
		"users:\n- name: u\n  user:\n    token: kubelets\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\ncurrent-context: c\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTokenInstall(t *testing.T) {
	env, out, errb := testEnv(t)
	root := env.Host.Root
	writeKubeletConf(t, root)
	token := claimstest.Token("n1", env.Now().Add(-time.Minute), 24*time.Hour)
	withStdin(t, token+"\n", false)
	code := Run(context.Background(), []string{"gnsh", "token", "install", "--node", "n1"}, env)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	want := "gnsh: installed the gate's token in /etc/gnsh/kubeconfig: kube-system/gnsh bound to Node n1, valid until 2026-11-22 09:59 UTC (in 24h); the node agent renews it\n"
	if out.String() != want || errb.String() != "" {
		t.Fatalf("stdout %q\nwant   %q\nstderr %q", out.String(), want, errb.String())
	}
	if strings.Contains(out.String()+errb.String(), token) {
		t.Fatal("the token was printed")
	}
	p := filepath.Join(root, "etc/gnsh/kubeconfig")
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", fi, err)
	}
	raw, err := clientcmd.LoadFromFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Clusters["default"].Server != "https://10.0.0.1:6443" || string(raw.Clusters["default"].CertificateAuthorityData) != "CA\n" ||
		raw.AuthInfos["gnsh"].Token != token || raw.CurrentContext != "default" {
		t.Fatalf("kubeconfig %+v", raw)
	}
}

func TestTokenInstallRefuses(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		stdin string
		tty   bool
		args  []string
		want  string
	}{
		{"a terminal", "", true, nil, "gnsh: gnsh token install reads the token from a pipe, not a terminal"},
		{"nothing", "\n", false, nil, "gnsh: no token on stdin"},
		{"an argument", "", false, []string{"TOKEN"}, "takes no arguments"},
		{"not a JWT", "abc\n", false, nil, "gnsh: the token on stdin: not a ServiceAccount token"},
		{"another node's", claimstest.Token("n2", now, time.Hour), false, []string{"--node", "n1"}, "gnsh: the token on stdin is bound to Node n2, but this node is n1"},
		{"expired", claimstest.Token("n1", now.Add(-2*time.Hour), time.Hour), false, []string{"--node", "n1"}, "gnsh: the token on stdin expired at 2026-11-21 09:00 UTC"},
		{"no cluster", claimstest.Token("n1", now, time.Hour), false, []string{"--node", "n1"}, "gnsh: no API server or CA: pass --server URL and --certificate-authority FILE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env, out, errb := testEnv(t)
			withStdin(t, c.stdin, c.tty)
			code := Run(context.Background(), append([]string{"gnsh", "token", "install"}, c.args...), env)
			if code == 0 || !strings.Contains(errb.String(), c.want) || out.Len() != 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %q", code, out.String(), errb.String(), c.want)
			}
			if _, err := os.Stat(filepath.Join(env.Host.Root, "etc/gnsh/kubeconfig")); err == nil {
				t.Fatal("written all the same")
			}
		})
	}
}

func TestTokenInstallUnboundWarns(t *testing.T) {
	env, out, errb := testEnv(t)
	writeKubeletConf(t, env.Host.Root)
	withStdin(t, claimstest.Token("", env.Now(), 8760*time.Hour), false)
	if code := Run(context.Background(), []string{"gnsh", "token", "install"}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if !strings.HasPrefix(errb.String(), "gnsh: warning: the token is not bound to a Node") || strings.Contains(out.String(), "renews") {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}
	if _, err := gatetoken.Load(filepath.Join(env.Host.Root, "etc/gnsh/kubeconfig")); err != nil {
		t.Fatal(err)
	}
}

// On a node whose config names the kubelet's kubeconfig (k3s, rke2) and
// the gate's (slots.kubeconfig), the API server and CA come from the one
// and the token goes to the other, where the agent renews it.
func TestTokenInstallFollowsConfig(t *testing.T) {
	env, out, errb := testEnv(t)
	root := env.Host.Root
	writeKubeletConf(t, root)
	writeKubeletKubeconfig(t, filepath.Join(root, "var/lib/rancher/k3s/agent/kubelet.kubeconfig"), "https://127.0.0.1:6444", "SzNTCg==")
	cfg := filepath.Join(root, "etc/gnsh/config.yaml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("kubeconfig: /var/lib/rancher/k3s/agent/kubelet.kubeconfig\nslots:\n  kubeconfig: /etc/gnsh/gate.kubeconfig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	token := claimstest.Token("n1", env.Now().Add(-time.Minute), 24*time.Hour)
	withStdin(t, token+"\n", false)
	if code := Run(context.Background(), []string{"gnsh", "token", "install", "--node", "n1"}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if !strings.HasPrefix(out.String(), "gnsh: installed the gate's token in /etc/gnsh/gate.kubeconfig: ") {
		t.Fatalf("stdout %q", out.String())
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/gnsh/kubeconfig")); err == nil {
		t.Fatal("/etc/gnsh/kubeconfig written, not slots.kubeconfig")
	}
	raw, err := clientcmd.LoadFromFile(filepath.Join(root, "etc/gnsh/gate.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if raw.Clusters["default"].Server != "https://127.0.0.1:6444" || string(raw.Clusters["default"].CertificateAuthorityData) != "K3S\n" {
		t.Fatalf("cluster %+v, want k3s's", raw.Clusters["default"])
	}
}
