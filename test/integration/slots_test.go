package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/internal/slots"
	"github.com/gnsh/gnsh/test/internal/faultproxy"
	"github.com/gnsh/gnsh/test/internal/rig"
)

// gnshIdentity applies install/kubernetes/rbac.yaml and returns what
// gives a node its gate kubeconfig: the ServiceAccount's token bound to
// that node's Node (its Node must exist), as the role hands out; the
// slots Lease policy refuses the writes of an unbound one. The reboot-slot
// gate needs it (the kubelet's credentials cannot read the Lease or other
// Nodes). It is the gate's only (issue 22): gnsh drains with the node's
// kubelet kubeconfig (nodeEnv) and names this one in slots.kubeconfig
// (gated).
func (k *cluster) gnshIdentity(t *testing.T) (gateKC func(node string) string) {
	t.Helper()
	manifest, err := os.ReadFile(filepath.Join("..", "..", "install", "kubernetes", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	k.cp.Kubectl(t, manifest, "apply", "-f", "-")
	return func(node string) string {
		t.Helper()
		token := strings.TrimSpace(k.cp.Kubectl(t, nil, "-n", "kube-system", "create", "token", "gnsh",
			"--bound-object-kind=Node", "--bound-object-name="+node, "--duration=1h"))
		f := k.cp.TokenKubeconfig(t, token)
		kubectl := filepath.Join(k.cp.BinDir, "kubectl")
		// RBAC sees the new bindings a moment after kubectl apply returns.
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out, err := exec.Command(kubectl, "--kubeconfig="+f, "auth", "can-i", "update", "leases/reboot-slots", "-n", "gnsh").CombinedOutput()
			if err == nil && strings.TrimSpace(string(out)) == "yes" {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the ServiceAccount may not update the slots Lease: %s %v", out, err)
			}
		}
		return f
	}
}

// gated is a config file's slots line with the gate's kubeconfig kc
// (slots.kubeconfig) added: "slots: {kubeconfig: KC, …}".
func gated(slotsLine, kc string) string {
	return strings.Replace(slotsLine, "slots: {", "slots: {kubeconfig: "+kc+", ", 1)
}

// nodeEnv is what gnsh gets on node name: its kubelet kubeconfig (the
// drain's identity), the config file cfg and a user name.
func (k *cluster) nodeEnv(t *testing.T, name, cfg string) []string {
	t.Helper()
	return []string{"KUBECONFIG=" + k.cp.NodeKubeconfig(t, name), "GNSH_CONFIG=" + cfg, "LOGNAME=alice"}
}

// leaseHistory records every version of the slots Lease.
func (k *cluster) leaseHistory(t *testing.T) func() []slots.Record {
	ctx := ctxFor(t, 10*time.Minute)
	w, err := k.admin.CoordinationV1().Leases("gnsh").Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", "reboot-slots").String()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var versions []slots.Record
	go func() {
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Deleted {
				if rec, err := slots.Decode(l); err == nil {
					mu.Lock()
					versions = append(versions, rec)
					mu.Unlock()
				}
			}
		}
	}()
	return func() []slots.Record {
		mu.Lock()
		defer mu.Unlock()
		return append([]slots.Record(nil), versions...)
	}
}

