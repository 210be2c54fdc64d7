package integration

// gnsh agent, end to end: the real binary in the rig's namespaces, with a
// node's own kubelet credentials against the real control plane (kwok
// keeps the Nodes Ready, but ag-guard's, whose kubelet has not come up in
// this boot). The agent never shuts anything down: each
// scenario starts it, follows it through its sd_notify messages (a
// datagram socket of the test's as $NOTIFY_SOCKET), and ends it with
// SIGTERM.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	gnshagent "github.com/gnsh/gnsh/internal/agent"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/test/internal/faultproxy"
	"github.com/gnsh/gnsh/test/internal/kwok"
	"github.com/gnsh/gnsh/test/internal/rig"
)

// agentNodes are the Nodes of TestAgent, one per scenario.
var agentNodes = []string{"ag-reboot", "ag-admin", "ag-recordon", "ag-drain", "ag-sameboot", "ag-late", "ag-locked", "ag-pending", "ag-503", "ag-sched", "ag-guard", "ag-nodrain"}

// earlierBoot is a boot ID that is not this one.
const earlierBoot = "00000000-0000-4000-8000-0000000000e1"

func TestAgent(t *testing.T) {
	t.Parallel()
	k := startCluster(t, agentNodes...)
	for _, sc := range []struct {
		name string
		f    func(*testing.T, *cluster)
	}{
		{"gnsh's reboot cordon from an earlier boot is undone", testAgentUncordons},
		{"an admin's cordon is left", testAgentAdminCordon},
		{"an admin's re-cordon after kubectl uncordon is left", testAgentAdminRecordon},
		{"a gnsh drain cordon is left", testAgentDrainCordon},
		{"a cordon made in this boot is left", testAgentSameBoot},
		{"API server not up at start: uncordoned once it answers", testAgentAPILate},
		{"a drain holding the lock delays the uncordon", testAgentLocked},
		{"a pending shutdown keeps the cordon until it is cancelled", testAgentPendingShutdown},
		{"503 on the Node for a while: uncordoned once it answers", testAgent503},
		{"a far schedule is drained ahead of it; its cancel uncordons", testAgentSchedule},
		{"a shutdown while the uncordon waits for Ready is drained", testAgentGuardWhileWaiting},
		{"reboot --no-drain is not drained by the agent either", testAgentNoDrain},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.f(t, k)
		})
	}
}

// gnshCordon cordons the node as drain.Cordon does: one patch of the
// annotation and spec.unschedulable, as field manager gnsh.
func (n *node) gnshCordon(action, bootID string) {
	n.t.Helper()
	own, _ := json.Marshal(ownership{Action: action, User: "alice", TTY: "pts/3", BootID: bootID,
		Time: time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Second)})
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{cordonAnnotation: string(own)}},
		"spec":     map[string]any{"unschedulable": true},
	})
	if _, err := n.admin.CoreV1().Nodes().Patch(ctxFor(n.t, time.Minute), n.name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: "gnsh"}); err != nil {
		n.t.Fatal(err)
	}
}

// kubectlCordon sets spec.unschedulable as kubectl cordon/uncordon do.
func (n *node) kubectlCordon(on bool) {
	n.t.Helper()
	patch := `{"spec":{"unschedulable":false}}`
	if on {
		patch = `{"spec":{"unschedulable":true}}`
	}
	if _, err := n.admin.CoreV1().Nodes().Patch(ctxFor(n.t, time.Minute), n.name, types.StrategicMergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: "kubectl-cordon"}); err != nil {
		n.t.Fatal(err)
	}
}

