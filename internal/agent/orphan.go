package agent

// The orphan watcher: the agent's undo of gnsh's cordon for a shutdown
// that nothing relies on any more. A wrapper killed mid-drain (SIGKILL, the
// OOM killer) runs no undo, and a shutdown cancelled behind gnsh's back
// (logind's CancelScheduledShutdown, a delay inhibitor's timeout that made
// logind give up) leaves the cordon its drain made; nothing else lifts it
// before the next boot, however long that is. Each drain for a shutdown
// notes, before its cordon, the record it makes and which process makes it
// (drainer.CordonNote). Every Poll the watcher looks at that note (a stat:
// no API request, no bus traffic while there is none); when the process is
// gone it undoes the record (drainer.UndoOrphanCordon) once, under the
// drain lock (no drain runs), logind and systemd say no shutdown is
// pending or under way, and the record standing on the Node is the
// note's. While a shutdown is pending it looks again every Poll; the undo
// is then at most Poll after the shutdown's cancel.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/drainer"
)

// DefaultOrphanPoll is how often the watcher looks at the cordon note.
const DefaultOrphanPoll = 5 * time.Second

// OrphanWatcher undoes gnsh's cordons that nothing relies on. Note, Gone
// and Undo are required.
type OrphanWatcher struct {
	// Note reads the cordon note (drainer.ReadCordonNote); an error
	// (none there) means nothing to look at.
	Note func() (drainer.CordonNote, error)
	// Gone reports whether the note's process has ended
	// (drainer.HolderGone).
	Gone func(drainer.CordonNote) bool
	// Undo undoes the note's cordon if nothing relies on it
	// (drainer.UndoOrphanCordon): a *drainer.HeldError while a drain runs,
	// drainer.ErrShutdownPending while a shutdown is pending or under way.
	Undo   func(ctx context.Context, n drainer.CordonNote) (bool, error)
	Out    io.Writer
	Status func(string)
	Clock  clock.Clock // clock.RealClock if nil
	// Poll is DefaultOrphanPoll if zero; after another failure it waits
	// DefaultMaxBackoff.
	Poll time.Duration
}

func (w *OrphanWatcher) say(format string, args ...any) {
	if w.Out != nil {
		fmt.Fprintf(w.Out, "gnsh: agent: "+format+"\n", args...)
	}
}

// Run watches until ctx ends; it returns ctx's error.
func (w *OrphanWatcher) Run(ctx context.Context) error {
	clk := w.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	poll := orDefault(w.Poll, DefaultOrphanPoll)
	var told string // the last line about the note, not said again
	for {
		wait := poll
		if n, err := w.Note(); err == nil && w.Gone(n) {
			undone, err := w.Undo(ctx, n)
			// The agent's own drain's cordon (ahead of a schedule, for a
			// shutdown that bypassed gnsh) is looked at too, but its
			// gnsh, the agent, is not gone.
			own := drainer.OwnNote(n)
			maker := fmt.Sprintf("its gnsh (pid %d) gone", n.PID)
			if own {
				maker = fmt.Sprintf("made by this agent's drain (pid %d)", n.PID)
			}
			line := ""
			switch {
			case ctx.Err() != nil:
			case drainer.IsLockHeld(err):
				// A drain runs: it answers for the cordon now.
			case errors.Is(err, drainer.ErrShutdownPending):
				line = fmt.Sprintf("gnsh's cordon of %s for the %s requested by %s stays, %s: %v",
					n.Node, n.Own.Request(), n.Own.Requester(), maker, err)
			case err != nil:
				by := "gnsh"
				if own {
					by = "this agent's drain"
				}
				line = fmt.Sprintf("cannot check gnsh's cordon of %s left by %s (pid %d): %v; trying again every %s",
					n.Node, by, n.PID, err, DefaultMaxBackoff)
				wait = DefaultMaxBackoff
			case undone:
				w.say("gnsh's cordon of %s for the %s requested by %s at %s undone: %s (pid %d)",
					n.Node, n.Own.Request(), n.Own.Requester(), n.Own.Time.UTC().Format(time.RFC3339), drainer.OrphanReason(n), n.PID)
				if w.Status != nil {
					why := "its gnsh was gone and no shutdown pending"
					if own {
						why = "no shutdown pending for the agent's drain"
					}
					w.Status("uncordoned " + n.Node + ": " + why)
				}
			}
			if line != "" && line != told {
				w.say("%s", line)
			}
			told = line
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(wait):
		}
	}
}
