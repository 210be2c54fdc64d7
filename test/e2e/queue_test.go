//go:build e2e

package e2e

// TestQueueE2E: issue 21's real clients, end to end. Reboots asked for by
// automation (Debian's unattended-upgrades, dnf-automatic's command,
// Ansible's reboot module with three forks) on three nodes at once, with
// the reboot-slot gate on and a limit of one node out, must all happen, one
// node at a time, none refused or cancelled for want of a slot: the ones
// that get no slot at once are queued and the node agent reboots each node
// when its slot comes, within the maintenance window if there is one; a
// queued reboot can be withdrawn with shutdown -c, survives the agent's
// restart and an API server that is down when its slot would come, and
// ends with the node's power.
//
// One rig for every case (its setup is the dearest part): three Debian 12
// nodes of a fresh local control plane (kwok plays their kubelets; the test
// reports each boot's ID as a kubelet would), gnsh installed on all three
// by the role with gnsh's own identity and
//
//	drainTimeout: 20s
//	slots: {maxUnavailable: 1, settle: 5s, renew: 5s, wait: 5s}
//
// and, on each node, the drain rig's pods (three web pods of a ReplicaSet
// under a PodDisruptionBudget, 2 s of grace each, a DaemonSet pod) and one
// more of the ReplicaSet with 8 s of grace. A node's turn (its drain, its
// reboot, its boot, its agent's uncordon and slots.settle) takes at least
// 13 s (about 15 s seen), longer than slots.wait: a reboot that waited in
// the command would be refused, as the issue found. A sampler lists the
// Nodes every 0.5 s from the role's end to the test's and fails the test if
// it ever sees more than one of the three out (cordoned or NotReady). Each
// container that goes down is booted again (its root survives) and its new
// boot ID reported. The cases run one after the other (subtests), each
// starting from an idle rig: every node up and schedulable, its pods back,
// the slots record empty.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/slots"
	"github.com/gnsh/gnsh/test/internal/controlplane"
)

const (
	queueNodes        = 3
	queueDrainTimeout = 20 * time.Second
	queueSlotWait     = 5 * time.Second
	// slowGrace is the grace period of one more pod on each node (beside
	// the drain rig's three web pods of 2 s): a node's turn is then at
	// least its drain (8 s) and slots.settle (5 s), well beyond slots.wait.
	slowGrace = 8
	// uuLog is unattended-upgrades' own log (it keeps what the shutdown
	// command printed: "Shutdown msg: …", or "Failed to issue shutdown").
	uuLog = "/var/log/unattended-upgrades/unattended-upgrades.log"
	// dnfMsg is dnf-automatic's reboot message (its reboot_command is
	// shutdown -r +5 'Rebooting after applying package updates').
	dnfMsg = "Rebooting after applying package updates"
)

// queueRig is the shared rig.
type queueRig struct {
	t      *testing.T // the top test: owns containers and watchers
	nodes  []*qNode
	cp     *controlplane.ControlPlane
	group  string // the Ansible inventory, ansible.cfg and logs
	home   string
	stop   chan struct{}
	wg     sync.WaitGroup
	sample *outSampler
	times  []string // per case: name and wall time
}

// qNode is one node: its container, replaced at each boot by its watcher.
type qNode struct {
	*ansibleNode
	rig    *queueRig
	root   string // the persistent root on the host (overlay merged dir)
	mu     sync.Mutex
	cur    *container
	boots  []qBoot
	cutNow bool // the test is cutting the power: the next exit is not a reboot
	gen    int  // pods made again so far (their names' suffix)
}

// qBoot is one boot of a node's container.
type qBoot struct {
	id   string
	up   time.Time // booted and its boot ID reported
	down time.Time // nspawn exited (zero while it runs)
	rc   int
	cut  bool // its power was cut by the test
}

func TestQueueE2E(t *testing.T) {
	if os.Getenv("GNSH_E2E_QUEUE") == "0" {
		t.Skip("SKIP: GNSH_E2E_QUEUE=0")
	}
	start := time.Now()
	r := newQueueRig(t)
	defer func() {
		if t.Failed() {
			markFailed()
		}
	}()
	defer r.shutdown()
	r.times = append(r.times, fmt.Sprintf("setup (3 nodes booted, the role applied): %v", time.Since(start).Round(time.Second)))
	defer func() {
		most, worst, samples := r.sample.worst(time.Time{}, time.Now())
		t.Logf("sampler: %d samples, at most %d node(s) out at once (%s)", samples, most, worst)
		if most > 1 {
			t.Errorf("the sampler saw %d nodes out at once: %s", most, worst)
		}
		r.times = append(r.times, fmt.Sprintf("TestQueueE2E: %v", time.Since(start).Round(time.Second)))
		t.Logf("times:\n%s", strings.Join(r.times, "\n"))
		_ = os.WriteFile(filepath.Join(resultsRoot, "queue-summary.txt"), []byte(strings.Join(r.times, "\n")+"\n"), 0o644)
	}()

	r.step("unattended_upgrades_now", r.unattendedNow)
	r.step("unattended_upgrades_time", r.unattendedTime)
	r.step("window", r.window)
	r.step("dnf_automatic", r.dnfAutomatic)
	r.step("ansible_reboot_forks", r.ansibleForks)
	r.step("withdrawal_agent_restart", r.withdrawalAgentRestart)
	r.step("power_cycle_api_down", r.powerCycleAPIDown)
}

// ---------------------------------------------------------------- the rig

// newQueueRig boots the three nodes, applies the role to them, and starts
// the sampler and the watchers (stopped by shutdown, which the test defers).
func newQueueRig(t *testing.T) *queueRig {
	const suite = "bookworm"
	gnsh := needGnsh(t)
	needAnsible(t)
	rootfs, _, err := rootfsFlavor(suite, "unattended")
	if err != nil {
		t.Fatalf("rootfs %s (unattended): %v", suite, err)
	}
	r := &queueRig{t: t, stop: make(chan struct{})}
	cpShared := &sharedCP{parent: t}
	for i := 1; i <= queueNodes; i++ {
		name := fmt.Sprintf("queue-%d", i)
		dir := freshResults(t, "ansible", suite, name)
		d := &drainCase{suite: suite, node: name, peer: name + "-peer", ns: name, shared: cpShared}
		d.connect(t)
		d.populate(t)
		d.webOnNode = append(d.webOnNode, "slow")
		root := persistentRoot(t, rootfs, dir)
		n := &ansibleNode{t: t, top: t, suite: name, dir: dir, adir: filepath.Join(dir, "ansible"), gnsh: gnsh, d: d}
		n.c = boot(t, suite, rootfs, dir, bootOpts{persist: root})
		d.installKubeconfig(n.c)
		d.reportBoot(t, n.c)
		n.setupSSH()
		q := &qNode{ansibleNode: n, rig: r, root: root, cur: n.c}
		q.boots = []qBoot{{id: q.bootID(t), up: time.Now()}}
		r.nodes = append(r.nodes, q)
	}
	r.cp = r.nodes[0].d.cp
	r.install(t, gnsh)
	r.sample = startSampler(r.nodes[0].d.admin, "queue-")
	for _, q := range r.nodes {
		r.wg.Add(1)
		go q.watch()
	}
	return r
}

