package controlplane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// do sends a request and returns the status code and body.
func do(t *testing.T, c *http.Client, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func rss(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func TestControlPlane(t *testing.T) {
	cp := Start(t)
	anon := cp.HTTPClient(t, "", "")

	code, body := do(t, anon, "GET", cp.Server+"/readyz", cp.AdminToken, nil)
	if code != 200 || string(body) != "ok" {
		t.Fatalf("/readyz as admin: %d %q", code, body)
	}
	code, body = do(t, anon, "GET", cp.Server+"/version", cp.AdminToken, nil)
	var v struct{ GitVersion string }
	if err := json.Unmarshal(body, &v); code != 200 || err != nil || !strings.HasPrefix(v.GitVersion, "v1.") {
		t.Fatalf("/version: %d %s", code, body)
	}
	t.Logf("kube-apiserver %s", v.GitVersion)

	// Client certificates: the admin's (system:masters) and a node's, whose
	// identity the apiserver must read from the certificate's CN and O.
	admin := cp.HTTPClient(t, cp.Dir+"/pki/admin.crt", cp.Dir+"/pki/admin.key")
	code, body = do(t, admin, "GET", cp.Server+"/readyz", "", nil)
	if code != 200 {
		t.Fatalf("/readyz with the admin certificate: %d %s", code, body)
	}
	for _, name := range []string{"node1", "worker-2"} {
		crt, key := cp.NodeCert(t, name)
		node := cp.HTTPClient(t, crt, key)
		code, body = do(t, node, "POST", cp.Server+"/apis/authentication.k8s.io/v1/selfsubjectreviews", "",
			map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
		var ssr struct {
			Status struct {
				UserInfo struct {
					Username string
					Groups   []string
				} `json:"userInfo"`
			}
		}
		if err := json.Unmarshal(body, &ssr); code != 201 || err != nil {
			t.Fatalf("SelfSubjectReview as %s: %d %s", name, code, body)
		}
		if u := ssr.Status.UserInfo; u.Username != "system:node:"+name || !contains(u.Groups, "system:nodes") {
			t.Fatalf("node cert %s authenticates as %+v", name, u)
		}
		// The Node authorizer: own Node readable (absent: 404), others not.
		if code, body = do(t, node, "GET", cp.Server+"/api/v1/nodes/"+name, "", nil); code != 404 {
			t.Errorf("GET own node as %s: %d %s", name, code, body)
		}
		if code, body = do(t, node, "GET", cp.Server+"/api/v1/nodes/other", "", nil); code != 403 {
			t.Errorf("GET other node as %s: %d %s", name, code, body)
		}
	}
	for _, f := range []string{cp.AdminKubeconfig, cp.NodeKubeconfig(t, "node1"), cp.NodeKubeconfigData(t, "node1")} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
	if out := cp.Kubectl(t, nil, "--kubeconfig", cp.NodeKubeconfig(t, "node1"), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); out != "system:node:node1" {
		t.Errorf("kubectl auth whoami with node-node1.kubeconfig: %q", out)
	}

	// The disruption controller processes a PDB (status.observedGeneration).
	pdb := map[string]any{
		"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
		"metadata": map[string]any{"name": "pdb"},
		"spec":     map[string]any{"maxUnavailable": 0, "selector": map[string]any{"matchLabels": map[string]string{"app": "x"}}},
	}
	if code, body = do(t, anon, "POST", cp.Server+"/apis/policy/v1/namespaces/default/poddisruptionbudgets", cp.AdminToken, pdb); code != 201 {
		t.Fatalf("create PDB: %d %s", code, body)
	}
	t0 := time.Now()
	for {
		_, body = do(t, anon, "GET", cp.Server+"/apis/policy/v1/namespaces/default/poddisruptionbudgets/pdb", cp.AdminToken, nil)
		var s struct {
			Status struct{ ObservedGeneration int }
		}
		if json.Unmarshal(body, &s) == nil && s.Status.ObservedGeneration == 1 {
			t.Logf("PDB processed by the disruption controller after %v", time.Since(t0).Round(time.Millisecond))
			break
		}
		if time.Since(t0) > 30*time.Second {
			t.Fatalf("PDB status not written within 30s: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for n, pid := range cp.PIDs() {
		t.Logf("RSS %s: %s", n, rss(pid))
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestKwok: a Node annotated for kwok becomes Ready.
func TestKwok(t *testing.T) {
	cp := StartWith(t, Options{Kwok: true, Nodes: []string{}})
	c := cp.HTTPClient(t, "", "")
	node := map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": "fake1", "annotations": map[string]string{"kwok.x-k8s.io/node": "fake"}},
	}
	if code, body := do(t, c, "POST", cp.Server+"/api/v1/nodes", cp.AdminToken, node); code != 201 {
		t.Fatalf("create node: %d %s", code, body)
	}
	t0 := time.Now()
	for {
		_, body := do(t, c, "GET", cp.Server+"/api/v1/nodes/fake1", cp.AdminToken, nil)
		var n struct {
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		_ = json.Unmarshal(body, &n)
		for _, cond := range n.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == "True" {
				t.Logf("kwok made the node Ready after %v", time.Since(t0).Round(time.Millisecond))
				return
			}
		}
		if time.Since(t0) > 30*time.Second {
			t.Fatalf("node not Ready within 30s: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestParallel: independent control planes side by side.
func TestParallel(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			cp := Start(t)
			code, body := do(t, cp.HTTPClient(t, "", ""), "GET", cp.Server+"/readyz", cp.AdminToken, nil)
			if code != 200 {
				t.Fatalf("/readyz: %d %s", code, body)
			}
		})
	}
}

// TestAudit: with Options.Audit the audit log names each request's user.
func TestAudit(t *testing.T) {
	cp := StartWith(t, Options{Audit: true})
	if cp.AuditLog == "" {
		t.Fatal("AuditLog not set")
	}
	crt, key := cp.NodeCert(t, "node1")
	c := cp.HTTPClient(t, crt, key)
	if code, body := do(t, c, "GET", cp.Server+"/api/v1/nodes/node1", "", nil); code != 404 {
		t.Fatalf("get own node: %d %s", code, body)
	}
	b, err := os.ReadFile(cp.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		var ev struct {
			Stage, Verb, RequestURI string
			User                    struct{ Username string }
		}
		if json.Unmarshal([]byte(l), &ev) == nil && ev.User.Username == "system:node:node1" {
			if ev.Stage != "ResponseComplete" || ev.Verb != "get" || ev.RequestURI != "/api/v1/nodes/node1" {
				t.Errorf("unexpected event %s", l)
			}
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d audit events for system:node:node1, want 1", n)
	}
	if cp2 := Start(t); cp2.AuditLog != "" {
		t.Fatalf("AuditLog %q without Options.Audit", cp2.AuditLog)
	}
}
