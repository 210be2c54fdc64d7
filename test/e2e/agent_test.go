//go:build e2e

package e2e

// The node agent as a real systemd service: `gnsh agent` run by
// install/systemd/gnsh.service (enabled, so it starts at every boot) in an
// nspawn container that is a Node of a local control plane (kwok playing
// its kubelet), across a reboot of that container. The container's root
// is an overlay on the cached rootfs that survives the reboot
// (persistentRoot); after `systemctl reboot` (or gnsh's `reboot`) nspawn
// exits 133 and the test boots the same root again: a new boot ID, and the
// agent starts by itself. Each case checks through the real API server
// (the Node, Events, the audit log) and the agent's journal.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// agentDelay is InhibitDelayMaxSec in the agent cases: the agent drains
	// within it less 2 s (agent.DrainBudget), enough for the pods' 2 s
	// grace; the stand-in kubelet lock holds the shutdown for all of it.
	agentDelay = 8
	agentUnit  = "gnsh.service"
	// What the agent tells systemd (STATUS=) once its shutdown guard holds
	// its delay lock and the uncordon step after boot is done (its outcome
	// follows: "; uncordoned NODE after boot").
	agentIdleStatus = "holding a delay lock on shutdown; idle"
)

// agentCP is TestAgentE2E's control plane (one Node per case and suite).
var agentCP = &sharedCP{}

// agentCase is one case of TestAgentE2E, run on each suite.
type agentCase struct {
	name    string
	slow    bool // mostly sleeps for a minute or more: the slow lane
	wrapper bool // gnsh installed over reboot/poweroff/halt/shutdown
	gate    bool // kubelet.conf points at a gate (a TCP relay the test can close) in front of the API server
	// kubelet: the stand-in lock looks like kubelet's (who "kubelet", its
	// why) and /var/lib/kubelet/config.yaml asks for a shutdown grace
	// period within InhibitDelayMaxSec, as gnsh doctor expects of a node.
	kubelet bool
	// realKubelet: the node runs the real kubelet on fakecri in place of
	// the stand-in lock and kwok (TestKubeletE2E, kubelet_test.go);
	// noAgent: gnsh.service is not installed (a stock node).
	realKubelet, noAgent bool
	run                  func(a *agentRun)
	why                  string
}

func agentCases() []agentCase {
	return []agentCase{
		{name: "api_down_at_boot", slow: true, gate: true, run: apiDownAtBoot,
			why: "the API server is unreachable for a minute after boot: the agent retries with backoff (logged at most every 30 s) and uncordons within one backoff step of it coming back"},
		{name: "systemctl_reboot", run: systemctlReboot,
			why: "systemctl reboot bypasses the wrapper: the agent drains on PrepareForShutdown before the container goes down, and uncordons after the next boot"},
		{name: "admin_cordon_kept", run: adminCordonKept,
			why: "an admin's cordon (kubectl) survives a reboot cycle: the agent leaves it"},
		{name: "gnsh_drain_kept", wrapper: true, run: gnshDrainKept,
			why: "a `gnsh drain` maintenance cordon survives a reboot through the wrapper: the agent leaves it; gnsh uncordon lifts it"},
		{name: "wrapper_drains_once", wrapper: true, run: wrapperDrainsOnce,
			why: "reboot through the wrapper with the agent running: one cordon and one eviction per pod (the agent sees the wrapper's marker), uncordoned after boot"},
		{name: "shutdown_+2_drain_ahead", wrapper: true, slow: true, run: shutdownAhead,
			why: "shutdown -r +2 with drainTimeout 90s: the agent drains at about the deadline - 90 s; shutdown -c uncordons"},
		{name: "cancelled_while_stopped", wrapper: true, slow: true, run: cancelledWhileStopped,
			why: "the agent drained ahead of shutdown -r +2, was stopped, and the schedule was cancelled over the bus (not through the wrapper): started again, the agent undoes gnsh's cordon for it"},
		{name: "wrapper_killed", wrapper: true, run: wrapperKilled,
			why: "no other user can take gnsh's locks; reboot killed with SIGKILL mid-drain: the agent undoes its cordon within seconds (no reboot), then reboot drains and hands off and the agent uncordons after the boot"},
		{name: "reboot_during_agent_undo", wrapper: true, gate: true, run: rebootDuringAgentUndo,
			why: "reboot typed while the agent holds the drain lock for an undo that the hung API server drags out (4×apiTimeout): not refused; it reads its Node before the reboot slot and the drain lock, meets the hung API server there, goes on without a drain and hands off"},
		{name: "reboot_during_agent_drain", wrapper: true, slow: true, run: rebootDuringAgentDrain,
			why: "reboot typed while the agent drains ahead of shutdown -r +2 (held up by a PDB): it waits for the agent instead of being refused, uses its drain and hands off"},
		{name: "chaos", wrapper: true, gate: true, slow: true, run: chaos,
			why: "reboots through random ways (reboot, shutdown -r now, systemctl reboot) with random faults (API cut mid-drain, an admin's cordon, the agent restarted, the wrapper killed): never refused, never left cordoned by gnsh (GNSH_E2E_CHAOS_CYCLES, GNSH_E2E_CHAOS_SEED)"},
		{name: "unit_sandbox", run: unitSandbox,
			why: "gnsh.service's own sandbox: the agent starts without /etc/gnsh; a probe under its [Service] lines writes and renames in /etc/gnsh (the gate token) and /run/gnsh, and cannot write /run/systemd/reboot-param or elsewhere"},
		{name: "doctor", kubelet: true, run: doctor,
			why: "gnsh doctor reports the gap on stock bullseye (exit 1) and passes once gnsh is installed over the four commands and the agent runs"},
	}
}

// agentRun is one running agent case: its containers (one per boot), its
// Node and pods, and the facts the checks compare.
type agentRun struct {
	t       *testing.T
	tc      agentCase
	suite   string
	gnsh    string
	dir     string
	root    string     // the persistent root (overlay) the container boots from
	c       *container // the current boot
	d       *drainCase // the Node, its pods, the admin client
	gate    *gate
	boots   []string // boot IDs, one per boot
	nodeUsr string
	row     *agentRow
}

type agentRow struct {
	suite, name, result         string
	boot1, reboot, boot2, after time.Duration
	what                        string
	total                       time.Duration
}

