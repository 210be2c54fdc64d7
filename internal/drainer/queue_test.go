package drainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/slots"
)

// queueRig: node1 asks while node2 holds the only slot; the node agent
// runs (its lock held, guarding) unless noAgent; journal lines are kept.
func queueRig(t *testing.T, config string, automated, noAgent bool) (*fakeNode, testDrainer, *[]string) {
	t.Helper()
	f := newFakeNode(false, nil, "web-1")
	otherHolder(t, f)
	d := newDrainer(t, f, config)
	d.Automated = func() (bool, string) {
		if automated {
			return true, "no terminal on stdin and stderr"
		}
		return false, ""
	}
	var lines []string
	var mu sync.Mutex // two runs at once (queue_review_test.go)
	d.Journal = func(warning bool, line string) {
		mu.Lock()
		defer mu.Unlock()
		p := "info: "
		if warning {
			p = "warning: "
		}
		lines = append(lines, p+line)
	}
	if !noAgent {
		l, err := HoldAgentLock(d.lockDir())
		if err != nil {
			t.Fatal(err)
		}
		l.SetState(AgentGuarding)
		t.Cleanup(l.Release)
	}
	return f, d, &lines
}

// A reboot asked with no person at a terminal that gets no slot at once
// is queued: exit 0 and one line, its place kept in the Lease's queue, the
// request written for the node agent, an Event and a journal line;
// nothing cordoned.
func TestAutomatedRebootIsQueued(t *testing.T) {
	f, d, lines := queueRig(t, "", true, false)
	start := time.Now()
	p, err := d.prepare(t, reboot())
	var qe *QueuedError
	if p != nil || !errors.As(err, &qe) || exitCode(err) != 0 {
		t.Fatalf("got %v %v, want a QueuedError (exit 0)\n%s", p, err, d.stderr)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %s: a queued request does not wait in the command", el)
	}
	for _, w := range []string{"gnsh: queued: no reboot slot is free now (cluster limit 1: node2", "place 1 in gnsh/reboot-slots",
		"the node agent drains this node and hands the reboot to systemd-logind once one is free", "'shutdown -c' withdraws it"} {
		if !strings.Contains(qe.Msg, w) {
			t.Errorf("line %q lacks %q", qe.Msg, w)
		}
	}
	if strings.Count(qe.Msg, "\n") != 0 {
		t.Errorf("not one line: %q", qe.Msg)
	}
	rec := slotRecord(t, f)
	w, ok := rec.Waiter("node1")
	if !ok || w.Boot != "boot-1" || !w.Queued {
		t.Fatalf("its place is not kept: %+v", rec)
	}
	q, err := d.ReadQueued()
	if err != nil || q == nil {
		t.Fatalf("queued request: %v %v", q, err)
	}
	if q.Action != "reboot" || q.Node != "node1" || q.Ticket != w.Ticket || q.Place != 1 || q.User != "alice" || q.TTY != "pts/3" ||
		q.Why != "no terminal on stdin and stderr" || q.NotBefore != nil || q.Until.Sub(q.Since) != 24*time.Hour {
		t.Errorf("queued %+v (waiter ticket %d)", q, w.Ticket)
	}
	if fi, err := os.Stat(filepath.Join(d.lockDir(), QueueName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("queue file: %v %v", fi, err)
	}
	if f.node(t).Spec.Unschedulable {
		t.Error("cordoned")
	}
	if !strings.Contains(strings.Join(f.reasons(), ","), ReasonRebootQueued) {
		t.Errorf("events %v", f.reasons())
	}
	if len(*lines) != 1 || !strings.HasPrefix((*lines)[0], "info: reboot asked by alice on pts/3") || !strings.Contains((*lines)[0], "queued, no slot free now (cluster limit 1: node2") || !strings.Contains((*lines)[0], "; place 1 in gnsh/reboot-slots") {
		t.Errorf("journal %q", *lines)
	}
	// shutdown --show says so.
	if l := d.QueuedLine(); !strings.HasPrefix(l, "gnsh: queued: reboot asked by alice on pts/3") || !strings.Contains(l, "place 1 in the queue") {
		t.Errorf("--show: %q", l)
	}
}

// Who is queued: slots.queue decides; auto queues automation only; a
// node whose agent does not run is never queued (nothing would carry the
// request): it waits and is refused as before, and says why, in the
// journal too.
func TestQueueModes(t *testing.T) {
	for _, c := range []struct {
		name          string
		config        string
		automated     bool
		noAgent       bool
		queued        bool
		refusalHasNot string
	}{
		{"auto, a person", "slots: {wait: 1s}\n", false, false, false, ""},
		{"always, a person", "slots: {wait: 1s, queue: always}\n", false, false, true, ""},
		{"never, automation", "slots: {wait: 1s, queue: never}\n", true, false, false, ""},
		{"auto, automation, no agent", "slots: {wait: 1s}\n", true, true, false, "it was not queued: the node agent is not running"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, d, lines := queueRig(t, c.config, c.automated, c.noAgent)
			_, err := d.prepare(t, reboot())
			var qe *QueuedError
			if errors.As(err, &qe) != c.queued {
				t.Fatalf("queued: got %v, want %v\n%s", err, c.queued, d.stderr)
			}
			q, _ := d.ReadQueued()
			if (q != nil) != c.queued {
				t.Fatalf("queue file %+v", q)
			}
			if c.queued {
				return
			}
			if exitCode(err) != 1 || !strings.Contains(err.Error(), "reboot refused") {
				t.Fatalf("not refused: %v", err)
			}
			if !strings.Contains(err.Error(), c.refusalHasNot) {
				t.Errorf("refusal %q lacks %q", err, c.refusalHasNot)
			}
			if len(*lines) != 1 || !strings.HasPrefix((*lines)[0], "warning: reboot requested by alice on pts/3 refused: no reboot slot within 1s") ||
				strings.Contains((*lines)[0], "\n") || !strings.Contains((*lines)[0], c.refusalHasNot) {
				t.Errorf("journal %q", *lines)
			}
			if _, ok := slotRecord(t, f).Waiter("node1"); ok {
				t.Error("a refused request left its place")
			}
			if !strings.Contains(strings.Join(f.reasons(), ","), ReasonRefused) {
				t.Errorf("no %s Event: %v", ReasonRefused, f.reasons())
			}
		})
	}
}