// uncordonMessages are the messages of the node's GnshUncordoned Events.
func (n *node) uncordonMessages() []string {
	n.t.Helper()
	l, err := n.admin.CoreV1().Events(metav1.NamespaceDefault).List(ctxFor(n.t, time.Minute), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", n.name).String()})
	if err != nil {
		n.t.Fatal(err)
	}
	var r []string
	for _, e := range l.Items {
		if e.Source.Component == "gnsh" && e.Reason == evUncordoned {
			r = append(r, e.Message)
		}
	}
	return r
}

// agent is a running gnsh agent and its sd_notify socket.
type agent struct {
	t      *testing.T
	p      *rig.Proc
	notify *net.UnixConn
}

func startAgent(t *testing.T, env []string) *agent { return startAgentIn(t, "", env) }

// startAgentIn starts the agent with runDir (if not "") as its /run.
func startAgentIn(t *testing.T, runDir string, env []string) *agent {
	t.Helper()
	dir, err := os.MkdirTemp("", "gnsh-agent-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	// The host's /etc/gnsh and /etc/kubernetes are hidden: only the test's
	// kubeconfig and config count.
	p := rig.Start(t, rig.Spec{Env: append([]string{"NOTIFY_SOCKET=" + sock}, env...),
		Argv: []string{filepath.Join(binDir, "gnsh"), "agent"}, Hide: []string{"/etc/gnsh", "/etc/kubernetes"}, RunDir: runDir})
	return &agent{t: t, p: p, notify: l}
}

// waitStatus reads sd_notify messages until one contains want, within d.
func (a *agent) waitStatus(want string, d time.Duration) []string {
	a.t.Helper()
	_ = a.notify.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	var got []string
	for {
		k, err := a.notify.Read(buf)
		if err != nil {
			a.stop()
			a.t.Fatalf("no sd_notify message with %q within %s (got %q): %v", want, d, got, err)
		}
		got = append(got, string(buf[:k]))
		if strings.Contains(string(buf[:k]), want) {
			return got
		}
	}
}

// stop sends SIGTERM and checks that the agent ends with status 0, every
// line of its log starting "gnsh: ". It returns the log.
func (a *agent) stop() string {
	a.t.Helper()
	if err := a.p.Signal(syscall.SIGTERM); err != nil {
		a.t.Error(err)
	}
	r := a.p.Wait()
	logRun(a.t, "gnsh", []string{"agent"}, r, 0)
	if r.Code != 0 {
		a.t.Errorf("gnsh agent: exit %d after SIGTERM, want 0", r.Code)
	}
	for _, l := range strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n") {
		if !strings.HasPrefix(l, "gnsh: ") {
			a.t.Errorf("log line without the prefix: %q", l)
		}
	}
	if !strings.HasSuffix(r.Stderr, "gnsh: agent stopping on SIGTERM\n") {
		t := a.t
		t.Errorf("the log does not end with the stop:\n%s", r.Stderr)
	}
	return r.Stderr
}

func testAgentUncordons(t *testing.T, k *cluster) {
	n := k.newNode(t, "ag-reboot")
	n.gnshCordon("reboot", earlierBoot)
	a := startAgent(t, n.env(fastConfig))
	msgs := a.waitStatus("uncordoned ag-reboot after boot", 30*time.Second)
	if !strings.HasPrefix(msgs[0], "READY=1\n") {
		t.Errorf("first sd_notify message %q, want READY=1 at once", msgs[0])
	}
	n.wantCordon("")
	ev := n.uncordonMessages()
	re := regexp.MustCompile(`^Uncordoned after boot: cordoned by gnsh for a reboot requested by alice on pts/3 at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
	if len(ev) != 1 || !re.MatchString(ev[0]) {
		t.Errorf("GnshUncordoned Events %q", ev)
	}
	// It stays up after the uncordon.
	time.Sleep(500 * time.Millisecond)
	log := a.stop()
	if !strings.Contains(log, "gnsh: ag-reboot uncordoned after boot: cordoned by gnsh for a reboot requested by alice on pts/3 at ") {
		t.Errorf("log:\n%s", log)
	}
}

// leftByAgent runs the agent on n and checks that it decides to leave the
// cordon (why in its status), changing nothing and posting nothing.
func leftByAgent(t *testing.T, n *node, why string) {
	t.Helper()
	before := n.get()
	a := startAgent(t, n.env(fastConfig))
	a.waitStatus("nothing to uncordon after boot", 30*time.Second)
	log := a.stop()
	after := n.get()
	// kwok's heartbeats change the Node's status (and resourceVersion) all
	// the time: the cordon and gnsh's annotation are what must not change.
	if !after.Spec.Unschedulable || after.Annotations[cordonAnnotation] != before.Annotations[cordonAnnotation] {
		t.Errorf("node changed: unschedulable %v, annotation %q -> %q", after.Spec.Unschedulable,
			before.Annotations[cordonAnnotation], after.Annotations[cordonAnnotation])
	}
	if ev := n.uncordonMessages(); len(ev) != 0 {
		t.Errorf("GnshUncordoned Events %q", ev)
	}
	if !strings.Contains(log, why) {
		t.Errorf("log lacks %q:\n%s", why, log)
	}
}

func testAgentAdminCordon(t *testing.T, k *cluster) {
	n := k.newNode(t, "ag-admin")
	n.kubectlCordon(true)
	leftByAgent(t, n, "is cordoned, but not by gnsh")
}

func testAgentAdminRecordon(t *testing.T, k *cluster) {
	// gnsh cordoned for a reboot in an earlier boot; the admin then ran
	// kubectl uncordon (the annotation stays) and kubectl cordon.
	n := k.newNode(t, "ag-recordon")
	n.gnshCordon("reboot", earlierBoot)
	n.kubectlCordon(false)
	n.kubectlCordon(true)
	leftByAgent(t, n, "is cordoned, but not by gnsh")
}

func testAgentDrainCordon(t *testing.T, k *cluster) {
	n := k.newNode(t, "ag-drain")
	n.gnshCordon("drain", earlierBoot)
	leftByAgent(t, n, "is cordoned by gnsh drain (requested by alice on pts/3")
}

func testAgentSameBoot(t *testing.T, k *cluster) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	n := k.newNode(t, "ag-sameboot")
	n.gnshCordon("reboot", strings.TrimSpace(string(b)))
	leftByAgent(t, n, "in this boot: that reboot has not happened")
}

// testAgentAPILate: the API server's address refuses connections when the
// agent starts (the API server is not up yet); a few seconds later it
// answers there (a TCP forwarder to the real API server starts listening
// on that port), and the agent, retrying, uncordons.
func testAgentAPILate(t *testing.T, k *cluster) {
	n := k.newNode(t, "ag-late")
	n.gnshCordon("poweroff", earlierBoot)
	kc, err := os.ReadFile(k.cp.NodeKubeconfig(t, n.name))
	if err != nil {
		t.Fatal(err)
	}
	server := regexp.MustCompile(`server: https://(127\.0\.0\.1:\d+)`)
	m := server.FindSubmatch(kc)
	if m == nil {
		t.Fatalf("no server line in the kubeconfig:\n%s", kc)
	}
	upstream := string(m[1])
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close() // nothing listens there until the "API server" comes up
	f := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(f, server.ReplaceAll(kc, []byte("server: https://"+addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, []string{"KUBECONFIG=" + f, "GNSH_CONFIG=" + writeConfig(t, fastConfig), "LOGNAME=alice"})
	a.waitStatus("STATUS=ag-late: read Node: ", 30*time.Second)
	time.Sleep(3500 * time.Millisecond) // the attempts at 1 and 3 s are refused too
	if unsched, _ := n.cordon(); !unsched {
		t.Fatal("uncordoned without an API server")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port was taken in between: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	go forward(l, upstream)
	start := time.Now()
	a.waitStatus("uncordoned ag-late after boot", 30*time.Second)
	t.Logf("uncordoned %s after the API server began to answer", time.Since(start).Round(time.Millisecond))
	n.wantCordon("")
	if ev := n.uncordonMessages(); len(ev) != 1 || !strings.Contains(ev[0], "cordoned by gnsh for a poweroff requested by alice") {
		t.Errorf("GnshUncordoned Events %q", ev)
	}
	log := a.stop()
	// The node name comes from the kubelet certificate, so the first
	// request that fails is the Node's GET: attempts at 0, 1 and 3 s
	// (and 7 s), at most one line every 30 s.
	lines := strings.Count(log, "gnsh: ag-late: read Node: ")
	if lines != 1 || !strings.Contains(log, "connection refused; retrying in 1s") {
		t.Errorf("want one line about the unreachable API server:\n%s", log)
	}
}

// forward accepts on l and copies each connection to and from upstream
// (TLS passes through untouched), until l is closed.
func forward(l net.Listener, upstream string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
			<-done
		}()
	}
}

// testAgentLocked: a drain of this node holds the drain lock (in /run/gnsh,
// shared with the agent's namespace): the agent waits for it, then
// uncordons.
func testAgentLocked(t *testing.T, k *cluster) {
	n := k.newNode(t, "ag-locked")
	n.gnshCordon("reboot", earlierBoot)
	runDir := t.TempDir()
	lock, err := drainer.Acquire(filepath.Join(runDir, "gnsh"), drainer.Holder{PID: os.Getpid(), Action: "reboot", User: "bob", Node: n.name})
	if err != nil {
		t.Fatal(err)
	}
	a := startAgentIn(t, runDir, n.env(fastConfig))
	a.waitStatus("STATUS=waiting for the drain of ag-locked to end: the drain lock is held (pid ", 30*time.Second)
	if unsched, _ := n.cordon(); !unsched {
		t.Fatal("uncordoned while a drain held the lock")
	}
	lock.Release()
	a.waitStatus("uncordoned ag-locked after boot", 30*time.Second)
	n.wantCordon("")
	log := a.stop()
	if !strings.Contains(log, fmt.Sprintf("gnsh: waiting for the drain of ag-locked to end: the drain lock is held (pid %d, reboot by bob", os.Getpid())) {
		t.Errorf("log:\n%s", log)
	}
}

// testAgentPendingShutdown: logind is preparing for a shutdown (a reboot
// drained under gnsh's cordon of the last boot, logind waiting for the
// delay locks): the agent leaves the cordon; once logind gives the
// shutdown up, it uncordons.
func testAgentPendingShutdown(t *testing.T, k *cluster) {
	n := k.newNode(t, "ag-pending")
	n.gnshCordon("reboot", earlierBoot)
	b := newLogind(t)
	b.ld.SetPreparingForShutdown(true)
	a := startAgent(t, append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + b.bus.Address()}, n.env(fastConfig)...))
	a.waitStatus("STATUS=waiting for the pending shutdown: systemd-logind is preparing for shutdown", 30*time.Second)
	if unsched, _ := n.cordon(); !unsched {
		t.Fatal("uncordoned while logind prepared for shutdown")
	}
	b.ld.SetPreparingForShutdown(false)
	a.waitStatus("uncordoned ag-pending after boot", 30*time.Second)
	n.wantCordon("")
	log := a.stop()
	if !strings.Contains(log, "gnsh: waiting for the pending shutdown: systemd-logind is preparing for shutdown; gnsh's cordon stays while it is\n") ||
		strings.Contains(log, "cannot ask systemd-logind") {
		t.Errorf("log:\n%s", log)
	}
}

// testAgent503: the API server answers, but 503 (say, etcd not up yet) on
// the Node for the first seconds: the agent retries and uncordons once the
// Node can be read.
func testAgent503(t *testing.T, k *cluster) {
	n := k.newNode(t, "ag-503")
	n.gnshCordon("kexec", earlierBoot)
	px := faultproxy.ForControlPlane(t, k.cp)
	rule := px.Fail(http.MethodGet, "^/api/v1/nodes/ag-503$", http.StatusServiceUnavailable)
	defer rule.Remove()
	a := startAgent(t, n.proxied(px, fastConfig))
	a.waitStatus("STATUS=ag-503: read Node: faultproxy: injected 503", 30*time.Second)
	time.Sleep(time.Second) // and a retry
	if unsched, _ := n.cordon(); !unsched || rule.Hits() == 0 {
		t.Fatalf("unschedulable %v after %d failed GETs of the Node", unsched, rule.Hits())
	}
	rule.Remove()
	a.waitStatus("uncordoned ag-503 after boot", 30*time.Second)
	n.wantCordon("")
	log := a.stop()
	if strings.Count(log, "gnsh: ag-503: read Node: ") != 1 || !strings.Contains(log, "faultproxy: injected 503") {
		t.Errorf("want one line about the 503s:\n%s", log)
	}
}

// testAgentSchedule: logind has a reboot scheduled beyond drainTimeout
// (10 s here; the wrapper says the agent will drain it). The agent, which
// follows logind's schedule file in its /run, drains drainTimeout before
// the deadline, with the wrapper's record for a schedule, and ends before
// it; cancelling the schedule (as systemctl or busctl would, bypassing the
// wrapper) uncordons. A dry run before it is left alone.
func testAgentSchedule(t *testing.T, k *cluster) {
	n := k.newNode(t, "ag-sched")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	runDir := t.TempDir()
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 252, ScheduleFile: filepath.Join(runDir, "systemd", "shutdown", "scheduled")})
	env := n.env(config("drainTimeout: 10s"))
	a := startAgentIn(t, runDir, append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, env...))
	a.waitStatus("nothing to uncordon after boot", 30*time.Second)

	// A dry run: logind's readers show it as a real schedule; the wrapper
	// notes it in /run/gnsh, and the agent leaves it alone.
	r := waitCmd(t, startCmd(t, bus, env, runDir, "shutdown", "-k", "+1"), "shutdown", "-k", "+1")
	if r.Code != 0 {
		t.Fatalf("shutdown -k +1: exit %d", r.Code)
	}
	a.waitStatus("STATUS=idle: a dry run (shutdown -k) is scheduled for ", 30*time.Second)

	// The wrapper, in the same /run, sees the agent's lock.
	r = waitCmd(t, startCmd(t, bus, env, runDir, "shutdown", "-r", "+30"), "shutdown", "-r", "+30")
	if r.Code != 0 || !regexp.MustCompile(`^gnsh: not draining now: the reboot is due in (29m59s|30m0s), beyond the drain timeout \(10s\); the node agent \(gnsh\.service\) will drain the node at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(10s before it\)(, once it has a reboot slot \(if none comes before the reboot's time, it defers the reboot until one does, within slots\.queueFor: 24h0m0s\))?\n`).MatchString(r.Stderr) {
		t.Errorf("shutdown -r +30: exit %d, stderr %q", r.Code, r.Stderr)
	}
	n.wantCordon("")

	c := bus.Connect(t)
	obj := c.Object(logindtest.LogindName, logindtest.LogindPath)
	deadline := time.Now().Add(20 * time.Second).Truncate(time.Microsecond)
	if err := obj.Call(logindtest.LogindInterface+".ScheduleShutdown", 0, "reboot", uint64(deadline.UnixMicro())).Err; err != nil {
		t.Fatal(err)
	}
	a.waitStatus("STATUS=drained ahead of the scheduled reboot", 40*time.Second)
	if now := time.Now(); !now.Before(deadline) {
		t.Errorf("drained %s after the deadline", now.Sub(deadline))
	}
	o := n.wantCordon("reboot")
	if o == nil || o.When == nil || !o.When.Equal(deadline) || o.Time.Before(deadline.Add(-10*time.Second).Truncate(time.Second)) {
		t.Errorf("cordon record %+v for the schedule at %s (drainTimeout 10s)", o, deadline.Format(time.RFC3339Nano))
	}
	if left := n.pods(); len(left) != 0 {
		t.Errorf("pods left: %q", names(left))
	}
	var m drainer.Marker
	if b, err := os.ReadFile(filepath.Join(runDir, "gnsh", drainer.MarkerName)); err != nil || json.Unmarshal(b, &m) != nil ||
		m.Deadline == nil || !m.Deadline.Equal(deadline) {
		t.Errorf("marker %q, %v", b, err)
	}

	if err := obj.Call(logindtest.LogindInterface+".CancelScheduledShutdown", 0).Err; err != nil {
		t.Fatal(err)
	}
	a.waitStatus("; uncordoned", 30*time.Second)
	n.wantCordon("")
	if _, err := os.Stat(filepath.Join(runDir, "gnsh", drainer.MarkerName)); !os.IsNotExist(err) {
		t.Errorf("marker after the cancel: %v", err)
	}
	n.wantEvents(evStarted, evFinished, evUncordoned)
	if typ, _ := ld.Scheduled(); typ != "" {
		t.Errorf("still scheduled: %q", typ)
	}
	log := a.stop()
	for _, want := range []string{
		"gnsh: agent: a reboot is scheduled for ",
		"gnsh: agent: draining ahead of the scheduled reboot for ",
		"gnsh: drained ag-sched in ",
		"gnsh: agent: drained ahead of the scheduled reboot for ",
		" was cancelled; gnsh's cordon for it undone\n",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// newStaleNode creates a Node that kwok is not the kubelet of, Ready=True
// as last reported at heartbeat, its node Lease last renewed then too: a
// node whose kubelet has not come up in this boot (yet), and whose Node
// nobody marks NotReady (this control plane runs no node lifecycle
// controller). It creates the namespace ns-NAME.
func (k *cluster) newStaleNode(t *testing.T, name string, heartbeat time.Time) *node {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	obj := kwok.Node(name, 100)
	delete(obj.Annotations, "kwok.x-k8s.io/node") // kwok is not its kubelet
	obj, err := k.admin.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{cluster: k, t: t, name: name, ns: "ns-" + name, uid: obj.UID}
	n.setReady(heartbeat)
	renewed := metav1.NewMicroTime(heartbeat)
	holder, secs := name, int32(40)
	if _, err := k.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &renewed},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return n
}

