//go:build e2e

package e2e

// The real kubelet in the nodes: kubelet v1.37.1 (test/k8s/build.sh
// kubelet) on fakecri, set up in the container by
// test/k8s/kubelet/node-setup.sh, registers its Node with the local control
// plane, takes its own delay lock, raises InhibitDelayMaxSec with its
// 99-kubelet.conf and runs the drain rig's pods; on PrepareForShutdown it
// runs its Graceful Node Shutdown. These cases prove the mission against it
// (the stand-ins of the agent cases, systemd-inhibit and kwok, are not used
// for the node; the peer Node stays on kwok), on the API server's own
// audit clock, and measure what happens on a shutdown that bypasses the
// wrapper.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
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

	"github.com/gnsh/gnsh/test/internal/controlplane"
)

const (
	// kubelet's shutdownGracePeriod / shutdownGracePeriodCriticalPods (s):
	// kubelet raises InhibitDelayMaxSec to kubeletGrace; the agent drains
	// within it less 2 s.
	kubeletGrace    = 20
	kubeletCritical = 5
	// The rig's logind drop-in: logind's default InhibitDelayMaxSec, in a
	// file that sorts before kubelet's 99-kubelet.conf (which then wins).
	kubeletRigDelay  = 5
	kubeletRigDropIn = "50-gnsh-e2e.conf"
	// kubelet's line when its shutdown manager acts on PrepareForShutdown.
	kubeletShutdownLine = "Shutdown manager detected new shutdown event"
	nodeSetupPath       = "/usr/local/sbin/node-setup.sh"
)

// kubeletCP is TestKubeletE2E's control plane.
var kubeletCP = &sharedCP{}

type kubeletCase struct {
	agentCase
	suites []string // the suites it runs on (nil: every suite)
}

func kubeletCases() []kubeletCase {
	return []kubeletCase{
		{suites: []string{"bullseye"}, agentCase: agentCase{name: "stock_reboot", realKubelet: true, noAgent: true, run: kubeletStockReboot,
			why: "the gap: the stock reboot on systemd 247 never reaches logind: kubelet sees no shutdown, the container goes down at once, the pods stay Running in the API"}},
		{agentCase: agentCase{name: "gnsh_reboot", realKubelet: true, wrapper: true, run: kubeletGnshReboot,
			why: "reboot through gnsh: every web pod evicted and gone before kubelet's shutdown event (audit clock), kubelet then stops only the DaemonSet pod; after boot kubelet is Ready and the agent uncordons; gnsh doctor reads the real kubelet's config and lock"}},
		{suites: []string{"bullseye"}, agentCase: agentCase{name: "shutdown_+1_drain_ahead", realKubelet: true, wrapper: true, slow: true, run: kubeletDrainAhead,
			why: "shutdown -r +1 through gnsh with drainTimeout 30s: the agent drains ahead; every web pod is gone before kubelet's shutdown event at the deadline"}},
		{agentCase: agentCase{name: "systemctl_reboot_bypass", realKubelet: true, run: kubeletBypass,
			why: "systemctl reboot with the agent running, the wrapper not used: measured (bypass.txt): which pods kubelet stopped before the agent's eviction, the delays, the longest time without serving pods"}},
		{agentCase: agentCase{name: "systemctl_reboot_bypass_pdb", realKubelet: true, run: kubeletBypassPDB,
			why: "systemctl reboot with the agent running, the PDB allowing no eviction: kubelet kills every web pod anyway, the API server refuses the agent's evictions (429) until kubelet has written a pod's terminal phase; measured (bypass.txt)"}},
	}
}

var (
	kubeletRowsMu sync.Mutex
	kubeletRows   []agentRow
	kubeletNotes  []string // one line per bypass run, for kubelet-summary.txt
)