// The node agent's run for a queued request asks in the request's place
// and, once the slot is free, takes it with that ticket and drains: the
// wrapper's own path, as the person who queued it.
func TestQueuedRunTakesTheSlotInItsPlace(t *testing.T) {
	f, d, _ := queueRig(t, "", true, false)
	if _, err := d.prepare(t, reboot()); !errors.As(err, new(*QueuedError)) {
		t.Fatalf("%v", err)
	}
	q, _ := d.ReadQueued()
	ag := newDrainer(t, f, "")
	ag.Agent, ag.LockDir = true, d.LockDir
	// Still held: the wait runs out, its place kept, where it stands.
	_, err := ag.QueuedPreparer(context.Background(), q, time.Second).Prepare(context.Background(), q.Request())
	if !IsSlotWait(err) || q.Place != 1 {
		t.Fatalf("held: %v (place %d)\n%s", err, q.Place, ag.stderr)
	}
	if w, ok := slotRecord(t, f).Waiter("node1"); !ok || w.Ticket != q.Ticket {
		t.Fatalf("its place: %+v", slotRecord(t, f))
	}
	// node2's slot freed: the agent's run takes it, in the ticket it had.
	if _, err := slots.NewGate(f, loadCfg(t, d)).Free(context.Background(), func(e slots.Entry) bool { return e.Node == "node2" }); err != nil {
		t.Fatal(err)
	}
	p, err := ag.QueuedPreparer(context.Background(), q, 5*time.Second).Prepare(context.Background(), q.Request())
	if err != nil || p == nil {
		t.Fatalf("%v %v\n%s", p, err, ag.stderr)
	}
	defer p.Finish(context.Background(), nil)
	h, ok := slotRecord(t, f).Holder("node1")
	if !ok || h.Ticket != q.Ticket || h.Who != "alice on pts/3" {
		t.Errorf("holder %+v %v (ticket %d)", h, ok, q.Ticket)
	}
	if !f.node(t).Spec.Unschedulable {
		t.Error("not cordoned")
	}
}

