package nodefacts

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drain/draintest"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/logind"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// holdKubeletLock takes a delay lock on shutdown as kubelet does, through
// the client, and keeps it until the test ends.
func holdKubeletLock(t *testing.T, addr string) {
	t.Helper()
	c, err := logind.Dial(testCtx(t), addr, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	f, err := c.Logind().Inhibit(testCtx(t), "shutdown", logind.KubeletWho, logind.KubeletWhy, "delay")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
}

// cordonedNode is node1, cordoned by gnsh, reporting machine ID m1.
func cordonedNode(t *testing.T) *corev1.Node {
	own, _ := json.Marshal(drain.Ownership{Action: "reboot", User: "alice", TTY: "pts/0", Time: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)})
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{drain.CordonAnnotation: string(own)},
			ManagedFields: []metav1.ManagedFieldsEntry{draintest.GnshCordonFields()}},
		Spec:   corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{MachineID: "m1"}},
	}
}

func connectTo(c kubernetes.Interface) func(string, time.Duration) (kubernetes.Interface, *rest.Config, error) {
	return func(string, time.Duration) (kubernetes.Interface, *rest.Config, error) { return c, &rest.Config{}, nil }
}

// nodeTree is a stock Debian 11 kubeadm node: systemd-sysv's links,
// kubelet with a 60 s grace period, its 99-kubelet.conf drop-in and
// unattended-upgrades' 30 s one, a kubeconfig of mode 0640.
func nodeTree(t *testing.T) (string, string) {
	root, self := commandTree(t, map[string]string{
		"/run/systemd/system/.keep":                  "",
		"/etc/systemd/logind.conf.d/99-kubelet.conf": kubeletDropIn,
		"/usr/lib/systemd/logind.conf.d/" + uuName:   uuDropIn,
		DefaultKubeletConfig:                         "kind: KubeletConfiguration\nshutdownGracePeriod: 60s\nshutdownGracePeriodCriticalPods: 10s\n",
		"/etc/kubernetes/kubelet.conf":               "apiVersion: v1\nkind: Config\n",
		"/etc/gnsh/config.yaml":                      "node: node1\napiTimeout: 2s\n",
		"/etc/sudoers":                               "Defaults secure_path=\"/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin\"\n",
	})
	if err := os.Chmod(filepath.Join(root, "/etc/kubernetes/kubelet.conf"), 0o640); err != nil {
		t.Fatal(err)
	}
	return root, self
}