// TestKubeletE2E runs the real-kubelet cases (GNSH_E2E_KUBELET=0 skips
// them) in the agent cases' lanes.
func TestKubeletE2E(t *testing.T) {
	if os.Getenv("GNSH_E2E_KUBELET") == "0" {
		t.Skip("SKIP: GNSH_E2E_KUBELET=0")
	}
	suites := e2eSuites()
	gnsh := needGnsh(t)
	needRootfs(t, suites)
	start := time.Now()
	bin := controlplane.KubeletBin(t)
	t.Logf("kubelet set: %s (ready in %v)", bin, time.Since(start).Round(time.Millisecond))
	setup, err := filepath.Abs(filepath.Join("..", "k8s", "kubelet", "node-setup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	kubeletCP.parent = t

	fast, slow := envInt("GNSH_E2E_AGENT_PARALLEL", 3), envInt("GNSH_E2E_SLOW_PARALLEL", 2)
	var jobs []laneJob
	for _, suite := range suites {
		for _, tc := range kubeletCases() {
			if tc.suites != nil && !contains(tc.suites, suite) {
				continue
			}
			jobs = append(jobs, laneJob{name: suite + "/" + tc.name, slow: tc.slow,
				run: func(t *testing.T) { runKubeletCase(t, suite, tc.agentCase, gnsh, bin, setup) }})
		}
	}
	runInLanes(t, jobs, fast, slow)

	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %-24s %-6s %7s %8s %7s %7s  %s\n", "suite", "case", "result", "boot 1", "reboot", "boot 2", "total", "what")
	kubeletRowsMu.Lock()
	sort.Slice(kubeletRows, func(i, j int) bool {
		if kubeletRows[i].suite != kubeletRows[j].suite {
			return kubeletRows[i].suite > kubeletRows[j].suite
		}
		return kubeletRows[i].name < kubeletRows[j].name
	})
	for _, r := range kubeletRows {
		fmt.Fprintf(&b, "%-9s %-24s %-6s %7s %8s %7s %7s  %s\n", r.suite, r.name, r.result, secs(r.boot1), secs(r.reboot),
			secs(r.boot2), secs(r.total), r.what)
	}
	for _, n := range kubeletNotes {
		fmt.Fprintln(&b, n)
	}
	kubeletRowsMu.Unlock()
	fmt.Fprintf(&b, "wall time for all kubelet cases: %v (fast lane %d, slow lane %d)\n", time.Since(start).Round(100*time.Millisecond), fast, slow)
	_ = os.WriteFile(filepath.Join(resultsRoot, "kubelet-summary.txt"), []byte(b.String()), 0o644)
	t.Logf("summary (also in %s):\n%s", filepath.Join(resultsRoot, "kubelet-summary.txt"), b.String())
}

func runKubeletCase(t *testing.T, suite string, tc agentCase, gnsh, bin, setup string) {
	caseStart := time.Now()
	rootfs, _, err := rootfsFor(suite)
	if err != nil {
		t.Fatal(err)
	}
	dir := freshResults(t, "", suite, "kubelet_"+tc.name)
	t.Logf("expectation: %s", tc.why)
	row := &agentRow{suite: suite, name: tc.name, result: "FAIL"}
	defer func() {
		row.total = time.Since(caseStart)
		if t.Skipped() {
			row.result = "skip"
		} else if !t.Failed() {
			row.result = "ok"
		}
		kubeletRowsMu.Lock()
		kubeletRows = append(kubeletRows, *row)
		kubeletRowsMu.Unlock()
		if t.Failed() {
			markFailed()
		}
	}()

	name := strings.ReplaceAll(strings.ReplaceAll(tc.name, "_", "-"), "+", "")
	d := &drainCase{suite: suite, node: "kl-" + name + "-" + suite, peer: "kl-" + name + "-" + suite + "-peer",
		ns: "kl-" + name + "-" + suite, shared: kubeletCP, realKubelet: true}
	d.connect(t)
	a := &agentRun{t: t, tc: tc, suite: suite, gnsh: gnsh, dir: dir, d: d, nodeUsr: "system:node:" + d.node, row: row}
	t.Cleanup(func() { a.audit(time.Time{}, time.Time{}) })
	a.root = persistentRoot(t, rootfs, dir)
	a.c = boot(t, suite, rootfs, dir, bootOpts{gnsh: gnsh, persist: a.root, delay: kubeletRigDelay, logindName: kubeletRigDropIn,
		extra: []string{
			"--bind-ro=" + filepath.Join(bin, "kubelet") + ":/usr/local/bin/kubelet",
			"--bind-ro=" + filepath.Join(bin, "fakecri") + ":/usr/local/bin/fakecri",
			"--bind-ro=" + setup + ":" + nodeSetupPath,
		}})
	row.boot1 = a.c.booted
	a.boots = append(a.boots, a.bootID())

	// The node: its kubeconfig where kubeadm puts it, then kubelet, which
	// registers the Node; then the pods (bound to it) and the peer.
	d.installKubeconfig(a.c)
	port := kubeletPorts(t)
	setupAt := time.Now()
	a.c.must("sh", nodeSetupPath, d.node, strconv.Itoa(port), fmt.Sprintf("%ds", kubeletGrace), fmt.Sprintf("%ds", kubeletCritical))
	n := a.waitKubeletReady(setupAt, 60*time.Second)
	if _, fake := n.Annotations["kwok.x-k8s.io/node"]; fake {
		t.Fatalf("Node %s is annotated for kwok: it must be the real kubelet's", d.node)
	}
	a.c.logf("kubelet (port %d) registered Node %s, Ready %.1f s after node-setup.sh; kubelet %s, kernel %s", port, d.node,
		time.Since(setupAt).Seconds(), n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.KernelVersion)
	d.populate(t)
	a.c.logf("pods Running and Ready on the real kubelet: %v + DaemonSet pod node-agent-%s", d.webOnNode, suite)
	a.install()
	// Before any shutdown: kubelet's node Lease, as on a real node (see
	// waitNodeLease; it comes up to 10 s after kubelet's start).
	renewed := a.waitNodeLease(setupAt, 40*time.Second)
	a.c.logf("kubelet's %s", leaseNote(renewed, setupAt))
	tc.run(a)
}

// kubeletPorts returns a port P with P and P+1 free on loopback, between
// the control planes' range (10000-31999) and the ephemeral one.
func kubeletPorts(t *testing.T) int {
	for range 200 {
		p := 32000 + 2*rand.IntN(350)
		l1, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l1.Close()
		if err != nil {
			continue
		}
		l2.Close()
		return p
	}
	t.Fatal("no two free ports in 32000-32699")
	return 0
}

// waitKubeletReady waits until the Node exists and is Ready (posted by the
// kubelet of this boot: its Ready condition's heartbeat after since).
func (a *agentRun) waitKubeletReady(since time.Time, timeout time.Duration) *corev1.Node {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := a.d.admin.CoreV1().Nodes().Get(ctx, a.d.node, metav1.GetOptions{})
		cancel()
		if err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)) {
					return n
				}
			}
		}
		if time.Now().After(deadline) {
			j := a.c.in(20*time.Second, "journalctl", "--no-pager", "-b", "-u", "kubelet.service", "-n", "60")
			a.t.Fatalf("Node %s not Ready %v after kubelet started (%v); kubelet's journal:\n%s", a.d.node, timeout, err, j.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// expectKubeletLock checks kubelet's side of logind in this boot: its delay
// lock (who "kubelet"), its drop-in and InhibitDelayMaxSec raised to its
// shutdownGracePeriod from the rig's kubeletRigDelay.
func (a *agentRun) expectKubeletLock() {
	t, c := a.t, a.c
	a.waitInhibitor("kubelet")
	r := c.must("cat", "/etc/systemd/logind.conf.d/99-kubelet.conf")
	if !strings.Contains(r.stdout, fmt.Sprintf("InhibitDelayMaxSec=%d", kubeletGrace)) {
		t.Errorf("kubelet's 99-kubelet.conf does not set InhibitDelayMaxSec=%d:\n%s", kubeletGrace, r.stdout)
	}
	if v := c.prop("InhibitDelayMaxUSec"); v != fmt.Sprintf("t %d", kubeletGrace*1000000) {
		t.Fatalf("InhibitDelayMaxUSec = %q, want kubelet's %d s (raised from the rig's %d s)", v, kubeletGrace, kubeletRigDelay)
	}
	c.logf("kubelet holds its delay lock and raised InhibitDelayMaxSec from %d s to %d s (99-kubelet.conf)", kubeletRigDelay, kubeletGrace)
}

// ---------------------------------------------------------------- what the node said

// hostJournal reads the case's journal (every boot) from the host, lines
// "SECONDS.MICROS host ident[pid]: text", for journalctl's filter args.
func (a *agentRun) hostJournal(args ...string) string {
	argv := append([]string{"-D", filepath.Join(a.dir, "journal"), "-o", "short-unix", "--no-pager"}, args...)
	out, err := exec.Command("journalctl", argv...).Output()
	if err != nil {
		a.t.Logf("journalctl %s: %v", strings.Join(argv, " "), err)
	}
	return string(out)
}

// journalAt returns the time of the first line in j (short-unix) after
// from containing s: kubelet's own time in its klog header if the line has
// one (the journal receives lines in batches, milliseconds late), else the
// journal's.
func journalAt(j, s string, from time.Time) (time.Time, bool) {
	for _, l := range strings.Split(j, "\n") {
		if !strings.Contains(l, s) {
			continue
		}
		at, ok := klogTime(l, from)
		if !ok {
			at, ok = unixField(l)
		}
		if ok && !at.Before(from) {
			return at, true
		}
	}
	return time.Time{}, false
}

var klogHeader = regexp.MustCompile(`\b[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) `)

// klogTime reads a klog header ("I1128 05:26:35.492580"; the containers'
// local time is UTC) in the year of ref.
func klogTime(l string, ref time.Time) (time.Time, bool) {
	m := klogHeader.FindStringSubmatch(l)
	if m == nil {
		return time.Time{}, false
	}
	n := make([]int, 6)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return time.Date(ref.UTC().Year(), time.Month(n[0]), n[1], n[2], n[3], n[4], n[5]*1000, time.UTC), true
}

func unixField(l string) (time.Time, bool) {
	f := strings.Fields(l)
	if len(f) == 0 {
		return time.Time{}, false
	}
	sec, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, int64(sec*1e9)), true
}

// criCall is one of fakecri's log lines: its own UTC time (µs), the call
// and the pod (namespace/name).
type criCall struct {
	at        time.Time
	call, pod string
}

var criLine = regexp.MustCompile(`fakecri: (\S+Z) (RunPodSandbox|CreateContainer|StopContainer|StopContainer done|StopPodSandbox) pod (\S+)`)

// criCalls returns fakecri's calls logged in the case's journal after from.
func (a *agentRun) criCalls(from time.Time) []criCall {
	var out []criCall
	for _, l := range strings.Split(a.hostJournal("-u", "fakecri.service"), "\n") {
		m := criLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000000Z", m[1])
		if err != nil || at.Before(from) {
			continue
		}
		out = append(out, criCall{at: at, call: m[2], pod: m[3]})
	}
	return out
}

var killLine = regexp.MustCompile(`"Shutdown manager killing pod with gracePeriod" pod="[^/"]+/([^"]+)"`)

// kubeletKills returns, from kubelet's journal j, when its shutdown manager
// decided to kill each pod (its klog time) after from. The kill reaches the
// runtime (fakecri's StopContainer) later: through the pod's worker, up to
// 1.4 s later in these containers.
func kubeletKills(j string, from time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, l := range strings.Split(j, "\n") {
		m := killLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if at, ok := klogTime(l, from); ok && !at.Before(from) {
			if _, seen := out[m[1]]; !seen {
				out[m[1]] = at
			}
		}
	}
	return out
}

// firstStop returns each pod's first StopContainer after from.
func firstStop(calls []criCall) map[string]time.Time {
	out := map[string]time.Time{}
	for _, c := range calls {
		if c.call != "StopContainer" {
			continue
		}
		name := c.pod[strings.LastIndex(c.pod, "/")+1:]
		if _, ok := out[name]; !ok {
			out[name] = c.at
		}
	}
	return out
}

// shuttingDown returns when the API server recorded the kubelet's first
// node-status write with "node is shutting down" in [from, to] (the audit
// policy logs nodes/status writes with their body).
func (a *agentRun) shuttingDown(from, to time.Time) (time.Time, bool) {
	for _, e := range a.audit(from, to) {
		r := e.ObjectRef
		if r.Resource == "nodes" && r.Subresource == "status" && r.Name == a.d.node && e.User.Username == a.nodeUsr &&
			bytes.Contains(e.raw, []byte("node is shutting down")) {
			return e.StageTimestamp.Time, true
		}
	}
	return time.Time{}, false
}

// podStates returns "name: phase[, deleting][, DisruptionTarget reason]"
// for the case's pods, and whether each web pod on the node is still
// Running without a deletion or a DisruptionTarget.
func (a *agentRun) podStates() (map[string]string, map[string]bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := a.d.admin.CoreV1().Pods(a.d.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	states, running := map[string]string{}, map[string]bool{}
	for _, p := range l.Items {
		s := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			s += ", deleting"
		}
		dt := ""
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				dt = c.Reason
				s += ", DisruptionTarget " + c.Reason
			}
		}
		states[p.Name] = s
		running[p.Name] = p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && dt == ""
	}
	return states, running
}

