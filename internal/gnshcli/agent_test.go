package gnshcli

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gnsh/gnsh/internal/legacy"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drain/draintest"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/logind"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/internal/signals"
	"github.com/gnsh/gnsh/internal/slots"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAgentCommand runs `gnsh agent` on a fake cluster: it reports READY=1
// at once, uncordons gnsh's reboot cordon from an earlier boot (and logs
// it), shows the shutdown guard's state in STATUS=, stays up, and ends
// with status 0 on SIGTERM.
func TestAgentCommand(t *testing.T) {
	env, _, _ := testEnv(t)
	var errb lockedBuffer
	env.Stderr = &errb
	sock := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	env.LookupEnv = func(k string) (string, bool) {
		switch k {
		case "NOTIFY_SOCKET":
			return sock, true
		case "DBUS_SYSTEM_BUS_ADDRESS":
			return "unix:path=/nonexistent/system_bus_socket", true
		}
		return "", false
	}
	own, _ := json.Marshal(drain.Ownership{Action: "reboot", User: "alice", Time: time.Now().Add(-time.Hour).UTC().Truncate(time.Second), BootID: "earlier-boot"})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{drain.CordonAnnotation: string(own)}}}
	n.Spec.Unschedulable = true
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	cs := draintest.New(n)
	sig := signals.NewDetached(nil)
	lockDir := t.TempDir()
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: env.Stderr, Getenv: func(string) string { return "" }, Signal: sig,
			ConfigPath: filepath.Join(t.TempDir(), "none.yaml"), BootID: "this-boot", LockDir: lockDir, KubeRoot: t.TempDir(),
			Connect: func(context.Context) (kubernetes.Interface, string, error) { return cs, "node-1", nil }}
	}
	done := make(chan int, 1)
	go func() { done <- Run(context.Background(), []string{"gnsh", "agent"}, env) }()

	_ = l.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 1024)
	var msgs []string
	// READY=1 first; then the guard's line (no system bus here: it keeps
	// trying) beside the uncordon's, which leaves it once done. (The
	// uncordon's log line comes before its outcome reaches STATUS=: the
	// guard may send a line in between.)
	for !strings.Contains(errb.String(), "node-1 uncordoned after boot") || len(msgs) < 2 ||
		!strings.HasSuffix(msgs[len(msgs)-1], "; uncordoned node-1 after boot") {
		k, err := l.Read(buf)
		if err != nil {
			t.Fatalf("notify: %v (got %q); stderr:\n%s", err, msgs, errb.String())
		}
		msgs = append(msgs, string(buf[:k]))
	}
	if !strings.HasPrefix(msgs[0], "READY=1\nSTATUS=") || !strings.HasPrefix(msgs[len(msgs)-1], "STATUS=system bus: ") ||
		!strings.HasSuffix(msgs[len(msgs)-1], "; uncordoned node-1 after boot") {
		t.Errorf("notify messages %q", msgs)
	}
	got, _ := cs.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if got.Spec.Unschedulable {
		t.Error("still cordoned")
	}
	select {
	case code := <-done:
		t.Fatalf("agent ended (%d) before a signal", code)
	case <-time.After(50 * time.Millisecond):
	}
	if running, _, err := drainer.AgentState(lockDir); !running || err != nil {
		t.Errorf("the wrapper does not see the agent running: %v, %v", running, err)
	}
	// A second agent does not start.
	var errb2 lockedBuffer
	env2 := *env
	env2.Stderr = &errb2
	if code := Run(context.Background(), []string{"gnsh", "agent"}, &env2); code != 1 || !strings.Contains(errb2.String(), "gnsh: agent: another gnsh agent is running (pid ") {
		t.Errorf("second agent: exit %d, %s", code, errb2.String())
	}
	sig.Deliver(syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not end on SIGTERM")
	}
	// Before it: the shutdown guard's STATUS= lines (no system bus here).
	for {
		k, err := l.Read(buf)
		if err != nil {
			t.Errorf("no STOPPING=1: %v", err)
			break
		}
		if m := string(buf[:k]); m == "STOPPING=1" {
			break
		} else if !strings.HasPrefix(m, "STATUS=system bus: ") {
			t.Errorf("notify %q before STOPPING=1", m)
		}
	}
	if running, _, err := drainer.AgentState(lockDir); running || err != nil {
		t.Errorf("agent lock held after the agent ended: %v, %v", running, err)
	}
	if l, err := drainer.Acquire(lockDir, drainer.Holder{}); err != nil {
		t.Errorf("the agent left the drain lock held: %v", err)
	} else {
		l.Release()
	}
	out := errb.String()
	for _, want := range []string{"gnsh: agent ", " started (boot this-boot)\n",
		"gnsh: node-1 uncordoned after boot: cordoned by gnsh for a reboot requested by alice at ",
		"gnsh: cannot ask systemd-logind whether a shutdown is pending (",
		"gnsh: agent stopping on SIGTERM\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
}

