//go:build e2e

package e2e

// The gate's token as the role delivers it (tasks/dedicated.yml): bound to
// this node's Node, a day long, replaced only when it must be, and left
// alone when the node agent has renewed it.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// tokenClaims is what the role reads of a ServiceAccount token.
type tokenClaims struct {
	Sub string `json:"sub"`
	Exp int64  `json:"exp"`
	Iat int64  `json:"iat"`
	K8s struct {
		ServiceAccount struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"serviceaccount"`
		Node *struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"node"`
	} `json:"kubernetes.io"`
}

// nodeToken returns the node's /etc/gnsh/kubeconfig, its token and the
// token's claims.
func (n *ansibleNode) nodeToken() (file, token string, claims tokenClaims) {
	t := n.t
	file = n.c.must("cat", "/etc/gnsh/kubeconfig").stdout
	cfg, err := clientcmd.Load([]byte(file))
	if err != nil {
		t.Fatalf("/etc/gnsh/kubeconfig: %v", err)
	}
	for _, a := range cfg.AuthInfos {
		token = a.Token
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("the token in /etc/gnsh/kubeconfig is not a JWT (%d parts)", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("the token's claims: %v", err)
	}
	if err := json.Unmarshal(b, &claims); err != nil {
		t.Fatalf("the token's claims: %v", err)
	}
	return file, token, claims
}

// expectFreshToken checks the token a run just wrote: kube-system/gnsh's,
// bound to this node's Node (its name and UID), asked a moment ago for a
// day (24h ± a minute), and taken so by the API server.
func (n *ansibleNode) expectFreshToken() {
	t, d := n.t, n.d
	_, _, cl := n.nodeToken()
	node, err := d.admin.CoreV1().Nodes().Get(context.Background(), d.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cl.Sub != saUser {
		t.Errorf("the token's subject is %q, want %s", cl.Sub, saUser)
	}
	if cl.K8s.Node == nil || cl.K8s.Node.Name != d.node || cl.K8s.Node.UID != string(node.UID) {
		t.Errorf("the token is bound to Node %+v, want %s (UID %s)", cl.K8s.Node, d.node, node.UID)
	}
	if life := time.Duration(cl.Exp-cl.Iat) * time.Second; life < 24*time.Hour-time.Minute || life > 24*time.Hour+time.Minute {
		t.Errorf("the token lasts %v, want 24h ± 1m", life)
	}
	if age := time.Since(time.Unix(cl.Iat, 0)); age > 5*time.Minute || age < -time.Minute {
		t.Errorf("the token was issued %v ago, want a new one", age.Round(time.Second))
	}
	kc := filepath.Join(n.adir, "node-kubeconfig")
	if err := os.WriteFile(kc, []byte(n.c.must("cat", "/etc/gnsh/kubeconfig").stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(d.cp.BinDir, "kubectl"), "--kubeconfig", kc, "auth", "whoami",
		"-o", `jsonpath={.status.userInfo.extra.authentication\.kubernetes\.io/node-name[0]}`).CombinedOutput()
	if err != nil || string(out) != d.node {
		t.Errorf("kubectl auth whoami with the node's token: node-name %q (%v), want %s", out, err, d.node)
	}
}

// mintToken asks the API server (as the admin) for a token of
// kube-system/gnsh bound to Node node, lasting duration.
func (n *ansibleNode) mintToken(node, duration string) string {
	out, err := exec.Command(filepath.Join(n.d.cp.BinDir, "kubectl"), "--kubeconfig", n.d.cp.AdminKubeconfig, "--namespace", "kube-system",
		"create", "token", "gnsh", "--bound-object-kind", "Node", "--bound-object-name", node, "--duration", duration).Output()
	if err != nil {
		n.t.Fatalf("kubectl create token gnsh bound to Node %s for %s: %v", node, duration, err)
	}
	return strings.TrimSpace(string(out))
}

// installToken puts token in the node's /etc/gnsh/kubeconfig in place of
// the one there (same server and CA), written as client-go writes a
// kubeconfig (the node agent's renewal does), root's, 0600.
func (n *ansibleNode) installToken(token string) {
	t := n.t
	file, _, _ := n.nodeToken()
	cfg, err := clientcmd.Load([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Token = token
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(n.c.dir, "rig", "kubeconfig.new")
	if err := os.WriteFile(stage, b, 0o600); err != nil {
		t.Fatal(err)
	}
	n.c.must("sh", "-ec", "install -m 0600 -o root -g root /rig/kubeconfig.new /etc/gnsh/kubeconfig; rm -f /rig/kubeconfig.new")
}

// tokenLifecycle: what a later run does with the node's token.
func (n *ansibleNode) tokenLifecycle(dedicated map[string]any) {
	t, d := n.t, n.d

	// Renewed by the node agent (a new day-long token for the same Node,
	// the file rewritten by client-go): a run keeps it, byte for byte.
	n.installToken(n.mintToken(d.node, "24h"))
	before, _, _ := n.nodeToken()
	n.expectUnchanged(n.play("token-agent-renewed", "site.yml", dedicated, false))
	if after, _, _ := n.nodeToken(); after != before {
		t.Errorf("a run rewrote the token the node agent renewed:\n%s\nwas:\n%s", after, before)
	}

	// About to expire (10 minutes left, less than
	// gnsh_token_renew_before_hours): replaced.
	n.installToken(n.mintToken(d.node, "10m"))
	r := n.play("token-expiring", "site.yml", dedicated, false)
	if r.changed == 0 || !strings.Contains(r.out, "its token expires in less than 6h") {
		t.Errorf("a token that expires in 10 minutes: changed=%d, and the play does not say it expires in less than 6h", r.changed)
	}
	n.expectFreshToken()

	// Bound to another Node: check mode says what it would do and changes
	// nothing; the run replaces it.
	n.installToken(n.mintToken(d.peer, "24h"))
	before, _, _ = n.nodeToken()
	r = n.play("token-foreign-check", "site.yml", dedicated, true)
	want := fmt.Sprintf("/etc/gnsh/kubeconfig would get a new token of 24h, bound to Node %s: its token is bound to Node %s, not %s", d.node, d.peer, d.node)
	if r.changed == 0 || !strings.Contains(r.out, want) {
		t.Errorf("check mode with a token bound to another Node: changed=%d, want a change and %q", r.changed, want)
	}
	if after, _, _ := n.nodeToken(); after != before {
		t.Errorf("check mode changed /etc/gnsh/kubeconfig")
	}
	r = n.play("token-foreign", "site.yml", dedicated, false)
	if r.changed == 0 || !strings.Contains(r.out, fmt.Sprintf("has a new token of 24h, bound to Node %s: its token is bound to Node %s", d.node, d.peer)) {
		t.Errorf("a token bound to another Node: changed=%d, and the play does not say it replaced it", r.changed)
	}
	n.expectFreshToken()

	// Expired an hour ago (its claims say so; the role reads them, the API
	// server would refuse the token): replaced.
	_, tok, cl := n.nodeToken()
	parts := strings.Split(tok, ".")
	var raw map[string]any
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	raw["exp"], raw["iat"], raw["nbf"] = time.Now().Add(-time.Hour).Unix(), cl.Iat-2*86400, cl.Iat-2*86400
	b, _ = json.Marshal(raw)
	n.installToken(parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2])
	r = n.play("token-expired", "site.yml", dedicated, false)
	if r.changed == 0 || !strings.Contains(r.out, "its token has expired") {
		t.Errorf("an expired token: changed=%d, and the play does not say it has expired", r.changed)
	}
	n.expectFreshToken()

	// No node in gnsh_config and no token: the Node is the kubelet's (the
	// CN of its client certificate), not the host name's.
	conf := map[string]any{}
	for k, v := range dedicated["gnsh_config"].(map[string]any) {
		if k != "node" {
			conf[k] = v
		}
	}
	n.c.must("rm", "-f", "/etc/gnsh/kubeconfig")
	n.play("token-kubelet-node", "site.yml", withVars(dedicated, map[string]any{"gnsh_config": conf}), false)
	n.expectFreshToken()

	// Without an admin kubeconfig (the default gnsh_credentials: auto) the
	// node's token stays, and so does the gate.
	keep := withVars(dedicated, map[string]any{"gnsh_config": conf})
	delete(keep, "gnsh_kubectl")
	delete(keep, "gnsh_kubectl_kubeconfig")
	before, _, _ = n.nodeToken()
	r = n.play("token-kept", "site.yml", keep, false)
	n.expectUnchanged(r)
	if after, _, _ := n.nodeToken(); after != before {
		t.Errorf("a run without gnsh_kubectl_kubeconfig changed the node's /etc/gnsh/kubeconfig")
	}
	if strings.Contains(r.out, "reboot-slot gate is off") {
		t.Errorf("the play says the gate is off on a node that keeps its token")
	}

	// More than 48h, and the days of old: refused before anything is done.
	r = n.playFails("token-49h", "site.yml", withVars(dedicated, map[string]any{"gnsh_token_duration": "49h"}))
	if !strings.Contains(r.out, "gnsh: gnsh_token_duration 49h is not between 10m and 48h: the node agent renews the token for as long again") {
		t.Errorf("the play does not refuse gnsh_token_duration 49h with its reason")
	}
	r = n.playFails("token-days", "site.yml", withVars(dedicated, map[string]any{"gnsh_token_renew_before_days": 30}))
	if !strings.Contains(r.out, `"gnsh: gnsh_token_renew_before_days is replaced by gnsh_token_renew_before_hours (default 6): tokens now last gnsh_token_duration (24h) and the node agent renews them; remove it`) {
		t.Errorf("the play does not name gnsh_token_renew_before_hours for gnsh_token_renew_before_days")
	}

	// A node whose gnsh_config names a Node the cluster does not have: the
	// play stops before its token or config is touched.
	before, _, _ = n.nodeToken()
	conf = map[string]any{}
	for k, v := range dedicated["gnsh_config"].(map[string]any) {
		conf[k] = v
	}
	conf["node"] = "no-such-node"
	r = n.playFails("token-no-node", "site.yml", withVars(dedicated, map[string]any{"gnsh_config": conf}))
	if !strings.Contains(r.out, "gnsh: the cluster has no Node no-such-node to bind this node's token to (") ||
		!strings.Contains(r.out, "set node in gnsh_config for this host to its Node's name") {
		t.Errorf("the play does not say that the cluster has no Node no-such-node")
	}
	if after, _, _ := n.nodeToken(); after != before {
		t.Errorf("a play that stopped for a Node the cluster does not have changed /etc/gnsh/kubeconfig")
	}

	n.play("token-restored", "site.yml", dedicated, false)
	n.expectDedicatedKubeconfig()
}