// ---------------------------------------------------------------- cases

// kubeletStockReboot: no gnsh at all; the stock reboot of systemd 247.
func kubeletStockReboot(a *agentRun) {
	t, c := a.t, a.c
	trigger := a.reboot("reboot")
	if pfs, ok := pfsAfter(c, trigger); ok {
		t.Errorf("PrepareForShutdown(true) at %s after the stock reboot: the gap is not there", pfs.Format("15:04:05.000000"))
	}
	if at, ok := journalAt(a.hostJournal("-u", "kubelet.service"), kubeletShutdownLine, trigger); ok {
		t.Errorf("kubelet logged %q at %s: it must not see the stock reboot", kubeletShutdownLine, at.Format("15:04:05.000000"))
	}
	if calls := a.criCalls(trigger); len(calls) > 0 {
		t.Errorf("fakecri was called after the reboot command: %v", calls)
	}
	states, running := a.podStates()
	c.logf("pods after the stock reboot, container down: %v", states)
	for _, p := range append(append([]string(nil), a.d.webOnNode...), "node-agent-"+a.suite) {
		if !running[p] {
			t.Errorf("pod %s is %q after the stock reboot; the gap leaves it Running in the API", p, states[p])
		}
	}
	if sd, ok := a.shuttingDown(trigger, time.Now()); ok {
		t.Errorf("kubelet posted 'node is shutting down' at %s", sd.Format("15:04:05.000000"))
	}
	a.row.what = fmt.Sprintf("kubelet saw nothing; down in %.2f s; %d web pods + the DaemonSet pod still Running in the API", a.row.reboot.Seconds(), len(a.d.webOnNode))
}