// install applies the role to the three nodes at once (one inventory,
// forks 5 as Ansible's default), gnsh's own identity, the limit of one.
func (r *queueRig) install(t *testing.T, gnsh string) {
	nodes := r.nodes
	r.group = filepath.Join(filepath.Dir(nodes[0].dir), "queue")
	_ = os.RemoveAll(r.group)
	if err := os.MkdirAll(filepath.Join(r.group, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	hosts := map[string]any{}
	var known []string
	for _, n := range nodes {
		hosts[n.d.node] = map[string]any{
			"ansible_host": "127.0.0.1", "ansible_port": n.port, "ansible_user": "root",
			"ansible_python_interpreter": "/usr/bin/python3", "ansible_ssh_private_key_file": filepath.Join(n.adir, "id_ed25519"),
			"gnsh_config": queueConfig(n.d.node, nil),
		}
		kh, err := os.ReadFile(filepath.Join(n.adir, "known_hosts"))
		if err != nil {
			t.Fatal(err)
		}
		known = append(known, strings.TrimSpace(string(kh)))
	}
	inv, _ := json.MarshalIndent(map[string]any{"kubernetes_nodes": map[string]any{"hosts": hosts}}, "", "  ")
	mustWrite(t, filepath.Join(r.group, "inventory.json"), string(inv))
	mustWrite(t, filepath.Join(r.group, "known_hosts"), strings.Join(known, "\n")+"\n")
	cfgText, err := os.ReadFile(filepath.Join(nodes[0].adir, "ansible.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(string(cfgText), filepath.Join(nodes[0].adir, "known_hosts"), filepath.Join(r.group, "known_hosts"))
	cfg = strings.Replace(cfg, "forks = 1", "forks = 5", 1)
	mustWrite(t, filepath.Join(r.group, "ansible.cfg"), cfg)
	r.home = filepath.Join(r.group, "home")
	_ = os.MkdirAll(r.home, 0o700)

	vars := map[string]any{"gnsh_install_from": "binary", "gnsh_binary_src": gnsh, "gnsh_hosts": "kubernetes_nodes", "gnsh_credentials": "dedicated",
		"gnsh_kubectl": filepath.Join(r.cp.BinDir, "kubectl"), "gnsh_kubectl_kubeconfig": r.cp.AdminKubeconfig}
	vb, _ := json.Marshal(vars)
	mustWrite(t, filepath.Join(r.group, "vars.json"), string(vb))
	site, _ := filepath.Abs(filepath.Join("..", "..", "install", "ansible", "site.yml"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := r.ansible(ctx, "01-site.log", "ansible-playbook", "-i", "inventory.json", "-e", "@vars.json", "-v", site).Run(); err != nil {
		t.Fatalf("the role on three nodes: %v\n%s", err, tailFile(filepath.Join(r.group, "01-site.log"), 4000))
	}
	for _, n := range nodes {
		n.c.must("sh", "-ec", `[ /sbin/shutdown -ef /usr/local/sbin/gnsh ]; systemctl is-active --quiet gnsh.service
			cp /etc/gnsh/config.yaml /root/gnsh-config.yaml.role
			test -x /usr/bin/unattended-upgrade; systemctl cat apt-daily-upgrade.service >/dev/null`)
		n.assertContainerSSH()
	}
}

// queueConfig is a node's gnsh config: the rig's, and window if not nil.
func queueConfig(node string, window map[string]any) map[string]any {
	s := map[string]any{"maxUnavailable": 1, "settle": "5s", "renew": "5s", "wait": queueSlotWait.String()}
	if window != nil {
		s["window"] = window
	}
	return map[string]any{"node": node, "drainTimeout": queueDrainTimeout.String(), "slots": s}
}

// ansible returns a command run in the group dir with the group's
// ansible.cfg, its output to LOG there.
func (r *queueRig) ansible(ctx context.Context, log string, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = r.group
	cmd.Env = append(os.Environ(), "ANSIBLE_CONFIG="+filepath.Join(r.group, "ansible.cfg"), "ANSIBLE_NOCOLOR=1", "ANSIBLE_FORCE_COLOR=0",
		"HOME="+r.home, "ANSIBLE_HOME="+filepath.Join(r.home, ".ansible"))
	f, err := os.Create(filepath.Join(r.group, log))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { f.Close() })
	fmt.Fprintf(f, "# %s\n", strings.Join(argv, " "))
	cmd.Stdout, cmd.Stderr = f, f
	return cmd
}

// step runs one case as a subtest from an idle rig, and leaves the rig
// idle again (withdrawing what a failed case left behind); a rig that
// cannot be made idle stops the test.
func (r *queueRig) step(name string, f func(t *testing.T)) {
	t := r.t
	start := time.Now()
	ok := t.Run(name, func(t *testing.T) {
		r.waitIdle(t, 90*time.Second)
		from := time.Now()
		f(t)
		if most, worst, _ := r.sample.worst(from, time.Now()); most > 1 {
			t.Errorf("the sampler saw %d nodes out at once during the case: %s", most, worst)
		}
	})
	r.times = append(r.times, fmt.Sprintf("%s: %v (%s)", name, time.Since(start).Round(time.Second), map[bool]string{true: "pass", false: "FAIL"}[ok]))
	if !ok {
		// Leave nothing queued or scheduled behind for the next case.
		for _, q := range r.nodes {
			if c := q.container(); !c.hasExited() {
				c.in(30*time.Second, "shutdown", "-c")
			}
		}
		r.clearLeftovers(t)
	}
	if !t.Run(name+"_idle_after", func(t *testing.T) { r.waitIdle(t, 120*time.Second) }) {
		t.Fatalf("the rig is not idle after %s: the cases after it cannot run", name)
	}
}

// clearLeftovers, after a failed case: once every node is up and
// schedulable for 30 s while the slots record still holds entries (a
// withdrawn or dropped request the case found left there), it empties the
// record as an admin would with gnsh slots reset --force, and says so,
// so that the cases after it can run.
func (r *queueRig) clearLeftovers(t *testing.T) {
	deadline := time.Now().Add(90 * time.Second)
	quiet := time.Time{}
	for time.Now().Before(deadline) {
		why := r.notIdle(t)
		switch {
		case why == "":
			return
		case strings.HasPrefix(why, "the slots record holds"):
			if quiet.IsZero() {
				quiet = time.Now()
			}
			if time.Since(quiet) >= 30*time.Second {
				res, err := (&slots.Gate{C: r.nodes[0].d.admin, Namespace: "gnsh", Name: "reboot-slots", APITimeout: 10 * time.Second}).Reset(ctxT(t, 20*time.Second), true)
				t.Logf("after the failed case %s for 30 s with every node up: reset it (gnsh slots reset --force): %+v %v", why, res, err)
				return
			}
		default:
			quiet = time.Time{}
		}
		time.Sleep(time.Second)
	}
}

// shutdown stops the watchers (before the containers' cleanups run).
func (r *queueRig) shutdown() {
	r.sample.stopSampling()
	close(r.stop)
	r.wg.Wait()
}

// container is the node's current container.
func (q *qNode) container() *container {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cur
}

func (q *qNode) name() string { return q.d.node }

// bootID reads the boot ID of the current container.
func (q *qNode) bootID(t *testing.T) string {
	r := q.container().in(10*time.Second, "cat", "/proc/sys/kernel/random/boot_id")
	if r.rc != 0 {
		t.Fatalf("%s: boot ID: %s", q.name(), r)
	}
	return strings.TrimSpace(r.stdout)
}

// watch boots the container again each time it goes down, as a machine
// (and its kubelet, for the boot ID) would.
func (q *qNode) watch() {
	r := q.rig
	defer r.wg.Done()
	for {
		c := q.container()
		select {
		case <-c.exited:
		case <-r.stop:
			return
		}
		q.mu.Lock()
		b := &q.boots[len(q.boots)-1]
		b.down, b.rc, b.cut = c.exitAt, c.exitCode, q.cutNow
		q.cutNow = false
		cut := b.cut
		q.mu.Unlock()
		if !cut && c.exitCode != 133 {
			r.t.Errorf("%s: the container went down with nspawn exit code %d, want 133 (a reboot)", q.name(), c.exitCode)
		}
		c.logf("%s went down (rc %d%s)", q.name(), c.exitCode, map[bool]string{true: ", power cut by the test"}[cut])
		select {
		case <-r.stop:
			return
		default:
		}
		nc := c.bootAgain(r.t)
		q.d.reportBoot(r.t, nc)
		id := strings.TrimSpace(nc.in(10*time.Second, "cat", "/proc/sys/kernel/random/boot_id").stdout)
		q.mu.Lock()
		q.cur, q.ansibleNode.c = nc, nc
		q.boots = append(q.boots, qBoot{id: id, up: time.Now()})
		q.mu.Unlock()
	}
}

// rebootsSince are the node's reboots (rc 133, not power cuts) whose
// container went down at or after since.
func (q *qNode) rebootsSince(since time.Time) []qBoot {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []qBoot
	for _, b := range q.boots {
		if !b.down.IsZero() && !b.down.Before(since) && !b.cut {
			out = append(out, b)
		}
	}
	return out
}

// downSince reports whether the container went down (for any reason) at
// or after since.
func (q *qNode) downSince(since time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range q.boots {
		if !b.down.IsZero() && !b.down.Before(since) {
			return true
		}
	}
	return false
}

// up reports whether the node's container runs and its boot is reported.
func (q *qNode) up() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.boots[len(q.boots)-1].down.IsZero() && !q.cur.hasExited()
}

// in runs argv in the node's current container.
func (q *qNode) in(timeout time.Duration, argv ...string) result {
	return q.container().in(timeout, argv...)
}

// must runs argv in the node and fails t unless it exits 0.
func (q *qNode) must(t *testing.T, argv ...string) result {
	t.Helper()
	res := q.container().in(60*time.Second, argv...)
	fmt.Fprintf(q.container().summary, "%s rig %s\n", time.Now().Format("15:04:05.000"), res)
	if res.rc != 0 {
		t.Fatalf("%s: %s", q.name(), res)
	}
	return res
}

// try runs argv in the node and fails t (without stopping it: it may run
// in a goroutine of r.all) unless it exits 0.
func (q *qNode) try(t *testing.T, argv ...string) bool {
	t.Helper()
	res := q.container().in(60*time.Second, argv...)
	fmt.Fprintf(q.container().summary, "%s rig %s\n", time.Now().Format("15:04:05.000"), res)
	if res.rc != 0 {
		t.Errorf("%s: %s", q.name(), res)
	}
	return res.rc == 0
}

// service runs argv as a transient service (no terminal: stdin is
// /dev/null, stdout and stderr pipes), as a timer's job runs, and returns
// its result when the command ends (or the container goes down under it).
// Each run is a unit of its own (unit-N), unloaded when it ends.
func (q *qNode) service(unit string, argv ...string) <-chan result {
	ch := make(chan result, 1)
	c := q.container()
	unitSeq.Lock()
	unitSeq.n++
	unit = fmt.Sprintf("%s-%d", unit, unitSeq.n)
	unitSeq.Unlock()
	go func() {
		res := c.in(10*time.Minute, append([]string{"systemd-run", "--quiet", "--collect", "--unit=" + unit, "--wait", "--pipe",
			"-p", "StandardInput=null", "--"}, argv...)...)
		res.argv = argv
		c.logf("%s: service %s: %s", q.name(), unit, res)
		ch <- res
	}()
	return ch
}

var unitSeq struct {
	sync.Mutex
	n int
}

// rebootNow runs shutdown -r now from a transient service on each of qs
// at once and sorts them out: the one that gets the slot at once drains
// and hands off (its command exits 0 after its drain, or dies with its
// container); the others must be queued: their command says "gnsh:
// queued: …" and exits 0 at once. A refusal (or anything else) fails t.
// It returns the admitted node and the queued ones, by name.
//
// gap, if not zero, spaces the requests out in the order of qs (so that
// the queue's order is theirs).
func (r *queueRig) rebootNow(t *testing.T, qs []*qNode, since time.Time, gap time.Duration) (admitted *qNode, queued []*qNode) {
	t.Helper()
	return r.rebootNowWith(t, qs, since, gap, "/sbin/shutdown", "-r", "now")
}

// rebootNowWith is rebootNow with another command than shutdown -r now
// (a plain reboot: it unlinks /run/systemd/reboot-param, which the
// agent's hand-off of a queued one must leave alone).
func (r *queueRig) rebootNowWith(t *testing.T, qs []*qNode, since time.Time, gap time.Duration, argv ...string) (admitted *qNode, queued []*qNode) {
	t.Helper()
	what := strings.Join(argv, " ")
	res := map[*qNode]<-chan result{}
	for i, q := range qs {
		if i > 0 {
			time.Sleep(gap)
		}
		res[q] = q.service("e2e-reboot-now", argv...)
	}
	deadline := time.After(60 * time.Second)
	for q, ch := range res {
		var x result
		select {
		case x = <-ch:
		case <-deadline:
			t.Fatalf("%s: %s from a service did not end within 60 s", q.name(), what)
		}
		switch {
		case x.rc == 0 && strings.Contains(x.stdout+x.stderr, "gnsh: queued: "):
			queued = append(queued, q)
		case x.rc == 0 || q.downSince(since) || q.container().hasExited():
			if admitted != nil {
				t.Fatalf("%s and %s both went ahead with %s (maxUnavailable 1): %s", admitted.name(), q.name(), what, x)
			}
			admitted = q
		default:
			t.Fatalf("%s: %s from a service, with no slot at once: %s; want \"gnsh: queued: …\" and exit 0", q.name(), what, x)
		}
	}
	if admitted == nil {
		t.Fatalf("%s on %v: all queued, none admitted with the slot free", what, names(qs))
	}
	sort.Slice(queued, func(i, j int) bool { return queued[i].name() < queued[j].name() })
	t.Logf("%s: %s admitted, %v queued", what, admitted.name(), names(queued))
	return admitted, queued
}

// waitIdle waits until every node is up and schedulable without gnsh's
// record, the slots record is empty, and each node's web pods are back.
func (r *queueRig) waitIdle(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for {
		why = r.notIdle(t)
		if why == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rig is not idle after %v: %s", timeout, why)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, q := range r.nodes {
		q.repopulate(t)
	}
}

func (r *queueRig) notIdle(t *testing.T) string {
	for _, q := range r.nodes {
		if !q.up() {
			return q.name() + " is down or booting"
		}
		n, err := q.d.admin.CoreV1().Nodes().Get(ctxT(t, 10*time.Second), q.name(), metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if n.Spec.Unschedulable || n.Annotations[cordonAnnoKey] != "" {
			return q.name() + " is cordoned"
		}
	}
	rec, err := r.record(t)
	if err != nil {
		return "the slots record: " + err.Error()
	}
	if len(rec.Holders) > 0 || len(rec.Waiters) > 0 {
		return fmt.Sprintf("the slots record holds %s", entries(rec))
	}
	return ""
}

// record reads the slots record (gnsh/reboot-slots).
func (r *queueRig) record(t *testing.T) (slots.Record, error) {
	rec, _, err := (&slots.Gate{C: r.nodes[0].d.admin, Namespace: "gnsh", Name: "reboot-slots", APITimeout: 10 * time.Second}).Read(ctxT(t, 15*time.Second))
	return rec, err
}

func entries(rec slots.Record) string {
	var s []string
	for _, e := range rec.Holders {
		s = append(s, fmt.Sprintf("holder %s (boot %s, %s)", e.Node, e.Boot, e.Phase))
	}
	for _, e := range rec.Waiters {
		s = append(s, fmt.Sprintf("waiter %s (boot %s)", e.Node, e.Boot))
	}
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, ", ")
}

// entriesOf are the record's entries (holders and waiters) of node.
func entriesOf(rec slots.Record, node string) []slots.Entry {
	var out []slots.Entry
	for _, e := range append(slices.Clone(rec.Holders), rec.Waiters...) {
		if e.Node == node {
			out = append(out, e)
		}
	}
	return out
}

// repopulate puts back the pods its drains evicted (the test plays
// their ReplicaSet controller), under new names (the disruption
// controller counts a pod of an evicted pod's name as disrupted for two
// minutes when it missed the deletion, as while the API server was down),
// and waits until the budget allows the next drain.
func (q *qNode) repopulate(t *testing.T) {
	t.Helper()
	d := q.d
	ctx := ctxT(t, 90*time.Second)
	rs, err := d.admin.AppsV1().ReplicaSets(d.ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := *metav1.NewControllerRef(rs, rs.GroupVersionKind())
	ref.APIVersion, ref.Kind = "apps/v1", "ReplicaSet"
	for i, name := range d.webOnNode {
		_, err := d.admin.CoreV1().Pods(d.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			t.Fatalf("pod %s: %v", name, err)
		}
		base, _, _ := strings.Cut(name, "-g")
		q.gen++
		p := drainPod(d.ns, fmt.Sprintf("%s-g%d", base, q.gen), d.node, map[string]string{"app": "web"}, ref)
		if base == "slow" {
			grace := int64(slowGrace)
			p.Labels = map[string]string{"app": "slow"} // under no budget
			p.Spec.TerminationGracePeriodSeconds = &grace
		}
		if _, err := d.admin.CoreV1().Pods(d.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
		d.webOnNode[i] = p.Name
	}
	for {
		last := d.readiness(ctx, len(d.webOnNode)+2)
		if last == "" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: pods not back after 90 s: %s", q.name(), last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ---------------------------------------------------------------- sampler

// outSampler lists the Nodes every 0.5 s and keeps, for each sample, the
// nodes (of one prefix, peers left out) that were cordoned or NotReady.
type outSampler struct {
	mu      sync.Mutex
	samples []outSample
	done    chan struct{}
	stopped chan struct{}
}

type outSample struct {
	at  time.Time
	out []string
}

func startSampler(admin kubernetes.Interface, prefix string) *outSampler {
	s := &outSampler{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			nl, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			cancel()
			if err != nil {
				continue // the API server down (a case stops it): no sample
			}
			at := time.Now()
			var out []string
			for _, nd := range nl.Items {
				if !strings.HasPrefix(nd.Name, prefix) || strings.HasSuffix(nd.Name, "-peer") {
					continue
				}
				if nd.Spec.Unschedulable || !nodeReady(&nd) {
					out = append(out, nd.Name)
				}
			}
			sort.Strings(out)
			s.mu.Lock()
			s.samples = append(s.samples, outSample{at: at, out: out})
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *outSampler) stopSampling() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.stopped
}

// worst returns the most nodes out at once between from and to (from zero:
// since the start), when, and how many samples there were.
func (s *outSampler) worst(from, to time.Time) (most int, worst string, samples int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.samples {
		if x.at.Before(from) || x.at.After(to) {
			continue
		}
		samples++
		if len(x.out) > most {
			most, worst = len(x.out), x.at.Format("15:04:05.0")+": "+strings.Join(x.out, ", ")
		}
	}
	return most, worst, samples
}

// firstOut returns when node was first seen out at or after from (zero
// if never).
func (s *outSampler) firstOut(node string, from time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.samples {
		if !x.at.Before(from) && slices.Contains(x.out, node) {
			return x.at
		}
	}
	return time.Time{}
}

// ---------------------------------------------------------------- checks

// waitReboots waits until each node in want has rebooted (gone down with
// 133 at or after since) and is back up, uncordoned; it returns when each
// went down.
//
// doomed, if not nil, is asked every few seconds whether a node can no
// longer reboot (its request refused or cancelled, say): then the wait
// stops at once, failing t with its answer.
func (r *queueRig) waitReboots(t *testing.T, want []*qNode, since time.Time, timeout time.Duration, doomed func() string) map[string]time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	lastAsk := time.Now()
	for {
		if doomed != nil && time.Since(lastAsk) > 3*time.Second {
			lastAsk = time.Now()
			if why := doomed(); why != "" {
				rec, _ := r.record(t)
				t.Fatalf("%s; the slots record: %s\n%s", why, entries(rec), r.agentJournals(names(r.nodes)))
			}
		}
		done := map[string]time.Time{}
		var missing []string
		for _, q := range want {
			rb := q.rebootsSince(since)
			if len(rb) > 0 && q.up() && !q.cordoned(t) {
				done[q.name()] = rb[0].down
			} else {
				missing = append(missing, q.name())
			}
		}
		if len(missing) == 0 {
			var order []string
			for n, at := range done {
				order = append(order, fmt.Sprintf("%s down at +%.1fs", n, at.Sub(since).Seconds()))
			}
			sort.Strings(order)
			t.Logf("rebooted: %s", strings.Join(order, "; "))
			return done
		}
		if time.Now().After(deadline) {
			rec, _ := r.record(t)
			t.Fatalf("not rebooted and back %v after the requests: %s; the slots record: %s\n%s", timeout, strings.Join(missing, ", "), entries(rec), r.agentJournals(missing))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// uuFailed is a doomed for waitReboots: a node whose unattended-upgrades
// logged "Failed to issue shutdown" after off and has not rebooted since.
func (r *queueRig) uuFailed(off map[string]int64, since time.Time) func() string {
	return func() string {
		for _, q := range r.nodes {
			if len(q.rebootsSince(since)) > 0 {
				continue
			}
			for _, l := range strings.Split(q.uuSince(off[q.name()]), "\n") {
				if strings.Contains(l, "Failed to issue shutdown") {
					return q.name() + ": unattended-upgrades: " + l
				}
			}
		}
		return ""
	}
}

// cancelled is a doomed for waitReboots: a GnshScheduleCancelled Event
// on a node since since (its reboot will not happen), or what also says
// so.
func (r *queueRig) cancelled(t *testing.T, since time.Time, also func() string) func() string {
	return func() string {
		if also != nil {
			if why := also(); why != "" {
				return why
			}
		}
		if n := r.eventsLog(t, since, false)["GnshScheduleCancelled"]; len(n) > 0 {
			return fmt.Sprintf("the schedule was cancelled (GnshScheduleCancelled) on %v", n)
		}
		return ""
	}
}

// cordoned reports whether the Node is unschedulable.
func (q *qNode) cordoned(t *testing.T) bool {
	n, err := q.d.admin.CoreV1().Nodes().Get(ctxT(t, 10*time.Second), q.name(), metav1.GetOptions{})
	return err != nil || n.Spec.Unschedulable
}

// agentJournals is the tail of gnsh.service's journal (all boots) on the
// named nodes that are up.
func (r *queueRig) agentJournals(names []string) string {
	var b strings.Builder
	for _, q := range r.nodes {
		if !slices.Contains(names, q.name()) || !q.up() {
			continue
		}
		j := q.in(20*time.Second, "journalctl", "--no-pager", "-o", "short-precise", "-n", "40", "-u", "gnsh.service").stdout
		fmt.Fprintf(&b, "--- %s: gnsh.service\n%s", q.name(), j)
	}
	return b.String()
}

// events are gnsh's Events on the rig's Nodes created at or after since:
// reason -> the nodes (one per Event). With log, those of queued and
// scheduled reboots are logged.
func (r *queueRig) events(t *testing.T, since time.Time) map[string][]string {
	return r.eventsLog(t, since, true)
}

func (r *queueRig) eventsLog(t *testing.T, since time.Time, log bool) map[string][]string {
	evs, err := r.nodes[0].d.admin.CoreV1().Events(metav1.NamespaceDefault).List(ctxT(t, 15*time.Second), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind != "Node" || !strings.HasPrefix(e.InvolvedObject.Name, "queue-") || e.Source.Component != "gnsh" {
			continue
		}
		at := e.CreationTimestamp.Time
		if at.Add(time.Second).Before(since.Truncate(time.Second)) {
			continue
		}
		out[e.Reason] = append(out[e.Reason], e.InvolvedObject.Name)
		if log && (strings.HasPrefix(e.Reason, "GnshReboot") || strings.HasPrefix(e.Reason, "GnshSchedule")) {
			t.Logf("Event %s %s on %s: %s", e.Type, e.Reason, e.InvolvedObject.Name, e.Message)
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

// expectEvents checks the Events of one reason: exactly on the nodes
// named (once each; none if nodes is empty).
func expectEvents(t *testing.T, evs map[string][]string, reason string, nodes []string) {
	t.Helper()
	got := slices.Clone(evs[reason])
	want := slices.Clone(nodes)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s Events on %v, want on %v", reason, got, want)
	}
}

// uuOffsets are the sizes of unattended-upgrades' log on each node now:
// what comes after is this case's.
func (r *queueRig) uuOffsets() map[string]int64 {
	m := map[string]int64{}
	for _, q := range r.nodes {
		if st, err := os.Stat(filepath.Join(q.root, uuLog)); err == nil {
			m[q.name()] = st.Size()
		}
	}
	return m
}

// uuSince is what unattended-upgrades logged on the node after off.
func (q *qNode) uuSince(off int64) string {
	b, _ := os.ReadFile(filepath.Join(q.root, uuLog))
	if int64(len(b)) < off {
		return string(b)
	}
	return string(b[off:])
}

// unattended sets unattended-upgrades up as an admin would for automatic
// reboots (Automatic-Reboot at when), leaves /run/reboot-required as a
// package's postinst does, and starts the real apt-daily-upgrade.service
// (its timer is masked in the rootfs) without waiting for it.
//
// From the package's own code (/usr/bin/unattended-upgrade, 2.9.1 on
// Debian 12): main() calls reboot_if_requested_and_needed() whenever
// run() returns update_stamp, which it does when there is nothing to
// upgrade ("No packages found that can be upgraded unattended and no
// pending auto-removals"): so, offline, with no package lists, the real
// reboot path runs: /var/run/reboot-required present and
// Unattended-Upgrade::Automatic-Reboot "true" make it log "Found
// /var/run/reboot-required, rebooting" and run check_output(["/sbin/shutdown",
// "-r", when]) with stdout and stderr captured (no terminal); it logs
// "Shutdown msg: …" with what the command printed, or "Failed to issue
// shutdown: …" if it exits non-zero. apt.systemd.daily (the service's
// ExecStart) runs unattended-upgrade once per
// APT::Periodic::Unattended-Upgrade days unless that is "always".
func (q *qNode) unattended(t *testing.T, when string) {
	t.Helper()
	q.try(t, "sh", "-ec", `cat > /etc/apt/apt.conf.d/52gnsh-e2e <<EOF
APT::Periodic::Update-Package-Lists "0";
APT::Periodic::Unattended-Upgrade "always";
Unattended-Upgrade::Automatic-Reboot "true";
Unattended-Upgrade::Automatic-Reboot-Time "`+when+`";
EOF
		echo '*** System restart required ***' > /var/run/reboot-required
		systemctl reset-failed apt-daily-upgrade.service 2>/dev/null || :
		systemctl start --no-block apt-daily-upgrade.service`)
}

// expectUnattended checks unattended-upgrades' log of this case on every
// node: it took its reboot path and the shutdown command did not fail;
// it returns the nodes whose command printed "gnsh: queued: ".
func (r *queueRig) expectUnattended(t *testing.T, off map[string]int64) []string {
	t.Helper()
	var queued []string
	for _, q := range r.nodes {
		log := q.uuSince(off[q.name()])
		if !strings.Contains(log, "Found /var/run/reboot-required, rebooting") {
			t.Errorf("%s: unattended-upgrades did not take its reboot path; its log:\n%s", q.name(), log)
		}
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "Failed to issue shutdown") {
				t.Errorf("%s: unattended-upgrades: %s", q.name(), l)
			}
			if strings.Contains(l, "Shutdown msg:") {
				t.Logf("%s: unattended-upgrades: %s", q.name(), l)
			}
		}
		if strings.Contains(log, "gnsh: queued: ") {
			queued = append(queued, q.name())
		}
	}
	return queued
}

// noCancelPromise fails t if what a far schedule's command printed says
// that the reboot will be cancelled when no slot comes in time: it is
// deferred and queued instead.
func noCancelPromise(t *testing.T, node, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "cancels the reboot") || strings.Contains(l, "cancel the reboot") {
			t.Errorf("%s: the command says the reboot is cancelled without a slot, while it is deferred: %s", node, l)
		}
	}
}

// nextMinute is the first whole minute at least lead from now (UTC, the
// containers' time zone).
func nextMinute(lead time.Duration) time.Time {
	return time.Now().UTC().Add(lead).Truncate(time.Minute).Add(time.Minute)
}

// all runs f on every node at once and waits for all; f reports with
// t.Errorf, and a failure stops t once all are done.
func (r *queueRig) all(t *testing.T, f func(q *qNode)) {
	var wg sync.WaitGroup
	for _, q := range r.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); f(q) }()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

func names(qs []*qNode) []string {
	var s []string
	for _, q := range qs {
		s = append(s, q.name())
	}
	return s
}

// ---------------------------------------------------------------- the cases

// unattendedNow (case 1): unattended-upgrades' reboot path with the
// default Automatic-Reboot-Time "now", from apt-daily-upgrade.service, on
// all three nodes at once. One gets the slot at once and reboots; the two
// others are queued (their command prints "gnsh: queued: …" and exits 0,
// so unattended-upgrades logs no failure) and reboot in turn.
func (r *queueRig) unattendedNow(t *testing.T) {
	off := r.uuOffsets()
	start := time.Now()
	r.all(t, func(q *qNode) { q.unattended(t, "now") })
	r.waitReboots(t, r.nodes, start, 4*time.Minute, r.uuFailed(off, start))
	queued := r.expectUnattended(t, off)
	if len(queued) != 2 {
		t.Errorf("the shutdown command said \"gnsh: queued: \" on %v; want the two nodes that got no slot at once", queued)
	}
	evs := r.events(t, start)
	expectEvents(t, evs, "GnshRebootQueued", queued)
	expectEvents(t, evs, "GnshRebootGivenUp", nil)
}

// unattendedTime (case 2): Automatic-Reboot-Time "HH:MM", the next whole
// minute at least drainTimeout + 10 s ahead (a far schedule: the agent
// drains ahead of it). The node whose drain ahead takes the slot reboots at
// that time; the two others get no slot before it: their schedules are
// deferred (logind's cancelled, the request queued), not cancelled, and
// they reboot in turn after it. None reboots before HH:MM.
func (r *queueRig) unattendedTime(t *testing.T) {
	off := r.uuOffsets()
	at := nextMinute(queueDrainTimeout + 10*time.Second)
	hhmm := at.Format("15:04")
	t.Logf("Automatic-Reboot-Time %q (UTC), %.0f s ahead", hhmm, time.Until(at).Seconds())
	start := time.Now()
	r.all(t, func(q *qNode) { q.unattended(t, hhmm) })
	down := r.waitReboots(t, r.nodes, start, time.Until(at)+4*time.Minute, r.cancelled(t, start, r.uuFailed(off, start)))
	for n, d := range down {
		if d.Before(at) {
			t.Errorf("%s went down at %s, before its schedule %s", n, d.Format("15:04:05.000"), at.Format("15:04:05"))
		}
	}
	r.expectUnattended(t, off)
	for _, q := range r.nodes {
		noCancelPromise(t, q.name(), q.uuSince(off[q.name()]))
	}
	evs := r.events(t, start)
	expectEvents(t, evs, "GnshScheduleCancelled", nil)
	expectEvents(t, evs, "GnshRebootGivenUp", nil)
	if d := evs["GnshRebootDeferred"]; len(d) != 2 {
		t.Errorf("GnshRebootDeferred Events on %v; want on the two nodes that got no slot before %s", d, hhmm)
	}
}

// window (case 3): slots.window opens at the next whole minute at least
// 25 s ahead; unattended-upgrades' "now" reboot asked on all three before
// it: all three are queued, none is cordoned or goes down before the
// window opens, then they reboot one at a time.
func (r *queueRig) window(t *testing.T) {
	open := nextMinute(25 * time.Second)
	w := map[string]any{"start": open.Format("15:04"), "end": open.Add(20 * time.Minute).Format("15:04"), "timeZone": "UTC"}
	t.Logf("slots.window %v: opens in %.0f s", w, time.Until(open).Seconds())
	// The role's config back on every node once the case ends, however
	// it ends (a node still rebooting is waited for).
	defer func() {
		var wg sync.WaitGroup
		for _, q := range r.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for end := time.Now().Add(3 * time.Minute); !q.up(); time.Sleep(500 * time.Millisecond) {
					if time.Now().After(end) {
						t.Errorf("%s: not up 3 min after the case: its window config is left", q.name())
						return
					}
				}
				q.try(t, "sh", "-ec", "cp /root/gnsh-config.yaml.role /etc/gnsh/config.yaml; systemctl restart gnsh.service")
			}()
		}
		wg.Wait()
	}()
	r.all(t, func(q *qNode) { q.setConfig(t, queueConfig(q.name(), w)) })
	off := r.uuOffsets()
	start := time.Now()
	r.all(t, func(q *qNode) { q.unattended(t, "now") })
	down := r.waitReboots(t, r.nodes, start, time.Until(open)+4*time.Minute, r.uuFailed(off, start))
	for _, q := range r.nodes {
		if d := down[q.name()]; d.Before(open) {
			t.Errorf("%s went down at %s, before the window opened at %s", q.name(), d.Format("15:04:05.000"), open.Format("15:04:05"))
		}
		if o := r.sample.firstOut(q.name(), start); !o.IsZero() && o.Before(open) {
			t.Errorf("%s was out (cordoned) at %s, before the window opened at %s", q.name(), o.Format("15:04:05.0"), open.Format("15:04:05"))
		}
	}
	queued := r.expectUnattended(t, off)
	if len(queued) != 3 {
		t.Errorf("the shutdown command said \"gnsh: queued: \" on %v; want all three (asked outside the window)", queued)
	}
	evs := r.events(t, start)
	expectEvents(t, evs, "GnshRebootQueued", names(r.nodes))
	expectEvents(t, evs, "GnshRebootGivenUp", nil)
}

// setConfig writes /etc/gnsh/config.yaml (JSON is YAML), checks it and
// restarts the agent, which reads its config when it starts.
func (q *qNode) setConfig(t *testing.T, cfg map[string]any) {
	t.Helper()
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(q.dir, "rig", "config.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	q.try(t, "sh", "-ec", `install -m 0644 /rig/config.yaml /etc/gnsh/config.yaml; rm /rig/config.yaml
		/usr/local/sbin/gnsh config check; systemctl restart gnsh.service; systemctl is-active --quiet gnsh.service`)
}

// dnfAutomatic (case 4, dnf-automatic): its reboot command, shutdown -r +5
// '…' scaled to +1 (still beyond drainTimeout: a far schedule), from a
// transient service on all three at once: each command exits 0, all three
// reboot one at a time, none before its time, none cancelled.
func (r *queueRig) dnfAutomatic(t *testing.T) {
	start := time.Now()
	res := map[string]<-chan result{}
	for _, q := range r.nodes {
		res[q.name()] = q.service("dnf-automatic-reboot", "/sbin/shutdown", "-r", "+1", dnfMsg)
	}
	for n, ch := range res {
		select {
		case x := <-ch:
			if x.rc != 0 {
				t.Errorf("%s: shutdown -r +1 from a service: %s", n, x)
			}
			noCancelPromise(t, n, x.stdout+x.stderr)
		case <-time.After(45 * time.Second):
			t.Errorf("%s: shutdown -r +1 did not return within 45 s", n)
		}
	}
	due := start.Add(time.Minute)
	down := r.waitReboots(t, r.nodes, start, 5*time.Minute, r.cancelled(t, start, nil))
	for n, d := range down {
		if d.Before(due) {
			t.Errorf("%s went down at %s, before its schedule (+1 from %s)", n, d.Format("15:04:05.000"), start.Format("15:04:05.000"))
		}
	}
	evs := r.events(t, start)
	expectEvents(t, evs, "GnshScheduleCancelled", nil)
	expectEvents(t, evs, "GnshRebootGivenUp", nil)
	if d := evs["GnshRebootDeferred"]; len(d) != 2 {
		t.Errorf("GnshRebootDeferred Events on %v; want on the two nodes that got no slot before their schedule", d)
	}
}

// ansibleForks (case 4, Ansible): ansible all -m ansible.builtin.reboot
// -f 3: the module runs shutdown -r 0 over ssh (with a terminal, for that
// one command) on the three nodes at once, then waits for a new boot ID:
// the play exits 0, three nodes rebooted.
func (r *queueRig) ansibleForks(t *testing.T) {
	for _, q := range r.nodes {
		q.t = t
		q.assertContainerSSH()
		q.t = r.t
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	log := fmt.Sprintf("reboot-forks-%d.log", start.Unix())
	err := r.ansible(ctx, log, "ansible", "all", "-i", "inventory.json", "-f", "3", "-m", "ansible.builtin.reboot",
		"-a", "reboot_timeout=420 connect_timeout=5 post_reboot_delay=0 test_command='systemctl is-system-running --wait'").Run()
	t.Logf("ansible all -m ansible.builtin.reboot -f 3: %v after %v", err, time.Since(start).Round(100*time.Millisecond))
	out := tailFile(filepath.Join(r.group, log), 8000)
	if err != nil {
		t.Fatalf("the play failed (%v):\n%s", err, out)
	}
	if n := strings.Count(out, `"rebooted": true`); n != 3 {
		t.Errorf("the play reports %d nodes rebooted, want 3:\n%s", n, out)
	}
	r.waitReboots(t, r.nodes, start, time.Minute, nil)
}

// withdrawalAgentRestart (case 5, and case 6's agent restart): a plain
// reboot from a transient service on all three at once: one (A) is
// admitted and reboots; the two others are queued, B first, C behind it.
// At once, shutdown -c on C withdraws it: the slots record has no entry of
// C within 10 s, and C never goes down or out, up to well past when its
// turn would have come. B's agent is restarted (systemctl restart
// gnsh.service) while B waits: its entry stays (of the same boot), gnsh
// status shows the queued reboot, and B reboots.
func (r *queueRig) withdrawalAgentRestart(t *testing.T) {
	start := time.Now()
	// A plain reboot, not shutdown -r now: it unlinks the reboot
	// parameter (one is there on each node beforehand), the queued ones
	// keep it unlinked, and the agent (which cannot write /run/systemd
	// under gnsh.service) must hand B's off without touching it.
	r.all(t, func(q *qNode) { q.must(t, "sh", "-c", "echo e2e >/run/systemd/reboot-param") })
	a, queued := r.rebootNowWith(t, r.nodes, start, 0, "/sbin/reboot")
	if len(queued) != 2 {
		t.Fatalf("queued: %v; want two", names(queued))
	}
	for _, q := range queued {
		if x := q.in(10*time.Second, "cat", "/run/systemd/reboot-param"); x.rc == 0 {
			t.Errorf("%s: /run/systemd/reboot-param is %q after a queued plain reboot; want it unlinked, as the command left it", q.name(), strings.TrimSpace(x.stdout))
		}
	}
	b, c := r.inQueueOrder(t, queued)
	t.Logf("admitted: %s; queued: %s (its agent restarted), %s behind it (withdrawn)", a.name(), b.name(), c.name())
	bBoot := b.bootID(t)
	cBoot := c.bootID(t)

	t.Run("withdrawal", func(t *testing.T) {
		x := c.container().run(60*time.Second, "shutdown", "-c")
		if x.rc != 0 {
			t.Errorf("%s: shutdown -c of a queued reboot: %s", c.name(), x)
		}
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			rec, err := r.record(t)
			if err == nil && len(entriesOf(rec, c.name())) == 0 {
				break
			}
			if time.Now().After(end) {
				t.Errorf("10 s after shutdown -c the slots record still has %s: %s (%v)", c.name(), entries(rec), err)
				break
			}
		}
	})
	t.Run("agent_restart_keeps_it", func(t *testing.T) {
		restarted := time.Now()
		b.must(t, "systemctl", "restart", "gnsh.service")
		b.must(t, "systemctl", "is-active", "--quiet", "gnsh.service")
		b.expectTokenRenewed(t, restarted)
		time.Sleep(2 * time.Second)
		rec, err := r.record(t)
		if err != nil {
			t.Fatal(err)
		}
		if e := entriesOf(rec, b.name()); len(e) != 1 || e[0].Boot != bBoot {
			t.Errorf("after the agent's restart the slots record has %v of %s; want its queued entry (boot %s): %s", e, b.name(), bBoot, entries(rec))
		}
		if st := b.in(30*time.Second, "/usr/local/sbin/gnsh", "status"); !strings.Contains(strings.ToLower(st.stdout+st.stderr), "queued") {
			t.Errorf("%s: gnsh status after the agent's restart does not show the queued reboot: %s", b.name(), st)
		}
		r.waitReboots(t, []*qNode{a, b}, start, 3*time.Minute, nil)
		if rb := b.rebootsSince(start); len(rb) != 1 || rb[0].id != bBoot {
			t.Errorf("%s: reboots %+v since the request; want one, of boot %s", b.name(), rb, bBoot)
		}
	})
	// Past when C would have been admitted (B back and settled, and
	// more): C never went down, was never out, and is not in the record.
	r.waitIdleQuiet(t, 90*time.Second)
	time.Sleep(15 * time.Second)
	if c.downSince(start) || c.bootID(t) != cBoot {
		t.Errorf("%s rebooted after its queued reboot was withdrawn", c.name())
	}
	if o := r.sample.firstOut(c.name(), start); !o.IsZero() {
		t.Errorf("%s was out (cordoned) at %s after its queued reboot was withdrawn", c.name(), o.Format("15:04:05.0"))
	}
	rec, err := r.record(t)
	if err != nil || len(entriesOf(rec, c.name())) != 0 {
		t.Errorf("the slots record after the case: %s (%v); want no entry of %s", entries(rec), err, c.name())
	}
	evs := r.events(t, start)
	expectEvents(t, evs, "GnshRebootGivenUp", nil)
}

// inQueueOrder returns the two queued nodes in the order of the slots
// record's waiters.
func (r *queueRig) inQueueOrder(t *testing.T, queued []*qNode) (first, second *qNode) {
	t.Helper()
	rec, err := r.record(t)
	if err != nil {
		t.Fatal(err)
	}
	place := map[string]int{}
	for i, e := range rec.Waiters {
		if _, ok := place[e.Node]; !ok {
			place[e.Node] = i + 1
		}
	}
	first, second = queued[0], queued[1]
	if place[first.name()] == 0 || place[second.name()] == 0 {
		t.Fatalf("queued %v, but the slots record's waiters are %s", names(queued), entries(rec))
	}
	if place[second.name()] < place[first.name()] {
		first, second = second, first
	}
	return first, second
}

// waitIdleQuiet waits (without repopulating) until the slots record is
// empty and every node up and schedulable.
func (r *queueRig) waitIdleQuiet(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := r.notIdle(t)
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not idle after %v: %s", timeout, why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// powerCycleAPIDown (case 6's power cycle and API server): shutdown -r now
// from a service on the three, 2 s apart: X is admitted, Z queued first,
// Y behind it. Y's power is cut at once (its container's PID 1 killed)
// and Y boots again. The moment X is back and uncordoned (its slot would
// be freed after slots.settle, 5 s, and Z admitted), the API server is
// stopped, and started again 15 s later: Z's request waits it out and Z
// reboots, after the API server is back. Y's new boot does not reboot:
// 15 s after Z's slot is freed, Y's boot ID is the new boot's, Y was never
// out, the slots record has no entry of Y (its old boot's waiter gone),
// and gnsh status on the new boot shows no queued reboot.
func (r *queueRig) powerCycleAPIDown(t *testing.T) {
	start := time.Now()
	x, queued := r.rebootNow(t, r.nodes, start, 2*time.Second)
	if x != r.nodes[0] || len(queued) != 2 {
		t.Fatalf("admitted %s, queued %v; want %s admitted (it asked 2 s before the others), two queued", x.name(), names(queued), r.nodes[0].name())
	}
	z, y := r.inQueueOrder(t, queued)
	t.Logf("admitted: %s; queued: %s (waits out the API server), %s behind it (power-cycled)", x.name(), z.name(), y.name())
	zBoot := z.bootID(t)
	old := y.bootID(t)

	// The power cut: SIGKILL to the container's PID 1 (from the host, it
	// takes the whole PID namespace down at once; no shutdown of any kind).
	c := y.container()
	y.mu.Lock()
	y.cutNow = true
	y.mu.Unlock()
	if err := syscall.Kill(c.pid1, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the container's PID 1 (%d): %v", c.pid1, err)
	}
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the container did not go down within 30 s of its power cut", y.name())
	}

	var stopped, ready time.Time
	t.Run("api_down_waited_out", func(t *testing.T) {
		r.waitReboots(t, []*qNode{x}, start, 2*time.Minute, nil)
		if rec, err := r.record(t); err != nil || len(entriesOf(rec, x.name())) == 0 {
			t.Fatalf("%s is back and its slot already freed (%s, %v): too late to stop the API server before %s's slot comes", x.name(), entries(rec), err, z.name())
		}
		stopped, ready = restartAPIServer(t, r.cp, r.nodes[0].d, 15*time.Second)
		t.Logf("kube-apiserver down from %s to %s", stopped.Format("15:04:05.000"), ready.Format("15:04:05.000"))
		down := r.waitReboots(t, []*qNode{z}, start, 3*time.Minute, nil)
		if down[z.name()].Before(ready) {
			t.Errorf("%s went down at %s while the API server was down (until %s)", z.name(), down[z.name()].Format("15:04:05.000"), ready.Format("15:04:05.000"))
		}
		if rb := z.rebootsSince(start); len(rb) != 1 || rb[0].id != zBoot {
			t.Errorf("%s: reboots %+v since the request; want one, of boot %s", z.name(), rb, zBoot)
		}
	})
	t.Run("power_cycle_drops_it", func(t *testing.T) {
		for end := time.Now().Add(90 * time.Second); !y.up() || y.container() == c; time.Sleep(250 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s not booted again within 90 s of its power cut", y.name())
			}
		}
		newBoot := y.bootID(t)
		t.Logf("%s power-cycled: boot %s, then %s", y.name(), old, newBoot)
		// Z's slot freed (after its settle), then past when Y would
		// have been admitted.
		for end := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			rec, err := r.record(t)
			if err == nil && len(rec.Holders) == 0 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the slots still held 90 s after %s's power cut: %s (%v)", y.name(), entries(rec), err)
			}
		}
		time.Sleep(15 * time.Second)
		if got := y.bootID(t); got != newBoot || len(y.rebootsSince(start)) != 0 {
			t.Errorf("%s rebooted again after its power cycle (boot %s, then %s now; reboots %+v)", y.name(), newBoot, got, y.rebootsSince(start))
		}
		if o := r.sample.firstOut(y.name(), start); !o.IsZero() {
			t.Errorf("%s was out (cordoned) at %s: its queued reboot outlived its power cycle", y.name(), o.Format("15:04:05.0"))
		}
		rec, err := r.record(t)
		if err != nil || len(entriesOf(rec, y.name())) != 0 {
			t.Errorf("the slots record after the power cycle: %s (%v); want no entry of %s (old boot %s)", entries(rec), err, y.name(), old)
		}
		if st := y.in(30*time.Second, "/usr/local/sbin/gnsh", "status"); strings.Contains(strings.ToLower(st.stdout+st.stderr), "queued") {
			t.Errorf("%s: gnsh status on the new boot still shows a queued reboot: %s", y.name(), st)
		}
	})
}

// ---------------------------------------------------------------- the API server

// restartAPIServer stops the control plane's kube-apiserver (SIGTERM, as
// a service manager stops it; SIGKILL 5 s later, since its graceful
// termination waits up to a minute for open watches: seen 30 s), keeps it
// down for down, then starts it again with the same command line (same
// port, same etcd, same audit log, appended to its log file) and waits
// until it is ready. Then it restarts kwok (the kubelets' stand-in) and the
// disruption controller the same way: their informers otherwise take up
// to a minute to watch again (client-go's backoff), meanwhile no evicted
// pod ends and no budget is updated, which real kubelets do not show. It
// returns when the API server went down and when it was ready again.
func restartAPIServer(t *testing.T, cp *controlplane.ControlPlane, d *drainCase, down time.Duration) (stopped, ready time.Time) {
	t.Helper()
	argv := cpStop(t, cp, "kube-apiserver")
	stopped = time.Now()
	time.Sleep(time.Until(stopped.Add(down)))
	npid, restarted := cpStart(t, cp, "kube-apiserver", argv)
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		body, err := d.admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			ready = time.Now()
			t.Logf("kube-apiserver (pid %d) started again: ready %.1f s after its start", npid, time.Since(restarted).Seconds())
			break
		}
		if time.Now().After(end) {
			t.Fatalf("kube-apiserver not ready 60 s after its restart: %v %s", err, body)
		}
	}
	for _, name := range []string{"kwok", "kube-controller-manager"} {
		cpStart(t, cp, name, cpStop(t, cp, name))
	}
	return stopped, ready
}

// cpStop stops the control plane's process NAME (SIGTERM, SIGKILL after 5
// s) and returns its command line. Its PID files stay (controlplane.sh's
// watchdog stops the control plane when the apiserver's goes).
func cpStop(t *testing.T, cp *controlplane.ControlPlane, name string) []string {
	t.Helper()
	pid := cp.PIDs()[name]
	if pid <= 1 {
		t.Fatalf("no %s PID in %s/run", name, cp.Dir)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if len(argv) < 2 || filepath.Base(argv[0]) != name {
		t.Fatalf("PID %d is not the %s: %q", pid, name, argv)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	gone := func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		_, rest, _ := strings.Cut(string(st), ") ")
		return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
	}
	for !gone() {
		if time.Since(sent) > 5*time.Second {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s (pid %d) stopped: exited %.1f s after SIGTERM", name, pid, time.Since(sent).Seconds())
	return argv
}

// cpStart starts the control plane's process NAME again with argv (its
// own session, output appended to its log), and records its PID and start
// time where controlplane.sh keeps them, so that Stop ends it.
func cpStart(t *testing.T, cp *controlplane.ControlPlane, name string, argv []string) (int, time.Time) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(cp.Dir, "logs", name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s again: %v", name, err)
	}
	started := time.Now()
	go func() { _ = cmd.Wait() }()
	npid := cmd.Process.Pid
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", npid))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(st), ") ")
	f := strings.Fields(rest)
	if len(f) < 20 {
		t.Fatalf("/proc/%d/stat: %q", npid, st)
	}
	for _, w := range []struct{ file, val string }{{name + ".start", f[19]}, {name + ".pid", strconv.Itoa(npid)}} {
		p := filepath.Join(cp.Dir, "run", w.file)
		if err := os.WriteFile(p+".tmp", []byte(w.val+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			t.Fatal(err)
		}
	}
	return npid, started
}