func TestAgentHelpAndArgs(t *testing.T) {
	env, out, errb := testEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "agent", "--help"}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	for _, want := range []string{"gnsh.service", "uncordons", "bypass the wrapper", "power button", "--kubeconfig", "See gnsh(8)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
	env, _, errb = testEnv(t)
	if code := Run(context.Background(), []string{"gnsh", "agent", "extra"}, env); code == 0 || !strings.Contains(errb.String(), "agent takes no arguments") {
		t.Errorf("exit %d: %s", code, errb)
	}
}

func TestPendingShutdown(t *testing.T) {
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{})
	bus.StartSystemd(t, logindtest.SystemdOptions{})
	ctx := context.Background()
	now := time.Now()
	check := func(what, want string) {
		t.Helper()
		got, err := pendingShutdown(ctx, bus.Address(), nil, 5*time.Minute, now)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", what, got, err, want)
		}
	}
	check("idle", "")
	ld.SetPreparingForShutdown(true)
	check("preparing", "systemd-logind is preparing for shutdown")
	ld.SetPreparingForShutdown(false)

	conn, err := logind.Dial(ctx, bus.Address(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	soon := now.Add(2 * time.Minute).Truncate(time.Second)
	if err := conn.Logind().ScheduleShutdown(ctx, "reboot", uint64(soon.UnixMicro())); err != nil {
		t.Fatal(err)
	}
	check("scheduled within the drain timeout", "a reboot is scheduled for "+soon.UTC().Format(time.RFC3339))
	if err := conn.Logind().ScheduleShutdown(ctx, "poweroff", uint64(now.Add(time.Hour).UnixMicro())); err != nil {
		t.Fatal(err)
	}
	check("scheduled beyond the drain timeout", "")
	// Beyond the drain timeout, but the very schedule gnsh's cordon was
	// made for (the wrapper drained with a longer --drain-timeout).
	far := now.Add(time.Hour)
	if err := conn.Logind().ScheduleShutdown(ctx, "poweroff", uint64(far.UnixMicro())); err != nil {
		t.Fatal(err)
	}
	when := far.UTC()
	if got, err := pendingShutdown(ctx, bus.Address(), &drain.Ownership{Action: "poweroff", When: &when}, 5*time.Minute, now); err != nil ||
		got != "the poweroff scheduled for "+far.UTC().Format(time.RFC3339)+", which gnsh's cordon was made for" {
		t.Errorf("the record's own schedule: %q, %v", got, err)
	}
	other := far.Add(time.Minute).UTC()
	if got, err := pendingShutdown(ctx, bus.Address(), &drain.Ownership{Action: "poweroff", When: &other}, 5*time.Minute, now); err != nil || got != "" {
		t.Errorf("another schedule beyond the drain timeout: %q, %v", got, err)
	}
	if _, err := conn.Logind().CancelScheduledShutdown(ctx); err != nil {
		t.Fatal(err)
	}
	check("cancelled", "")
	// A shutdown started on PID 1 without logind (the wrapper's fallback
	// when logind cannot be reached): systemd is stopping.
	if err := conn.Systemd().StartUnit(ctx, "reboot.target", "replace-irreversibly"); err != nil {
		t.Fatal(err)
	}
	check("systemd stopping", "systemd is stopping the system")

	if _, err := pendingShutdown(ctx, "unix:path=/nonexistent/bus", nil, time.Minute, now); err == nil {
		t.Error("no error without a bus")
	}
	old := logindtest.StartBus(t)
	old.StartLogind(t, logindtest.Options{Version: 219})
	old.StartSystemd(t, logindtest.SystemdOptions{Version: 219})
	if got, err := pendingShutdown(ctx, old.Address(), nil, time.Minute, now); err != nil || got != "" {
		t.Errorf("v219 (no ScheduledShutdown): %q, %v", got, err)
	}
}

// The node name is wrong (a config copied from another node): the Node the
// agent reads is another machine's, Ready with a heartbeat after this
// boot, and cordoned by gnsh for that machine's own reboot (its boot ID,
// not this one's). The agent must not take that cordon for a leftover of
// an earlier boot here and undo it mid-drain there: every write to a Node
// goes through the same-machine check.
func TestAgentLeavesAnotherMachinesNode(t *testing.T) {
	env, errb := agentEnv(t, "unix:path=/nonexistent/system_bus_socket")
	own, _ := json.Marshal(drain.Ownership{Action: "reboot", User: "bob", Time: time.Now().Add(-time.Minute).UTC().Truncate(time.Second), BootID: "their-boot"})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2", Annotations: map[string]string{drain.CordonAnnotation: string(own)}}}
	n.Spec.Unschedulable = true
	n.Status.NodeInfo.MachineID = "their-machine"
	n.Status.NodeInfo.BootID = "their-boot"
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	cs := draintest.New(n)
	sig := signals.NewDetached(nil)
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: env.Stderr, Getenv: func(string) string { return "" }, Signal: sig,
			ConfigPath: filepath.Join(t.TempDir(), "none.yaml"), BootID: "this-boot", LockDir: t.TempDir(),
			HostID:  &kube.HostID{MachineID: "this-machine", BootID: "this-boot"},
			Connect: func(context.Context) (kubernetes.Interface, string, error) { return cs, "node-2", nil }}
	}
	stop := startAgent(t, env, sig)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errb.String(), "nothing is uncordoned") {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not end its uncordon step; stderr:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	got, _ := cs.CoreV1().Nodes().Get(context.Background(), "node-2", metav1.GetOptions{})
	if !got.Spec.Unschedulable || got.Annotations[drain.CordonAnnotation] != string(own) {
		t.Errorf("another machine's Node was changed: unschedulable %v, annotation %q", got.Spec.Unschedulable, got.Annotations[drain.CordonAnnotation])
	}
	if n := cs.Requests("patch", "nodes"); n != 0 {
		t.Errorf("%d patches of another machine's Node", n)
	}
	if want := "gnsh: waiting for node-2 to be this machine: the Node node-2 in the cluster is not this machine (Node node-2 is another machine: machine ID: Node node-2 reports their-machine, this machine has this-machine); nothing is uncordoned (set node in /etc/gnsh/config.yaml, or --node, to this machine's Node name)"; !strings.Contains(errb.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, errb.String())
	}
}

