package drainer

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/drain"
)

// progress shows a drain as it goes: for a person at a terminal one
// status line rewritten in place (at most ten times a second); otherwise
// (the journal, a pipe, Ansible's captured terminal: internal/caller), a
// plain line when something changes, at most every plainEvery, and at once
// when the set of blocked pods changes.
type progress struct {
	w     io.Writer
	tty   bool
	node  string
	clock clock.WithTicker
	// width is the terminal's width in columns, 0 if unknown: a live line
	// is cut to it, so that it never wraps (a wrapped line is not
	// rewritten in place, but printed again below).
	width func() int

	mu        sync.Mutex
	last      time.Time
	lastLine  string
	lastBlock string
	drawn     bool // a live line is on screen
	plainGap  time.Duration
	have      bool         // status holds a drain status
	status    drain.Status // the latest, for ticks
	start     time.Time

	// lastLive is the last line live said as a plain line: the same
	// line (a waiting line asked again) is not said twice.
	lastLive string
}

const (
	ttyEvery   = 100 * time.Millisecond
	plainEvery = 5 * time.Second
	// plainQuiet is the longest a plain log stays silent during a drain,
	// so a journal shows a stuck drain as still alive.
	plainQuiet = 30 * time.Second
)

func newProgress(w io.Writer, tty bool, node string, clk clock.WithTicker) *progress {
	return &progress{w: w, tty: tty, node: node, clock: clk, plainGap: plainEvery, width: func() int { return termWidth(w) }}
}

// termWidth is the width of the terminal w writes to, 0 if it is none or
// the width cannot be read.
func termWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// oneLine makes text from outside gnsh safe to print as (part of) one
// line: every control character (C0, DEL, C1: an escape sequence could
// retitle the terminal or clear it), a line or paragraph separator, a
// bidirectional override, and each byte that is not UTF-8 becomes '?'.
// The Lease's record is written by any node's credentials.
func oneLine(s string) string {
	clean := true
	for _, c := range s {
		if c == utf8.RuneError || UnsafeRune(c) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, c := range s {
		if c == utf8.RuneError || UnsafeRune(c) {
			c = '?'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// safeLines is oneLine for each line of a text of several lines (a
// refusal): the line breaks stay.
func safeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = oneLine(l)
	}
	return strings.Join(lines, "\n")
}

// UnsafeRune reports whether c must not reach a terminal as it is: a
// control character (C0, DEL, C1), a line or paragraph separator, or a
// bidirectional mark, embedding, override or isolate, which reorder what
// is shown. (oneLine replaces them, gnsh slots escapes them.)
func UnsafeRune(c rune) bool {
	switch {
	case unicode.IsControl(c):
		return true
	case c == '\u061c', c == '\u200e', c == '\u200f', c == '\u2028', c == '\u2029',
		c >= '\u202a' && c <= '\u202e', c >= '\u2066' && c <= '\u2069':
		return true
	}
	return false
}

// fit cuts a live line to the terminal's width (less one column: a line
// that fills the last column wraps on some terminals), ending it with
// "…"; unknown, it is left whole.
func (p *progress) fit(line string) string {
	width := 0
	if p.width != nil {
		width = p.width() - 1
	}
	if width <= 0 || utf8.RuneCountInString(line) <= width {
		return line
	}
	return string([]rune(line)[:width-1]) + "…"
}

// liveLine is line as the live status line: "\r", clear to the end of
// the line, then "gnsh: " and the line, cut to the terminal's width.
func (p *progress) liveLine(line string) string {
	return "\r\033[K" + p.fit("gnsh: "+oneLine(line))
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
	fmt.Fprintf(&b, "draining %s: %d/%d pods gone, %d evicted", node, s.Gone, s.Total, s.Evicted)
	if n := stoppedNote(s); n != "" {
		fmt.Fprintf(&b, " (%s)", n)
	}
	fmt.Fprintf(&b, ", %d terminating", s.Terminating)
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
		fmt.Fprint(p.w, p.liveLine(line))
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
	fmt.Fprintf(p.w, "gnsh: %s\n", oneLine(line))
}

func stripElapsed(l string) string {
	if i := strings.LastIndex(l, " ("); i >= 0 {
		return l[:i]
	}
	return l
}

// printf prints a whole line, first ending a live status line. The line
// is made safe (oneLine): its arguments may come from the Lease.
func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
	fmt.Fprintf(p.w, "gnsh: %s\n", oneLine(fmt.Sprintf(format, args...)))
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

// live shows a line that replaces itself: on a person's terminal the live
// status line, otherwise a plain line, not said again while it stays the
// same.
func (p *progress) live(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, p.liveLine(line))
		p.drawn = true
		return
	}
	if line == p.lastLive {
		return
	}
	p.lastLive = line
	fmt.Fprintf(p.w, "gnsh: %s\n", oneLine(line))
}
