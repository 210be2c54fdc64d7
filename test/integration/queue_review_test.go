package integration

// Review of issue 21 (queued reboots): scratch tests with the real
// wrapper, agent and API server; a failure is a finding.

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

// The node agent SIGKILLed in the middle of a queued reboot's drain (its
// slot taken, the node cordoned, a pod terminating), then started again
// in the same boot: the request is carried on, the node drained and
// handed off exactly once, in the slot it held; no second slot, no
// cordon lost on the way.
func TestReviewQueuedAgentKilledMidDrain(t *testing.T) {
	k := startCluster(t)
	gateKC := k.gnshIdentity(t)
	n := k.newNode(t, "qkill-a")
	other := k.newNode(t, "qkill-b")
	n.replicaSet("web", 1, podOpts{hold: true})
	n.waitRunning(1)
	other.adminCordon()
	run := t.TempDir()
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 252, ScheduleFile: filepath.Join(run, "systemd", "shutdown", "scheduled")})
	cfg := writeConfig(t, config("node: "+n.name, "drainTimeout: 2m", gated("slots: {maxUnavailable: 1, renew: 2s, wait: 5m}", gateKC(n.name))))
	env := k.nodeEnv(t, n.name, cfg)
	agentEnv := append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, env...)
	a := startAgentIn(t, run, agentEnv)
	a.waitStatus("nothing to uncordon after boot", 30*time.Second)

	r := waitCmd(t, startCmd(t, bus, env, run, "reboot"), "reboot")
	if r.Code != 0 || !strings.Contains(r.Stderr, "gnsh: queued:") {
		t.Fatalf("reboot: exit %d\n%s", r.Code, r.Stderr)
	}
	a.waitStatus("a queued reboot waits for a reboot slot", 30*time.Second)
	if _, err := k.admin.CoreV1().Nodes().Patch(ctxFor(t, time.Minute), other.name, types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitTerminating(1) // admitted, cordoned, evicting: the pod is held
	h1, ok := k.slotRecord(t).Holder(n.name)
	if !ok {
		t.Fatalf("draining without a slot: %+v", k.slotRecord(t))
	}
	if err := a.p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	kr := a.p.Wait()
	t.Logf("first agent (SIGKILL):\n%s", kr.Stderr)
	if u, _ := n.cordon(); !u {
		t.Errorf("the cordon went with the agent")
	}
	a = startAgentIn(t, run, agentEnv)
	time.Sleep(3 * time.Second) // the new agent takes the request up
	n.forceDelete()
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		reboots := 0
		for _, m := range members(ld.Calls()) {
			if m == "RebootWithFlags" {
				reboots++
			}
		}
		if reboots > 0 {
			time.Sleep(3 * time.Second)
			again := 0
			for _, m := range members(ld.Calls()) {
				if m == "RebootWithFlags" {
					again++
				}
			}
			if again != 1 {
				t.Errorf("handed off %d times", again)
			}
			break
		}
		if time.Now().After(end) {
			t.Errorf("not handed off 90 s after the restart: logind %q; record %+v", members(ld.Calls()), k.slotRecord(t))
			t.Fatalf("second agent:\n%s", a.stop())
		}
	}
	h2, ok := k.slotRecord(t).Holder(n.name)
	rec := k.slotRecord(t)
	if !ok || h2.Ticket != h1.Ticket || len(rec.Holders) != 1 {
		t.Errorf("holder before the kill %+v, after the hand-off %+v (%v); record %+v", h1, h2, ok, rec)
	}
	n.wantCordon("reboot")
	log := a.stop()
	t.Logf("second agent:\n%s", log)
	for _, bad := range []string{"uncordoned", "orphan", "the gnsh that made it is gone"} {
		if strings.Contains(log, bad) {
			t.Errorf("second agent's log has %q", bad)
		}
	}
}
