package gnshcli

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/nodefacts"
	"github.com/gnsh/gnsh/internal/slots"
)

// gnsh slots shows each entry's time as when its request was made
// (a holder admitted after waiting keeps the time it asked), labelled so.
func TestSlotsListSaysAsked(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gnsh", Name: "reboot-slots", ResourceVersion: "7"}}
	asked := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	slots.Record{Version: slots.Schema, Next: 2, Holders: []slots.Entry{{Node: "node-2", Phase: slots.Admitted, Action: "reboot",
		Who: "bob", Since: asked, Renew: 10}}}.Encode(l)
	_, kc := slotsServer(t, l)
	e := slotsEnv(t, map[string]string{"HOME": t.TempDir()})
	if code := Run(context.Background(), []string{"gnsh", "slots", "--kubeconfig", kc}, e.env); code != 0 {
		t.Fatalf("exit %d: %s", code, e.errb)
	}
	if got := e.out.String(); !strings.Contains(got, "asked 2026-11-21T09:00:00Z") || strings.Contains(got, "since") {
		t.Fatalf("listing:\n%s", got)
	}
}

// gnsh status does not call a record that cannot be read "unavailable"
// (which an optional gate goes past): it refuses every reboot.
func TestStatusSlotsLineUnreadableRecord(t *testing.T) {
	for _, cause := range []string{nodefacts.CauseRecord, nodefacts.CauseNewer} {
		got := slotsLine(nodefacts.SlotsFacts{Gate: "optional", Lease: "gnsh/reboot-slots", MaxUnavailable: 1, Cause: cause, Error: "the record"})
		if want := "gate optional, gnsh/reboot-slots, limit 1; every reboot is refused: the record"; got != want {
			t.Errorf("%s: %q, want %q", cause, got, want)
		}
	}
}
