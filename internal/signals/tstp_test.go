package signals

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 20: a wrapper stopped with Ctrl-Z (SIGTSTP) after it took its
// reboot slot kept its run lock, so the node agent renewed the slot for as
// long as it stayed stopped: every other node waited on a stopped
// terminal. In Drain and Hold modes SIGTSTP is now taken over (the runtime
// then does not stop the process), reported once, and changes nothing
// else: the drain goes on, nothing is interrupted. Back in no mode, its
// default action (stop) is the runtime's again.
func TestCtrlZDoesNotStopADrain(t *testing.T) {
	h, f := newFake()
	var asked []os.Signal
	h.notify = func(c chan<- os.Signal, sigs ...os.Signal) {
		f.mu.Lock()
		f.ch, f.active, asked = c, true, sigs
		f.mu.Unlock()
	}
	ctx, leave := h.Drain(context.Background())
	if !slices.Contains(asked, os.Signal(syscall.SIGTSTP)) {
		t.Fatalf("SIGTSTP not taken over in Drain mode (its default action stops the process): %v", asked)
	}
	f.send(t, h, syscall.SIGTSTP)
	f.send(t, h, syscall.SIGTSTP)
	if ctx.Err() != nil || h.Caught() != 0 {
		t.Fatalf("SIGTSTP interrupted the drain: %v %v", ctx.Err(), h.Caught())
	}
	if got := f.said(); strings.Count(got, "SIGTSTP (Ctrl-Z) received: not stopping") != 1 {
		t.Fatalf("said %q", got)
	}
	leaveHold := h.Hold("handing the reboot to systemd-logind")
	f.send(t, h, syscall.SIGTSTP)
	if h.Held() != 0 {
		t.Fatalf("SIGTSTP held as an interrupt: %v", h.Held())
	}
	leaveHold()
	leave()
	f.send(t, h, syscall.SIGTSTP)
	if len(f.raised) != 1 || f.raised[0] != syscall.SIGTSTP {
		t.Fatalf("no mode: default action not restored: %v", f.raised)
	}
}

// The real runtime: a process in Drain mode that gets SIGTSTP goes on
// (the child re-runs this test binary; a stopped child is seen in
// /proc/PID/stat and killed).
func TestCtrlZRealProcess(t *testing.T) {
	if os.Getenv("GNSH_TSTP_CHILD") == "1" {
		h := New(func(string) {})
		_, leave := h.Drain(context.Background())
		_ = syscall.Kill(os.Getpid(), syscall.SIGTSTP)
		time.Sleep(200 * time.Millisecond)
		leave()
		os.Stdout.WriteString("went on\n")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCtrlZRealProcess$")
	cmd.Env = append(os.Environ(), "GNSH_TSTP_CHILD=1")
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			if err != nil || !strings.Contains(out.String(), "went on") {
				t.Fatalf("child: %v %q", err, out.String())
			}
			return
		default:
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat"); err == nil {
			if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
				_ = cmd.Process.Kill()
				<-done
				t.Fatal("SIGTSTP stopped the process in Drain mode")
			}
		}
		if time.Now().After(end) {
			_ = cmd.Process.Kill()
			t.Fatal("child did not end")
		}
	}
}
