package claims

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/gatetoken/claims/claimstest"
)

func TestParseClaims(t *testing.T) {
	iat := time.Unix(1_800_000_000, 0)
	c, err := ParseClaims(claimstest.Token("n1", iat, 24*time.Hour) + "\n")
	if err != nil {
		t.Fatal(err)
	}
	want := Claims{Subject: Username, Namespace: "kube-system", ServiceAccount: "gnsh", IssuedAt: iat, Expiry: iat.Add(24 * time.Hour), NodeName: "n1", NodeUID: "uid-n1"}
	if c != want {
		t.Fatalf("claims %+v, want %+v", c, want)
	}
	if !c.NodeBound() || !c.IsGnsh() || c.Life() != 24*time.Hour {
		t.Fatalf("NodeBound %v IsGnsh %v Life %v", c.NodeBound(), c.IsGnsh(), c.Life())
	}
	unbound, err := ParseClaims(claimstest.Token("", iat, time.Hour))
	if err != nil || unbound.NodeBound() {
		t.Fatalf("unbound: %+v %v", unbound, err)
	}
	pod, err := ParseClaims(claimstest.JWT(map[string]any{"iat": 1, "exp": 700, "kubernetes.io": map[string]any{"namespace": "a",
		"serviceaccount": map[string]string{"name": "b"}, "pod": map[string]string{"name": "p"}, "node": map[string]string{"name": "n1"}}}))
	if err != nil || pod.NodeBound() || pod.OtherBinding != "pod" {
		t.Fatalf("pod-bound: %+v %v", pod, err)
	}
	for _, bad := range []string{"", "abc", "a.b", "a.!!.c", "a." + base64.RawURLEncoding.EncodeToString([]byte("[1]")) + ".c",
		claimstest.JWT(map[string]any{"sub": "x"}), claimstest.JWT(map[string]any{"exp": "soon", "kubernetes.io": map[string]any{"serviceaccount": map[string]string{}}})} {
		if _, err := ParseClaims(bad); err == nil {
			t.Errorf("ParseClaims(%q) took it", bad)
		}
	}
}

func FuzzParseClaims(f *testing.F) {
	f.Add(claimstest.Token("n1", time.Unix(1_800_000_000, 0), time.Hour))
	f.Add("a.b.c")
	f.Add(claimstest.JWT(map[string]any{"iat": 1.5, "exp": -3, "kubernetes.io": map[string]any{"serviceaccount": nil}}))
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseClaims(s)
		if err != nil {
			return
		}
		if c.Life() < 0 {
			t.Fatalf("negative life %v", c.Life())
		}
		if c.NodeBound() && c.NodeName == "" {
			t.Fatal("bound to no node")
		}
	})
}