// kubeletGnshReboot: gnsh doctor, then reboot through the wrapper, then
// the next boot.
func kubeletGnshReboot(a *agentRun) {
	t, c := a.t, a.c
	a.expectDoctorKubelet()

	trigger := a.reboot("reboot")
	pfs, ok := pfsAfter(c, trigger)
	if !ok {
		t.Errorf("no PrepareForShutdown(true) after gnsh's reboot")
	}
	da := a.drainAudit(trigger, c.exitAt)
	sd, ok := a.shuttingDown(trigger, c.exitAt)
	if !ok {
		t.Errorf("no node-status write by %s with 'node is shutting down' before the container went down", a.nodeUsr)
	}
	lines := []string{}
	if ok {
		lines = append(lines, fmt.Sprintf("%+8.3fs kubelet: Node Ready=False 'node is shutting down' (audit)", sd.Sub(trigger).Seconds()))
	}
	var lastGone time.Time
	for _, p := range a.d.webOnNode {
		if _, ok := da.accepted[p]; !ok {
			t.Errorf("no accepted eviction of %s", p)
		}
		g, ok := da.gone[p]
		switch {
		case !ok:
			t.Errorf("pod %s: no final delete before the container went down", p)
		case !sd.IsZero() && !g.Before(sd):
			t.Errorf("pod %s: final delete at %s, not before kubelet's 'node is shutting down' at %s", p, g.Format("15:04:05.000000"), sd.Format("15:04:05.000000"))
		}
		if g.After(lastGone) {
			lastGone = g
		}
	}
	kj := a.hostJournal("-u", "kubelet.service")
	event, evOK := journalAt(kj, kubeletShutdownLine, trigger)
	// gnsh's drain summary: the wrapper prints it on the terminal (not to
	// the journal) and posts it as its first Event after the last pod is
	// gone (GnshDrainFinished), which the audit log times.
	summary := a.gnshEventAfter(lastGone, c.exitAt)
	switch {
	case !evOK:
		t.Errorf("kubelet did not log %q", kubeletShutdownLine)
	case summary.IsZero():
		t.Errorf("no Event posted by gnsh after the last web pod was gone")
	case !event.After(summary):
		t.Errorf("kubelet's shutdown event (journal, %s) is not after gnsh's drain summary (its Event, audit, %s)", event.Format("15:04:05.000000"), summary.Format("15:04:05.000000"))
	default:
		c.logf("kubelet's shutdown event %.3f s after gnsh's drain summary (journal vs audit, one clock)", event.Sub(summary).Seconds())
	}
	if evOK {
		lines = append(lines, fmt.Sprintf("%+8.3fs kubelet: %s (journal)", event.Sub(trigger).Seconds(), kubeletShutdownLine))
	}
	// After its event kubelet stops only the DaemonSet pod.
	stopped := map[string]bool{}
	for _, cc := range a.criCalls(event) {
		if evOK && cc.call == "StopContainer" {
			stopped[cc.pod[strings.LastIndex(cc.pod, "/")+1:]] = true
		}
		lines = append(lines, fmt.Sprintf("%+8.3fs fakecri: %s %s", cc.at.Sub(trigger).Seconds(), cc.call, cc.pod))
	}
	if evOK && (len(stopped) != 1 || !stopped["node-agent-"+a.suite]) {
		t.Errorf("kubelet stopped %v after its shutdown event; want only the DaemonSet pod node-agent-%s", stopped, a.suite)
	}
	a.timeline(trigger, pfs, drainAudit{lines: append(da.lines, lines...)})
	if !lastGone.IsZero() && !sd.IsZero() {
		c.logf("last web pod gone %.3f s before kubelet's 'node is shutting down' (audit clock)", sd.Sub(lastGone).Seconds())
	}

	a.bootAgain()
	bootAt := a.c.started
	a.waitKubeletReady(bootAt, 60*time.Second)
	at := a.waitUncordoned(60 * time.Second)
	a.row.after = at.Sub(bootAt)
	ready, uncordon := a.readyAndUncordon(bootAt, at.Add(time.Second))
	what := fmt.Sprintf("pods gone %.2f s before kubelet's shutdown status; down in %.1f s", sd.Sub(lastGone).Seconds(), a.row.reboot.Seconds())
	if !ready.IsZero() && !uncordon.IsZero() {
		what += fmt.Sprintf("; after boot Ready +%.1f s, uncordoned %.1f s after Ready", ready.Sub(bootAt).Seconds(), uncordon.Sub(ready).Seconds())
		c.logf("after boot: kubelet posted Ready at +%.2f s, gnsh's agent uncordoned %.2f s after it (audit clock)", ready.Sub(bootAt).Seconds(), uncordon.Sub(ready).Seconds())
	}
	a.row.what = what
	a.expectJournal(`uncordoned after boot: cordoned by gnsh for a reboot requested by`)
	if n := a.kubeletTooWarnings(time.Time{}); n != 0 {
		t.Errorf("the agent warned %d times that the shutdown bypassed gnsh's commands; gnsh's reboot drained first", n)
	}
}

