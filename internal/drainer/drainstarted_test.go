package drainer

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8stesting "k8s.io/client-go/testing"
)

// The agent's drain ahead of a schedule drains within what is left before
// it, a time to the nanosecond: its GnshDrainStarted Event gives the
// timeout as its journal line does, to the millisecond (25s, not
// 24.999760008s).
func TestDrainStartedTimeoutRounded(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	at := time.Now().Add(30 * time.Minute)
	if _, err := d.DrainForSchedule(context.Background(), "reboot", at, 24999760008*time.Nanosecond); err != nil {
		t.Fatalf("DrainForSchedule: %v\n%s", err, d.stderr)
	}
	var msgs []string
	for _, a := range f.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
			if ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ev.Reason == ReasonDrainStarted {
				msgs = append(msgs, ev.Message)
			}
		}
	}
	if len(msgs) != 1 || !strings.HasSuffix(msgs[0], " (timeout 25s)") {
		t.Errorf("GnshDrainStarted: %q", msgs)
	}
}