// gnsh installed before kubeadm join: the agent starts with no kubeconfig,
// says so (to the wrapper too, through its lock: no drain is promised), and
// takes the node up once a kubeconfig appears: it guards from then on.
func TestAgentTakesUpANodeJoinedLater(t *testing.T) {
	env, errb := agentEnv(t, "unix:path=/nonexistent/system_bus_socket")
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	cs := draintest.New(n)
	var joined atomic.Bool
	sig := signals.NewDetached(nil)
	lockDir := t.TempDir()
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: env.Stderr, Getenv: func(string) string { return "" }, Signal: sig,
			ConfigPath: filepath.Join(t.TempDir(), "none.yaml"), BootID: "this-boot", LockDir: lockDir, KubeRoot: t.TempDir(),
			Connect: func(context.Context) (kubernetes.Interface, string, error) {
				if !joined.Load() {
					return nil, "", kube.ErrNoKubeconfig
				}
				return cs, "node-1", nil
			}}
	}
	stop := startAgent(t, env, sig)
	waitState := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			held, state, err := drainer.AgentState(lockDir)
			if held && state == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent state %v %q %v, want %q; stderr:\n%s", held, state, err, want, errb.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitState(drainer.AgentNoKubeconfig)
	joined.Store(true) // kubeadm join
	waitState(drainer.AgentGuarding)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errb.String(), "nothing to uncordon after boot") {
		if time.Now().After(deadline) {
			t.Fatalf("no uncordon step after the join; stderr:\n%s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	out := errb.String()
	for _, want := range []string{"gnsh: no kubeconfig found: not a Kubernetes node (yet); looking for one every 5s\n",
		"gnsh: found a kubeconfig: this machine is a Kubernetes node now\n"} {
		if strings.Count(out, want) != 1 {
			t.Errorf("stderr has %q %d times, want once:\n%s", want, strings.Count(out, want), out)
		}
	}
}

// A reboot through the wrapper killed mid-drain (kill -9: no undo runs)
// leaves gnsh's cordon of this boot. The agent notices (the wrapper's
// cordon note, its process gone, the drain lock free, logind and systemd
// idle) and undoes it within a few seconds, saying why; it used to stay
// until some later reboot.
func TestAgentUndoesCordonOfKilledWrapper(t *testing.T) {
	bus := logindtest.StartBus(t)
	bus.StartLogind(t, logindtest.Options{})
	bus.StartSystemd(t, logindtest.SystemdOptions{})
	env, errb := agentEnv(t, bus.Address())
	own := drain.Ownership{Action: "reboot", User: "alice", TTY: "pts/0", Time: time.Now().Add(-time.Minute).UTC().Truncate(time.Second), BootID: "this-boot"}
	ann, _ := json.Marshal(own)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{drain.CordonAnnotation: string(ann)}}}
	n.Spec.Unschedulable = true
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	cs := draintest.New(n)
	lockDir := filepath.Join(t.TempDir(), "gnsh")
	if err := os.Mkdir(lockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	note, _ := json.Marshal(drainer.CordonNote{PID: dead.Process.Pid, Start: 1, Node: "node-1", Own: own})
	if err := os.WriteFile(filepath.Join(lockDir, drainer.CordonNoteName), note, 0o600); err != nil {
		t.Fatal(err)
	}
	sig := signals.NewDetached(nil)
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: env.Stderr, Getenv: func(string) string { return "" }, Signal: sig,
			ConfigPath: filepath.Join(t.TempDir(), "none.yaml"), BootID: "this-boot", LockDir: lockDir, KubeRoot: t.TempDir(),
			Connect: func(context.Context) (kubernetes.Interface, string, error) { return cs, "node-1", nil }}
	}
	stop := startAgent(t, env, sig)
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The cordon undone, and the agent's line about it written (it
		// comes a moment after the patch: stopping the agent in between
		// lost it under load).
		got, _ := cs.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
		if !got.Spec.Unschedulable && strings.Contains(errb.String(), "undone: no drain runs") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still cordoned after 30 s; stderr:\n%s", errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	want := fmt.Sprintf("gnsh: agent: gnsh's cordon of node-1 for the reboot requested by alice on pts/0 at %s undone: no drain runs, no shutdown is pending or under way, and the gnsh that made it is gone (pid %d)\n",
		own.Time.Format(time.RFC3339), dead.Process.Pid)
	if out := errb.String(); !strings.Contains(out, want) {
		t.Errorf("stderr lacks %q:\n%s", want, out)
	}
	if _, err := os.Lstat(filepath.Join(lockDir, drainer.CordonNoteName)); !os.IsNotExist(err) {
		t.Errorf("note left: %v", err)
	}
}

