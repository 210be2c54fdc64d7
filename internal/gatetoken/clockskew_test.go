package gatetoken

// The renewal is planned on the node's own clock from when the token was
// received, never from the API server's iat against the node's clock: a
// node whose clock is hours ahead of the API server's renews once an
// hour, not every second, and says the skew once in the journal and in
// its state (gnsh status). Issue 22.

import (
	"context"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/gatetoken/claims/claimstest"
)

func TestClockAheadRenewsOnItsOwnClock(t *testing.T) {
	for _, ahead := range []time.Duration{2 * time.Hour, -2 * time.Hour} {
		server := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
		srv := clocktesting.NewFakeClock(server)
		s := newTokenServer(srv)
		p := writeKubeconfig(t, t.TempDir(), claimstest.Token("n1", server.Add(-2*time.Minute), 24*time.Hour))
		r, said, st := newRenewer(t, p, s)
		node := clocktesting.NewFakeClock(server.Add(ahead))
		r.Clock = node
		ctx := context.Background()
		start := node.Now()
		// Three hours of the agent's life, as its Run loop goes.
		for node.Now().Sub(start) < 3*time.Hour {
			w := r.Once(ctx)
			if w <= 0 {
				t.Fatalf("wait %v", w)
			}
			node.Step(w)
			srv.Step(w)
		}
		// At start, then about hourly (less the jitter): 4 at most.
		if n := len(s.asked); n < 3 || n > 4 {
			t.Errorf("node clock %v: %d TokenRequests in 3h, want 3 or 4 (at start, then hourly)", ahead, n)
		}
		way := "ahead of"
		if ahead < 0 {
			way = "behind"
		}
		want := "this node's clock is 2h " + way + " the API server's"
		var skewLines int
		for _, l := range *said {
			if strings.Contains(l, "this node's clock is ") && strings.Contains(l, " "+way+" the API server's") {
				skewLines++
				if !strings.HasPrefix(l, "gnsh: ") || !strings.Contains(l, "sync this node's clock") || strings.Contains(l, "\n") {
					t.Errorf("skew line %q", l)
				}
			}
		}
		if skewLines != 1 {
			t.Errorf("node clock %v: the skew said %d times, want once: %q", ahead, skewLines, *said)
		}
		if st.ClockSkew != want || st.Error != "" {
			t.Errorf("node clock %v: state skew %q error %q", ahead, st.ClockSkew, st.Error)
		}
	}
}

// A token whose renewal is due at once (a tiny Every) is still renewed
// no more often than once a Poll.
func TestRenewedAtMostOncePerPoll(t *testing.T) {
	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	s := newTokenServer(clk)
	p := writeKubeconfig(t, t.TempDir(), claimstest.Token("n1", now, 24*time.Hour))
	r, _, st := newRenewer(t, p, s)
	r.Every = time.Second
	ctx := context.Background()
	for clk.Now().Sub(now) < 10*time.Minute {
		w := r.Once(ctx)
		clk.Step(w)
	}
	if n := len(s.asked); n > 11 {
		t.Errorf("%d TokenRequests in 10 minutes, want one a minute at most", n)
	}
	if st.ClockSkew != "" {
		t.Errorf("skew %q with synced clocks", st.ClockSkew)
	}
}