// Gather against a fake systemd 247 logind and PID 1 on a private bus,
// with kubelet's lock held and a reboot scheduled, on a fake root tree,
// with a fake cluster whose Node gnsh has cordoned.
func TestGatherFakeBus(t *testing.T) {
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 247, InhibitDelayMax: 30 * time.Second,
		Inhibitors: []logindtest.Inhibitor{{What: "sleep", Who: "UPower", Why: "lid", Mode: "delay", PID: 7}}})
	bus.StartSystemd(t, logindtest.SystemdOptions{Version: 247})
	holdKubeletLock(t, bus.Address())
	at := time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC)
	c, err := logind.Dial(testCtx(t), bus.Address(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Logind().ScheduleShutdown(testCtx(t), "reboot", uint64(at.UnixMicro())); err != nil {
		t.Fatal(err)
	}

	root, self := nodeTree(t)
	s := &Sources{Root: root, Self: self, Getenv: envOf(map[string]string{"DBUS_SYSTEM_BUS_ADDRESS": bus.Address()}),
		Kube: KubeOptions{Connect: connectTo(fake.NewClientset(cordonedNode(t))), HostID: &kube.HostID{MachineID: "m1"}}}
	r := Gather(testCtx(t), s)

	if sd := r.Systemd; !sd.Booted || sd.Version != "247" || sd.Major != 247 || sd.RHEL8 || sd.Error != "" {
		t.Errorf("systemd %+v", sd)
	}
	l := r.Logind
	if !l.Reachable || l.InhibitDelayMax != "30s" || l.InhibitDelayMaxSec != 30 || !l.KubeletLock || l.GnshLock ||
		len(l.Inhibitors) != 2 || l.Inhibitors[1].Who != "kubelet" || l.Inhibitors[1].PID != uint32(os.Getpid()) || l.Error != "" {
		t.Errorf("logind %+v", l)
	}
	if l.Scheduled == nil || l.Scheduled.Type != "reboot" || l.Scheduled.Time != "2026-11-23T02:00:00Z" {
		t.Errorf("scheduled %+v", l.Scheduled)
	}
	if lc := r.LogindConf; lc.EffectiveSec != 30 || lc.EffectiveFile != "/usr/lib/systemd/logind.conf.d/"+uuName {
		t.Errorf("logind.conf %+v", lc)
	}
	if k := r.Kubelet; k.RequestedSec != 60 || k.ShutdownGracePeriodCriticalPods != "10s" {
		t.Errorf("kubelet %+v", k)
	}
	if cf := r.Commands; cf.RootPath != DefaultRootPath || len(cf.Root) != 4 || cf.Root[0].Is != "systemctl" || len(cf.Sudo) != 4 {
		t.Errorf("commands %+v", cf)
	}
	if kc := r.Kubeconfig; !kc.Found || kc.Path != filepath.Join(root, "/etc/kubernetes/kubelet.conf") || kc.Mode != "0640" || kc.ConfigError != "" {
		t.Errorf("kubeconfig %+v", kc)
	}
	n := r.Node
	if !n.Found || n.Name != "node1" || n.NameFrom != "config" || n.Schedulable == nil || *n.Schedulable ||
		n.Cordon == nil || n.Cordon.User != "alice" || n.SameMachine == nil || !*n.SameMachine || n.Error != "" {
		t.Errorf("node %+v", n)
	}
	// The fake PID 1 has no GetUnit: the agent's state is unknown, with why.
	if a := r.Agent; a.Unit != AgentUnit || a.ActiveState != "unknown" || a.Error == "" || a.LockPath != AgentLockPath ||
		a.Lock != LockAbsent || a.LockError != "" || a.Running {
		t.Errorf("agent %+v", a)
	}
	if d := r.Drain; !d.Enabled || d.Timeout != "5m0s" || d.TimeoutSec != 300 {
		t.Errorf("drain %+v", d)
	}
	if r.Access != nil {
		t.Errorf("access asked without Sources.Access: %+v", r.Access)
	}
	// Doctor on this node: the gap of stock Debian 11.
	var failed []string
	for _, ch := range Doctor(r) {
		if ch.Verdict == Fail {
			failed = append(failed, ch.Name)
		}
	}
	if got := strings.Join(failed, ","); got != "systemd,InhibitDelayMaxSec,commands (root),commands (sudo),kubeconfig,agent" {
		t.Errorf("failed checks %s", got)
	}
	// Only reads reached logind (the test's own Inhibit and ScheduleShutdown aside).
	for _, call := range ld.Calls() {
		switch call.Member {
		case "Get", "ListInhibitors", "Inhibit", "ScheduleShutdown":
		default:
			t.Errorf("unexpected call %s", call.Member)
		}
	}
}

// Nothing on the bus address, a Node the cluster lacks: every fact says
// why it is missing, and the rest are there.
func TestGatherNothingReachable(t *testing.T) {
	root, self := nodeTree(t)
	s := &Sources{Root: root, Self: self, Getenv: envOf(map[string]string{"DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent"}),
		Kube: KubeOptions{Connect: connectTo(fake.NewClientset())}}
	start := time.Now()
	r := Gather(testCtx(t), s)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	if r.Systemd.Error == "" || !r.Systemd.Booted || r.Logind.Reachable || !strings.Contains(r.Logind.Error, "/nonexistent") ||
		r.Agent.ActiveState != "unknown" || r.Agent.Error == "" {
		t.Errorf("bus facts: %+v %+v %+v", r.Systemd, r.Logind, r.Agent)
	}
	if !r.Node.NotFound || r.Node.Found || r.Node.Error != `the cluster has no Node "node1"` {
		t.Errorf("node %+v", r.Node)
	}
	if r.Kubelet.RequestedSec != 60 || r.LogindConf.EffectiveSec != 30 || !r.Kubeconfig.Found {
		t.Errorf("file facts missing: %+v %+v %+v", r.Kubelet, r.LogindConf, r.Kubeconfig)
	}
}

// A logind that does not answer one call: that fact times out, the
// others are there.
func TestGatherHungCall(t *testing.T) {
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{})
	release := ld.HoldReplies("ListInhibitors")
	defer release()
	s := &Sources{Root: t.TempDir(), Self: "/nonexistent", Timeout: 300 * time.Millisecond,
		Getenv: envOf(map[string]string{"DBUS_SYSTEM_BUS_ADDRESS": bus.Address()})}
	start := time.Now()
	r := Gather(testCtx(t), s)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s", d)
	}
	if !r.Logind.Reachable || r.Logind.InhibitorsError == "" || r.Logind.InhibitDelayMax != "5s" || r.Logind.ScheduledError != "" {
		t.Errorf("logind %+v", r.Logind)
	}
	if r.Node.Error != "no kubeconfig" || r.Kubeconfig.Found {
		t.Errorf("kube %+v %+v", r.Kubeconfig, r.Node)
	}
}

