package drainer

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A run is under way while it holds its run.PID.flock: not by its PID,
// which another PID namespace (or /proc) may show as another process, and
// not once it has exited, a zombie not yet reaped included.
func TestRunsPendingByTheRunLock(t *testing.T) {
	d := newDrainer(t, nil, "")
	const pid = 4 // as a wrapper in a PID namespace of its own sees itself
	start, err := procStart(pid)
	if err != nil {
		start = 1 // no such process here: the PID says nothing either way
	}
	data, _ := json.Marshal(RunNote{PID: pid, Start: start, Action: "reboot", User: "root"})
	if err := d.writeRunFile(runNotePrefix+strconv.Itoa(pid), data); err != nil {
		t.Fatal(err)
	}
	l, err := d.holdRunLock(pid)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.RunsPending(); len(got) != 1 {
		t.Fatalf("its lock held: %q", got)
	}
	l.Close() // the run's process ends (however: SIGKILL, a zombie)
	if got := d.RunsPending(); len(got) != 0 {
		t.Fatalf("its lock released: %q", got)
	}
}

// Without a lock file (an older gnsh's note), a killed wrapper not yet
// reaped (a zombie) has ended all the same.
func TestRunsPendingZombie(t *testing.T) {
	d := newDrainer(t, nil, "")
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	pid := cmd.Process.Pid
	start, err := procStart(pid)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(RunNote{PID: pid, Start: start, Action: "reboot", User: "root"})
	if err := d.writeRunFile(runNotePrefix+strconv.Itoa(pid), data); err != nil {
		t.Fatal(err)
	}
	if got := d.RunsPending(); len(got) != 1 {
		t.Fatalf("running: %q", got)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, _, _ := procStat(pid); st == "Z" {
			break
		}
		if time.Now().After(end) {
			t.Fatal("not a zombie")
		}
	}
	if got := d.RunsPending(); len(got) != 0 {
		t.Errorf("a zombie counts as under way: %q", got)
	}
	_ = cmd.Wait()
}