// TestSlotsRollingReboots: five nodes run reboot at once with a limit of
// one node out (the real wrapper, gnsh's identity, a fake logind). One is
// admitted, drains and hands off; the others wait in line. Each node's
// "next boot" is its Node reporting a new boot ID and the node agent
// started with it: the agent lifts gnsh's cordon and frees the slot once
// the node has been Ready and uncordoned for the settle time, and only
// then is the next node admitted.
func TestSlotsRollingReboots(t *testing.T) {
	k := startCluster(t)
	gateKC := k.gnshIdentity(t)
	history := k.leaseHistory(t)

	const n = 5
	type contender struct {
		n   *node
		env []string
		p   *rig.Proc
		ld  *logindtest.Logind // each machine its own logind
	}
	var cs []*contender
	for i := range n {
		nd := k.newNode(t, "roll-"+string(rune('a'+i)))
		nd.replicaSet("web", 1, podOpts{})
		nd.waitRunning(1)
		cfg := config("node: "+nd.name, gated("slots: {maxUnavailable: 1, wait: 3m, settle: 2s, renew: 2s}", gateKC(nd.name)))
		cs = append(cs, &contender{n: nd, env: k.nodeEnv(t, nd.name, writeConfig(t, cfg))})
	}
	for _, c := range cs {
		bus := logindtest.StartBus(t)
		c.ld = bus.StartLogind(t, logindtest.Options{Version: 252})
		c.p = startCmd(t, bus, c.env, "", "reboot")
	}
	var order []string
	for round := range n {
		// The one admitted hands off; the rest still wait.
		var done *contender
		for done == nil {
			for _, c := range cs {
				select {
				case <-c.p.Done():
					if !strings.Contains(strings.Join(order, " "), c.n.name) {
						done = c
					}
				default:
				}
				if done != nil {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		r := waitCmd(t, done.p, "reboot")
		if r.Code != 0 {
			t.Fatalf("round %d: %s: exit %d", round, done.n.name, r.Code)
		}
		if round > 0 && !strings.Contains(r.Stderr, "gnsh: waiting for a reboot slot (place ") {
			t.Errorf("%s did not say it waited:\n%s", done.n.name, r.Stderr)
		}
		order = append(order, done.n.name)
		wantHandOff(t, done.n.name, done.ld.Calls(), "RebootWithFlags")
		done.n.wantCordon("reboot")
		rec := history()[len(history())-1]
		if h, ok := rec.Holder(done.n.name); !ok || len(rec.Holders) != 1 || h.Phase != slots.ShuttingDown {
			t.Fatalf("round %d: after %s handed off: %+v", round, done.n.name, rec)
		}
		// Its next boot: the kubelet reports a new boot ID, the agent starts.
		boot := "00000000-0000-4000-8000-00000000000" + string(rune('1'+round))
		nd := done.n.get()
		nd.Status.NodeInfo.BootID = boot
		if _, err := k.admin.CoreV1().Nodes().UpdateStatus(ctxFor(t, time.Minute), nd, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		stopAgent := slotAgent(t, append(done.env, "GNSH_DEBUG=1"), "", boot)
		freed := false
		for end := time.Now().Add(40 * time.Second); !freed && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			recs := history()
			_, held := recs[len(recs)-1].Holder(done.n.name)
			freed = !held
		}
		ar := stopAgent()
		if !freed {
			t.Fatalf("round %d: the agent did not free the slot of %s", round, done.n.name)
		}
		for _, want := range []string{done.n.name + " uncordoned after boot", "is back on a new boot", "freed the reboot slot of " + done.n.name + " in gnsh/reboot-slots: back, Ready and uncordoned for"} {
			if !strings.Contains(ar.Stderr, want) {
				t.Errorf("round %d: the agent's log lacks %q", round, want)
			}
		}
		if o := done.n.get(); o.Spec.Unschedulable {
			t.Errorf("round %d: %s still cordoned after its agent freed the slot", round, done.n.name)
		}
	}
	// Never more than one holder; between two holders the slot was free
	// (the first freed by its agent before the next was admitted).
	var last string
	ticket := int64(-1)
	for i, v := range history() {
		for _, h := range v.Holders {
			if h.Node != last && h.Ticket <= ticket {
				t.Fatalf("version %d: %s admitted with ticket %d after ticket %d: not in arrival order", i, h.Node, h.Ticket, ticket)
			}
			ticket = max(ticket, h.Ticket)
		}
		if len(v.Holders) > 1 {
			t.Fatalf("version %d has %d holders", i, len(v.Holders))
		}
		if len(v.Holders) == 1 {
			if h := v.Holders[0].Node; h != last && last != "" {
				t.Fatalf("version %d: %s admitted while %s held the slot", i, h, last)
			} else {
				last = h
			}
		} else {
			last = ""
		}
	}
	t.Logf("admitted in order: %s", strings.Join(order, " "))
}

// TestSlotsWrapperKilled: a reboot killed (SIGKILL) at each step after it
// took its slot leaves neither the slot nor gnsh's cordon behind: the node
// agent (sharing the wrapper's /run) undoes the cordon and frees the slot
// once nothing relies on them; after a hand-off, only once the shutdown
// is no longer under way.
func TestSlotsWrapperKilled(t *testing.T) {
	k := startCluster(t)
	gateKC := k.gnshIdentity(t)
	px := faultproxy.ForControlPlane(t, k.cp)
	for _, c := range []struct {
		step string
		// stall makes the wrapper stop at the step, and says when it has.
		stall func(t *testing.T, n *node) (reached func() bool, release func())
	}{
		{"after_the_slot", func(t *testing.T, n *node) (func() bool, func()) {
			r := px.Hang("PATCH", "^/api/v1/nodes/"+n.name+"$")
			return func() bool { return r.Hits() > 0 }, r.Remove
		}},
		{"after_the_cordon", func(t *testing.T, n *node) (func() bool, func()) {
			r := px.Hang("GET", "^/api/v1/pods$")
			return func() bool { return r.Hits() > 0 }, r.Remove
		}},
		{"mid_drain", func(t *testing.T, n *node) (func() bool, func()) {
			n.replicaSet("held", 1, podOpts{hold: true})
			n.waitRunning(2)
			return func() bool { return len(n.terminating()) > 0 }, func() { n.forceDelete() }
		}},
	} {
		t.Run(c.step, func(t *testing.T) {
			n := k.newNode(t, "killed-"+strings.ReplaceAll(c.step, "_", "-"))
			n.replicaSet("web", 1, podOpts{})
			n.waitRunning(1)
			kc := gateKC(n.name)
			cfg := writeConfig(t, config("node: "+n.name, gated("slots: {maxUnavailable: 1, wait: 1m, renew: 2s}", kc)))
			// The wrapper's requests, both identities', go through the
			// proxy.
			pcfg := writeConfig(t, config("node: "+n.name, gated("slots: {maxUnavailable: 1, wait: 1m, renew: 2s}", px.Kubeconfig(t, kc))))
			b := newLogind(t)
			run := t.TempDir()
			stopAgent := slotAgent(t, append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + b.bus.Address()}, k.nodeEnv(t, n.name, cfg)...), run, "")
			reached, release := c.stall(t, n)
			p := startCmd(t, b.bus, []string{"KUBECONFIG=" + px.Kubeconfig(t, k.cp.NodeKubeconfig(t, n.name)), "GNSH_CONFIG=" + pcfg, "LOGNAME=alice"}, run, "reboot")
			for end := time.Now().Add(30 * time.Second); !reached(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("the reboot never reached the step")
				}
			}
			if rec := k.slotRecord(t); len(rec.Holders) != 1 || rec.Holders[0].Node != n.name {
				t.Fatalf("at the step: %+v", rec)
			}
			if err := p.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitCmd(t, p, "reboot")
			release()
			killed := time.Now()
			for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				_, held := k.slotRecord(t).Holder(n.name)
				if unsched, _ := n.cordon(); !held && !unsched {
					t.Logf("slot freed and cordon undone %s after the kill", time.Since(killed).Round(100*time.Millisecond))
					break
				}
				if time.Now().After(end) {
					t.Fatalf("30 s after the kill: slot held %v, %+v", held, n.get().Spec)
				}
			}
			if len(b.ld.Calls()) > 0 && slices.Contains(members(b.ld.Calls()), "RebootWithFlags") {
				t.Errorf("logind was asked to reboot")
			}
			ar := stopAgent()
			if !strings.Contains(ar.Stderr, "freed the reboot slot of "+n.name+" in gnsh/reboot-slots: the reboot it was taken for did not happen") {
				t.Errorf("the agent did not say it freed the slot")
			}
		})
	}

	// Killed after the hand-off (here: exited; the process is gone all the
	// same): the reboot is under way (logind has it), so the slot and the
	// cordon stay, the slot renewed by the agent; they go after the boot
	// (TestSlotsRollingReboots).
	t.Run("after_the_hand_off", func(t *testing.T) {
		n := k.newNode(t, "killed-after-hand-off")
		n.replicaSet("web", 1, podOpts{})
		n.waitRunning(1)
		cfg := writeConfig(t, config("node: "+n.name, gated("slots: {maxUnavailable: 1, wait: 1m, renew: 2s}", gateKC(n.name))))
		b := newLogind(t)
		run := t.TempDir()
		env := k.nodeEnv(t, n.name, cfg)
		stopAgent := slotAgent(t, append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + b.bus.Address()}, env...), run, "")
		r := waitCmd(t, startCmd(t, b.bus, env, run, "reboot"), "reboot")
		if r.Code != 0 {
			t.Fatalf("exit %d", r.Code)
		}
		h, _ := k.slotRecord(t).Holder(n.name)
		time.Sleep(6 * time.Second)
		h2, held := k.slotRecord(t).Holder(n.name)
		unsched, _ := n.cordon()
		stopAgent()
		if !held || !unsched || h2.Phase != slots.ShuttingDown || h2.Beat <= h.Beat {
			t.Fatalf("with the reboot under way: held %v (%s, beat %d, then %d), cordoned %v; want held, shutting-down, renewed, cordoned",
				held, h2.Phase, h.Beat, h2.Beat, unsched)
		}
	})
}