var (
	agentRowsMu sync.Mutex
	agentRows   []agentRow
)

// TestAgentE2E runs the agent cases on both suites: fast cases in one lane
// (GNSH_E2E_AGENT_PARALLEL containers at a time, default 3: they mostly
// wait for logind's delay and the reboot), slow ones in another
// (GNSH_E2E_SLOW_PARALLEL, default 2), both at once.
func TestAgentE2E(t *testing.T) {
	suites := e2eSuites()
	gnsh := needGnsh(t)
	if n := staticNote(gnsh); n != "" {
		t.Logf("WARNING: %s", n)
	}
	needRootfs(t, suites)
	agentCP.parent = t

	fast, slow := envInt("GNSH_E2E_AGENT_PARALLEL", 3), envInt("GNSH_E2E_SLOW_PARALLEL", 2)
	start := time.Now()
	var jobs []laneJob
	for _, suite := range suites {
		for _, tc := range agentCases() {
			jobs = append(jobs, laneJob{name: suite + "/" + tc.name, slow: tc.slow,
				run: func(t *testing.T) { runAgentCase(t, suite, tc, gnsh) }})
		}
	}
	runInLanes(t, jobs, fast, slow)

	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %-24s %-6s %7s %8s %7s %8s %7s  %s\n", "suite", "case", "result", "boot 1", "reboot", "boot 2", "after", "total", "after boot 2")
	agentRowsMu.Lock()
	sort.Slice(agentRows, func(i, j int) bool {
		if agentRows[i].suite != agentRows[j].suite {
			return agentRows[i].suite > agentRows[j].suite
		}
		return agentRows[i].name < agentRows[j].name
	})
	for _, r := range agentRows {
		fmt.Fprintf(&b, "%-9s %-24s %-6s %7s %8s %7s %8s %7s  %s\n", r.suite, r.name, r.result, secs(r.boot1), secs(r.reboot),
			secs(r.boot2), secs(r.after), secs(r.total), r.what)
	}
	agentRowsMu.Unlock()
	fmt.Fprintf(&b, "wall time for all agent cases: %v (fast lane %d, slow lane %d)\n", time.Since(start).Round(100*time.Millisecond), fast, slow)
	_ = os.WriteFile(filepath.Join(resultsRoot, "agent-summary.txt"), []byte(b.String()), 0o644)
	t.Logf("summary (also in %s):\n%s", filepath.Join(resultsRoot, "agent-summary.txt"), b.String())
}

func runAgentCase(t *testing.T, suite string, tc agentCase, gnsh string) {
	caseStart := time.Now()
	rootfs, _, err := rootfsFor(suite)
	if err != nil {
		t.Fatal(err)
	}
	dir := freshResults(t, "", suite, "agent_"+tc.name)
	t.Logf("expectation: %s", tc.why)
	row := &agentRow{suite: suite, name: tc.name, result: "FAIL"}
	defer func() {
		row.total = time.Since(caseStart)
		if t.Skipped() {
			row.result = "skip"
		} else if !t.Failed() {
			row.result = "ok"
		}
		agentRowsMu.Lock()
		agentRows = append(agentRows, *row)
		agentRowsMu.Unlock()
		if t.Failed() {
			markFailed()
		}
	}()

	// The cluster side first: the Node must exist before the agent starts.
	name := strings.ReplaceAll(strings.ReplaceAll(tc.name, "_", "-"), "+", "")
	d := &drainCase{suite: suite, node: "agent-" + name + "-" + suite, peer: "agent-" + name + "-" + suite + "-peer",
		ns: "agent-" + name + "-" + suite, shared: agentCP}
	d.connect(t)
	a := &agentRun{t: t, tc: tc, suite: suite, gnsh: gnsh, dir: dir, d: d, nodeUsr: "system:node:" + d.node, row: row}
	if tc.gate {
		a.gate = newGate(t, d.cp.Server)
		d.server = a.gate.URL()
	}
	d.populate(t)

	t.Cleanup(func() { a.audit(time.Time{}, time.Time{}) }) // keeps audit.jsonl with the artefacts
	a.root = persistentRoot(t, rootfs, dir)
	a.c = boot(t, suite, rootfs, dir, bootOpts{gnsh: gnsh, persist: a.root, delay: agentDelay})
	row.boot1 = a.c.booted
	a.boots = append(a.boots, a.bootID())
	a.install()
	tc.run(a)
}

// ---------------------------------------------------------------- install

