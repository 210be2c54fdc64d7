package gnshcli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/logind"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/internal/nodefacts"
)

func boolp(b bool) *bool { return &b }

// The text layout, line by line: one fact a line, labels aligned, errors
// in place.
func TestWriteStatusLayout(t *testing.T) {
	r := &nodefacts.Report{
		Systemd: nodefacts.SystemdFacts{Booted: true, Version: "247.3-7+deb11u5", Major: 247},
		Logind: nodefacts.LogindFacts{Reachable: true, InhibitDelayMax: "30s", InhibitDelayMaxSec: 30, KubeletLock: true,
			Inhibitors: []nodefacts.Lock{{What: "shutdown", Who: "kubelet", Why: logind.KubeletWhy, Mode: "delay", UID: 0, PID: 812}},
			Scheduled:  &nodefacts.Scheduled{Type: "reboot", Time: "2026-11-23T02:00:00Z"}},
		LogindConf: nodefacts.LogindConfFacts{Effective: "30s", EffectiveSec: 30,
			EffectiveFile: "/usr/lib/systemd/logind.conf.d/unattended-upgrades-logind-maxdelay.conf",
			Files: []nodefacts.ConfFile{{Path: "/etc/systemd/logind.conf.d/99-kubelet.conf", InhibitDelayMaxSec: "60"},
				{Path: "/usr/lib/systemd/logind.conf.d/unattended-upgrades-logind-maxdelay.conf", InhibitDelayMaxSec: "30"}}},
		Kubelet: nodefacts.KubeletFacts{ConfigPath: "/var/lib/kubelet/config.yaml", ShutdownGracePeriod: "1m0s", RequestedSec: 60},
		Commands: nodefacts.CommandFacts{RootPath: "/usr/sbin:/usr/bin", RootPathFrom: "default", SecurePath: "/sbin:/bin",
			Ansible: nodefacts.Resolution{Name: "shutdown", Path: "/sbin/shutdown", Target: "/usr/bin/systemctl", Is: "systemctl"},
			Root: []nodefacts.Resolution{
				{Name: "reboot", Path: "/usr/local/sbin/reboot", Target: "/usr/local/sbin/gnsh", Is: "gnsh"},
				{Name: "halt", Is: "missing"}},
			Sudo: []nodefacts.Resolution{
				{Name: "reboot", Path: "/sbin/reboot", Target: "/usr/bin/systemctl", Is: "systemctl"},
				{Name: "halt", Path: "/sbin/halt", Target: "/sbin/halt", Is: "other"}}},
		Kubeconfig: nodefacts.KubeconfigFacts{Found: true, Path: "/etc/kubernetes/kubelet.conf", Mode: "0600"},
		Node: nodefacts.NodeFacts{Name: "node1", NameFrom: "certificate", Found: true, Schedulable: boolp(false),
			Cordon:      &drain.Ownership{Action: "reboot", User: "alice", TTY: "pts/0", Time: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)},
			SameMachine: boolp(true), SameWhy: "Node node1 has this machine's machine ID m1"},
		Agent: nodefacts.AgentFacts{Unit: "gnsh.service", ActiveState: "unknown", Error: "systemd not reachable: timed out\nreally",
			LockPath: "/run/gnsh/agent.flock", Lock: "held", Running: true},
		Slots: nodefacts.SlotsFacts{Gate: "optional", Lease: "gnsh/reboot-slots", MaxUnavailable: 1, Pools: []string{"gpu (pool=gpu): 1"},
			Reachable: true, Holders: []string{"node2 (draining)"}, Waiting: 1, This: "waiting (place 1)"},
	}
	var b bytes.Buffer
	WriteStatus(&b, r)
	want := `systemd             systemd 247.3-7+deb11u5
logind              reachable
inhibit delay max   30s
logind.conf         InhibitDelayMaxSec 30s (set by /usr/lib/systemd/logind.conf.d/unattended-upgrades-logind-maxdelay.conf, overriding /etc/systemd/logind.conf.d/99-kubelet.conf 60)
inhibitors          kubelet yes, gnsh no; 1 in all
                    delay shutdown by kubelet (pid 812, uid 0): Kubelet needs time to handle node shutdown
scheduled shutdown  reboot at 2026-11-23T02:00:00Z
kubelet             shutdownGracePeriod 1m0s, shutdownGracePeriodCriticalPods unset (/var/lib/kubelet/config.yaml)
PATH (root)         /usr/sbin:/usr/bin (default)
secure_path (sudo)  /sbin:/bin
reboot              root: /usr/local/sbin/reboot → /usr/local/sbin/gnsh (gnsh); sudo: /sbin/reboot → /usr/bin/systemctl (systemctl)
halt                root: not found; sudo: /sbin/halt (other)
ansible reboot      /sbin/shutdown → /usr/bin/systemctl (systemctl)
kubeconfig          /etc/kubernetes/kubelet.conf (mode 0600)
node                node1 (from certificate), unschedulable
cordon              by gnsh for reboot, by alice on pts/0 at 2026-11-22T10:00:00Z
this machine        yes: Node node1 has this machine's machine ID m1
agent               gnsh.service: unknown (error: systemd not reachable: timed out really)
agent runs          yes (/run/gnsh/agent.flock held), delay lock on shutdown no
reboot slots        gate optional, gnsh/reboot-slots, limit 1, pools gpu (pool=gpu): 1; held by node2 (draining), 1 waiting; this node: waiting (place 1)
`
	if b.String() != want {
		t.Fatalf("layout:\n%s\nwant:\n%s", b.String(), want)
	}
}

