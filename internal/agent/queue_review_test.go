package agent

// Review of issue 21 (queued reboots): scratch tests; a failure is a
// finding (see the review report).

import (
	"context"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/drainer"
)

// A window that does not open before the request's end: the runner never
// asks, and gives it up at Until saying "not admitted by … (slots.queueFor)";
// neither its line nor the Event's reason names the window that kept it.
func TestReviewGivenUpForTheWindowSaysSo(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	f := &queueFake{q: &drainer.QueuedReboot{BootID: "b", Action: "reboot", Since: now, Until: now.Add(time.Minute)}}
	f.result = func(ctx context.Context, n int) error { return nil }
	var out syncBuffer
	r := f.runner(clk, &out)
	r.Window = fakeWindow{open: now.Add(time.Hour), close: now.Add(2 * time.Hour)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	until(t, clk, 120, func() bool { _, _, g, _ := f.state(); return g != "" })
	runs, _, why, _ := f.state()
	t.Logf("given up: %q; runs %v\n%s", why, runs, out.String())
	if len(runs) != 0 {
		t.Fatalf("asked outside the window: %v", runs)
	}
	if !strings.Contains(why, "window") {
		t.Errorf("the give-up reason %q does not say the window never opened before its end", why)
	}
}