// shutdown -c withdraws a queued reboot: the request and its place go,
// and an Event says so.
func TestCancelWithdrawsTheQueuedReboot(t *testing.T) {
	f, d, lines := queueRig(t, "", true, false)
	if _, err := d.prepare(t, reboot()); !errors.As(err, new(*QueuedError)) {
		t.Fatalf("%v", err)
	}
	if err := d.handOff(t, cancelReq(), nil); err != nil {
		t.Fatal(err)
	}
	if q, _ := d.ReadQueued(); q != nil {
		t.Errorf("still queued: %+v", q)
	}
	if _, ok := slotRecord(t, f).Waiter("node1"); ok {
		t.Errorf("its place stays: %+v", slotRecord(t, f))
	}
	if !strings.Contains(d.stderr.String(), "gnsh: the queued reboot asked by alice on pts/3") || !strings.Contains(d.stderr.String(), "is withdrawn") {
		t.Errorf("stderr %q", d.stderr)
	}
	if !strings.Contains(strings.Join(f.reasons(), ","), ReasonRebootWithdrawn) {
		t.Errorf("events %v", f.reasons())
	}
	if !strings.Contains(strings.Join(*lines, "\n"), "withdrawn by alice (shutdown -c)") {
		t.Errorf("journal %q", *lines)
	}
}

// A far schedule whose drain ahead got no slot is deferred, not dropped:
// logind's schedule cancelled, the request queued (never before its time),
// GnshRebootDeferred.
func TestCancelScheduleDefers(t *testing.T) {
	f, d, _ := queueRig(t, "", false, false)
	at := time.Now().Add(time.Minute).Truncate(time.Second)
	ok, err := d.CancelSchedule(context.Background(), "reboot", at, "no reboot slot within 1m", true, func(context.Context) (bool, error) { return true, nil })
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	q, err := d.ReadQueued()
	if err != nil || q == nil || !q.Deferred || q.NotBefore == nil || !q.NotBefore.Equal(at) || q.Action != "reboot" {
		t.Fatalf("queued %+v %v", q, err)
	}
	if r := strings.Join(f.reasons(), ","); !strings.Contains(r, ReasonRebootDeferred) || strings.Contains(r, ReasonScheduleCancelled) {
		t.Errorf("events %v", r)
	}
	if req := q.Request(); req.Action.String() != "reboot" || !req.Immediate() {
		t.Errorf("request %+v", req)
	}
}