// fakeSystemd exports, on a test bus, the systemd1 reads BusSystemd makes:
// Version, GetUnit and a unit's LoadState and ActiveState, GetUnitFileState.
type fakeSystemd struct {
	units map[string][2]string
	files map[string]string // unit file states
}

func (f *fakeSystemd) GetUnitFileState(name string) (string, *dbus.Error) {
	if s, ok := f.files[name]; ok {
		return s, nil
	}
	return "", dbus.NewError("org.freedesktop.DBus.Error.FileNotFound", []any{"No such file or directory"})
}

func (f *fakeSystemd) GetUnit(name string) (dbus.ObjectPath, *dbus.Error) {
	if _, ok := f.units[name]; !ok {
		return "", dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not loaded."})
	}
	return dbus.ObjectPath("/org/freedesktop/systemd1/unit/" + strings.ReplaceAll(strings.ReplaceAll(name, ".", "_2e"), "-", "_2d")), nil
}

type fakeProps struct {
	version string
	unit    [2]string
}

func (p *fakeProps) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	switch name {
	case "Version":
		return dbus.MakeVariant(p.version), nil
	case "LoadState":
		return dbus.MakeVariant(p.unit[0]), nil
	case "ActiveState":
		return dbus.MakeVariant(p.unit[1]), nil
	}
	return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{name})
}

func TestBusSystemdUnit(t *testing.T) {
	bus := logindtest.StartBus(t)
	conn := bus.Connect(t)
	f := &fakeSystemd{units: map[string][2]string{AgentUnit: {"loaded", "active"}}, files: map[string]string{AgentUnit: "disabled"}}
	if err := conn.Export(f, logind.SystemdPath, logind.SystemdManager); err != nil {
		t.Fatal(err)
	}
	if err := conn.Export(&fakeProps{version: "252.39-1~deb12u1"}, logind.SystemdPath, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Export(&fakeProps{unit: f.units[AgentUnit]}, "/org/freedesktop/systemd1/unit/gnsh_2eservice", "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.RequestName(logind.SystemdService, dbus.NameFlagDoNotQueue); err != nil {
		t.Fatal(err)
	}
	s := &Sources{Root: t.TempDir(), Self: "/nonexistent", Getenv: envOf(map[string]string{"DBUS_SYSTEM_BUS_ADDRESS": bus.Address()})}
	r := &Report{}
	gatherSystemd(testCtx(t), s, r)
	if r.Systemd.Version != "252.39-1~deb12u1" || r.Systemd.Major != 252 || r.Systemd.Booted {
		t.Errorf("systemd %+v", r.Systemd)
	}
	if r.Agent.ActiveState != "active" || r.Agent.LoadState != "loaded" || r.Agent.UnitFileState != "disabled" || r.Agent.Error != "" {
		t.Errorf("agent %+v", r.Agent)
	}
	// A unit systemd does not know reads as systemctl shows it.
	c, err := DialBus(testCtx(t), bus.Address(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	load, active, err := (&BusSystemd{Conn: c}).Unit(testCtx(t), "nope.service")
	if err != nil || load != "not-found" || active != "inactive" {
		t.Errorf("nope.service: %q %q %v", load, active, err)
	}
	if fs, err := (&BusSystemd{Conn: c}).UnitFileState(testCtx(t), "nope.service"); err != nil || fs != "" {
		t.Errorf("nope.service's unit file state: %q %v", fs, err)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]struct {
		major int
		rhel8 bool
	}{
		"252.39-1~deb12u1": {252, false}, "239 (239-78.el8)": {239, true}, "247": {247, false}, "v255": {255, false},
		"239 (239-82.el8_10.2)": {239, true}, "": {0, false}, "unknown": {0, false},
	} {
		if m, r := ParseVersion(in); m != want.major || r != want.rhel8 {
			t.Errorf("ParseVersion(%q) = %d %v", in, m, r)
		}
	}
}
