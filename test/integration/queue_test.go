package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/internal/slots"
)

// TestSlotsQueuedReboot: a reboot asked with no terminal (as
// unattended-upgrades or cron asks) while the only slot is taken is queued
// (exit 0, one line), not refused: the real wrapper and the real node
// agent sharing /run, gnsh's identity, a fake logind. shutdown --show says
// so; shutdown -c withdraws it (its place too); queued again, it survives
// the agent's restart; once the other node is back, the agent takes the
// slot in the request's place, drains and hands the reboot off to logind.
// An agent of another boot (the node power-cycled) drops it.
func TestSlotsQueuedReboot(t *testing.T) {
	k := startCluster(t)
	gateKC := k.gnshIdentity(t)
	n := k.newNode(t, "queue-a")
	other := k.newNode(t, "queue-b")
	n.replicaSet("web", 1, podOpts{})
	n.waitRunning(1)
	other.adminCordon()
	run := t.TempDir()
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 252, ScheduleFile: filepath.Join(run, "systemd", "shutdown", "scheduled")})
	cfg := writeConfig(t, config("node: "+n.name, "drainTimeout: 12s", gated("slots: {maxUnavailable: 1, renew: 2s, wait: 5m}", gateKC(n.name))))
	env := k.nodeEnv(t, n.name, cfg)
	agentEnv := append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, env...)
	a := startAgentIn(t, run, agentEnv)
	a.waitStatus("nothing to uncordon after boot", 30*time.Second)

	queue := func() {
		t.Helper()
		r := waitCmd(t, startCmd(t, bus, env, run, "reboot"), "reboot")
		if r.Code != 0 {
			t.Fatalf("reboot with no terminal: exit %d, want 0 (queued)\n%s", r.Code, r.Stderr)
		}
		if strings.Contains(r.Stderr, "waiting for a reboot slot") {
			t.Errorf("a queued request said it waits:\n%s", r.Stderr)
		}
		wantLines(t, r.Stderr, "gnsh: queued: no reboot slot is free now (cluster limit 1: queue-b (cordoned…); place 1 in gnsh/reboot-slots; "+
			"the node agent drains this node and hands the reboot to systemd-logind once one is free, or gives up at … ('shutdown -c' withdraws it)")
		if strings.Contains(r.Stderr, "\r") || strings.Contains(r.Stderr, "\x1b[") {
			t.Errorf("a live line with no terminal: %q", r.Stderr)
		}
		if w, ok := k.slotRecord(t).Waiter(n.name); !ok || w.Who != "alice" {
			t.Fatalf("its place: %+v", k.slotRecord(t))
		}
		n.wantCordon("")
		if slices.Contains(members(ld.Calls()), "RebootWithFlags") {
			t.Fatalf("handed off while queued: %q", members(ld.Calls()))
		}
	}
	queue()
	if !slices.Contains(n.events(), "GnshRebootQueued") {
		t.Errorf("events %v", n.events())
	}
	show := waitCmd(t, startCmd(t, bus, env, run, "shutdown", "--show"), "shutdown", "--show")
	if show.Code != 0 || !strings.Contains(show.Stdout, "gnsh: queued: reboot asked by alice at ") {
		t.Errorf("shutdown --show: exit %d, stdout %q", show.Code, show.Stdout)
	}
	a.waitStatus("a queued reboot waits for a reboot slot", 30*time.Second)

	// Withdrawn: the request and its place go; nothing reboots.
	c := waitCmd(t, startCmd(t, bus, env, run, "shutdown", "-c"), "shutdown", "-c")
	if c.Code != 0 {
		t.Fatalf("shutdown -c: exit %d", c.Code)
	}
	wantLines(t, c.Stderr, "gnsh: the queued reboot asked by alice at … is withdrawn")
	if _, ok := k.slotRecord(t).Waiter(n.name); ok {
		t.Errorf("its place stays after shutdown -c: %+v", k.slotRecord(t))
	}
	if _, err := os.Stat(filepath.Join(run, "gnsh", "queued")); !os.IsNotExist(err) {
		t.Errorf("the request stays: %v", err)
	}

	a.waitStatus("the queued reboot was withdrawn", 30*time.Second)

	// Queued again; the agent restarted meanwhile carries it on.
	queue()
	a.waitStatus("a queued reboot waits for a reboot slot", 30*time.Second)
	log1 := a.stop()
	a = startAgentIn(t, run, agentEnv)
	a.waitStatus("a queued reboot waits for a reboot slot", 30*time.Second)
	w, ok := k.slotRecord(t).Waiter(n.name)
	if !ok {
		t.Fatalf("its place was not kept through the agent's restart: %+v", k.slotRecord(t))
	}
	ticket := w.Ticket

	// The other node back: admitted in its place, drained, handed off.
	if _, err := k.admin.CoreV1().Nodes().Patch(ctxFor(t, time.Minute), other.name, types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(60 * time.Second); !slices.Contains(members(ld.Calls()), "RebootWithFlags"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not handed off 60 s after the slot came free: logind got %q; record %+v", members(ld.Calls()), k.slotRecord(t))
		}
	}
	n.wantCordon("reboot")
	h, ok := k.slotRecord(t).Holder(n.name)
	if !ok || h.Ticket != ticket || h.Phase != slots.ShuttingDown || h.Who != "alice" {
		t.Errorf("holder %+v (held %v), want ticket %d shutting-down", h, ok, ticket)
	}
	if left := len(n.pods()); left != 0 {
		t.Errorf("%d pods left on %s after the drain", left, n.name)
	}
	log2 := a.stop()
	for _, want := range []string{"gnsh: agent: queued: reboot asked by alice at ", "gnsh: agent: the queued reboot was withdrawn"} {
		if !strings.Contains(log1, want) {
			t.Errorf("first agent's log lacks %q:\n%s", want, log1)
		}
	}
	for _, want := range []string{"gnsh: agent: queued: reboot asked by alice at ", "gnsh: agent: the queued reboot was handed off"} {
		if !strings.Contains(log2, want) {
			t.Errorf("second agent's log lacks %q:\n%s", want, log2)
		}
	}

	// A request of another boot (the node power-cycled while queued) is
	// not made again: the agent of the new boot drops it.
	if err := os.WriteFile(filepath.Join(run, "gnsh", "queued"), []byte(`{"bootID":"00000000-0000-4000-8000-0000000000aa","action":"reboot","since":"2026-01-01T00:00:00Z","until":"2099-01-01T00:00:00Z"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	calls := len(ld.Calls())
	stop := slotAgent(t, agentEnv, run, "00000000-0000-4000-8000-0000000000bb")
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(run, "gnsh", "queued")); os.IsNotExist(err) {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the request of another boot was not dropped")
		}
	}
	r := stop()
	if later := members(ld.Calls()[calls:]); slices.Contains(later, "RebootWithFlags") || slices.Contains(later, "ScheduleShutdown") || strings.Contains(r.Stderr, "queued:") {
		t.Errorf("the new boot acted on the old request: logind %q\n%s", later, r.Stderr)
	}
}

// TestSlotsScheduleDeferred: a far schedule (shutdown -r HH:MM beyond the
// drain timeout) whose drain ahead gets no slot before its time is
// deferred, not cancelled: logind's schedule goes (it must not take the
// node down without a slot), the reboot is queued (GnshRebootDeferred),
// and once the other node is back the agent drains and hands the reboot
// off, never before the time asked.
func TestSlotsScheduleDeferred(t *testing.T) {
	k := startCluster(t)
	gateKC := k.gnshIdentity(t)
	n := k.newNode(t, "defer-a")
	other := k.newNode(t, "defer-b")
	n.replicaSet("web", 1, podOpts{})
	n.waitRunning(1)
	other.adminCordon()
	run := t.TempDir()
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 252, ScheduleFile: filepath.Join(run, "systemd", "shutdown", "scheduled")})
	cfg := writeConfig(t, config("node: "+n.name, "drainTimeout: 12s", gated("slots: {maxUnavailable: 1, renew: 2s}", gateKC(n.name))))
	env := k.nodeEnv(t, n.name, cfg)
	a := startAgentIn(t, run, append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, env...))
	a.waitStatus("nothing to uncordon after boot", 30*time.Second)

	obj := bus.Connect(t).Object(logindtest.LogindName, logindtest.LogindPath)
	at := time.Now().Add(20 * time.Second).Truncate(time.Microsecond)
	if err := obj.Call(logindtest.LogindInterface+".ScheduleShutdown", 0, "reboot", uint64(at.UnixMicro())).Err; err != nil {
		t.Fatal(err)
	}
	a.waitStatus("deferred the scheduled reboot for ", 40*time.Second)
	if typ, _ := ld.Scheduled(); typ != "" {
		t.Errorf("logind's schedule stands: %q", typ)
	}
	n.wantCordon("")
	if !slices.Contains(n.events(), "GnshRebootDeferred") || slices.Contains(n.events(), "GnshScheduleCancelled") {
		t.Errorf("events %v", n.events())
	}
	show := waitCmd(t, startCmd(t, bus, env, run, "shutdown", "--show"), "shutdown", "--show")
	if show.Code != 0 || !strings.Contains(show.Stdout, "gnsh: queued: reboot scheduled for ") {
		t.Errorf("shutdown --show: exit %d, stdout %q", show.Code, show.Stdout)
	}
	// The other node back at once: still never before the time asked.
	if _, err := k.admin.CoreV1().Nodes().Patch(ctxFor(t, time.Minute), other.name, types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var reboot *logindtest.Call
	for end := time.Now().Add(60 * time.Second); reboot == nil; time.Sleep(100 * time.Millisecond) {
		for _, c := range ld.Calls() {
			if c.Member == "RebootWithFlags" {
				reboot = &c
			}
		}
		if reboot == nil && time.Now().After(end) {
			t.Fatalf("not handed off: logind got %q; record %+v", members(ld.Calls()), k.slotRecord(t))
		}
	}
	if reboot.Time.Before(at) {
		t.Errorf("handed off at %s, before the time asked (%s)", reboot.Time.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
	}
	n.wantCordon("reboot")
	log := a.stop()
	for _, want := range []string{"gnsh: agent: deferred the scheduled reboot for ", "gnsh: agent: queued: reboot scheduled for ", "gnsh: agent: the queued reboot was handed off"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}
