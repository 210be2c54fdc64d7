package drainer

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/legacy"
)

// shutdown -c stops a shutdown -r +2 (due within drainTimeout, so drained
// now) that still waits for its reboot slot: it withdraws from the queue,
// exits 1 saying so, and schedules nothing; the cancel says what it
// stopped. (It used to say nothing, and the wrapper then drained and
// scheduled the reboot after the cancel.)
func TestCancelStopsAScheduleWaitingForASlot(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d := newDrainer(t, f, "slots:\n  wait: 1m\n")
	out := &syncBuffer{}
	d.Stderr = out
	req := scheduledReboot(2 * time.Minute)
	run := make(chan error, 1)
	go func() {
		p, err := d.Prepare(context.Background(), req)
		if p != nil {
			p.Finish(context.Background(), nil) // it would have scheduled
			err = errors.New("scheduled after the cancel")
		}
		run <- err
	}()
	waitFor(t, out, "waiting for a reboot slot")

	c := newDrainer(t, f, "")
	c.LockDir, c.Who = d.LockDir, Requester{User: "bob", TTY: "pts/1"}
	cout := &syncBuffer{}
	c.Stderr = cout
	p, _ := c.prepare(t, cancelReq())
	var err error
	select {
	case err = <-run:
	case <-time.After(20 * time.Second):
		t.Fatalf("the waiting run was not stopped:\n%s\ncancel:\n%s", out, cout)
	}
	p.(*cancelRun).FinishCancel(context.Background(), false, nil) // nothing was scheduled
	at := legacy.FromUsec(req.When).Local().Format("15:04:05")
	refusal(t, err, "gnsh: the reboot scheduled for "+at+" was cancelled by bob on pts/1 (shutdown -c) while this command was waiting for a reboot slot; nothing was scheduled")
	if !strings.Contains(cout.String(), "gnsh: stopped pid ") ||
		!strings.Contains(cout.String(), ": the reboot scheduled for "+at+" by alice on pts/3, which was waiting for a reboot slot; it scheduled nothing") {
		t.Errorf("the cancel said:\n%s", cout)
	}
	if rec := slotRecord(t, f); len(rec.Waiters) != 0 || len(rec.Holders) != 1 {
		t.Errorf("record %+v", rec)
	}
	if f.node(t).Spec.Unschedulable {
		t.Error("cordoned")
	}
	if notes := d.runNotes(); len(notes) != 0 {
		t.Errorf("notes left: %+v", notes)
	}
}

// shutdown -c stops a run for a schedule that drains: its cordon is
// undone, its slot freed.
func TestCancelStopsAScheduleDraining(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	f.Stick("web-1")
	d := newDrainer(t, f, "")
	out := &syncBuffer{}
	d.Stderr = out
	run := make(chan error, 1)
	go func() {
		p, err := d.Prepare(context.Background(), scheduledReboot(2*time.Minute))
		if p != nil {
			p.Finish(context.Background(), nil)
			err = errors.New("scheduled after the cancel")
		}
		run <- err
	}()
	for deadline := time.Now().Add(20 * time.Second); f.Evicted("web-1") == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no drain:\n%s", out)
		}
	}
	c := newDrainer(t, f, "")
	c.LockDir = d.LockDir
	if err := c.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	refusal(t, <-run, "while this command was draining node1; nothing was scheduled")
	if !strings.Contains(c.stderr.String(), ", which was draining node1; it scheduled nothing") {
		t.Errorf("the cancel said %q", c.stderr)
	}
	if f.node(t).Spec.Unschedulable {
		t.Errorf("still cordoned:\n%s", out)
	}
	if rec := slotRecord(t, f); len(rec.Holders) != 0 {
		t.Errorf("slot kept: %+v", rec)
	}
	if got := strings.Join(f.reasons(), " "); !strings.Contains(got, "GnshDrainFailed") {
		t.Errorf("events %q", got)
	}
}

// An immediate reboot waiting for a slot is not a schedule: shutdown -c
// names it but does not stop it (as systemd's shutdown -c does not cancel
// an immediate reboot); Ctrl-C does.
func TestCancelNamesAnImmediateRebootWaiting(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d := newDrainer(t, f, "slots:\n  wait: 1m\n")
	out := &syncBuffer{}
	d.Stderr = out
	run := make(chan error, 1)
	go func() { _, err := d.Prepare(context.Background(), reboot()); run <- err }()
	waitFor(t, out, "waiting for a reboot slot")
	c := newDrainer(t, f, "")
	c.LockDir = d.LockDir
	if err := c.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.stderr.String(), "a reboot (pid ") ||
		!strings.Contains(c.stderr.String(), ", by alice on pts/3) is waiting for a reboot slot: it is not scheduled, so shutdown -c does not stop it; interrupt it (Ctrl-C where it runs, or kill -INT ") {
		t.Errorf("the cancel said %q", c.stderr)
	}
	select {
	case err := <-run:
		t.Fatalf("stopped by shutdown -c: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	d.Signal.Deliver(syscall.SIGINT)
	var intr *Interrupted
	if err := <-run; !errors.As(err, &intr) {
		t.Fatalf("%v", err)
	}
}