// A request of another boot is not carried: the reboot it asked for has
// happened (or the node was power-cycled); it is dropped when read.
func TestQueuedOfAnotherBootIsDropped(t *testing.T) {
	_, d, _ := queueRig(t, "", true, false)
	if err := d.WriteQueued(&QueuedReboot{BootID: "boot-0", Action: "reboot", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if q, err := d.PeekQueued(); q != nil || err != nil {
		t.Fatalf("peek: %+v %v", q, err)
	}
	if _, err := os.Stat(filepath.Join(d.lockDir(), QueueName)); err != nil {
		t.Fatal("peeking removed it")
	}
	if q, err := d.ReadQueued(); q != nil || err != nil {
		t.Fatalf("read: %+v %v", q, err)
	}
	if _, err := os.Stat(filepath.Join(d.lockDir(), QueueName)); !os.IsNotExist(err) {
		t.Errorf("not dropped: %v", err)
	}
}

// loadCfg is d's configuration as a run reads it.
func loadCfg(t *testing.T, d testDrainer) config.Config {
	t.Helper()
	c, err := config.Load(d.configPath())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// exitCode is the status dispatch.ExitStatus gives err.
func exitCode(err error) int {
	var ec interface{ ExitCode() int }
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return ec.ExitCode()
	}
	return 1
}

// The node agent's run of a queued reboot never goes on without its slot:
// not when its ctx ends (the request withdrawn, the agent stopping) while
// it waits, and not when the API server fails before the slot is taken
// (a person's reboot would go on without a drain; a queued one waits).
func TestQueuedRunNeverGoesOnWithoutItsSlot(t *testing.T) {
	f, d, _ := queueRig(t, "", true, false)
	if _, err := d.prepare(t, reboot()); !errors.As(err, new(*QueuedError)) {
		t.Fatalf("%v", err)
	}
	q, _ := d.ReadQueued()
	ag := newDrainer(t, f, "")
	ag.Agent, ag.LockDir = true, d.LockDir
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	p, err := ag.QueuedPreparer(ctx, q, 10*time.Second).Prepare(context.Background(), q.Request())
	if p != nil || err == nil || IsSlotWait(err) {
		t.Fatalf("withdrawn while it waited: %v %v\n%s", p, err, ag.stderr)
	}
	if _, ok := slotRecord(t, f).Waiter("node1"); !ok {
		t.Errorf("an agent stopping lost the place: %+v", slotRecord(t, f))
	}

	// The API server failing before the slot: refused, not "rebooting
	// without draining".
	f.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	ag2 := newDrainer(t, f, "")
	ag2.Agent, ag2.LockDir = true, d.LockDir
	p, err = ag2.QueuedPreparer(context.Background(), q, 10*time.Second).Prepare(context.Background(), q.Request())
	if p != nil || err == nil || strings.Contains(ag2.stderr.String(), "without draining") {
		t.Fatalf("the API server down: %v %v\n%s", p, err, ag2.stderr)
	}
	f.ReactionChain = f.ReactionChain[1:]
	if f.node(t).Spec.Unschedulable {
		t.Error("cordoned")
	}
}

// Outside slots.window a reboot asked by automation is queued without
// asking, even with a slot free (it would go now): a ticket keeps its
// place in arrival order, the line says when the window opens. A person's
// reboot is not held by the window.
func TestQueuedOutsideTheWindow(t *testing.T) {
	now := time.Now().UTC()
	// A window that opens an hour from now, for an hour, every day.
	open := now.Add(time.Hour)
	win := fmt.Sprintf("slots: {window: {start: %q, end: %q, timeZone: UTC}}\n", open.Format("15:04"), open.Add(time.Hour).Format("15:04"))
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, win)
	d.Automated = func() (bool, string) { return true, "no terminal on stdin and stderr" }
	l, err := HoldAgentLock(d.lockDir())
	if err != nil {
		t.Fatal(err)
	}
	l.SetState(AgentGuarding)
	defer l.Release()
	_, err = d.prepare(t, reboot())
	var qe *QueuedError
	if !errors.As(err, &qe) {
		t.Fatalf("a free slot outside the window: %v\n%s", err, d.stderr)
	}
	if !strings.Contains(qe.Msg, "gnsh: queued: outside the window mon-sun "+open.Format("15:04")) || !strings.Contains(qe.Msg, "once it is open and a reboot slot is free") {
		t.Errorf("line %q", qe.Msg)
	}
	rec := slotRecord(t, f)
	if len(rec.Holders) != 0 || len(rec.Waiters) != 0 || rec.Next != 2 {
		t.Errorf("record %+v: want no entry, ticket 1 taken", rec)
	}
	if q, _ := d.ReadQueued(); q == nil || q.Ticket != 1 || q.Place != 0 || f.node(t).Spec.Unschedulable {
		t.Errorf("queued %+v", q)
	}
	// The same node, a person: not held by the window.
	f2 := newFakeNode(false, nil, "web-1")
	d2 := newDrainer(t, f2, win)
	if p, err := d2.prepare(t, reboot()); err != nil || p == nil {
		t.Fatalf("a person outside the window: %v %v\n%s", p, err, d2.stderr)
	}
}