// `shutdown -r +30 --drain-timeout=1h` drains now (due within the
// wrapper's drain timeout), cordons for the schedule, schedules and exits.
// The agent (config drainTimeout 5m) sees the wrapper's PID gone and the
// schedule beyond its drain timeout, but it is the very schedule the cordon
// was made for: the cordon and the marker stay (the agent used to take the
// cordon for an orphan, and the reboot then went ahead undrained).
func TestAgentKeepsCordonOfItsSchedule(t *testing.T) {
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{})
	bus.StartSystemd(t, logindtest.SystemdOptions{})
	env, errb := agentEnv(t, bus.Address())
	yes := true
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "app", UID: types.UID("uid-web-1"),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	cs := draintest.New([]runtime.Object{n, pod}...)
	lockDir := filepath.Join(t.TempDir(), "gnsh")
	cfgPath := filepath.Join(t.TempDir(), "none.yaml") // defaults: drainTimeout 5m
	sig := signals.NewDetached(nil)
	mk := func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: env.Stderr, Getenv: func(string) string { return "" }, Signal: sig,
			ConfigPath: cfgPath, BootID: "this-boot", LockDir: lockDir, KubeRoot: t.TempDir(),
			Who:     drainer.Requester{User: "alice", TTY: "pts/0"},
			Connect: func(context.Context) (kubernetes.Interface, string, error) { return cs, "node-1", nil }}
	}
	// The wrapper: shutdown -r +30 --drain-timeout=1h.
	w := mk()
	w.Signal = signals.NewDetached(nil)
	at := time.Now().Add(30 * time.Minute).Truncate(time.Second)
	req := &legacy.Request{Command: "shutdown", Action: legacy.Reboot, When: legacy.Usec(at)}
	req.Drain.Timeout = time.Hour
	p, err := w.Prepare(context.Background(), req)
	if err != nil || p == nil {
		t.Fatalf("prepare: %v %v\n%s", p, err, errb.String())
	}
	conn, err := logind.Dial(context.Background(), bus.Address(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Logind().ScheduleShutdown(context.Background(), "reboot", uint64(at.UnixMicro())); err != nil {
		t.Fatal(err)
	}
	p.Finish(context.Background(), nil) // handed off: the wrapper exits
	got, _ := cs.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	o := drain.Owner(got)
	if !got.Spec.Unschedulable || o == nil || o.When == nil || o.Drained == nil {
		t.Fatalf("wrapper did not drain for the near schedule: %+v %+v\n%s", got.Spec, o, errb.String())
	}
	// The wrapper process is gone: its note names a dead PID.
	dead := exec.Command("true")
	_ = dead.Run()
	var note drainer.CordonNote
	b, err := os.ReadFile(filepath.Join(lockDir, drainer.CordonNoteName))
	if err != nil {
		t.Fatalf("no note: %v", err)
	}
	_ = json.Unmarshal(b, &note)
	note.PID = dead.Process.Pid
	b, _ = json.Marshal(note)
	_ = os.WriteFile(filepath.Join(lockDir, drainer.CordonNoteName), b, 0o600)

	env.NewDrainer = mk
	stop := startAgent(t, env, sig)
	// The agent's watcher looks every 5 s: give it two looks.
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(errb.String(), "gnsh's cordon of node-1 for the reboot requested by alice on pts/0 stays") {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(6 * time.Second)
	stop()
	typ, _ := ld.Scheduled()
	if typ != "reboot" {
		t.Fatalf("the schedule went: %q", typ)
	}
	got, _ = cs.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if o := drain.Owner(got); !got.Spec.Unschedulable || o == nil || o.Drained == nil {
		t.Errorf("the drained node's cordon for its schedule was undone; stderr:\n%s", errb.String())
	}
	if !mk().ScheduleDrained(at) {
		t.Errorf("the marker for the schedule went")
	}
	if want := "which gnsh's cordon was made for"; !strings.Contains(errb.String(), want) {
		t.Errorf("the agent does not say why the cordon stays (%q):\n%s", want, errb.String())
	}
}

// agentEnv is testEnv for gnsh agent: stderr in a buffer safe to read while
// the agent writes, the system bus at bus.
func agentEnv(t *testing.T, bus string) (*dispatch.Env, *lockedBuffer) {
	t.Helper()
	env, _, _ := testEnv(t)
	errb := &lockedBuffer{}
	env.Stderr = errb
	env.LookupEnv = func(k string) (string, bool) {
		if k == "DBUS_SYSTEM_BUS_ADDRESS" {
			return bus, true
		}
		return "", false
	}
	return env, errb
}

// startAgent runs gnsh agent with env; stop delivers SIGTERM through sig
// and checks that it ends with status 0.
func startAgent(t *testing.T, env *dispatch.Env, sig *signals.Handler) (stop func()) {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- Run(context.Background(), []string{"gnsh", "agent"}, env) }()
	return func() {
		t.Helper()
		sig.Deliver(syscall.SIGTERM)
		if code := <-done; code != 0 {
			t.Errorf("agent exit %d", code)
		}
	}
}

// The node agent keeps this boot's reboot slot while its uncordon after
// boot still waits (here for the Node to be Ready): the keeper used to
// start only once that uncordon had returned, and a slot taken meanwhile
// (shutdown -r +5 right after boot) went unrenewed, for others to reclaim.
func TestAgentKeepsThisBootsSlotWhileTheUncordonWaits(t *testing.T) {
	env, errb := agentEnv(t, "unix:path=/nonexistent/system_bus_socket")
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-1"}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.Now()}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	when := time.Now().Add(4 * time.Minute).UTC().Truncate(time.Second)
	slots.Record{Version: slots.Schema, Next: 1, Holders: []slots.Entry{{Node: "node-1", UID: "uid-1", Boot: "this-boot",
		Phase: slots.ShuttingDown, Action: "reboot", Who: "alice on pts/0", Renew: 1, When: &when}}}.Encode(l)
	cs := draintest.New(n, l)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("apiTimeout: 1s\nslots:\n  renew: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sig := signals.NewDetached(nil)
	lockDir := filepath.Join(t.TempDir(), "gnsh")
	env.NewDrainer = func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: env.Stderr, Getenv: func(string) string { return "" }, Signal: sig,
			ConfigPath: cfgPath, BootID: "this-boot", LockDir: lockDir, KubeRoot: t.TempDir(),
			Connect: func(context.Context) (kubernetes.Interface, string, error) { return cs, "node-1", nil }}
	}
	stop := startAgent(t, env, sig)
	defer stop()
	beat := func() int64 {
		got, err := cs.CoordinationV1().Leases("gnsh").Get(context.Background(), "reboot-slots", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := slots.Decode(got)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := rec.Holder("node-1")
		if !ok {
			t.Fatalf("the slot was freed: %+v\n%s", rec, errb.String())
		}
		return h.Beat
	}
	for deadline := time.Now().Add(15 * time.Second); beat() == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the slot was not renewed while the uncordon waits:\n%s", errb.String())
		}
	}
	if !strings.Contains(errb.String(), "waiting") {
		t.Errorf("the uncordon does not wait:\n%s", errb.String())
	}
}