// slotAgent starts gnsh agent with env (the host's /etc/gnsh and
// /etc/kubernetes hidden), /run at run and this boot's ID boot (each
// optional); stop sends SIGTERM, logs the agent's output and returns it,
// once: later calls return the same result.
func slotAgent(t *testing.T, env []string, run, boot string) (stop func() rig.Result) {
	ag := rig.Start(t, rig.Spec{Env: env, Argv: []string{filepath.Join(binDir, "gnsh"), "agent"},
		Hide: []string{"/etc/gnsh", "/etc/kubernetes"}, RunDir: run, BootID: boot})
	var once sync.Once
	var r rig.Result
	return func() rig.Result {
		once.Do(func() {
			if err := ag.Signal(syscall.SIGTERM); err != nil {
				t.Error(err)
			}
			r = ag.Wait()
			logRun(t, "gnsh", []string{"agent"}, r, 0)
		})
		return r
	}
}

func (k *cluster) slotRecord(t *testing.T) slots.Record {
	t.Helper()
	rec, _, err := (&slots.Gate{C: k.admin, Namespace: "gnsh", Name: "reboot-slots", APITimeout: 10 * time.Second}).Read(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (n *node) terminating() []string {
	var s []string
	for _, p := range n.pods() {
		if p.DeletionTimestamp != nil {
			s = append(s, p.Name)
		}
	}
	return s
}

// TestSlotsKeptForTheSchedule: shutdown -r +8 --drain-timeout=10m drains at
// once (due within its own drain timeout) and keeps its slot for the
// schedule. The agent, whose drainTimeout (30 s) is shorter than the time
// left, still keeps the slot: it is the very schedule the slot was taken
// for. shutdown -c frees it.
func TestSlotsKeptForTheSchedule(t *testing.T) {
	k := startCluster(t)
	gateKC := k.gnshIdentity(t)
	n := k.newNode(t, "far-schedule")
	n.replicaSet("web", 1, podOpts{})
	n.waitRunning(1)
	cfg := writeConfig(t, config("node: "+n.name, gated("slots: {maxUnavailable: 1, wait: 1m, renew: 2s}", gateKC(n.name))))
	b := newLogind(t)
	run := t.TempDir()
	env := k.nodeEnv(t, n.name, cfg)
	stop := slotAgent(t, append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + b.bus.Address()}, env...), run, "")
	defer stop()
	r := waitCmd(t, startCmd(t, b.bus, env, run, "shutdown", "-r", "+8", "--drain-timeout=10m"), "shutdown")
	if r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	h, _ := k.slotRecord(t).Holder(n.name)
	if h.When == nil || h.Phase != slots.ShuttingDown {
		t.Fatalf("after shutdown -r +8: %+v", h)
	}
	// The agent renews it once it is past its uncordon after boot (which
	// waited for the wrapper's drain lock); never freed meanwhile.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		h2, held := k.slotRecord(t).Holder(n.name)
		if !held {
			t.Fatalf("the schedule's slot was freed (beat %d when the wrapper left)", h.Beat)
		}
		if h2.Beat > h.Beat+1 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("30 s later: beat %d then %d: the agent did not keep the schedule's slot", h.Beat, h2.Beat)
		}
	}
	r = waitCmd(t, startCmd(t, b.bus, env, run, "shutdown", "-c"), "shutdown")
	if _, held := k.slotRecord(t).Holder(n.name); r.Code != 0 || held {
		t.Fatalf("shutdown -c: exit %d, slot held %v", r.Code, held)
	}
	stop()
}

