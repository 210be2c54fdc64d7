package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/logind"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

// kubeletLock takes a delay lock on shutdown as kubelet does; closing the
// file releases it.
func (f *guardFixture) kubeletLock(t *testing.T) *os.File {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := logind.Dial(ctx, f.bus.Address(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lock, err := c.Logind().Inhibit(ctx, "shutdown", logind.KubeletWho, logind.KubeletWhy, "delay")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	return lock
}

// guardReleased: the guard let its lock go (it drained, or did not).
func guardReleased(s logindtest.State) bool {
	return slices.ContainsFunc(s.Released, func(i logindtest.Inhibitor) bool { return i.Who == InhibitWho })
}

func TestGuardWarnsThatKubeletStopsPodsToo(t *testing.T) {
	// systemctl reboot with kubelet's graceful node shutdown on: logind
	// tells kubelet and the agent at once, so the journal says that the
	// pods' PodDisruptionBudgets are not kept on this path.
	f := newGuardFixture(t, 252, 30*time.Second)
	kubelet := f.kubeletLock(t)
	f.start(t)
	f.reboot(t)
	f.wait(t, "the guard's release", guardReleased)
	kubelet.Close() // kubelet has stopped its pods
	f.started(t)
	if got := f.cs.Evictions(); got != 2 {
		t.Errorf("evictions = %d, want 2", got)
	}
	want := "gnsh: agent: " + KubeletTooLine + "\n"
	f.eventually(t, "the warning", func() bool { return strings.Contains(f.out.String(), want) })
	log := f.out.String()
	if strings.Count(log, want) != 1 {
		t.Fatalf("want the warning once; log:\n%s", log)
	}
	if i, j := strings.Index(log, "draining within"), strings.Index(log, want); i < 0 || j < i {
		t.Errorf("the warning is not after the drain's first line; log:\n%s", log)
	}
}

func TestGuardNoKubeletWarning(t *testing.T) {
	t.Run("no kubelet lock", func(t *testing.T) {
		// kubelet's graceful node shutdown is off: only the agent acts.
		f := newGuardFixture(t, 252, 30*time.Second)
		f.start(t)
		f.reboot(t)
		f.started(t)
		if f.cs.Evictions() != 2 || strings.Contains(f.out.String(), "warning") {
			t.Errorf("%d evictions; log:\n%s", f.cs.Evictions(), f.out)
		}
	})
	for _, noDrain := range []bool{false, true} {
		// Through gnsh's commands (their marker): drained first, or not
		// drained on purpose (--no-drain); nothing to warn about.
		name := "through the commands"
		if noDrain {
			name += " with --no-drain"
		}
		t.Run(name, func(t *testing.T) {
			f := newGuardFixture(t, 252, 30*time.Second)
			kubelet := f.kubeletLock(t)
			if err := os.MkdirAll(f.d.LockDir, 0o755); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(drainer.Marker{BootID: thisBoot, Action: "reboot", Time: time.Now().UTC(), NoDrain: noDrain})
			if err := os.WriteFile(filepath.Join(f.d.LockDir, drainer.MarkerName), b, 0o644); err != nil {
				t.Fatal(err)
			}
			f.start(t)
			f.reboot(t)
			f.wait(t, "the guard's release", guardReleased)
			kubelet.Close()
			f.started(t)
			if f.cs.Evictions() != 0 || strings.Contains(f.out.String(), "warning") {
				t.Errorf("%d evictions; log:\n%s", f.cs.Evictions(), f.out)
			}
		})
	}
}

// With drain: false the agent evicts nothing on a shutdown that bypassed
// the commands, so its warning must not say that gnsh evicts (a review of
// issue 23 found "while gnsh evicts them" printed there); kubelet's part
// is still true, and said.
func TestKubeletWarningWithDrainOff(t *testing.T) {
	f := newGuardFixture(t, 252, 30*time.Second)
	if err := os.WriteFile(f.d.ConfigPath, []byte("drain: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kubelet := f.kubeletLock(t)
	defer kubelet.Close()
	f.start(t)
	f.reboot(t)
	f.wait(t, "the guard's release", guardReleased)
	f.eventually(t, "the drain's end", func() bool { return strings.Contains(f.out.String(), "drain for the shutdown ended") })
	f.eventually(t, "the warning", func() bool { return strings.Contains(f.out.String(), KubeletTooLine) })
	if n := f.cs.Evictions(); n != 0 {
		t.Fatalf("%d evictions with drain: false", n)
	}
	if log := f.out.String(); strings.Contains(log, "evicts") {
		t.Errorf("the warning says gnsh evicts with drain: false; log:\n%s", log)
	}
}
