package nodefacts

// The agent's word that this node's clock is off the API server's
// (gatetoken.State.ClockSkew) reaches gnsh status's gate-token line and
// makes doctor warn, with the fix: time sync. Issue 22.

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

func TestGateTokenClockSkew(t *testing.T) {
	root := t.TempDir()
	now := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	s := &Sources{Root: root}
	kc := gatetoken.New(filepath.Join(root, "etc/gnsh/kubeconfig"), "https://10.0.0.1:6443", []byte("CA"), claimstest.Token("node1", now.Add(-time.Hour), 24*time.Hour))
	if err := os.MkdirAll(filepath.Dir(kc.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := kc.Save(); err != nil {
		t.Fatal(err)
	}
	skew := "this node's clock is 2h ahead of the API server's"
	data, _ := json.Marshal(gatetoken.State{Renewed: now.Add(-time.Hour), ClockSkew: skew})
	if err := os.MkdirAll(filepath.Join(root, "run/gnsh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, GateTokenStatePath), data, 0o600); err != nil {
		t.Fatal(err)
	}
	f := readGateToken(s, now)
	if f == nil || f.ClockSkew != skew {
		t.Fatalf("facts %+v", f)
	}
	want := "node node1, valid until 2026-11-29 01:00 UTC (in 23h); renewed by the agent at 2026-11-28 01:00 UTC; " + skew +
		": sync this node's clock (timedatectl set-ntp true, chrony or systemd-timesyncd)"
	if f.Line() != want {
		t.Fatalf("line %q\nwant %q", f.Line(), want)
	}
	r := healthy()
	r.GateToken = f
	if c := CheckGateToken(r); c.Verdict != Warn || !strings.Contains(c.Message, skew) || !strings.Contains(c.Fix, "sync this node's clock") {
		t.Errorf("doctor: %+v", c)
	}
}
