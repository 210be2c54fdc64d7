//go:build e2e

package e2e

// Agent cases for the review's defects: a wrapper killed mid-drain (its
// cordon undone by the agent), locks no other user can hold, a reboot typed
// while the agent drains (waited for, not refused), and a loop of reboots
// through random ways with random faults (GNSH_E2E_CHAOS_CYCLES cycles,
// GNSH_E2E_CHAOS_SEED to replay one).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gnsh/gnsh/test/internal/kwok"
)

// background starts argv inside the container, detached (its own
// session), its output in /rig/NAME.log (on the host: c.dir/rig/NAME.log).
func (a *agentRun) background(name string, argv ...string) {
	q := make([]string, len(argv))
	for i, s := range argv {
		q[i] = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	a.c.must("sh", "-c", "setsid "+strings.Join(q, " ")+" >/rig/"+name+".log 2>&1 </dev/null &")
}

// rigLog is what a background command wrote so far.
func (a *agentRun) rigLog(name string) string {
	b, _ := os.ReadFile(a.c.dir + "/rig/" + name + ".log")
	return string(b)
}

// waitFor polls cond every 100 ms for up to timeout.
func (a *agentRun) waitFor(what string, timeout time.Duration, cond func() bool) {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			a.t.Fatalf("waiting for %s: not within %v", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cordoned reports whether the Node is cordoned with gnsh's record.
func (a *agentRun) cordoned() bool {
	n := a.node()
	_, ok := a.cordonRecord(n)
	return n.Spec.Unschedulable && ok
}

// expectLocksRootOnly: user nobody can neither open nor hold the drain
// lock, the agent's lock or any file in /run/gnsh (flock(2) works on a
// read-only descriptor, so one that can open a lock can hold it).
func (a *agentRun) expectLocksRootOnly() {
	t, c := a.t, a.c
	// drain.flock is made by the first drain; the agent's lock and the
	// directory exist once the agent runs.
	r := c.must("stat", "-c", "%a %U %n", "/run/gnsh", "/run/gnsh/agent.flock")
	c.logf("lock directory: %s", strings.TrimSpace(r.stdout))
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(l)
		want := "600"
		if f[2] == "/run/gnsh" {
			want = "700"
		}
		if len(f) != 3 || f[0] != want || f[1] != "root" {
			t.Errorf("%s: mode %s owner %s, want %s root", f[len(f)-1], f[0], f[1], want)
		}
	}
	// Another user learns whether the agent runs from systemd instead.
	st := c.in(30*time.Second, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/local/sbin/gnsh", "status")
	if !strings.Contains(st.stdout, "agent runs          yes (from systemd; /run/gnsh/agent.flock is root's)") {
		t.Errorf("gnsh status as user nobody: %s", st)
	}
	for _, p := range []string{"/run/gnsh/drain.flock", "/run/gnsh/agent.flock"} {
		r := c.in(10*time.Second, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "flock", "--shared", "--nonblock", p, "true")
		if r.rc == 0 || !strings.Contains(r.stderr, "Permission denied") {
			t.Errorf("user nobody on %s: %s; want Permission denied", p, r)
		}
	}
}

// wrapperKilled (item 13, and item 1): user nobody cannot take gnsh's
// locks; then a reboot through the wrapper is killed with SIGKILL while it
// drains. Its cordon must not stay: the agent undoes it within a few
// seconds (the container stays up), saying why. Then the agent is
// restarted (it starts: nobody holds its lock) and a reboot through the
// wrapper drains and hands off, and the agent uncordons after the boot.
func wrapperKilled(a *agentRun) {
	t, c := a.t, a.c
	a.expectLocksRootOnly()
	// No budget in the way: evictions the killed wrapper had made count
	// as disruptions for up to 2 minutes (the disruption controller's
	// DisruptedPods), which would hold up the reboot after it.
	a.setPDB(0)
	a.addPods("slow", 2, 20) // the drain lasts about 20 s: time to kill it
	a.background("reboot", "reboot")
	a.waitFor("the wrapper's cordon", 20*time.Second, a.cordoned)
	killAt := time.Now()
	if r := c.in(10*time.Second, "pkill", "-KILL", "-x", "reboot"); r.rc != 0 {
		t.Fatalf("pkill -KILL reboot: %s\n%s", r, a.rigLog("reboot"))
	}
	c.logf("the wrapper killed mid-drain; it said:\n%s", a.rigLog("reboot"))
	a.expectGnshCordon("reboot", a.boots[0])
	at := a.waitUncordoned(30 * time.Second)
	a.row.what = fmt.Sprintf("killed wrapper's cordon undone %.1f s after the kill", at.Sub(killAt).Seconds())
	c.logf("%s", a.row.what)
	if at.Sub(killAt) > 20*time.Second {
		t.Errorf("uncordoned %.1f s after the kill, want within 20 s (the agent looks every 5 s)", at.Sub(killAt).Seconds())
	}
	if c.hasExited() {
		t.Fatal("the container went down: the killed wrapper's shutdown happened anyway")
	}
	a.expectJournal(`gnsh's cordon of \S+ for the reboot requested by .+ at \S+ undone: no drain runs, no shutdown is pending or under way, and the gnsh that made it is gone \(pid \d+\)`)
	c.must("systemctl", "restart", agentUnit)
	a.waitAgentIdle(30 * time.Second)
	a.reboot("reboot")
	a.expectGnshCordon("reboot", a.boots[0])
	a.bootAgain()
	a.waitUncordonedAny(60 * time.Second)
	// The agent posts its Event right after the patch: give it a moment.
	evs := a.gnshEvents()["GnshUncordoned"]
	for wait := time.Now().Add(20 * time.Second); len(evs) < 2 && time.Now().Before(wait); evs = a.gnshEvents()["GnshUncordoned"] {
		time.Sleep(250 * time.Millisecond)
	}
	if len(evs) != 2 {
		t.Errorf("GnshUncordoned Events %q, want two (the killed wrapper's cordon, the one after the boot)", evs)
	}
	a.waitAgentIdle(30 * time.Second)
}

// setPDB sets the web PodDisruptionBudget's minAvailable.
func (a *agentRun) setPDB(minAvailable int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	patch := fmt.Sprintf(`{"spec":{"minAvailable":%d}}`, minAvailable)
	if _, err := a.d.admin.PolicyV1().PodDisruptionBudgets(a.d.ns).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		a.t.Fatalf("PDB web minAvailable %d: %v", minAvailable, err)
	}
	a.c.logf("PDB web: minAvailable %d", minAvailable)
}

// addPods puts n more pods (NAME-1 …, label app=chaos: under no budget)
// of the web ReplicaSet on the node, each with grace seconds to end once
// evicted, and waits until kwok has them Running and Ready.
func (a *agentRun) addPods(name string, n int, grace int64) {
	t, d := a.t, a.d
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs, err := d.admin.AppsV1().ReplicaSets(d.ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := *metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	var names []string
	for i := 1; i <= n; i++ {
		p := drainPod(d.ns, fmt.Sprintf("%s-%d", name, i), d.node, map[string]string{"app": "chaos"}, ref)
		p.Spec.TerminationGracePeriodSeconds = &grace
		if _, err := d.admin.CoreV1().Pods(d.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
		names = append(names, p.Name)
	}
	for _, name := range names {
		for {
			p, err := d.admin.CoreV1().Pods(d.ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && kwok.RunningReady(p) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("pod %s not Running and Ready within 60 s: %v", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// rebootDuringAgentDrain (item 12): the agent drains ahead of shutdown -r +2
// (drainTimeout 90s), held up by the PodDisruptionBudget; the admin types
// reboot meanwhile. It must wait for the agent, not be refused; once the
// budget lets the agent's drain finish, reboot uses that outcome (no drain
// of its own) and hands off.
func rebootDuringAgentDrain(a *agentRun) {
	t, c := a.t, a.c
	a.setPDB(len(a.d.webOnNode) + 1) // every eviction refused
	a.drainedAhead()
	a.background("reboot", "reboot")
	a.waitFor("the wrapper to wait for the agent", 30*time.Second, func() bool {
		return strings.Contains(a.rigLog("reboot"), "waiting for the node agent (gnsh.service, pid ")
	})
	if c.hasExited() {
		t.Fatalf("the container went down before the agent's drain finished:\n%s", a.rigLog("reboot"))
	}
	a.setPDB(1) // the agent's drain can finish now
	if !c.waitExit(90 * time.Second) {
		t.Fatalf("container not down within 90 s; reboot said:\n%s", a.rigLog("reboot"))
	}
	out := a.rigLog("reboot")
	c.logf("reboot said:\n%s", out)
	if c.exitCode != 133 {
		t.Errorf("nspawn exit code %d, want 133", c.exitCode)
	}
	for _, want := range []string{"to finish its drain of ", "the node agent is done (", "; not draining again"} {
		if !strings.Contains(out, want) {
			t.Errorf("reboot's output lacks %q", want)
		}
	}
	if strings.Contains(out, "another gnsh is draining") {
		t.Errorf("reboot was refused for the agent's drain")
	}
	a.row.what = "reboot waited for the agent's drain"
	a.bootAgain()
	a.waitUncordoned(60 * time.Second)
}

// rebootDuringAgentUndo (item 12, the agent's bookkeeping as the holder):
// a reboot killed mid-drain leaves its cordon; the API server then stops
// answering (the gate holds every connection), so the agent's undo of that
// cordon holds the drain lock until its requests time out (4×apiTimeout).
// reboot typed meanwhile must not be refused: it reads its Node before it
// asks for a reboot slot and takes the drain lock (the slot comes first),
// meets the hung API server there, and goes on without a drain and
// without waiting for the agent's lock, and hands off.
func rebootDuringAgentUndo(a *agentRun) {
	t, c := a.t, a.c
	a.setPDB(0)
	a.addPods("slow", 2, 20)
	a.background("killed", "reboot")
	a.waitFor("the wrapper's cordon", 20*time.Second, a.cordoned)
	a.gate.setHang(true) // before the agent's next look (every 5 s)
	if r := c.in(10*time.Second, "pkill", "-KILL", "-x", "reboot"); r.rc != 0 {
		t.Fatalf("pkill -KILL reboot: %s", r)
	}
	// The agent takes the lock for its undo within 5 s.
	a.waitFor("the agent's undo to take the drain lock", 20*time.Second, func() bool {
		r := c.in(5*time.Second, "cat", "/run/gnsh/drain.flock")
		return strings.Contains(r.stdout, `"kind":"agent"`)
	})
	trigger := time.Now()
	a.background("reboot", "reboot")
	if !c.waitExit(120 * time.Second) {
		t.Fatalf("container not down within 120 s; reboot said:\n%s", a.rigLog("reboot"))
	}
	out := a.rigLog("reboot")
	c.logf("reboot said (%.1f s):\n%s", c.exitAt.Sub(trigger).Seconds(), out)
	if c.exitCode != 133 {
		t.Errorf("nspawn exit code %d, want 133", c.exitCode)
	}
	for _, want := range []string{"gnsh: warning: API server unreachable (", "rebooting without draining"} {
		if !strings.Contains(out, want) {
			t.Errorf("reboot's output lacks %q", want)
		}
	}
	if strings.Contains(out, "another gnsh is draining") {
		t.Errorf("reboot was refused while the agent was busy")
	}
	a.row.what = fmt.Sprintf("reboot went on beside the agent's undo, down %.1f s after", c.exitAt.Sub(trigger).Seconds())
	a.gate.setHang(false)
	a.bootAgain()
	a.waitUncordonedAny(60 * time.Second)
	a.waitAgentIdle(30 * time.Second)
}

// ---------------------------------------------------------------- chaos

// chaos reboots the node again and again, each cycle one way (reboot,
// shutdown -r now, systemctl reboot) with one fault (none, the API server
// cut mid-drain, an admin's cordon, the agent restarted just before, the
// wrapper killed mid-drain), chosen from a seed it prints
// (GNSH_E2E_CHAOS_SEED replays it). After each cycle: no reboot refused;
// the node cordoned only by an admin's cordon; a killed wrapper's cordon
// undone without a reboot.
func chaos(a *agentRun) {
	t := a.t
	cycles := envInt("GNSH_E2E_CHAOS_CYCLES", 3)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GNSH_E2E_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("GNSH_E2E_CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("chaos: %d cycles, seed %d (replay: GNSH_E2E_CHAOS_SEED=%d GNSH_E2E_CHAOS_CYCLES=%d make chaos)", cycles, seed, seed, cycles)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	// The loop is about faults, not budgets: evictions a killed wrapper
	// had made count as disruptions for a while (the disruption
	// controller's DisruptedPods), and with the web budget the next
	// cycle's drain waited up to 80 s for them (seen on bullseye).
	a.setPDB(0)
	ways := [][]string{{"reboot"}, {"shutdown", "-r", "now"}, {"systemctl", "reboot"}}
	faults := []string{"none", "api-cut", "admin-cordon", "agent-restart", "wrapper-killed"}
	var done []string
	for i := 1; i <= cycles && !t.Failed(); i++ {
		way := ways[rng.IntN(len(ways))]
		fault := faults[rng.IntN(len(faults))]
		if fault == "wrapper-killed" && way[0] == "systemctl" {
			fault = "none" // no wrapper to kill
		}
		a.c.logf("chaos cycle %d/%d: %s with %s", i, cycles, strings.Join(way, " "), fault)
		a.chaosCycle(way, fault)
		done = append(done, strings.Join(way, " ")+"/"+fault)
	}
	a.row.what = fmt.Sprintf("seed %d: %s", seed, strings.Join(done, ", "))
}

func (a *agentRun) chaosCycle(way []string, fault string) {
	t, c := a.t, a.c
	switch fault {
	case "admin-cordon":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := a.d.admin.CoreV1().Nodes().Patch(ctx, a.d.node, types.StrategicMergePatchType,
			[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{FieldManager: "kubectl-cordon"}); err != nil {
			t.Fatal(err)
		}
	case "agent-restart":
		c.must("systemctl", "restart", "--no-block", agentUnit)
	}
	name := fmt.Sprintf("chaos-%d-%d", len(a.boots), time.Now().UnixMilli()%100000)
	// Pods to drain in every cycle (the evicted ones are gone for good:
	// nothing recreates them), slow enough that the faults hit mid-drain.
	a.addPods(name, 2, 6)
	a.background(name, way...)
	switch fault {
	case "api-cut":
		if way[0] == "systemctl" {
			time.Sleep(500 * time.Millisecond) // the guard cordons on PrepareForShutdown
		} else {
			a.waitFor("the cordon", 20*time.Second, func() bool { return a.node().Spec.Unschedulable })
		}
		a.gate.setDown(true)
	case "wrapper-killed":
		a.waitFor("the wrapper's cordon", 20*time.Second, a.cordoned)
		if r := c.in(10*time.Second, "pkill", "-KILL", "-x", way[0]); r.rc != 0 {
			t.Fatalf("pkill -KILL %s: %s", way[0], r)
		}
		a.waitUncordonedAny(30 * time.Second)
		if c.hasExited() {
			t.Fatal("the container went down after the wrapper was killed")
		}
		return
	}
	if !c.waitExit(90 * time.Second) {
		t.Fatalf("%s with %s: container not down within 90 s; it said:\n%s", strings.Join(way, " "), fault, a.rigLog(name))
	}
	if c.exitCode != 133 {
		t.Fatalf("%s with %s: nspawn exit code %d, want 133; it said:\n%s", strings.Join(way, " "), fault, c.exitCode, a.rigLog(name))
	}
	if out := a.rigLog(name); strings.Contains(out, "another gnsh is draining") {
		t.Errorf("%s with %s was refused:\n%s", strings.Join(way, " "), fault, out)
	}
	if fault == "api-cut" {
		a.gate.setDown(false)
	}
	a.bootAgain()
	if fault == "admin-cordon" {
		a.waitAgentIdle(60 * time.Second)
		if n := a.node(); !n.Spec.Unschedulable {
			t.Errorf("the admin's cordon was lifted")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := a.d.admin.CoreV1().Nodes().Patch(ctx, a.d.node, types.StrategicMergePatchType,
			[]byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{FieldManager: "kubectl-cordon"}); err != nil {
			t.Fatal(err)
		}
		return
	}
	a.waitUncordonedAny(60 * time.Second)
	a.waitAgentIdle(60 * time.Second)
}

// waitUncordonedAny waits until the Node is schedulable without gnsh's
// annotation (Events are not counted: a chaos run posts several).
func (a *agentRun) waitUncordonedAny(timeout time.Duration) {
	a.waitFor("the Node uncordoned", timeout, func() bool {
		n := a.node()
		_, annotated := n.Annotations[cordonAnnoKey]
		return !n.Spec.Unschedulable && !annotated
	})
}