// install puts the rig's units, the kubelet's credentials and gnsh.service
// into the persistent root, enables them (so that they start at the next
// boot by themselves) and starts them now: the dbus-monitor, the stand-in
// kubelet's delay lock, then the agent, waiting until it holds its own
// delay lock (its uncordon step is done: nothing to do on a schedulable
// Node).
func (a *agentRun) install() {
	t, c := a.t, a.c
	unit, err := os.ReadFile(filepath.Join("..", "..", "install", "systemd", agentUnit))
	if err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(a.dir, "rig", "units")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(stage, agentUnit), string(unit))
	// dbus-monitor for every boot, appending to /rig/mon.log (append:
	// needs systemd ≥ 240; both suites have it).
	mustWrite(t, filepath.Join(stage, "rig-mon.service"), `[Unit]
Description=gnsh e2e: dbus-monitor of logind
After=dbus.service
[Service]
ExecStart=/usr/bin/dbus-monitor --system "type='signal',interface='org.freedesktop.login1.Manager'" "type='method_call',destination='org.freedesktop.login1'"
StandardOutput=append:/rig/`+monLog+`
StandardError=journal
[Install]
WantedBy=multi-user.target
`)
	// The stand-in kubelet: a shutdown delay lock held from every boot on.
	who, why := inhibitWho, "e2e delay lock"
	if a.tc.kubelet {
		who, why = "kubelet", "Kubelet needs time to handle node shutdown" // kubelet's own words
		mustWrite(t, filepath.Join(stage, "kubelet-config.yaml"), "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+
			fmt.Sprintf("shutdownGracePeriod: %ds\nshutdownGracePeriodCriticalPods: 2s\n", agentDelay-2))
		c.must("sh", "-ec", "mkdir -p /var/lib/kubelet && install -m 0644 /rig/units/kubelet-config.yaml /var/lib/kubelet/config.yaml && rm /rig/units/kubelet-config.yaml")
	}
	inhibitUnit := "rig-inhibit.service"
	if a.tc.realKubelet {
		inhibitUnit = "" // kubelet.service holds kubelet's own lock (node-setup.sh)
	}
	agent := agentUnit
	if a.tc.noAgent {
		agent = ""
	}
	mustWrite(t, filepath.Join(stage, "rig-inhibit.service"), `[Unit]
Description=gnsh e2e: a kubelet-like shutdown delay lock
After=systemd-logind.service dbus.service
[Service]
ExecStart=/usr/bin/systemd-inhibit --what=shutdown --mode=delay "--who=`+who+`" "--why=`+why+`" /bin/sleep infinity
[Install]
WantedBy=multi-user.target
`)
	c.must("sh", "-ec", `install -m 0644 /rig/units/*.service /etc/systemd/system/
		systemctl daemon-reload
		systemctl enable --quiet rig-mon.service `+inhibitUnit+` `+agent+`
		test -z "`+agent+`" || test -L /etc/systemd/system/multi-user.target.wants/`+agent+`
		systemctl start rig-mon.service`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.in(5*time.Second, "busctl", "call", "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Peer", "Ping")
		if b, _ := os.ReadFile(filepath.Join(c.dir, "rig", monLog)); strings.Contains(string(b), "member=Ping") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dbus-monitor not capturing after 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a.tc.realKubelet {
		a.expectKubeletLock()
	} else {
		c.must("systemctl", "start", "rig-inhibit.service")
		a.waitInhibitor(who)
		if v := c.prop("InhibitDelayMaxUSec"); v != fmt.Sprintf("t %d", agentDelay*1000000) {
			t.Fatalf("InhibitDelayMaxUSec = %q, want %d s", v, agentDelay)
		}
	}
	if a.tc.wrapper {
		c.must("sh", "-ec", `for c in reboot poweroff halt shutdown; do
			p=$(command -v "$c"); ln -sfn /usr/local/sbin/gnsh "$p"
			[ "$(readlink "$p")" = /usr/local/sbin/gnsh ] || { echo "$p not replaced" >&2; exit 1; }
		done`)
	}
	if !a.tc.realKubelet {
		a.d.installKubeconfig(c) // the real kubelet's node has it already
	}
	c.setupAt = time.Now()
	if a.tc.noAgent {
		return
	}
	if r := c.in(30*time.Second, "systemctl", "start", agentUnit); r.rc != 0 {
		st := c.in(10*time.Second, "systemctl", "status", "--no-pager", "-l", agentUnit)
		t.Fatalf("systemctl start %s: %s\n%s", agentUnit, r, st.stdout)
	}
	a.waitAgentIdle(30 * time.Second)
	a.expectAgentBootID()
}

// expectAgentBootID checks that the agent started in this boot sees this
// boot's ID ("agent VERSION started (boot ID)").
func (a *agentRun) expectAgentBootID() {
	want := a.boots[len(a.boots)-1]
	m := regexp.MustCompile(`agent \S+ started \(boot ([0-9a-f-]+)\)`).FindStringSubmatch(a.journal(true))
	switch {
	case m == nil:
		a.t.Errorf("no \"agent … started (boot …)\" line in the agent's journal of this boot")
	case m[1] != want:
		a.t.Errorf("the agent sees boot ID %s, the container's boot is %s (the host's is %s): see ReadOnlyPaths= in install/systemd/gnsh.service", m[1], want, hostBootID())
	default:
		a.c.logf("the agent sees this boot's ID %s", m[1])
	}
}

func hostBootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// waitInhibitor waits until logind lists a delay lock of who.
func (a *agentRun) waitInhibitor(who string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := a.c.in(5*time.Second, "busctl", "call", "org.freedesktop.login1", "/org/freedesktop/login1",
			"org.freedesktop.login1.Manager", "ListInhibitors")
		if strings.Contains(r.stdout, `"`+who+`"`) && strings.Contains(r.stdout, `"delay"`) {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("no delay lock of %q listed after 20 s: %s", who, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// status returns the agent's StatusText and ActiveState.
func (a *agentRun) status() (text, state string) {
	r := a.c.in(10*time.Second, "systemctl", "show", "-p", "StatusText", "-p", "ActiveState", agentUnit)
	for _, l := range strings.Split(r.stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "StatusText="); ok {
			text = v
		} else if v, ok := strings.CutPrefix(l, "ActiveState="); ok {
			state = v
		}
	}
	return text, state
}

// waitAgentIdle waits until the agent holds its delay lock (STATUS= says
// so, and logind lists it with who=gnsh): the uncordon step after boot is
// over and the shutdown guard is on.
func (a *agentRun) waitAgentIdle(timeout time.Duration) {
	t := a.t
	deadline := time.Now().Add(timeout)
	for {
		text, state := a.status()
		if strings.HasPrefix(text, agentIdleStatus) && !strings.Contains(text, "waiting for") {
			a.waitInhibitor("gnsh")
			a.c.logf("agent idle: StatusText=%q", text)
			return
		}
		if state == "failed" || time.Now().After(deadline) {
			st := a.c.in(10*time.Second, "systemctl", "status", "--no-pager", "-l", agentUnit)
			t.Fatalf("agent not idle (StatusText %q, ActiveState %s) after %v:\n%s", text, state, timeout, st.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (a *agentRun) bootID() string {
	r := a.c.must("cat", "/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(r.stdout)
}

// ---------------------------------------------------------------- reboot cycle

// reboot runs argv (a reboot) and waits for the container to go down with
// 133; it returns when the command was issued.
func (a *agentRun) reboot(argv ...string) time.Time {
	t, c := a.t, a.c
	trigger := time.Now()
	r := c.run(60*time.Second, argv...)
	if r.rc != 0 {
		t.Errorf("%s: %s", strings.Join(argv, " "), r)
	}
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if l != "" {
			c.logf("%s said: %s", argv[0], l)
		}
	}
	if !c.waitExit(60*time.Second - time.Since(trigger)) {
		t.Fatalf("container did not go down within 60 s of %s", strings.Join(argv, " "))
	}
	if c.exitCode != 133 {
		t.Fatalf("nspawn exit code %d, want 133 (reboot)", c.exitCode)
	}
	a.row.reboot = c.exitAt.Sub(trigger)
	c.logf("%s → container down in %.2f s (rc 133)", strings.Join(argv, " "), a.row.reboot.Seconds())
	return trigger
}

// bootAgain boots the persistent root again and checks the boot ID is new.
func (a *agentRun) bootAgain() {
	a.c = a.c.bootAgain(a.t)
	a.row.boot2 = a.c.booted
	id := a.bootID()
	for _, old := range a.boots {
		if id == old {
			a.t.Fatalf("boot %d has the boot ID %s of an earlier boot", len(a.boots)+1, id)
		}
	}
	a.boots = append(a.boots, id)
	a.c.logf("boot %d: boot ID %s (earlier: %v)", len(a.boots), id, a.boots[:len(a.boots)-1])
	deadline := time.Now().Add(20 * time.Second)
	for !regexp.MustCompile(`agent \S+ started`).MatchString(a.journal(true)) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	a.expectAgentBootID()
}

// ---------------------------------------------------------------- cluster checks

func (a *agentRun) node() *corev1.Node {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := a.d.admin.CoreV1().Nodes().Get(ctx, a.d.node, metav1.GetOptions{})
	if err != nil {
		a.t.Fatalf("get Node %s: %v", a.d.node, err)
	}
	return n
}

type cordonRecord struct {
	Action, User, BootID string
}

// cordonRecord returns gnsh's annotation on the Node (ok false if none).
func (a *agentRun) cordonRecord(n *corev1.Node) (cordonRecord, bool) {
	var r cordonRecord
	v, ok := n.Annotations[cordonAnnoKey]
	if !ok {
		return r, false
	}
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		a.t.Errorf("%s = %q: %v", cordonAnnoKey, v, err)
	}
	return r, true
}

// expectGnshCordon checks the Node is cordoned by gnsh for action in boot.
func (a *agentRun) expectGnshCordon(action, bootID string) {
	n := a.node()
	rec, ok := a.cordonRecord(n)
	a.c.logf("Node %s: unschedulable %v, %s %q", n.Name, n.Spec.Unschedulable, cordonAnnoKey, n.Annotations[cordonAnnoKey])
	if !n.Spec.Unschedulable || !ok || rec.Action != action || (bootID != "" && rec.BootID != bootID) {
		a.t.Errorf("Node %s: unschedulable %v, record %+v (present %v); want cordoned by gnsh for a %s in boot %s",
			n.Name, n.Spec.Unschedulable, rec, ok, action, bootID)
	}
}

// gnshEvents returns gnsh's Events on the Node by reason, with messages.
func (a *agentRun) gnshEvents() map[string][]string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := a.d.admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + a.d.node})
	if err != nil {
		a.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range evs.Items {
		if e.Source.Component == "gnsh" {
			out[e.Reason] = append(out[e.Reason], e.Message)
		}
	}
	return out
}

// waitUncordoned waits until the Node is schedulable without gnsh's
// annotation, then checks the GnshUncordoned Event. It returns when it saw
// the Node so.
func (a *agentRun) waitUncordoned(timeout time.Duration) time.Time {
	t := a.t
	deadline := time.Now().Add(timeout)
	for {
		n := a.node()
		_, annotated := n.Annotations[cordonAnnoKey]
		if !n.Spec.Unschedulable && !annotated {
			at := time.Now()
			a.c.logf("Node %s schedulable, %s gone", n.Name, cordonAnnoKey)
			// The agent posts the Event right after its patch: give it a moment.
			evs := a.gnshEvents()
			for wait := time.Now().Add(20 * time.Second); len(evs["GnshUncordoned"]) == 0 && time.Now().Before(wait); evs = a.gnshEvents() {
				time.Sleep(250 * time.Millisecond)
			}
			if len(evs["GnshUncordoned"]) != 1 {
				t.Errorf("GnshUncordoned Events: %q, want one", evs["GnshUncordoned"])
			} else {
				a.c.logf("Event GnshUncordoned (%.1f s after the Node was seen schedulable): %s", time.Since(at).Seconds(), evs["GnshUncordoned"][0])
			}
			return at
		}
		if time.Now().After(deadline) {
			text, state := a.status()
			t.Fatalf("Node %s not uncordoned %v after boot (unschedulable %v, %s %q); agent %s: %q\n%s", n.Name, timeout,
				n.Spec.Unschedulable, cordonAnnoKey, n.Annotations[cordonAnnoKey], state, text, a.journal(true))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// expectLeft waits until the agent's uncordon step is over in this boot
// (it holds its delay lock again) and checks that it said why it left the
// cordon (a line matching want), that the Node is still cordoned and that
// no GnshUncordoned Event was posted.
func (a *agentRun) expectLeft(want string) {
	t := a.t
	a.waitAgentIdle(60 * time.Second)
	j := a.journal(true)
	if !regexp.MustCompile(want).MatchString(j) {
		t.Errorf("the agent's journal of this boot has no line matching %q:\n%s", want, j)
	}
	n := a.node()
	a.c.logf("Node %s after the agent's uncordon step: unschedulable %v, %s %q", n.Name, n.Spec.Unschedulable, cordonAnnoKey, n.Annotations[cordonAnnoKey])
	if !n.Spec.Unschedulable {
		t.Errorf("Node %s is schedulable: the agent lifted a cordon it must leave", n.Name)
	}
	if evs := a.gnshEvents(); len(evs["GnshUncordoned"]) != 0 {
		t.Errorf("GnshUncordoned Event posted: %q", evs["GnshUncordoned"])
	}
}

// journal returns the agent's journal lines (this boot's only, or all),
// "SECONDS.MICROS host gnsh[pid]: text".
func (a *agentRun) journal(thisBoot bool) string {
	args := []string{"journalctl", "--no-pager", "-o", "short-unix", "-u", agentUnit}
	if thisBoot {
		args = append(args, "-b")
	}
	return a.c.in(20*time.Second, args...).stdout
}

// audit returns the control plane's audit records in [from, to] made as
// the case's Node, or naming its Node or namespace; kept in audit.jsonl.
func (a *agentRun) audit(from, to time.Time) []auditEvent {
	evs, err := readAudit(a.d.cp.AuditLog)
	if err != nil {
		a.t.Fatalf("audit log: %v", err)
	}
	var out []auditEvent
	var raw []byte
	for _, e := range evs {
		r := e.ObjectRef
		if e.User.Username != a.nodeUsr && r.Namespace != a.d.ns && r.Name != a.d.node {
			continue
		}
		raw = append(append(raw, e.raw...), '\n')
		if at := e.StageTimestamp.Time; !at.Before(from) && !at.After(to) {
			out = append(out, e)
		}
	}
	_ = os.WriteFile(filepath.Join(a.dir, "audit.jsonl"), raw, 0o644)
	return out
}

// drainAudit is what the audit log shows of a drain by the Node's identity.
type drainAudit struct {
	cordons   []time.Time          // node patches by the Node's identity (200)
	evictions map[string]int       // pod -> eviction requests
	accepted  map[string]time.Time // pod -> accepted eviction (201)
	gone      map[string]time.Time // pod -> final delete
	lines     []string
}

func (a *agentRun) drainAudit(from, to time.Time) drainAudit {
	da := drainAudit{evictions: map[string]int{}, accepted: map[string]time.Time{}, gone: map[string]time.Time{}}
	for _, e := range a.audit(from, to) {
		r, code, at := e.ObjectRef, e.ResponseStatus.Code, e.StageTimestamp.Time
		line := fmt.Sprintf("%+8.3fs %s %s %s/%s/%s by %s: %d", at.Sub(from).Seconds(), e.Verb, r.Resource, r.Namespace, r.Name, r.Subresource, e.User.Username, code)
		switch {
		case r.Resource == "nodes" && r.Name == a.d.node && e.Verb == "patch" && e.User.Username == a.nodeUsr:
			if code == 200 {
				da.cordons = append(da.cordons, at)
			}
		case r.Resource == "pods" && r.Subresource == "eviction" && r.Namespace == a.d.ns && e.Verb == "create":
			da.evictions[r.Name]++
			if code == 201 {
				da.accepted[r.Name] = at
			}
		case r.Resource == "pods" && r.Subresource == "" && r.Namespace == a.d.ns && e.Verb == "delete" && code == 200:
			da.gone[r.Name] = at
		case e.Verb == "get" || e.Verb == "list" || e.Verb == "watch":
			continue // the admin's polling, the drain's reads
		}
		da.lines = append(da.lines, line)
	}
	return da
}

// ---------------------------------------------------------------- cases

// systemctlReboot (case 1): `systemctl reboot` with the wrapper not
// installed; the agent drains on PrepareForShutdown(true), before the
// container goes down; after the next boot it uncordons.
func systemctlReboot(a *agentRun) {
	t, c := a.t, a.c
	trigger := a.reboot("systemctl", "reboot")
	pfs, ok := pfsAfter(c, trigger)
	if !ok {
		t.Errorf("no PrepareForShutdown(true) after systemctl reboot")
	}
	da := a.drainAudit(trigger, c.exitAt)
	a.timeline(trigger, pfs, da)
	a.expectAgentDrain(trigger, pfs, da)
	a.expectGnshCordon("reboot", a.boots[0])
	for _, want := range []string{
		"shutdown under way that bypassed gnsh: draining within",
		"drained " + a.d.node + " in ",
		"released the delay lock: systemd-logind goes on with the shutdown",
	} {
		if !strings.Contains(c.consoleText(), want) {
			t.Errorf("the agent did not say %q (console.log of boot 1)", want)
		}
	}
	evs := a.gnshEvents()
	c.logf("gnsh's Events after the drain: %v", evs)
	if len(evs["GnshDrainStarted"]) != 1 || len(evs["GnshDrainFinished"]) != 1 {
		t.Errorf("Events GnshDrainStarted %d, GnshDrainFinished %d; want one each", len(evs["GnshDrainStarted"]), len(evs["GnshDrainFinished"]))
	}

	a.bootAgain()
	at := a.waitUncordoned(60 * time.Second)
	a.row.after = at.Sub(a.c.started)
	a.row.what = "uncordoned"
	a.expectJournal(`uncordoned after boot: cordoned by gnsh for a reboot requested by`)
	a.waitAgentIdle(30 * time.Second)
}

// adminCordonKept (case 2): an admin cordons with kubectl (field manager
// kubectl-cordon) before `systemctl reboot`; the agent still drains (no
// cordon of its own), and leaves the admin's cordon after the next boot.
func adminCordonKept(a *agentRun) {
	t, c := a.t, a.c
	out := a.d.cp.Kubectl(t, nil, "cordon", a.d.node)
	c.logf("kubectl %s", strings.TrimSpace(out))
	trigger := a.reboot("systemctl", "reboot")
	pfs, _ := pfsAfter(c, trigger)
	da := a.drainAudit(trigger, c.exitAt)
	a.timeline(trigger, pfs, da)
	if len(da.cordons) != 0 {
		t.Errorf("%d node patches by %s during the shutdown; the Node was cordoned already: want none", len(da.cordons), a.nodeUsr)
	}
	for _, p := range a.d.webOnNode {
		if _, ok := da.accepted[p]; !ok {
			t.Errorf("no accepted eviction of %s before the container went down", p)
		}
	}
	a.bootAgain()
	a.expectLeft(`is cordoned, but not by gnsh .*left as it is`)
	a.row.what = "admin's cordon left"
	if n := a.node(); n.Annotations[cordonAnnoKey] != "" {
		t.Errorf("gnsh's annotation on an admin's cordon: %q", n.Annotations[cordonAnnoKey])
	}
}

// gnshDrainKept (case 3): `gnsh drain` (a maintenance cordon, action
// drain), then `reboot` through the wrapper; after the next boot the agent
// leaves the cordon; `gnsh uncordon` lifts it.
func gnshDrainKept(a *agentRun) {
	t, c := a.t, a.c
	r := c.run(60*time.Second, "gnsh", "drain")
	if r.rc != 0 {
		t.Fatalf("gnsh drain: %s", r)
	}
	a.expectGnshCordon("drain", a.boots[0])
	a.reboot("reboot")
	a.expectGnshCordon("drain", a.boots[0])
	a.bootAgain()
	a.expectLeft(`is cordoned by gnsh drain \(requested by .*\): left until 'gnsh uncordon'`)
	a.expectGnshCordon("drain", a.boots[0])
	a.row.what = "gnsh drain's cordon left"
	r = a.c.run(30*time.Second, "gnsh", "uncordon")
	if r.rc != 0 {
		t.Errorf("gnsh uncordon: %s", r)
	}
	if n := a.node(); n.Spec.Unschedulable || n.Annotations[cordonAnnoKey] != "" {
		t.Errorf("after gnsh uncordon: unschedulable %v, %s %q", n.Spec.Unschedulable, cordonAnnoKey, n.Annotations[cordonAnnoKey])
	}
}

// wrapperDrainsOnce (case 4): `reboot` through the wrapper with the agent
// running: the wrapper drains and leaves its marker; the agent, on
// PrepareForShutdown, sees it and does not drain again. After the next
// boot the agent uncordons.
func wrapperDrainsOnce(a *agentRun) {
	t, c := a.t, a.c
	trigger := a.reboot("reboot")
	pfs, _ := pfsAfter(c, trigger)
	da := a.drainAudit(trigger, c.exitAt)
	a.timeline(trigger, pfs, da)
	if len(da.cordons) != 2 {
		t.Errorf("%d node patches by %s between reboot and the container going down, want exactly 2 (the wrapper's cordon, then its record of the finished drain)", len(da.cordons), a.nodeUsr)
	}
	for _, p := range a.d.webOnNode {
		if n := da.evictions[p]; n != 1 {
			t.Errorf("%d eviction requests for %s, want exactly 1", n, p)
		}
	}
	for p, n := range da.evictions {
		if !contains(a.d.webOnNode, p) {
			t.Errorf("%d eviction requests for %s, which must stay", n, p)
		}
	}
	if !strings.Contains(c.consoleText(), "already drained for by gnsh reboot at") {
		t.Errorf("the agent did not say the wrapper drained already (console.log)")
	}
	if strings.Contains(c.consoleText(), "shutdown under way that bypassed gnsh") {
		t.Errorf("the agent drained although the wrapper had")
	}
	a.expectGnshCordon("reboot", a.boots[0])
	a.bootAgain()
	at := a.waitUncordoned(60 * time.Second)
	a.row.after = at.Sub(a.c.started)
	a.row.what = "uncordoned"
	a.waitAgentIdle(30 * time.Second)
}

// apiDownAtBoot (case 5, slow): kubelet.conf names a gate in front of the
// API server. After the drain of `systemctl reboot`, while the container
// is down, the gate drops every connection; the container boots; a
// minute later the gate lets connections through again, and the agent
// must uncordon within one backoff step (30 s) plus slack. Its journal
// must show the retries logged at most every 30 s.
func apiDownAtBoot(a *agentRun) {
	t := a.t
	a.reboot("systemctl", "reboot")
	a.expectGnshCordon("reboot", a.boots[0])
	a.gate.setDown(true)
	downAt := time.Now()
	a.bootAgain()
	const down = 60 * time.Second
	time.Sleep(time.Until(downAt.Add(down)))
	if n := a.node(); !n.Spec.Unschedulable {
		t.Fatalf("Node uncordoned while the API server was unreachable for the agent")
	}
	attempts := dials(a.gate.setDown(false))
	upAt := time.Now()
	at := a.waitUncordoned(30*time.Second + 30*time.Second)
	a.row.after = at.Sub(upAt)
	a.row.what = fmt.Sprintf("uncordoned %.1f s after the API server came back", at.Sub(upAt).Seconds())
	a.c.logf("the API server was unreachable for %v; uncordoned %.1f s after it came back", upAt.Sub(downAt).Round(time.Second), at.Sub(upAt).Seconds())
	if at.Sub(upAt) > 30*time.Second+15*time.Second {
		t.Errorf("uncordoned %.1f s after the API server came back, want within the 30 s backoff cap + 15 s", at.Sub(upAt).Seconds())
	}

	// The agent's connection attempts while the gate was closed: the
	// backoff doubles from about 1 s (1, 2, 4, 8, 16 s, then 30 s, which a
	// minute down does not reach: the next attempt after 16 s comes about
	// 30 s later, after the gate opened) and never exceeds 30 s.
	var gaps []string
	for i := 1; i < len(attempts); i++ {
		gaps = append(gaps, fmt.Sprintf("%.1f", attempts[i].Sub(attempts[i-1]).Seconds()))
	}
	a.c.logf("%d connection attempts while down; gaps (s): %s", len(attempts), strings.Join(gaps, " "))
	if len(attempts) < 4 || len(attempts) > 15 {
		t.Errorf("%d connection attempts in the %v down, want a backoff's 4-15 (1, 2, 4, 8, 16, 30 s…)", len(attempts), down)
	}
	for i := 2; i < len(attempts); i++ {
		prev, g := attempts[i-1].Sub(attempts[i-2]), attempts[i].Sub(attempts[i-1])
		if g > 31*time.Second || g < min(prev*3/2, 29*time.Second) || g > prev*5/2+time.Second {
			t.Errorf("gap %d between attempts %.1f s after %.1f s: want the backoff doubling up to 30 s (gaps %s)", i, g.Seconds(), prev.Seconds(), strings.Join(gaps, " "))
		}
	}

	// Its log: one line, then at most one every 30 s, saying how many
	// attempts were held back.
	var when []time.Time
	var lines []string
	for _, l := range strings.Split(a.journal(true), "\n") {
		if !strings.Contains(l, "retrying in") {
			continue
		}
		f := strings.Fields(l)
		sec, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		when = append(when, time.Unix(0, int64(sec*1e9)))
		lines = append(lines, l)
	}
	a.c.logf("the agent's retry lines:\n%s", strings.Join(lines, "\n"))
	if len(when) < 2 {
		t.Errorf("%d retry lines in the agent's journal over %v down, want at least 2", len(when), down)
	}
	for i := 1; i < len(when); i++ {
		if g := when[i].Sub(when[i-1]); g < 29*time.Second {
			t.Errorf("retry lines %.1f s apart, want at most one every 30 s:\n%s\n%s", g.Seconds(), lines[i-1], lines[i])
		}
	}
	if len(lines) >= 2 && !strings.Contains(strings.Join(lines[1:], "\n"), "more attempts since the last line") {
		t.Errorf("no retry line says how many attempts it held back")
	}
	if !strings.Contains(strings.Join(lines, "\n"), "retrying in 30s") {
		t.Errorf("no retry line says \"retrying in 30s\": the backoff did not reach its cap")
	}
	a.expectJournal(`uncordoned after boot`)
	a.waitAgentIdle(30 * time.Second)
}

// shutdownAhead (case 6): shutdown -r +2 through the wrapper with
// drainTimeout 90s: the wrapper does not drain (beyond drainTimeout) and
// says the agent will; the agent drains at about the deadline - 90 s, and
// shutdown -c uncordons.
func shutdownAhead(a *agentRun) {
	t, c := a.t, a.c
	a.drainedAhead()
	if r := c.run(30*time.Second, "shutdown", "-c"); r.rc != 0 {
		t.Fatalf("shutdown -c: %s", r)
	}
	a.waitUncordoned(30 * time.Second)
	c.terminate()
}

// drainedAhead schedules shutdown -r +2 through the wrapper with
// drainTimeout 90s and waits for the agent's drain ahead of it (about 30 s
// later), checking when it came and its cordon record.
func (a *agentRun) drainedAhead() {
	t, c := a.t, a.c
	c.must("sh", "-ec", `mkdir -p /etc/gnsh && printf 'drainTimeout: 90s\n' > /etc/gnsh/config.yaml`)
	c.must("systemctl", "restart", agentUnit)
	a.waitAgentIdle(30 * time.Second)
	sched := time.Now()
	if r := c.run(30*time.Second, "shutdown", "-r", "+2"); r.rc != 0 {
		t.Fatalf("shutdown -r +2: %s", r)
	} else if !strings.Contains(r.stderr, "the node agent (gnsh.service) will drain the node at") {
		t.Errorf("shutdown -r +2 does not say that the agent will drain:\n%s", r.stderr)
	}
	_, due := c.scheduled()
	if due.IsZero() {
		t.Fatalf("nothing scheduled after shutdown -r +2")
	}
	// The drain is due at about due - 90 s (30 s after scheduling).
	deadline := due.Add(-90*time.Second + 30*time.Second)
	var cordonAt time.Time
	for time.Now().Before(deadline) {
		if n := a.node(); n.Spec.Unschedulable {
			cordonAt = time.Now()
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if cordonAt.IsZero() {
		t.Fatalf("no cordon by %v (due %v, drainTimeout 90 s)", deadline, due)
	}
	c.logf("cordoned %.1f s after scheduling, %.1f s before the deadline", cordonAt.Sub(sched).Seconds(), due.Sub(cordonAt).Seconds())
	if due.Sub(cordonAt) > 100*time.Second {
		t.Errorf("drained %.1f s before the deadline, want about 90 s", due.Sub(cordonAt).Seconds())
	}
	a.expectGnshCordon("reboot", a.boots[0])
}

// cancelledWhileStopped: the cancel of a schedule the agent drained for
// happens while the agent is stopped, and not through the wrapper (whose
// shutdown -c undoes the cordon itself): busctl calls logind's
// CancelScheduledShutdown. Started again, the agent finds gnsh's cordon
// for a schedule of this boot with nothing scheduled and undoes it.
func cancelledWhileStopped(a *agentRun) {
	t, c := a.t, a.c
	a.drainedAhead()
	c.must("systemctl", "stop", agentUnit)
	if r := c.run(30*time.Second, "busctl", "call", "org.freedesktop.login1", "/org/freedesktop/login1",
		"org.freedesktop.login1.Manager", "CancelScheduledShutdown"); r.rc != 0 || strings.TrimSpace(r.stdout) != "b true" {
		t.Fatalf("CancelScheduledShutdown over the bus: %s", r)
	}
	if _, due := c.scheduled(); !due.IsZero() {
		t.Fatalf("still scheduled for %v after the cancel", due)
	}
	a.expectGnshCordon("reboot", a.boots[0]) // nobody undid it yet
	c.must("systemctl", "start", agentUnit)
	a.waitUncordoned(30 * time.Second)
	// Either of the agent's looks may come first: the schedule follower's
	// at its start, or the orphan watcher's (the drain's note names the
	// stopped agent's process).
	if j := a.journal(true); !strings.Contains(j, "no shutdown is scheduled (one was cancelled while the node agent was not running); gnsh's cordon for it undone") &&
		!strings.Contains(j, "undone: no drain runs, no shutdown is pending or under way, and the gnsh that made it is gone") {
		t.Errorf("the agent's journal does not say why it uncordoned:\n%s", j)
	}
	c.terminate()
}

// doctor (case 7): gnsh doctor against the real systemd and logind of each
// suite, the stand-in lock looking like kubelet's and a kubelet config
// asking for 6 s (InhibitDelayMaxSec is 8 s). With the stock commands it
// must fail on bullseye (they bypass logind); with gnsh installed over the
// four commands and the agent running it must pass on both suites.
func doctor(a *agentRun) {
	t, c := a.t, a.c
	r := c.run(30*time.Second, "gnsh", "doctor")
	c.logf("gnsh doctor (stock commands), rc %d:\n%s%s", r.rc, r.stdout, r.stderr)
	switch {
	case a.suite == "bullseye" && r.rc != 1:
		t.Errorf("gnsh doctor on stock bullseye: rc %d, want 1 (the gap)", r.rc)
	case a.suite == "bullseye" && !regexp.MustCompile(`(?m)^fail +commands \(root\)`).MatchString(r.stdout):
		t.Errorf("gnsh doctor on stock bullseye does not fail the commands check:\n%s", r.stdout)
	}
	c.must("sh", "-ec", `for c in reboot poweroff halt shutdown; do ln -sfn /usr/local/sbin/gnsh "$(command -v "$c")"; done`)
	r = c.run(30*time.Second, "gnsh", "doctor")
	c.logf("gnsh doctor (gnsh installed, agent running), rc %d:\n%s%s", r.rc, r.stdout, r.stderr)
	if r.rc != 0 {
		t.Errorf("gnsh doctor with gnsh installed and the agent running: rc %d, want 0:\n%s%s", r.rc, r.stdout, r.stderr)
	}
	for _, want := range []string{`(?m)^ok +kubelet inhibitor`, `(?m)^ok +commands \(root\)`, `(?m)^ok +agent +the agent runs \(gnsh.service is active\) and holds its delay lock`} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("gnsh doctor's output has no line matching %q", want)
		}
	}
	a.row.what = "doctor: stock vs installed"
	c.terminate()
}

// ---------------------------------------------------------------- shared checks

// expectAgentDrain checks the agent's drain in the audit log: it began
// after PrepareForShutdown(true) (cordon, then an accepted eviction of
// every web pod), and every pod was gone before the container went down.
func (a *agentRun) expectAgentDrain(trigger, pfs time.Time, da drainAudit) {
	t, c := a.t, a.c
	if len(da.cordons) != 2 {
		t.Errorf("%d node patches by %s, want 2 (the cordon, then the record of the finished drain)", len(da.cordons), a.nodeUsr)
	}
	if len(da.cordons) > 0 && !pfs.IsZero() && da.cordons[0].Before(pfs) {
		t.Errorf("cordon at %s before PrepareForShutdown at %s: the agent must drain on the signal", da.cordons[0].Format("15:04:05.000000"), pfs.Format("15:04:05.000000"))
	}
	for _, p := range a.d.webOnNode {
		at, ok := da.accepted[p]
		switch {
		case !ok:
			t.Errorf("no accepted eviction of %s by %s before the container went down", p, a.nodeUsr)
		case len(da.cordons) > 0 && at.Before(da.cordons[0]):
			t.Errorf("eviction of %s before the cordon", p)
		}
		if g, ok := da.gone[p]; !ok || g.After(c.exitAt) {
			t.Errorf("pod %s not gone before the container went down (final delete %v)", p, g)
		}
	}
	for p := range da.evictions {
		if !contains(a.d.webOnNode, p) {
			t.Errorf("eviction of %s, which must stay", p)
		}
	}
}

// timeline logs and saves what happened from trigger on.
func (a *agentRun) timeline(trigger, pfs time.Time, da drainAudit) {
	lines := append([]string(nil), da.lines...)
	if !pfs.IsZero() {
		lines = append(lines, fmt.Sprintf("%+8.3fs logind: PrepareForShutdown(true)", pfs.Sub(trigger).Seconds()))
	}
	lines = append(lines, fmt.Sprintf("%+8.3fs container exited (rc %d)", a.c.exitAt.Sub(trigger).Seconds(), a.c.exitCode))
	sort.SliceStable(lines, func(i, j int) bool { return lineSecs(lines[i]) < lineSecs(lines[j]) })
	s := strings.Join(lines, "\n")
	_ = os.WriteFile(filepath.Join(a.dir, "timeline.txt"), []byte(s+"\n"), 0o644)
	a.c.logf("timeline (seconds after the reboot command):\n%s", s)
}

func lineSecs(l string) float64 {
	f := strings.Fields(l)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(strings.TrimSuffix(f[0], "s"), 64)
	return v
}

// expectJournal checks the agent's journal of this boot for a line
// matching re.
func (a *agentRun) expectJournal(re string) {
	j := a.journal(true)
	if !regexp.MustCompile(re).MatchString(j) {
		a.t.Errorf("the agent's journal of this boot has no line matching %q:\n%s", re, j)
	}
}

// pfsAfter returns the first PrepareForShutdown(true) after t.
func pfsAfter(c *container, t time.Time) (time.Time, bool) {
	for _, m := range c.messages() {
		if m.kind == "signal" && m.member == "PrepareForShutdown" && strings.Contains(m.body, "boolean true") && m.at.After(t) {
			return m.at, true
		}
	}
	return time.Time{}, false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------- gate

// gate is a TCP relay on loopback in front of the API server: TLS goes
// end to end (the client still talks to the API server, with its own
// identity), so the audit log is unchanged. Closed, it accepts each
// connection and resets it at once (the client sees the API server
// unreachable), recording when each attempt came.
type gate struct {
	t        *testing.T
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	down     bool
	hang     bool
	conns    map[net.Conn]bool
	attempts []time.Time
}

func newGate(t *testing.T, server string) *gate {
	t.Helper()
	up := strings.TrimPrefix(server, "https://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{t: t, ln: ln, upstream: up, conns: map[net.Conn]bool{}}
	go g.serve()
	t.Cleanup(func() {
		ln.Close()
		g.mu.Lock()
		for c := range g.conns {
			c.Close()
		}
		g.mu.Unlock()
	})
	t.Logf("gate %s → %s", ln.Addr(), up)
	return g
}

func (g *gate) URL() string { return "https://" + g.ln.Addr().String() }

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		g.mu.Lock()
		if g.down {
			g.attempts = append(g.attempts, time.Now())
			g.mu.Unlock()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // RST
			}
			c.Close()
			continue
		}
		g.conns[c] = true
		hang := g.hang
		g.mu.Unlock()
		if hang {
			continue // accepted, never relayed: the client's request times out
		}
		go g.relay(c)
	}
}

// setHang makes the gate accept connections and relay nothing (true: an
// API server that does not answer; the connections relayed so far are
// reset, so that clients reconnect into the hang) or relay again (false:
// the held connections are closed).
func (g *gate) setHang(hang bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hang = hang
	for c := range g.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
		delete(g.conns, c)
	}
	g.t.Logf("gate hanging: %v", hang)
}

func (g *gate) relay(c net.Conn) {
	defer func() {
		c.Close()
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
	}()
	u, err := net.DialTimeout("tcp", g.upstream, 5*time.Second)
	if err != nil {
		return
	}
	g.mu.Lock()
	g.conns[u] = true
	g.mu.Unlock()
	defer func() {
		u.Close()
		g.mu.Lock()
		delete(g.conns, u)
		g.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
}

// setDown closes (true) or opens (false) the gate. Closing resets every
// relayed connection; opening returns the attempts made while closed.
func (g *gate) setDown(down bool) []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = down
	if down {
		g.attempts = nil
		for c := range g.conns {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
		}
		g.t.Logf("gate closed: connections reset")
		return nil
	}
	g.t.Logf("gate open after %d attempts", len(g.attempts))
	return append([]time.Time(nil), g.attempts...)
}

// dials folds connection attempts that come within 250 ms of the one
// before into it: Go's HTTP transport dials again at once when a
// connection is reset before any answer (an idempotent GET is retried on
// a new connection), so one attempt of the agent's can be two dials.
func dials(at []time.Time) []time.Time {
	var out []time.Time
	for _, t := range at {
		if len(out) > 0 && t.Sub(out[len(out)-1]) < 250*time.Millisecond {
			continue
		}
		out = append(out, t)
	}
	return out
}
