package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/slots"
)

// The run of a queued reboot ends by itself as withdrawn (it found its
// place gone and the request removed by shutdown -c: slots.Request.Stands)
// before the runner's next look at the file: the runner says withdrawn,
// and neither calls it a refusal nor asks again.
func TestQueueRunnerRunEndsWithdrawnBeforeItsLook(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	f := &queueFake{q: &drainer.QueuedReboot{BootID: "b", Action: "reboot", Since: now, Until: now.Add(time.Hour)}}
	f.result = func(ctx context.Context, n int) error {
		f.mu.Lock()
		f.q = nil // shutdown -c, as the run read the Lease
		f.mu.Unlock()
		return &drainer.Refusal{Msg: "gnsh: the queued reboot was not handed off: withdrawn (shutdown -c, or a new request in its place)", Err: slots.ErrWithdrawn}
	}
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.runner(clk, &out).Run(ctx) }()
	until(t, clk, 10, func() bool { return strings.Contains(out.String(), "withdrawn") })
	clk.Step(5 * time.Minute)
	time.Sleep(10 * time.Millisecond)
	if s := out.String(); !strings.Contains(s, "gnsh: agent: the queued reboot was withdrawn\n") || strings.Contains(s, "not handed off") || strings.Contains(s, "asking again") {
		t.Errorf("agent's lines:\n%s", s)
	}
	if runs, _, _, saved := f.state(); len(runs) != 1 || saved != 0 {
		t.Errorf("runs %v, saved %d", runs, saved)
	}
}