// gnshEventAfter returns when the API server recorded the first Event
// gnsh (user agent gnsh) created in [from, to].
func (a *agentRun) gnshEventAfter(from, to time.Time) time.Time {
	if from.IsZero() {
		return time.Time{}
	}
	for _, e := range a.audit(from, to) {
		if e.ObjectRef.Resource == "events" && e.Verb == "create" && strings.HasPrefix(e.UserAgent, "gnsh") {
			return e.StageTimestamp.Time
		}
	}
	return time.Time{}
}

// readyAndUncordon returns, from the audit log in [from, to], the kubelet's
// first node-status write with Ready=True ("KubeletReady") and the agent's
// first write of the Node (its uncordon, user agent gnsh).
func (a *agentRun) readyAndUncordon(from, to time.Time) (ready, uncordon time.Time) {
	for _, e := range a.audit(from, to) {
		r := e.ObjectRef
		if r.Resource != "nodes" || r.Name != a.d.node || e.User.Username != a.nodeUsr || (e.Verb != "patch" && e.Verb != "update") {
			continue
		}
		switch {
		case r.Subresource == "status" && ready.IsZero() && bytes.Contains(e.raw, []byte("KubeletReady")):
			ready = e.StageTimestamp.Time
		case r.Subresource == "" && uncordon.IsZero() && strings.Contains(e.UserAgent, "gnsh"):
			uncordon = e.StageTimestamp.Time
		}
	}
	return ready, uncordon
}

// expectDoctorKubelet: gnsh doctor finds the real kubelet's config through
// its --config and reports its delay lock.
func (a *agentRun) expectDoctorKubelet() {
	t, c := a.t, a.c
	r := c.run(30*time.Second, "gnsh", "doctor")
	c.logf("gnsh doctor on the real kubelet's node, rc %d:\n%s%s", r.rc, r.stdout, r.stderr)
	for _, want := range []string{
		`(?m)^ok +kubelet inhibitor +kubelet holds a delay lock on shutdown`,
		fmt.Sprintf(`(?m)^ok +kubelet grace period +shutdownGracePeriod %ds, shutdownGracePeriodCriticalPods %ds\s+\(/etc/kubernetes/kubelet-config.yaml\)`, kubeletGrace, kubeletCritical),
	} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("gnsh doctor's output has no line matching %q", want)
		}
	}
	// The bypass path with this node's kubelet, which stops the pods
	// within its own shutdownGracePeriod (the check's lines joined).
	bp := doctorCheck(r.stdout, "bypass path")
	if want := fmt.Sprintf(`^ok bypass path .*shutdownGracePeriod %ds\b`, kubeletGrace); !regexp.MustCompile(want).MatchString(bp) {
		t.Errorf("gnsh doctor's bypass path check %q does not match %q", bp, want)
	}
}

