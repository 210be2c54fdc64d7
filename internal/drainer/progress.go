package drainer

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/drain"
)

// progress shows a drain as it goes: on a terminal one status line
// rewritten in place (at most ten times a second); otherwise, for the
// journal, a plain line when something changes, at most every
// plainEvery, and at once when the set of blocked pods changes.
type progress struct {
	w     io.Writer
	tty   bool
	node  string
	clock clock.WithTicker

	mu        sync.Mutex
	last      time.Time
	lastLine  string
	lastBlock string
	drawn     bool // a live line is on screen
	plainGap  time.Duration
	have      bool         // status holds a drain status
	status    drain.Status // the latest, for ticks
	start     time.Time
}

const (
	ttyEvery   = 100 * time.Millisecond
	plainEvery = 5 * time.Second
	// plainQuiet is the longest a plain log stays silent during a drain,
	// so a journal shows a stuck drain as still alive.
	plainQuiet = 30 * time.Second
)

func newProgress(w io.Writer, tty bool, node string, clk clock.WithTicker) *progress {
	return &progress{w: w, tty: tty, node: node, clock: clk, plainGap: plainEvery}
}

// ticking redraws the status every second (the live line's clock runs
// while nothing else changes) until the returned stop is called; stop also
// ends the live line.
func (p *progress) ticking() (stop func()) {
	t := p.clock.NewTicker(time.Second)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-t.C():
				p.tick()
			case <-done:
				return
			}
		}
	}()
	return func() {
		t.Stop()
		close(done)
		<-finished
		p.done()
	}
}

// sayf prints an API server's warning as one of gnsh's lines.
func (p *progress) sayf(warning string) { p.printf("warning: API server: %s", warning) }

// statusLine is the one-line status: pods gone of total, evictions
// accepted, terminating, blocked (and by which PDB), elapsed.
func statusLine(node string, s drain.Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "draining %s: %d/%d pods gone, %d evicted, %d terminating", node, s.Gone, s.Total, s.Evicted, s.Terminating)
	if s.Blocked > 0 {
		fmt.Fprintf(&b, ", %d blocked", s.Blocked)
		if pdbs := blockers(s.BlockedPods); pdbs != "" {
			b.WriteString(" by " + pdbs)
		}
	}
	fmt.Fprintf(&b, " (%s)", s.Elapsed.Truncate(time.Second))
	return b.String()
}

// blockers names the PodDisruptionBudgets (or reasons) holding pods back.
func blockers(bs []drain.Blocked) string {
	set := map[string]bool{}
	for _, b := range bs {
		switch {
		case b.PDB != "":
			ns, _, _ := strings.Cut(b.Pod, "/")
			set["PDB "+ns+"/"+b.PDB] = true
		case b.Reason != "":
			set[b.Reason] = true
		}
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("%d more", len(out)-3))
	}
	return strings.Join(out, ", ")
}

// update is drain.Options.Progress.
func (p *progress) update(s drain.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if !p.have {
		p.start = now.Add(-s.Elapsed)
	}
	p.have, p.status = true, s
	p.render(s, now)
}

// tick redraws the latest status with the time elapsed now, so that the
// live line's clock runs while nothing else changes.
func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.have {
		return
	}
	// One reading of the clock for the elapsed time and the redraw's
	// throttle: read twice, a second that passed in between drew the old
	// elapsed time and throttled the redraw that had the new one.
	now := p.clock.Now()
	s := p.status
	s.Elapsed = now.Sub(p.start)
	p.render(s, now)
}

// render draws s as of now, throttled as the type's comment says.
func (p *progress) render(s drain.Status, now time.Time) {
	line := statusLine(p.node, s)
	if p.tty {
		if now.Sub(p.last) < ttyEvery && s.Gone < s.Total {
			return
		}
		p.last = now
		fmt.Fprintf(p.w, "\r\033[Kgnsh: %s", line)
		p.drawn = true
		return
	}
	block := blockers(s.BlockedPods)
	changed := block != p.lastBlock
	p.lastBlock = block
	quiet := now.Sub(p.last) >= plainQuiet
	if !changed && !quiet && (now.Sub(p.last) < p.plainGap || stripElapsed(line) == stripElapsed(p.lastLine)) {
		return
	}
	p.last, p.lastLine = now, line
	fmt.Fprintf(p.w, "gnsh: %s\n", line)
}

func stripElapsed(l string) string {
	if i := strings.LastIndex(l, " ("); i >= 0 {
		return l[:i]
	}
	return l
}

// printf prints a whole line, first ending a live status line.
func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
	fmt.Fprintf(p.w, "gnsh: "+format+"\n", args...)
}

// done ends the live line, if any.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
}

func (p *progress) endLine() {
	p.have = false
	if p.drawn {
		fmt.Fprint(p.w, "\n")
		p.drawn = false
	}
}

// live shows a line that replaces itself: on a terminal the live status
// line, otherwise a plain line (callers call it only when it changes).
func (p *progress) live(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[Kgnsh: %s", line)
		p.drawn = true
		return
	}
	fmt.Fprintf(p.w, "gnsh: %s\n", line)
}
