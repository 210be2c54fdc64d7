package agent

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drainer"
)

// runOrphan runs an OrphanWatcher over the note n, whose Undo answers
// undo, until it has asked Undo once; it returns the journal's and the
// status's lines.
func runOrphan(t *testing.T, n drainer.CordonNote, undo func() (bool, error)) (string, []string) {
	t.Helper()
	out := &syncBuffer{}
	var mu sync.Mutex
	var status []string
	asked := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &OrphanWatcher{
		Note: func() (drainer.CordonNote, error) { return n, nil },
		Gone: func(drainer.CordonNote) bool { return true },
		Undo: func(context.Context, drainer.CordonNote) (bool, error) {
			defer once.Do(func() { close(asked) })
			return undo()
		},
		Out: out,
		Status: func(s string) {
			mu.Lock()
			defer mu.Unlock()
			status = append(status, s)
		},
		Clock: clocktesting.NewFakeClock(s0),
	}
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	<-asked
	// Its line follows the Undo's answer: wait for it (at most 5 s).
	for end := time.Now().Add(5 * time.Second); out.String() == "" && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return out.String(), status
}

func orphanNote(pid int) drainer.CordonNote {
	return drainer.CordonNote{PID: pid, Start: 1, Node: "node1",
		Own: drain.Ownership{Action: "reboot", User: "root", Time: s0, BootID: "boot-1"}}
}

// The agent's own drain (ahead of a schedule) made the cordon: while its
// shutdown is pending the watcher's line does not call the agent gone.
func TestOrphanOwnCordonPending(t *testing.T) {
	out, _ := runOrphan(t, orphanNote(os.Getpid()), func() (bool, error) { return false, drainer.ErrShutdownPending })
	if strings.Contains(out, "gone") || !strings.Contains(out, "gnsh: agent: gnsh's cordon of node1 for the reboot requested by root stays, made by this agent's drain (pid ") {
		t.Errorf("%q", out)
	}
	// A wrapper's, killed: its gnsh is gone.
	out, _ = runOrphan(t, orphanNote(os.Getpid()+100000), func() (bool, error) { return false, drainer.ErrShutdownPending })
	if !strings.Contains(out, "stays, its gnsh (pid ") {
		t.Errorf("%q", out)
	}
}

// Undone, the agent's own drain's cordon is not said to be of a gnsh
// that is gone, in the journal or the status.
func TestOrphanOwnCordonUndone(t *testing.T) {
	out, status := runOrphan(t, orphanNote(os.Getpid()), func() (bool, error) { return true, nil })
	if strings.Contains(out, "gone") || !strings.Contains(out, "undone: no drain runs, no shutdown is pending or under way, and the node agent's drain that made it is over (pid ") ||
		len(status) != 1 || strings.Contains(status[0], "gone") {
		t.Errorf("%q %q", out, status)
	}
	out, _ = runOrphan(t, orphanNote(os.Getpid()), func() (bool, error) { return false, errors.New("etcd has no leader") })
	if !strings.Contains(out, "left by this agent's drain (pid ") {
		t.Errorf("%q", out)
	}
}