// kubeletDrainAhead: shutdown -r +1 through the wrapper, drainTimeout 30s:
// the agent drains at about the deadline - 30 s; logind reboots at the
// deadline and kubelet acts then, with every web pod gone.
func kubeletDrainAhead(a *agentRun) {
	t, c := a.t, a.c
	c.must("sh", "-ec", `mkdir -p /etc/gnsh && printf 'drainTimeout: 30s\n' > /etc/gnsh/config.yaml`)
	c.must("systemctl", "restart", agentUnit)
	a.waitAgentIdle(30 * time.Second)
	trigger := time.Now()
	r := c.run(30*time.Second, "shutdown", "-r", "+1")
	if r.rc != 0 {
		t.Fatalf("shutdown -r +1: %s", r)
	} else if !strings.Contains(r.stderr, "the node agent (gnsh.service) will drain the node at") {
		t.Errorf("shutdown -r +1 does not say that the agent will drain:\n%s", r.stderr)
	}
	_, due := c.scheduled()
	if due.IsZero() {
		t.Fatalf("nothing scheduled after shutdown -r +1")
	}
	c.logf("scheduled for %s (%.1f s after the command)", due.Format("15:04:05"), due.Sub(trigger).Seconds())
	if !c.waitExit(time.Until(due) + 60*time.Second) {
		t.Fatalf("container still up 60 s after the deadline %s", due.Format("15:04:05"))
	}
	if c.exitCode != 133 {
		t.Fatalf("nspawn exit code %d, want 133 (reboot)", c.exitCode)
	}
	a.row.reboot = c.exitAt.Sub(trigger)
	pfs, _ := pfsAfter(c, trigger)
	da := a.drainAudit(trigger, c.exitAt)
	sd, ok := a.shuttingDown(trigger, c.exitAt)
	if !ok {
		t.Errorf("no node-status write with 'node is shutting down' before the container went down")
	}
	var first, lastGone time.Time
	for _, p := range a.d.webOnNode {
		at, ok := da.accepted[p]
		if !ok {
			t.Errorf("no accepted eviction of %s", p)
		} else if first.IsZero() || at.Before(first) {
			first = at
		}
		g, ok := da.gone[p]
		if !ok || (!sd.IsZero() && !g.Before(sd)) {
			t.Errorf("pod %s: final delete %v, want before kubelet's 'node is shutting down' at %v", p, g, sd)
		}
		if g.After(lastGone) {
			lastGone = g
		}
	}
	if !first.IsZero() {
		// Ahead: before the deadline and logind's PrepareForShutdown (the
		// lead itself, about drainTimeout, is logged, not asserted).
		c.logf("the agent's first eviction %.1f s before the deadline (drainTimeout 30 s)", due.Sub(first).Seconds())
		if !first.Before(due) || (!pfs.IsZero() && !first.Before(pfs)) {
			t.Errorf("the agent's first eviction at %s is not ahead of the deadline %s and PrepareForShutdown %s",
				first.Format("15:04:05.000"), due.Format("15:04:05.000"), pfs.Format("15:04:05.000"))
		}
	}
	lines := []string{}
	if ok {
		lines = append(lines, fmt.Sprintf("%+8.3fs kubelet: Node Ready=False 'node is shutting down' (audit)", sd.Sub(trigger).Seconds()))
	}
	if ev, ok := journalAt(a.hostJournal("-u", "kubelet.service"), kubeletShutdownLine, trigger); ok {
		lines = append(lines, fmt.Sprintf("%+8.3fs kubelet: %s (journal)", ev.Sub(trigger).Seconds(), kubeletShutdownLine))
	} else {
		t.Errorf("kubelet did not log %q at the deadline", kubeletShutdownLine)
	}
	a.timeline(trigger, pfs, drainAudit{lines: append(da.lines, lines...)})
	a.row.what = fmt.Sprintf("drained %.0f s ahead; pods gone %.1f s before kubelet's shutdown status", due.Sub(first).Seconds(), sd.Sub(lastGone).Seconds())
}