// TestSlotsScheduleWithoutASlot: a reboot scheduled beyond drainTimeout
// (made through logind, as systemctl or a far shutdown -r leave it) is the
// node agent's to drain ahead of, and it takes a reboot slot first. With
// the only slot of the cluster taken by an admin's cordon on another node
// it waits within its budget, then cancels that schedule through logind:
// nothing cordoned, a GnshScheduleCancelled Event, no entry left in the
// Lease. Once the other node is back, the same schedule drains under a
// slot taken for it, and cancelling the schedule frees that slot.
func TestSlotsScheduleWithoutASlot(t *testing.T) {
	k := startCluster(t)
	gateKC := k.gnshIdentity(t)
	n := k.newNode(t, "sched-a")
	other := k.newNode(t, "sched-b")
	n.replicaSet("web", 1, podOpts{})
	n.waitRunning(1)
	other.adminCordon()
	run := t.TempDir()
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 252, ScheduleFile: filepath.Join(run, "systemd", "shutdown", "scheduled")})
	// slots.queue: never: the schedule is cancelled, not deferred
	// (TestSlotsScheduleDeferred).
	cfg := writeConfig(t, config("node: "+n.name, "drainTimeout: 12s", gated("slots: {maxUnavailable: 1, renew: 2s, queue: never}", gateKC(n.name))))
	env := k.nodeEnv(t, n.name, cfg)
	a := startAgentIn(t, run, append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, env...))
	a.waitStatus("nothing to uncordon after boot", 30*time.Second)

	obj := bus.Connect(t).Object(logindtest.LogindName, logindtest.LogindPath)
	schedule := func() time.Time {
		t.Helper()
		at := time.Now().Add(20 * time.Second).Truncate(time.Microsecond)
		if err := obj.Call(logindtest.LogindInterface+".ScheduleShutdown", 0, "reboot", uint64(at.UnixMicro())).Err; err != nil {
			t.Fatal(err)
		}
		return at
	}
	at := schedule()
	a.waitStatus("STATUS=idle: cancelled the scheduled reboot for ", 40*time.Second)
	if now := time.Now(); !now.Before(at) {
		t.Errorf("cancelled %s after the schedule's time", now.Sub(at))
	}
	if typ, _ := ld.Scheduled(); typ != "" {
		t.Errorf("still scheduled: %q", typ)
	}
	n.wantCordon("")
	if rec := k.slotRecord(t); len(rec.Holders) != 0 || len(rec.Waiters) != 0 {
		t.Errorf("record after the refusal: %+v", rec)
	}
	n.wantEvents(slots.ReasonWaiting, "GnshScheduleCancelled")

	// The other node back: the schedule drains under its own slot.
	if _, err := k.admin.CoreV1().Nodes().Patch(ctxFor(t, time.Minute), other.name, types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	at = schedule()
	a.waitStatus("STATUS=drained ahead of the scheduled reboot", 40*time.Second)
	h, held := k.slotRecord(t).Holder(n.name)
	if !held || h.When == nil || !h.When.Equal(at) || h.Phase != slots.ShuttingDown {
		t.Fatalf("holder %+v (held %v) for the schedule at %s", h, held, at.Format(time.RFC3339Nano))
	}
	n.wantCordon("reboot")
	if err := obj.Call(logindtest.LogindInterface+".CancelScheduledShutdown", 0).Err; err != nil {
		t.Fatal(err)
	}
	// The follower undoes the cordon, or the agent's look for orphaned
	// cordons does (the drain that made it is over), whichever comes
	// first; the keeper frees the slot.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		_, held := k.slotRecord(t).Holder(n.name)
		if unsched, _ := n.cordon(); !held && !unsched {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("30 s after the schedule was cancelled: slot %+v, node %+v", k.slotRecord(t), n.get().Spec)
		}
	}
	log := a.stop()
	for _, want := range []string{
		"gnsh: agent: draining ahead of the scheduled reboot for ",
		"gnsh: waiting for a reboot slot (place 1 in the queue of gnsh/reboot-slots)",
		"gnsh: agent: cancelled the scheduled reboot for ",
		": no reboot slot within ",
		"cluster limit 1: sched-b (cordoned",
		"gnsh: agent: drained ahead of the scheduled reboot for ",
		"gnsh: freed the reboot slot of sched-a in gnsh/reboot-slots: the reboot it was taken for did not happen and nothing relies on it",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}