// setReady sets the Node's Ready condition to True, last heartbeat at
// heartbeat, as a kubelet reports it.
func (n *node) setReady(heartbeat time.Time) {
	n.t.Helper()
	obj := n.get()
	hb := metav1.NewTime(heartbeat)
	obj.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: hb, LastTransitionTime: hb}}
	if _, err := n.admin.CoreV1().Nodes().UpdateStatus(ctxFor(n.t, time.Minute), obj, metav1.UpdateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// hasGuardLock reports whether the agent's delay lock on shutdown is among
// logind's inhibitors.
func hasGuardLock(inh []logindtest.Inhibitor) bool {
	return slices.ContainsFunc(inh, func(i logindtest.Inhibitor) bool {
		return i.Who == "gnsh" && i.What == "shutdown" && i.Mode == "delay"
	})
}

// testAgentGuardWhileWaiting: the Node is not Ready for this boot (its
// kubelet last reported before the boot began), and gnsh's reboot cordon
// of an earlier boot stands, so the uncordon after boot waits. The
// shutdown guard runs meanwhile: a reboot that bypasses the wrapper (as
// systemctl reboot, straight to logind) is drained within logind's
// InhibitDelayMax less the margin, and the delay lock released. The drain
// takes the earlier boot's cordon over for this reboot, evicts the pods,
// and, the kubelet being dead (a stale Lease), does not wait for pods that
// cannot go. While logind prepares the shutdown the agent does not
// uncordon, even once the Node is Ready for this boot. When logind gives
// the shutdown up the guard takes its lock again.
func testAgentGuardWhileWaiting(t *testing.T, k *cluster) {
	boot, err := gnshagent.BootTimeFromUptime(time.Now(), "/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	bootID := strings.TrimSpace(string(b))
	n := k.newStaleNode(t, "ag-guard", boot.Add(-time.Hour))
	pods := n.replicaSet("web", 2, podOpts{})
	n.gnshCordon("reboot", earlierBoot)

	// logind waits for the delay locks as long as they are held (its
	// InhibitDelayMax timer never fires): the shutdown goes on because
	// the agent let it, not because logind's patience ran out.
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 252, WaitForDelayLocks: true, InhibitDelayMax: 10 * time.Second,
		After: func(time.Duration) <-chan time.Time { return make(chan time.Time) }})
	a := startAgent(t, append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, n.env(fastConfig)...))
	// The uncordon waits, and the guard holds its delay lock meanwhile
	// (before a1b08ac it took the lock only once the uncordon was done).
	msgs := a.waitStatus("STATUS=waiting for ag-guard to be Ready for this boot: Ready=True was last reported at ", 30*time.Second)
	ctx := ctxFor(t, 45*time.Second) // the agent runs at most a minute (rig.Proc.Wait)
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if st, err := ld.Wait(lctx, func(s logindtest.State) bool { return hasGuardLock(s.Inhibitors) }); err != nil {
		a.stop()
		t.Fatalf("no delay lock of gnsh's while the uncordon waits: %v; inhibitors %+v", err, st.Inhibitors)
	}
	if !strings.Contains(msgs[len(msgs)-1], "; meanwhile holding a delay lock on shutdown; idle") {
		a.waitStatus("; meanwhile holding a delay lock on shutdown; idle", 30*time.Second)
	}
	if unsched, o := n.cordon(); !unsched || o == nil || o.BootID != earlierBoot {
		t.Fatalf("before the shutdown: unschedulable %v, record %+v", unsched, o)
	}

	// A reboot that bypasses gnsh.
	start := time.Now()
	obj := bus.Connect(t).Object(logindtest.LogindName, logindtest.LogindPath)
	if err := obj.Call(logindtest.LogindInterface+".RebootWithFlags", 0, uint64(0)).Err; err != nil {
		t.Fatal(err)
	}
	st, err := ld.Wait(ctx, func(s logindtest.State) bool { return s.ShutdownStarted })
	if err != nil {
		t.Fatalf("the agent did not release its delay lock: %v; inhibitors %+v", err, st.Inhibitors)
	}
	t.Logf("logind went on with the reboot %s after it began", time.Since(start).Round(time.Millisecond))
	if hasGuardLock(st.Inhibitors) || !hasGuardLock(st.Released) || st.DelayTimedOut {
		t.Errorf("after the drain: inhibitors %+v, released %+v, timed out %v", st.Inhibitors, st.Released, st.DelayTimedOut)
	}
	// The evictions went out; nothing finishes them without a kubelet.
	n.waitTerminating(len(pods))
	// gnsh's cordon stands, now for this boot's reboot (the drain took
	// the earlier boot's over, so that the agent does not lift it).
	o := n.wantCordon("reboot")
	if o == nil || o.BootID != bootID || o.When != nil {
		t.Errorf("cordon record %+v, want this boot's (%s) reboot", o, bootID)
	}
	n.wantEvents(evStarted, evFailed)

	// The kubelet comes up while logind is still preparing the reboot:
	// the Node is Ready for this boot, and the agent still leaves the
	// cordon.
	n.setReady(time.Now())
	msgs = a.waitStatus("STATUS=waiting for the pending shutdown: systemd-logind is preparing for shutdown; gnsh's cordon stays while it is", 30*time.Second)
	if last := msgs[len(msgs)-1]; !strings.HasSuffix(last, "; meanwhile shutdown under way; delay lock released") {
		t.Errorf("status while logind prepares the reboot: %q, want the guard's part to say its lock is released", last)
	}
	time.Sleep(time.Second)
	n.wantCordon("reboot")
	if ev := n.uncordonMessages(); len(ev) != 0 {
		t.Errorf("GnshUncordoned Events %q while the shutdown was pending", ev)
	}

	// logind gives the reboot up (its job failed): PrepareForShutdown(false).
	if !ld.CancelShutdown() {
		t.Fatal("no shutdown in progress to cancel")
	}
	if st, err := ld.Wait(ctx, func(s logindtest.State) bool { return hasGuardLock(s.Inhibitors) }); err != nil {
		t.Fatalf("the agent did not take its delay lock again: %v; inhibitors %+v", err, st.Inhibitors)
	}
	// The reboot did not happen: the drain's undo gives the adopted
	// cordon back to the earlier boot's record, and the uncordon after
	// boot (the Node is Ready for this boot by now) lifts it, as it would
	// have without the cancelled reboot.
	a.waitStatus("uncordoned ag-guard after boot", 30*time.Second)
	n.wantCordon("")
	if ev := n.uncordonMessages(); len(ev) != 1 {
		t.Errorf("GnshUncordoned Events %q, want one", ev)
	}
	log := a.stop()
	for _, want := range []string{
		"gnsh: agent: holding a delay lock on shutdown, to drain before shutdowns that bypass gnsh\n",
		"gnsh: waiting for ag-guard to be Ready for this boot: Ready=True was last reported at ",
		"gnsh: agent: shutdown under way that bypassed gnsh: draining within 8s (InhibitDelayMaxSec 10s)\n",
		"gnsh's cordon of ag-guard from an earlier boot now stands for this reboot",
		"gnsh: agent: drain for the shutdown ended: ",
		"the kubelet of ag-guard is not alive: Lease last renewed ",
		"gnsh: agent: released the delay lock: systemd-logind goes on with the shutdown\n",
		"gnsh: waiting for the pending shutdown: systemd-logind is preparing for shutdown; gnsh's cordon stays while it is",
		"gnsh: agent: the shutdown was cancelled; holding the delay lock again\n",
		"gnsh's cordon of ag-guard stands for the earlier boot again: the node agent lifts it once the Node is Ready\n",
		"gnsh: ag-guard uncordoned after boot: cordoned by gnsh for a reboot requested by alice ",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// testAgentNoDrain: reboot --no-drain promises no drain, and the agent's
// guard, which drains every shutdown that did not come through gnsh, must
// keep it: the command marks the shutdown in /run/gnsh before it hands it
// to logind (found by a new admin's reading: the guard drained it). A
// plain reboot refused by logind leaves no mark for a later one.
func testAgentNoDrain(t *testing.T, k *cluster) {
	n := k.newNode(t, "ag-nodrain")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	runDir := t.TempDir()
	bus := logindtest.StartBus(t)
	// logind waits for the delay locks as long as they are held.
	ld := bus.StartLogind(t, logindtest.Options{Version: 252, WaitForDelayLocks: true, InhibitDelayMax: 10 * time.Second,
		After: func(time.Duration) <-chan time.Time { return make(chan time.Time) }})
	env := n.env(fastConfig)
	a := startAgentIn(t, runDir, append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address()}, env...))
	a.waitStatus("holding a delay lock on shutdown; idle", 30*time.Second)

	r := waitCmd(t, startCmd(t, bus, env, runDir, "reboot", "--no-drain"), "reboot", "--no-drain")
	if r.Code != 0 {
		t.Fatalf("reboot --no-drain: exit %d", r.Code)
	}
	ctx := ctxFor(t, 45*time.Second)
	st, err := ld.Wait(ctx, func(s logindtest.State) bool { return s.ShutdownStarted })
	if err != nil {
		t.Fatalf("the agent did not release its delay lock: %v; inhibitors %+v", err, st.Inhibitors)
	}
	log := a.stop()
	if unsched, o := n.cordon(); unsched || o != nil {
		t.Errorf("reboot --no-drain: the node was cordoned (record %+v)", o)
	}
	for _, p := range n.pods() {
		if p.DeletionTimestamp != nil {
			t.Errorf("reboot --no-drain: pod %s was evicted", p.Name)
		}
	}
	if !strings.Contains(log, "shutdown under way, asked with --no-drain (gnsh reboot at ") {
		t.Errorf("the agent's log does not say it left the --no-drain reboot alone:\n%s", log)
	}
}
