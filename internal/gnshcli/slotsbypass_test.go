package gnshcli

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/slots"
)

// gnsh slots says which holder the node agent wrote for a shutdown that
// bypassed gnsh (issue 20, hole 7).
func TestSlotsShowsBypass(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gnsh", Name: "reboot-slots", ResourceVersion: "7"}}
	since := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	slots.Record{Version: slots.Schema, Next: 1, Holders: []slots.Entry{{Node: "node-3", Phase: slots.Draining, Action: "reboot",
		Since: since, Renew: 10, Bypass: true}}}.Encode(l)
	_, kc := slotsServer(t, l)
	e := slotsEnv(t, map[string]string{"HOME": t.TempDir()})
	if code := Run(context.Background(), []string{"gnsh", "slots", "--kubeconfig", kc}, e.env); code != 0 {
		t.Fatalf("exit %d: %s", code, e.errb)
	}
	if want := "reboot (bypassed gnsh: counts, never refused)"; !strings.Contains(e.out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, e.out)
	}
}
