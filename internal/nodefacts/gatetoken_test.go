package nodefacts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/gatetoken"
	"github.com/gnsh/gnsh/internal/gatetoken/claims/claimstest"
)

func TestGateTokenFactsAndStatusLine(t *testing.T) {
	root := t.TempDir()
	now := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	s := &Sources{Root: root}
	if f := readGateToken(s, now); f != nil {
		t.Fatalf("no kubeconfig: %+v", f)
	}
	kc := gatetoken.New(filepath.Join(root, "etc/gnsh/kubeconfig"), "https://10.0.0.1:6443", []byte("CA"), claimstest.Token("n1", now.Add(-time.Hour), 24*time.Hour))
	if err := os.MkdirAll(filepath.Dir(kc.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := kc.Save(); err != nil {
		t.Fatal(err)
	}
	f := readGateToken(s, now)
	if f == nil || f.Node != "n1" || f.Agent {
		t.Fatalf("facts %+v", f)
	}
	if want := "node n1, valid until 2026-11-29 01:00 UTC (in 23h); issued 2026-11-28 01:00 UTC, not renewed by the agent yet"; f.Line() != want {
		t.Fatalf("line %q\nwant %q", f.Line(), want)
	}
	st := gatetoken.State{Renewed: now.Add(-time.Hour), Error: "the API server refuses the token: 401 Unauthorized", Since: now.Add(-10 * time.Minute)}
	data, _ := json.Marshal(st)
	if err := os.MkdirAll(filepath.Join(root, "run/gnsh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, GateTokenStatePath), data, 0o600); err != nil {
		t.Fatal(err)
	}
	f = readGateToken(s, now)
	if want := "node n1, valid until 2026-11-29 01:00 UTC (in 23h); renewal failing since 2026-11-28 01:50 UTC: the API server refuses the token: 401 Unauthorized"; f.Line() != want {
		t.Fatalf("line %q\nwant %q", f.Line(), want)
	}
}

func TestCheckGateToken(t *testing.T) {
	now := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	good := GateTokenFacts{Path: "/etc/gnsh/kubeconfig", Subject: gatetoken.Username, Node: "node1", IssuedAt: now.Add(-time.Hour),
		Expiry: now.Add(23 * time.Hour), Agent: true, Renewed: now.Add(-time.Hour), At: now}
	for _, c := range []struct {
		name   string
		change func(f *GateTokenFacts)
		want   Verdict
		says   string
	}{
		{"fresh", func(*GateTokenFacts) {}, OK, "node node1, valid until"},
		{"3h left", func(f *GateTokenFacts) { f.Expiry = now.Add(3 * time.Hour) }, Warn, "(in 3h)"},
		{"expired", func(f *GateTokenFacts) { f.Expiry = now.Add(-time.Minute) }, Fail, "expired"},
		{"another node's", func(f *GateTokenFacts) { f.Node = "node2" }, Fail, "node node2"},
		{"unbound", func(f *GateTokenFacts) { f.Node = "" }, Warn, "not bound to a Node"},
		{"renewal failing", func(f *GateTokenFacts) { f.RenewError, f.RenewErrorSince = "403 Forbidden: no", now }, Warn, "renewal failing since"},
		{"unreadable", func(f *GateTokenFacts) { f.Error = "not a ServiceAccount token" }, Fail, "error: not a ServiceAccount token"},
	} {
		r := healthy()
		f := good
		c.change(&f)
		r.GateToken = &f
		got := CheckGateToken(r)
		if got.Verdict != c.want || !strings.Contains(got.Message, c.says) || (c.want != OK) != (got.Fix != "") {
			t.Errorf("%s: %+v, want %s saying %q", c.name, got, c.want, c.says)
		}
	}
	if got := CheckGateToken(healthy()); got.Verdict != OK {
		t.Errorf("no token: %+v", got)
	}
}

// The gate's kubeconfig named by slots.kubeconfig is the one read (and
// the one the agent renews), not /etc/gnsh/kubeconfig.
func TestGateTokenFollowsSlotsKubeconfig(t *testing.T) {
	root := t.TempDir()
	now := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	cfgPath := filepath.Join(root, "etc/gnsh/config.yaml")
	if err := os.MkdirAll(filepath.Join(root, "etc/gnsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte("slots:\n  kubeconfig: /var/lib/gnsh/gate.kubeconfig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kc := gatetoken.New(filepath.Join(root, "var/lib/gnsh/gate.kubeconfig"), "https://10.0.0.1:6443", []byte("CA"), claimstest.Token("n2", now.Add(-time.Hour), 24*time.Hour))
	if err := os.MkdirAll(filepath.Dir(kc.Path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := kc.Save(); err != nil {
		t.Fatal(err)
	}
	f := readGateToken(&Sources{Root: root}, now)
	if f == nil || f.Node != "n2" || f.Path != "/var/lib/gnsh/gate.kubeconfig" {
		t.Fatalf("facts %+v, want node n2 from /var/lib/gnsh/gate.kubeconfig", f)
	}
}