// kubeletBypass: systemctl reboot, the agent running, the wrapper not
// used. Measured: for each web pod, whether the agent's eviction or
// kubelet's stop came first; from PrepareForShutdown to kubelet's first
// stop and to the agent's first eviction; the longest time with fewer web
// pods serving than the PDB's minAvailable, and with none of the node's.
func kubeletBypass(a *agentRun) {
	t, c := a.t, a.c
	trigger := a.reboot("systemctl", "reboot")
	pfs, ok := pfsAfter(c, trigger)
	if !ok {
		t.Fatalf("no PrepareForShutdown(true) after systemctl reboot")
	}
	da := a.drainAudit(trigger, c.exitAt)
	evictAt := map[string]time.Time{} // first eviction request of each pod reaching the API server (any answer)
	var firstEvict time.Time
	for _, e := range a.audit(trigger, c.exitAt) {
		r := e.ObjectRef
		if r.Resource == "pods" && r.Subresource == "eviction" && r.Namespace == a.d.ns && e.Verb == "create" {
			if _, seen := evictAt[r.Name]; !seen {
				evictAt[r.Name] = e.StageTimestamp.Time
			}
			if firstEvict.IsZero() {
				firstEvict = e.StageTimestamp.Time
			}
		}
	}
	calls := a.criCalls(trigger)
	stops := firstStop(calls)
	kj := a.hostJournal("-u", "kubelet.service")
	event, evOK := journalAt(kj, kubeletShutdownLine, trigger)
	if !evOK {
		t.Errorf("kubelet did not log %q", kubeletShutdownLine)
	}
	states, _ := a.podStates()
	c.logf("pods when the container was down: %v", states)

	kills := kubeletKills(kj, trigger)
	var firstKill, firstStopAt time.Time
	var b strings.Builder
	fmt.Fprintf(&b, "suite %s, systemctl reboot, kubelet shutdownGracePeriod %ds (critical %ds), pods' grace %ds, PDB minAvailable 1 over %d web pods (1 on a peer Node)\n",
		a.suite, kubeletGrace, kubeletCritical, drainGrace, drainWebPods+1)
	fmt.Fprintf(&b, "clock: the API server's audit timestamps (evictions, deletes, node status), kubelet's klog times (its decision to kill a pod), fakecri's own log times (StopContainer, the runtime's side), dbus-monitor (PrepareForShutdown): one host clock\n")
	kubeletFirst, refused, byKubelet := 0, 0, 0
	var lag time.Duration // longest time from kubelet's kill of a pod to the agent's accepted eviction of it
	var killSpread []time.Time
	ends := map[string]time.Time{} // when each pod stopped serving: kubelet's kill or its runtime stop, else its accepted eviction
	for _, p := range a.d.webOnNode {
		refused += da.evictions[p]
		if _, ok := da.accepted[p]; ok {
			refused--
		}
		if strings.Contains(states[p], "TerminationByKubelet") {
			byKubelet++
		}
		kill, killed := kills[p]
		st, stopped := stops[p]
		ev, evicted := evictAt[p]
		how := "neither"
		switch {
		case killed && (!evicted || kill.Before(ev)):
			how = "killed by kubelet first"
			kubeletFirst++
			killSpread = append(killSpread, kill)
			if acc, ok := da.accepted[p]; ok && acc.Sub(kill) > lag {
				lag = acc.Sub(kill)
			}
		case evicted:
			how = "evicted by gnsh's agent first"
		}
		if killed && (firstKill.IsZero() || kill.Before(firstKill)) {
			firstKill = kill
		}
		if stopped && (firstStopAt.IsZero() || st.Before(firstStopAt)) {
			firstStopAt = st
		}
		for _, at := range []time.Time{kill, st, da.accepted[p]} {
			if !at.IsZero() && (ends[p].IsZero() || at.Before(ends[p])) {
				ends[p] = at
			}
		}
		fmt.Fprintf(&b, "pod %s: %s; kubelet's kill %s, its runtime's StopContainer %s, agent's first eviction request %s, accepted %s, gone %s; state %q\n", p, how,
			relTo(kill, killed, pfs), relTo(st, stopped, pfs), relTo(ev, evicted, pfs), relTo(da.accepted[p], !da.accepted[p].IsZero(), pfs), relTo(da.gone[p], !da.gone[p].IsZero(), pfs), states[p])
	}
	under, none := servingGaps(a.d.webOnNode, ends, 1, 1, c.exitAt)
	fmt.Fprintf(&b, "PrepareForShutdown → kubelet's shutdown event %s, → kubelet's first kill %s, → its runtime's first StopContainer %s, → agent's first eviction %s\n",
		relTo(event, evOK, pfs), relTo(firstKill, !firstKill.IsZero(), pfs), relTo(firstStopAt, !firstStopAt.IsZero(), pfs), relTo(firstEvict, !firstEvict.IsZero(), pfs))
	fmt.Fprintf(&b, "longest time with fewer web pods serving than minAvailable (1, the peer's pod counted): %.3f s; with none of the node's %d serving before the container went down: %.3f s (serving = not killed by kubelet, not stopped, no eviction accepted)\n",
		under.Seconds(), drainWebPods, none.Seconds())
	spread := time.Duration(0)
	if len(killSpread) > 0 {
		sort.Slice(killSpread, func(i, j int) bool { return killSpread[i].Before(killSpread[j]) })
		spread = killSpread[len(killSpread)-1].Sub(killSpread[0])
	}
	// kubelet's status writes of the pods, the agent's end of its drain
	// and its lock, and its warning (asserted in expectBypassAgent).
	_, terminal, _, said := a.kubeletStatusWrites(trigger, c.exitAt)
	var firstTerm, lastTerm time.Time
	saidN := map[string]int{} // what kubelet's terminal-phase writes said, e.g. "Succeeded, DisruptionTarget TerminationByKubelet"
	for _, p := range a.d.webOnNode {
		if w, ok := said[p]; ok {
			saidN[w]++
			// Deleted by the time the container was down (the agent's
			// accepted eviction, then kubelet's final delete): what
			// kubelet's own terminal write said counts.
			if _, inAPI := states[p]; !inAPI && strings.Contains(w, "TerminationByKubelet") {
				byKubelet++
			}
		}
		if at, ok := terminal[p]; ok {
			if firstTerm.IsZero() || at.Before(firstTerm) {
				firstTerm = at
			}
			if at.After(lastTerm) {
				lastTerm = at
			}
		}
	}
	fmt.Fprintf(&b, "kubelet's kills of the pods it reached first within %.3f s of each other; longest from kubelet's kill of a pod to the agent's accepted eviction of it: %.3f s; eviction requests answered other than 201 (PDB 429s, ...): %d; pods marked TerminationByKubelet (in the API when down, or by kubelet's terminal write of a pod deleted since): %d\n",
		spread.Seconds(), lag.Seconds(), refused, byKubelet)
	accepted := len(da.accepted)
	endLine, endAt := a.agentDrainEnd(trigger)
	released, relOK := journalAt(a.hostJournal("-u", agentUnit), "released the delay lock: systemd-logind goes on", trigger)
	fmt.Fprintf(&b, "kubelet's terminal-phase writes of the web pods %s to %s, saying %v; evictions accepted %d; the agent's drain ended %s (%s), it released its lock %s\n",
		relTo(firstTerm, !firstTerm.IsZero(), pfs), relTo(lastTerm, !lastTerm.IsZero(), pfs), saidN, accepted, relTo(endAt, !endAt.IsZero(), pfs), endLine, relTo(released, relOK, pfs))
	fmt.Fprintf(&b, "container down %.2f s after systemctl reboot\n", a.row.reboot.Seconds())
	_ = os.WriteFile(filepath.Join(a.dir, "bypass.txt"), []byte(b.String()), 0o644)
	c.logf("bypass measurement (bypass.txt):\n%s", b.String())

	lines := []string{}
	if evOK {
		lines = append(lines, fmt.Sprintf("%+8.3fs kubelet: %s (journal)", event.Sub(trigger).Seconds(), kubeletShutdownLine))
	}
	for _, cc := range calls {
		lines = append(lines, fmt.Sprintf("%+8.3fs fakecri: %s %s", cc.at.Sub(trigger).Seconds(), cc.call, cc.pod))
	}
	for p, at := range kills {
		lines = append(lines, fmt.Sprintf("%+8.3fs kubelet: Shutdown manager killing pod %s (journal)", at.Sub(trigger).Seconds(), p))
	}
	a.timeline(trigger, pfs, drainAudit{lines: append(da.lines, lines...)})

	// The stable facts.
	if kubeletFirst == 0 {
		t.Errorf("kubelet killed none of the web pods before the agent's eviction of it reached the API server")
	}
	if firstEvict.IsZero() || !strings.Contains(c.consoleText(), "shutdown under way that bypassed gnsh: draining within") {
		t.Errorf("the agent did not drain (first eviction %v)", firstEvict)
	}
	a.expectBypassAgent(trigger)
	note := fmt.Sprintf("bypass %s: kubelet first for %d/%d web pods (its kills within %.3f s), %d marked TerminationByKubelet; PFS→kubelet kill %s, →StopContainer %s, →agent eviction %s, →kubelet's terminal writes %s..%s (%v), →agent's drain end %s, →lock released %s; kubelet kill→accepted eviction up to %.3f s; %d evictions refused, %d accepted; none of the node's serving %.3f s before down; below minAvailable %.3f s; down in %.2f s; agent: %q",
		a.suite, kubeletFirst, drainWebPods, spread.Seconds(), byKubelet, relTo(firstKill, !firstKill.IsZero(), pfs), relTo(firstStopAt, !firstStopAt.IsZero(), pfs),
		relTo(firstEvict, !firstEvict.IsZero(), pfs), relTo(firstTerm, !firstTerm.IsZero(), pfs), relTo(lastTerm, !lastTerm.IsZero(), pfs), saidN, relTo(endAt, !endAt.IsZero(), pfs), relTo(released, relOK, pfs),
		lag.Seconds(), refused, accepted, none.Seconds(), under.Seconds(), a.row.reboot.Seconds(), endLine)
	kubeletRowsMu.Lock()
	kubeletNotes = append(kubeletNotes, note)
	kubeletRowsMu.Unlock()
	a.row.what = fmt.Sprintf("kubelet first for %d/%d pods, %d TerminationByKubelet; none serving %.2f s", kubeletFirst, drainWebPods, byKubelet, none.Seconds())
}

func relTo(at time.Time, ok bool, ref time.Time) string {
	if !ok || at.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%+.3fs", at.Sub(ref).Seconds())
}

// servingGaps returns the longest time before end during which fewer web
// pods served than minAvailable (counting `others` serving elsewhere), and
// during which none of pods served. A pod stops serving at stopped[p]
// (kubelet's kill, its runtime's stop or its accepted eviction, whichever
// came first: it is terminating then); none comes back before end (no
// replacement runs on the node being shut down).
func servingGaps(pods []string, stopped map[string]time.Time, others, minAvailable int, end time.Time) (under, none time.Duration) {
	var ends []time.Time
	for _, p := range pods {
		at := end
		if s, ok := stopped[p]; ok && s.Before(at) {
			at = s
		}
		ends = append(ends, at)
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	// serving after the k-th end: len(pods)-k (+ others).
	for k, at := range ends {
		if len(pods)-(k+1)+others < minAvailable && end.Sub(at) > under {
			under = end.Sub(at)
		}
	}
	if len(ends) > 0 && ends[len(ends)-1].Before(end) {
		none = end.Sub(ends[len(ends)-1])
	}
	return under, none
}