// statusEnv is testEnv on a fake tree whose system bus is addr.
func statusEnv(t *testing.T, addr string) (*bytesEnv, string) {
	env, out, errb := testEnv(t)
	root := env.Host.Root
	vars := map[string]string{"DBUS_SYSTEM_BUS_ADDRESS": addr, "PATH": "/usr/local/sbin:/usr/sbin"}
	env.LookupEnv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	files := map[string]string{
		"/usr/sbin/reboot":             "/usr/local/sbin/gnsh",
		"/usr/sbin/shutdown":           "/usr/local/sbin/gnsh",
		"/usr/sbin/poweroff":           "/usr/local/sbin/gnsh",
		"/usr/sbin/halt":               "/usr/bin/systemctl",
		"/var/lib/kubelet/config.yaml": "",
	}
	for p, target := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target != "" {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(full, []byte("shutdownGracePeriod: 20s\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/usr/local/sbin/gnsh", "/usr/bin/systemctl"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self := filepath.Join(root, "/usr/local/sbin/gnsh")
	adjustSources = func(s *nodefacts.Sources) { s.Self, s.Euid = self, func() int { return 0 } }
	t.Cleanup(func() { adjustSources = nil })
	return &bytesEnv{env: env, out: out, errb: errb}, root
}

type bytesEnv struct {
	env       *dispatch.Env
	out, errb *bytes.Buffer
}

func TestStatusAndDoctorFakeLogind(t *testing.T) {
	bus := logindtest.StartBus(t)
	ld := bus.StartLogind(t, logindtest.Options{Version: 252, InhibitDelayMax: 30 * time.Second})
	bus.StartSystemd(t, logindtest.SystemdOptions{Version: 252})
	c, err := logind.Dial(context.Background(), bus.Address(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lock, err := c.Logind().Inhibit(context.Background(), "shutdown", logind.KubeletWho, logind.KubeletWhy, "delay")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()

	e, _ := statusEnv(t, bus.Address())
	if code := Run(context.Background(), []string{"gnsh", "status"}, e.env); code != 0 {
		t.Fatalf("status exit %d: %s", code, e.errb)
	}
	text := e.out.String()
	for _, want := range []string{
		"systemd             systemd 252\n",
		"inhibit delay max   30s\n",
		"inhibitors          kubelet yes, gnsh no; 1 in all\n",
		"scheduled shutdown  none\n",
		"kubelet             shutdownGracePeriod 20s, shutdownGracePeriodCriticalPods unset (/var/lib/kubelet/config.yaml)\n",
		"reboot              root: /usr/sbin/reboot → /usr/local/sbin/gnsh (gnsh)\n",
		"halt                root: /usr/sbin/halt → /usr/bin/systemctl (systemctl)\n",
		"node                unknown (error: no kubeconfig)\n",
		"agent               gnsh.service: unknown (error: ",
		"agent runs          no (/run/gnsh/agent.flock absent)\n",
		"reboot slots        gate optional, gnsh/reboot-slots, limit 1; not a node (no kubeconfig found): the gate does not apply\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}

	e.out.Reset()
	if code := Run(context.Background(), []string{"gnsh", "status", "--output", "json"}, e.env); code != 0 {
		t.Fatalf("status json exit %d: %s", code, e.errb)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal(e.out.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["logind"]["kubeletLock"] != true || raw["logind"]["inhibitDelayMaxSec"] != 30.0 || raw["systemd"]["major"] != 252.0 ||
		raw["kubelet"]["requestedSec"] != 20.0 || raw["agent"]["activeState"] != "unknown" || raw["kubeconfig"]["found"] != false ||
		raw["agent"]["lock"] != "absent" || raw["agent"]["running"] != false || raw["drain"]["timeoutSec"] != 300.0 || raw["access"] != nil {
		t.Errorf("json %s", e.out)
	}

	e.out.Reset()
	code := Run(context.Background(), []string{"gnsh", "doctor"}, e.env)
	lines := unwrapChecks(e.out.String())
	if code != 1 || len(lines) != 16 || e.errb.String() != "gnsh: doctor: 3 of 16 checks failed\n" {
		t.Fatalf("doctor exit %d, stderr %q:\n%s", code, e.errb, e.out)
	}
	for i, want := range []string{
		"ok    systemd               systemd 252: its legacy commands go through logind",
		"ok    logind                systemd-logind answers: InhibitDelayMaxSec 30s, 1 inhibitor(s)",
		"ok    kubelet grace period  shutdownGracePeriod 20s",
		"ok    kubelet inhibitor     kubelet holds a delay lock on shutdown",
		"warn  bypass path           systemctl reboot and the power button bypass gnsh's commands, and nothing drains them (gnsh's agent is not running): " +
			"kubelet stops every pod at once (within shutdownGracePeriod 20s",
		"ok    InhibitDelayMaxSec    30s (logind, set by logind's default) ≥ kubelet's 20s; logind.conf now says 5s: logind has not reloaded it",
		"fail  commands (root)       halt → /usr/bin/systemctl (systemctl) (root's PATH /usr/local/sbin:/usr/sbin): these bypass gnsh's drain; fix: install gnsh over them: " + filepath.Join(e.env.Host.Root, "/usr/local/sbin/gnsh") + " install (links made by hand",
		"ok    commands (sudo)       sudo has no secure_path",
		"ok    ansible reboot        ansible.builtin.reboot runs /usr/sbin/shutdown: gnsh",
		"ok    config                no " + filepath.Join(e.env.Host.Root, "/etc/gnsh/config.yaml") + ": the defaults apply",
		"fail  kubeconfig            no kubeconfig found",
		"warn  node                  not checked: no kubeconfig",
		"warn  API access            not checked: no kubeconfig",
		"fail  agent                 gnsh.service: state unknown (Unknown method GetUnit or interface org.freedesktop.systemd1.Manager.), " +
			"no agent holds /run/gnsh/agent.flock: nothing uncordons the node after a reboot",
		"ok    reboot slots          not a node (no kubeconfig found): the gate does not apply",
		"ok    gate token            no token in the gate's kubeconfig (/etc/gnsh/kubeconfig or slots.kubeconfig): no identity of its own for the gate",
	} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("doctor line %d:\n got %s\nwant %s…", i+1, lines[i], want)
		}
	}
	// Only reads reached logind.
	for _, call := range ld.Calls() {
		if call.Member != "Get" && call.Member != "ListInhibitors" && call.Member != "Inhibit" {
			t.Errorf("unexpected logind call %s", call.Member)
		}
	}

	e.out.Reset()
	e.errb.Reset()
	if code := Run(context.Background(), []string{"gnsh", "doctor", "-o", "json"}, e.env); code != 1 {
		t.Fatalf("doctor json exit %d", code)
	}
	var checks []nodefacts.Check
	if err := json.Unmarshal(e.out.Bytes(), &checks); err != nil || len(checks) != 16 || checks[6].Verdict != nodefacts.Fail ||
		checks[4].Name != "bypass path" || checks[4].Verdict != nodefacts.Warn ||
		checks[9].Name != "config" || checks[12].Name != "API access" || checks[13].Verdict != nodefacts.Fail || !strings.HasSuffix(e.out.String(), "]\n") {
		t.Fatalf("doctor json %v: %s", err, e.out)
	}
}

func TestStatusNoBusAndBadOutput(t *testing.T) {
	e, _ := statusEnv(t, "unix:path=/nonexistent")
	if code := Run(context.Background(), []string{"gnsh", "status"}, e.env); code != 0 ||
		!strings.Contains(e.out.String(), "logind              not reachable (error: connect to unix:path=/nonexistent: no such file or directory)\n") {
		t.Fatalf("exit %d:\n%s", code, e.out)
	}
	if code := Run(context.Background(), []string{"gnsh", "status", "--output", "yaml"}, e.env); code != 1 ||
		!strings.Contains(e.errb.String(), `invalid --output "yaml"`) {
		t.Fatalf("exit %d, %q", code, e.errb)
	}
	e.errb.Reset()
	if code := Run(context.Background(), []string{"gnsh", "doctor", "now"}, e.env); code != 1 ||
		!strings.Contains(e.errb.String(), `doctor takes no arguments`) {
		t.Fatalf("exit %d, %q", code, e.errb)
	}
}

// Another user than root cannot probe the agent's lock (root's alone):
// gnsh status says whether the agent runs from systemd's ActiveState.
func TestStatusAgentForAnotherUser(t *testing.T) {
	r := &nodefacts.Report{Logind: nodefacts.LogindFacts{Reachable: true, GnshLock: true},
		Agent: nodefacts.AgentFacts{Unit: "gnsh.service", ActiveState: "active", LockPath: "/run/gnsh/agent.flock",
			Lock: nodefacts.LockRootOnly, Running: true}}
	var b bytes.Buffer
	WriteStatus(&b, r)
	if want := "agent runs          yes (from systemd; /run/gnsh/agent.flock is root's), delay lock on shutdown yes\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}
}

// unwrapChecks undoes WriteChecks' wrapping: one line per check, its
// message's lines joined and its fix after "; fix: ".
func unwrapChecks(text string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch rest := strings.TrimLeft(l, " "); {
		case rest == l || len(lines) == 0:
			lines = append(lines, l)
		case strings.HasPrefix(rest, "fix: ") && !strings.Contains(lines[len(lines)-1], "; fix: "):
			lines[len(lines)-1] += "; " + rest
		default:
			lines[len(lines)-1] += " " + rest
		}
	}
	return lines
}

// gnsh status names the gate's kubeconfig beside the drain's, and a drain
// that falls back to gnsh's own (issue 22).
func TestStatusKubeconfigs(t *testing.T) {
	for _, tt := range []struct {
		kc    nodefacts.KubeconfigFacts
		slots nodefacts.SlotsFacts
		want  string
	}{
		{nodefacts.KubeconfigFacts{Found: true, Path: "/etc/kubernetes/kubelet.conf", Mode: "0600"},
			nodefacts.SlotsFacts{Gate: "optional", Kubeconfig: "/etc/gnsh/kubeconfig", Mode: "0600"},
			"kubeconfig          /etc/kubernetes/kubelet.conf (mode 0600); gate: /etc/gnsh/kubeconfig (mode 0600)\n"},
		{nodefacts.KubeconfigFacts{Found: true, Path: "/etc/gnsh/kubeconfig", Mode: "0600", Fallback: true},
			nodefacts.SlotsFacts{Gate: "optional", Kubeconfig: "/etc/gnsh/kubeconfig", Mode: "0600"},
			"kubeconfig          /etc/gnsh/kubeconfig (mode 0600), gnsh's own for want of a kubelet kubeconfig (/etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig): set kubeconfig to the kubelet's\n"},
	} {
		var b bytes.Buffer
		WriteStatus(&b, &nodefacts.Report{Kubeconfig: tt.kc, Slots: tt.slots})
		if !strings.Contains(b.String(), tt.want) {
			t.Errorf("status:\n%s\nlacks %q", b.String(), tt.want)
		}
	}
}
