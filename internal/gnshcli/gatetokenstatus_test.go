package gnshcli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/gatetoken"
	"github.com/gnsh/gnsh/internal/nodefacts"
)

// gnsh status has a row for the gate's token: its node, its expiry, the
// agent's last renewal or why it fails.
func TestStatusGateTokenRow(t *testing.T) {
	now := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	r := &nodefacts.Report{GateToken: &nodefacts.GateTokenFacts{Path: "/etc/gnsh/kubeconfig", Subject: gatetoken.Username, Node: "n1",
		IssuedAt: now.Add(-time.Hour), Expiry: now.Add(23 * time.Hour), Agent: true, Renewed: now.Add(-time.Hour), At: now}}
	var b bytes.Buffer
	WriteStatus(&b, r)
	want := "gate token          node n1, valid until 2026-11-29 01:00 UTC (in 23h); renewed by the agent at 2026-11-28 01:00 UTC\n"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("status:\n%s\nlacks\n%s", b.String(), want)
	}
	b.Reset()
	WriteStatus(&b, &nodefacts.Report{})
	if strings.Contains(b.String(), "gate token") {
		t.Fatalf("a row without a token:\n%s", b.String())
	}
}
