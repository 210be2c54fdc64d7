package gnshcli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/internal/gatetoken/claims/claimstest"
)

// On a k3s node with no kubeconfig key, gnsh token install takes the API
// server and CA from the kubelet's kubeconfig where k3s keeps it, as the
// drain finds it, not from a kubelet.conf that is not there.
func TestTokenInstallFindsK3sKubelet(t *testing.T) {
	env, out, errb := testEnv(t)
	root := env.Host.Root
	writeKubeletKubeconfig(t, filepath.Join(root, "var/lib/rancher/k3s/agent/kubelet.kubeconfig"), "https://127.0.0.1:6444", "SzNTCg==")
	withStdin(t, claimstest.Token("n1", env.Now().Add(-time.Minute), 24*time.Hour)+"\n", false)
	if code := Run(context.Background(), []string{"gnsh", "token", "install", "--node", "n1"}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if !strings.HasPrefix(out.String(), "gnsh: installed the gate's token in /etc/gnsh/kubeconfig: ") {
		t.Fatalf("stdout %q", out.String())
	}
	raw, err := clientcmd.LoadFromFile(filepath.Join(root, "etc/gnsh/kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if raw.Clusters["default"].Server != "https://127.0.0.1:6444" || string(raw.Clusters["default"].CertificateAuthorityData) != "K3S\n" {
		t.Fatalf("cluster %+v, want k3s's", raw.Clusters["default"])
	}
}
