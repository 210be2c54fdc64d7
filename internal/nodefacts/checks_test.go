package nodefacts

import (
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/agent"
	"github.com/gnsh/gnsh/internal/drain"
)

func res(is string) []Resolution {
	var rs []Resolution
	for _, n := range LegacyCommands {
		r := Resolution{Name: n, Path: "/usr/sbin/" + n, Target: "/usr/local/sbin/gnsh", Is: is}
		if is == "systemctl" {
			r.Target = "/usr/bin/systemctl"
		}
		rs = append(rs, r)
	}
	return rs
}

func ptr[T any](v T) *T { return &v }

// healthy is a Debian 11 node with gnsh installed and everything right.
func healthy() *Report {
	return &Report{
		Systemd: SystemdFacts{Booted: true, Version: "247.3-7+deb11u5", Major: 247},
		Logind: LogindFacts{Reachable: true, InhibitDelayMax: "1m0s", InhibitDelayMaxSec: 60, KubeletLock: true, GnshLock: true,
			Inhibitors: []Lock{{What: "shutdown", Who: "kubelet", Why: "Kubelet needs time to handle node shutdown", Mode: "delay", PID: 42},
				{What: "shutdown", Who: "gnsh", Why: "drain the node before shutdown", Mode: "delay", PID: 43}}},
		LogindConf: LogindConfFacts{Effective: "1m0s", EffectiveSec: 60, EffectiveFile: "/etc/systemd/logind.conf.d/99-kubelet.conf"},
		Kubelet:    KubeletFacts{ConfigPath: DefaultKubeletConfig, ShutdownGracePeriod: "1m0s", ShutdownGracePeriodCriticalPods: "10s", RequestedSec: 60},
		Commands: CommandFacts{Self: "/usr/local/sbin/gnsh", RootPath: DefaultRootPath, SecurePath: DefaultRootPath,
			Root: res("gnsh"), Sudo: res("gnsh"), Ansible: res("gnsh")[1]},
		Kubeconfig: KubeconfigFacts{Found: true, Path: "/etc/kubernetes/kubelet.conf", Mode: "0600", Config: "/etc/gnsh/config.yaml"},
		Node: NodeFacts{Name: "node1", NameFrom: "certificate", Found: true, Schedulable: ptr(true), SameMachine: ptr(true),
			SameWhy: "Node node1 has this machine's machine ID abc"},
		Drain:   DrainFacts{Enabled: true, Timeout: "30s", TimeoutSec: 30},
		Agent:   AgentFacts{Unit: AgentUnit, ActiveState: "active", LoadState: "loaded", LockPath: AgentLockPath, Lock: LockHeld, Running: true},
		Access:  &AccessFacts{User: "system:node:node1", Allowed: GnshRequests("node1", true)},
		Slots:   SlotsFacts{Gate: "optional", Lease: "gnsh/reboot-slots", MaxUnavailable: 1, Reachable: true, Holders: []string{}, This: "none"},
		Install: InstallFacts{By: ByInstall, Unit: "/etc/systemd/system/gnsh.service"},
	}
}

func TestDoctorHealthy(t *testing.T) {
	cs := Doctor(healthy())
	if len(cs) != 16 || Failed(cs) != 0 {
		t.Fatalf("%+v", cs)
	}
	for _, c := range cs {
		if c.Verdict != OK || c.Fix != "" {
			t.Errorf("%+v", c)
		}
	}
}

func TestChecks(t *testing.T) {
	for _, tt := range []struct {
		name    string
		change  func(r *Report)
		check   func(r *Report) Check
		verdict Verdict
		msg     string // substring of the message
		fix     string // substring of the fix ("" = no fix)
	}{
		// systemd
		{"247 covered by gnsh", func(*Report) {}, CheckSystemd, OK, "systemd 247: root's reboot, poweroff, halt and shutdown now bypass logind (before 251)", ""},
		{"247 stock", func(r *Report) { r.Commands.Root = res("systemctl") }, CheckSystemd, Fail, "bypass logind", "install gnsh over shutdown, reboot, poweroff and halt"},
		{"247, sudo not covered", func(r *Report) { r.Commands.Sudo = res("systemctl") }, CheckSystemd, Fail, "bypass logind", "install gnsh"},
		{"252 stock", func(r *Report) {
			r.Systemd.Major, r.Commands.Root = 252, res("systemctl")
		}, CheckSystemd, OK, "systemd 252: its legacy commands go through logind", ""},
		{"RHEL 8 239", func(r *Report) {
			r.Systemd = SystemdFacts{Booted: true, Version: "239 (239-78.el8)", Major: 239, RHEL8: true, NewShutdownEnv: "1"}
			r.Commands.Root = res("systemctl")
		}, CheckSystemd, Fail, `unless SYSTEMD_NEW_SHUTDOWN=1, which sudo's env_reset drops and units and cron do not have (set to "1" here)`, "install gnsh"},
		{"no systemd", func(r *Report) { r.Systemd = SystemdFacts{Error: "connect: no such file"} }, CheckSystemd, Warn,
			"PID 1 is not systemd (no /run/systemd/system); connect: no such file", "need systemd-logind"},
		{"version unreadable", func(r *Report) { r.Systemd = SystemdFacts{Booted: true, Error: "access denied"} }, CheckSystemd, Warn,
			"cannot read systemd's version: access denied", "systemctl status dbus"},
		// logind
		{"logind ok", func(r *Report) { r.Logind.Scheduled = &Scheduled{Type: "reboot", Time: "2026-11-22T02:00:00Z"} }, CheckLogind, OK,
			"InhibitDelayMaxSec 1m0s, 2 inhibitor(s), reboot scheduled for 2026-11-22T02:00:00Z", ""},
		{"logind down", func(r *Report) { r.Logind = LogindFacts{Error: "connect to unix:path=/x: no such file or directory"} }, CheckLogind, Fail,
			"cannot reach systemd-logind: connect to unix:path=/x", "systemctl status dbus systemd-logind"},
		// grace period
		{"grace ok", func(*Report) {}, CheckGracePeriod, OK, "shutdownGracePeriod 1m0s, shutdownGracePeriodCriticalPods 10s (/var/lib/kubelet/config.yaml)", ""},
		{"grace by priority", func(r *Report) { r.Kubelet.ByPodPrioritySec = 35 }, CheckGracePeriod, OK, "shutdownGracePeriodByPodPriority totals 35s", ""},
		{"grace off", func(r *Report) { r.Kubelet.ShutdownGracePeriod, r.Kubelet.RequestedSec = "", 0 }, CheckGracePeriod, Fail,
			"graceful node shutdown is off", "set shutdownGracePeriod (e.g. 60s) and shutdownGracePeriodCriticalPods (e.g. 10s) in /var/lib/kubelet/config.yaml, then restart kubelet"},
		{"grace unreadable", func(r *Report) { r.Kubelet = KubeletFacts{Error: "permission denied"} }, CheckGracePeriod, Warn, "cannot read kubelet's config", "--kubelet-config"},
		{"not a node", func(r *Report) {
			r.Kubelet = KubeletFacts{Error: "no kubelet config file"}
			r.Kubeconfig = KubeconfigFacts{}
		}, CheckGracePeriod, Warn,
			"not a Kubernetes node?", "--kubelet-config"},
		// kubelet's lock
		{"lock held", func(*Report) {}, CheckKubeletLock, OK, "kubelet holds a delay lock on shutdown", ""},
		{"lock missing", func(r *Report) { r.Logind.KubeletLock = false }, CheckKubeletLock, Fail, "kubelet holds no delay lock", "journalctl -u kubelet"},
		{"lock missing, grace off", func(r *Report) { r.Logind.KubeletLock, r.Kubelet.RequestedSec = false, 0 }, CheckKubeletLock, Fail,
			"its graceful node shutdown is off", "see the kubelet grace period check"},
		{"lock unknown", func(r *Report) { r.Logind = LogindFacts{Error: "timed out"} }, CheckKubeletLock, Warn, "cannot list logind's inhibitors: timed out", "see the logind check"},
		// InhibitDelayMaxSec
		{"delay ok", func(*Report) {}, CheckInhibitDelay, OK, "1m0s (logind, set by /etc/systemd/logind.conf.d/99-kubelet.conf) ≥ kubelet's 1m0s " +
			"and gnsh's 34s (the agent's drain of drainTimeout 30s plus its margin); kubelet's lock and gnsh's run side by side from PrepareForShutdown, " +
			"so logind waits for the longer (1m0s), not the sum", ""},
		{"delay ok, drain off", func(r *Report) { r.Drain.Enabled = false }, CheckInhibitDelay, OK, "1m0s (logind, set by /etc/systemd/logind.conf.d/99-kubelet.conf) ≥ kubelet's 1m0s", ""},
		{"delay short for the agent's drain", func(r *Report) { r.Drain.Timeout, r.Drain.TimeoutSec = "5m0s", 300 }, CheckInhibitDelay, Warn,
			"1m0s (logind, set by /etc/systemd/logind.conf.d/99-kubelet.conf) ≥ kubelet's 1m0s, but gnsh's agent drains a shutdown that bypasses the wrapper " +
				"(systemctl reboot, the power button) within InhibitDelayMaxSec less max(10%, 2s): 54s, short of drainTimeout 5m0s, so such a drain is cut short " +
				"(it needs 5m34s); kubelet's lock and gnsh's run side by side from PrepareForShutdown, so logind waits for the longer (5m34s), not the sum",
			"write [Login] InhibitDelayMaxSec=334 to /etc/systemd/logind.conf.d/zz-gnsh-inhibit-delay.conf (sorts after 99-kubelet.conf), then systemctl kill -s HUP systemd-logind; " +
				"or lower drainTimeout in /etc/gnsh/config.yaml"},
		{"both short: fix covers the longer", func(r *Report) {
			r.Drain.TimeoutSec = 300
			r.Logind.InhibitDelayMax, r.Logind.InhibitDelayMaxSec = "30s", 30
			r.LogindConf = LogindConfFacts{Effective: "30s", EffectiveSec: 30, EffectiveFile: "/usr/lib/systemd/logind.conf.d/" + uuName}
		}, CheckInhibitDelay, Fail, "is below kubelet's 1m0s: kubelet cannot take its lock, or pods are cut short, and gnsh's agent needs 5m34s to drain within drainTimeout 5m0s",
			"InhibitDelayMaxSec=334 to /etc/systemd/logind.conf.d/zz-gnsh-inhibit-delay.conf (sorts after " + uuName + ")"},
		{"no kubelet period, agent short", func(r *Report) { r.Kubelet.RequestedSec, r.Logind.InhibitDelayMaxSec = 0, 5 }, CheckInhibitDelay, Warn,
			"5s (logind, set by /etc/systemd/logind.conf.d/99-kubelet.conf): gnsh's agent drains a shutdown that bypasses the wrapper (systemctl reboot, the power button) within InhibitDelayMaxSec less max(10%, 2s): 3s, short of drainTimeout 30s",
			"InhibitDelayMaxSec=34"},
		{"no kubelet period, agent ok", func(r *Report) { r.Kubelet.RequestedSec = 0 }, CheckInhibitDelay, OK,
			"≥ gnsh's 34s (the agent's drain of drainTimeout 30s plus its margin); kubelet asks for no delay", ""},
		{"kubelet unreadable, agent ok", func(r *Report) { r.Kubelet = KubeletFacts{Error: "permission denied"} }, CheckInhibitDelay, Warn,
			"≥ gnsh's 34s (the agent's drain of drainTimeout 30s plus its margin); kubelet's period unknown", ""},
		{"unattended-upgrades trap", func(r *Report) {
			r.Logind.InhibitDelayMax, r.Logind.InhibitDelayMaxSec = "30s", 30
			r.LogindConf = LogindConfFacts{Effective: "30s", EffectiveSec: 30, EffectiveFile: "/usr/lib/systemd/logind.conf.d/" + uuName,
				Files: []ConfFile{{Path: "/etc/systemd/logind.conf"}, {Path: "/etc/systemd/logind.conf.d/99-kubelet.conf", InhibitDelayMaxSec: "60"},
					{Path: "/usr/lib/systemd/logind.conf.d/" + uuName, InhibitDelayMaxSec: "30"}}}
		}, CheckInhibitDelay, Fail, "30s (logind, set by /usr/lib/systemd/logind.conf.d/" + uuName + ", overriding 99-kubelet.conf's 60) is below kubelet's 1m0s",
			"write [Login] InhibitDelayMaxSec=60 to /etc/systemd/logind.conf.d/zz-gnsh-inhibit-delay.conf (sorts after " + uuName + "), then systemctl kill -s HUP systemd-logind"},
		{"not reloaded", func(r *Report) { r.Logind.InhibitDelayMax, r.Logind.InhibitDelayMaxSec = "5s", 5 }, CheckInhibitDelay, Fail,
			"5s (logind) is below kubelet's 1m0s, though logind.conf says 1m0s (/etc/systemd/logind.conf.d/99-kubelet.conf): logind has not reloaded it",
			"systemctl kill -s HUP systemd-logind, then restart kubelet"},
		{"from logind.conf when logind is down", func(r *Report) {
			r.Logind = LogindFacts{Error: "down"}
			r.LogindConf = LogindConfFacts{Effective: "5s", EffectiveSec: 5}
		}, CheckInhibitDelay, Fail, "5s (logind.conf, set by logind's default) is below kubelet's 1m0s",
			"write [Login] InhibitDelayMaxSec=60 to /etc/systemd/logind.conf.d/zz-gnsh-inhibit-delay.conf, then"},
		{"infinity", func(r *Report) {
			r.Logind.InhibitDelayMax, r.Logind.InhibitDelayMaxSec = "infinity", -1
			r.LogindConf.EffectiveSec = -1
		},
			CheckInhibitDelay, OK, "infinity (logind, set by", ""},
		{"kubelet asks none, not a node", func(r *Report) { r.Kubelet.RequestedSec, r.Kubeconfig.Found = 0, false }, CheckInhibitDelay, OK, "kubelet asks for no delay", ""},
		{"a drop-in named after zz", func(r *Report) {
			r.Logind.InhibitDelayMaxSec, r.LogindConf.EffectiveFile = 10, "/etc/systemd/logind.conf.d/zzz.conf"
			r.LogindConf.EffectiveSec = 10
		}, CheckInhibitDelay, Fail, "below", "/etc/systemd/logind.conf.d/zzz.conf-zz.conf (sorts after zzz.conf)"},
		// commands
		{"root commands stock", func(r *Report) { r.Commands.Root = res("systemctl") }, func(r *Report) Check {
			return CheckCommands("commands (root)", r.Commands.Root, "root's PATH", r.Commands.Self)
		}, Fail, "reboot → /usr/bin/systemctl (systemctl), shutdown → /usr/bin/systemctl (systemctl)",
			"install gnsh over them: /usr/local/sbin/gnsh install (links made by hand"},
		{"sudo misses /usr/local/sbin", func(r *Report) {
			r.Commands.SecurePath = "/sbin:/bin:/usr/sbin:/usr/bin"
			r.Commands.Sudo = res("systemctl")
		},
			CheckSudo, Fail, "(sudo's secure_path /sbin:/bin:/usr/sbin:/usr/bin): these bypass gnsh's drain", "/usr/local/sbin/gnsh install (links made by hand, such as ln -sf over /usr/sbin/reboot, are undone"},
		{"sudo missing command", func(r *Report) { r.Commands.Sudo[3] = Resolution{Name: "halt", Is: "missing"} }, CheckSudo, Fail, "halt not found", "install gnsh over them"},
		{"sudo ok", func(*Report) {}, CheckSudo, OK, "run gnsh (sudo's secure_path", ""},
		{"no secure_path", func(r *Report) { r.Commands.SecurePath, r.Commands.Sudo = "", nil }, CheckSudo, OK, "keeps the caller's PATH", ""},
		{"sudoers unreadable", func(r *Report) { r.Commands.SecurePath, r.Commands.SudoersErr = "", "permission denied" }, CheckSudo, Warn,
			"cannot read sudo's policy: permission denied", "as root"},
		// ansible
		{"ansible ok", func(*Report) {}, CheckAnsible, OK, "ansible.builtin.reboot runs /usr/sbin/shutdown: gnsh", ""},
		{"ansible finds /sbin first", func(r *Report) {
			r.Commands.Ansible = Resolution{Name: "shutdown", Path: "/sbin/shutdown", Target: "/usr/bin/systemctl", Is: "systemctl"}
		}, CheckAnsible, Warn, "runs the first shutdown of /sbin:/bin:/usr/sbin:/usr/bin:/usr/local/sbin: /sbin/shutdown → /usr/bin/systemctl (systemctl), not gnsh",
			"install gnsh over /sbin/shutdown: /usr/local/sbin/gnsh install"},
		{"ansible finds none", func(r *Report) { r.Commands.Ansible = Resolution{Name: "shutdown", Is: "missing"} }, CheckAnsible, Warn, "finds no shutdown", ""},
		// agent
		{"agent active, lock held", func(*Report) {}, CheckAgent, OK,
			"the agent runs (gnsh.service is active) and holds its delay lock on shutdown (who gnsh)", ""},
		{"agent active, an agent without the lock file", func(r *Report) { r.Agent.Lock = LockAbsent }, CheckAgent, OK,
			"the agent runs (gnsh.service is active)", ""},
		{"agent not installed", func(r *Report) {
			r.Agent.ActiveState, r.Agent.LoadState, r.Agent.Lock = "inactive", "not-found", LockAbsent
		}, CheckAgent, Fail,
			"gnsh.service is inactive (not-found), no agent holds /run/gnsh/agent.flock: nothing uncordons the node after a reboot, and shutdowns that bypass the wrapper",
			"no gnsh.service on this node: run gnsh install again: it writes /etc/systemd/system/gnsh.service (and enables it on a first install), then systemctl enable --now gnsh.service"},
		{"agent not installed, packaged", func(r *Report) {
			r.Agent.ActiveState, r.Agent.LoadState, r.Agent.Lock = "inactive", "not-found", LockAbsent
			r.Install = InstallFacts{By: ByPackage, RBAC: "/usr/share/doc/gnsh/rbac.yaml"}
		}, CheckAgent, Fail, "gnsh.service is inactive (not-found)",
			"no gnsh.service on this node: reinstall the gnsh package, which ships gnsh.service (apt-get install --reinstall gnsh, or dnf reinstall gnsh), then systemctl enable --now gnsh.service"},
		{"agent not installed, the role's node", func(r *Report) {
			r.Agent.ActiveState, r.Agent.LoadState, r.Agent.Lock = "inactive", "not-found", LockAbsent
			r.Install = InstallFacts{By: ByRole}
		}, CheckAgent, Fail, "gnsh.service is inactive (not-found)",
			"no gnsh.service on this node: run the Ansible role gnsh again with gnsh_agent: true: it installs, enables and starts gnsh.service"},
		{"agent failed, lock free", func(r *Report) { r.Agent.ActiveState, r.Agent.Lock = "failed", LockFree }, CheckAgent, Fail,
			"gnsh.service is failed, no agent holds /run/gnsh/agent.flock:",
			"systemctl enable --now gnsh.service; if it stops again, journalctl -u gnsh.service says why"},
		{"agent stopped on the role's node", func(r *Report) {
			r.Agent.ActiveState, r.Agent.Lock = "inactive", LockFree
			r.Install.By = ByRole
		}, CheckAgent, Fail, "gnsh.service is inactive",
			"set gnsh_agent: true for the Ansible role gnsh and run it again (a hand-made systemctl enable --now gnsh.service lasts until its next run)"},
		{"agent unknown, no lock", func(r *Report) {
			r.Agent = AgentFacts{Unit: AgentUnit, ActiveState: "unknown", Error: "systemd not reachable", LockPath: AgentLockPath, Lock: LockAbsent}
		}, CheckAgent, Fail, "gnsh.service: state unknown (systemd not reachable), no agent holds /run/gnsh/agent.flock", "systemctl enable --now"},
		{"agent unknown, lock held", func(r *Report) {
			r.Agent = AgentFacts{Unit: AgentUnit, ActiveState: "unknown", Error: "systemd not reachable", LockPath: AgentLockPath, Lock: LockHeld}
		}, CheckAgent, OK, "the agent runs (gnsh.service: state unknown (systemd not reachable)) and holds its delay lock", ""},
		{"agent lock root's", func(r *Report) {
			r.Agent.ActiveState, r.Agent.Lock = "active", LockRootOnly
		}, CheckAgent, OK, "gnsh.service is active", ""},
		{"agent lock root's, unit off", func(r *Report) {
			r.Agent.ActiveState, r.Agent.Lock = "inactive", LockRootOnly
		}, CheckAgent, Fail, "gnsh.service is inactive, /run/gnsh/agent.flock is root's (gnsh doctor as root probes it)", "systemctl enable"},
		{"agent lock unprobed", func(r *Report) {
			r.Agent.ActiveState, r.Agent.Lock, r.Agent.LockError = "inactive", "", "open /run/gnsh/agent.flock: permission denied"
		}, CheckAgent, Fail, "cannot probe /run/gnsh/agent.flock: open /run/gnsh/agent.flock: permission denied", "systemctl enable"},
		{"agent run by hand", func(r *Report) { r.Agent.ActiveState = "inactive" }, CheckAgent, Warn,
			"an agent holds /run/gnsh/agent.flock, but gnsh.service is inactive: an agent runs outside the unit", "stop that agent"},
		{"agent without its delay lock", func(r *Report) { r.Logind.GnshLock = false }, CheckAgent, Warn,
			"holds no delay lock on shutdown (who gnsh): a shutdown that bypasses the wrapper is not drained. It takes the lock once it has found a kubeconfig",
			"journalctl -u gnsh.service"},
		{"agent, inhibitors unknown", func(r *Report) { r.Logind = LogindFacts{Error: "timed out"} }, CheckAgent, Warn,
			"cannot list logind's inhibitors to see its delay lock: timed out", "see the logind check"},
		{"agent disabled", func(r *Report) {
			r.Agent.ActiveState, r.Agent.UnitFileState, r.Agent.Lock = "inactive", "disabled", LockAbsent
		}, CheckAgent, Warn,
			"gnsh.service is disabled and inactive: the node agent is off (left so by gnsh install): nothing uncordons the node after a reboot",
			"if it should run: systemctl enable --now gnsh.service"},
		{"agent masked, not a node", func(r *Report) {
			r.Kubeconfig, r.Kubelet.Error = KubeconfigFacts{}, "no kubelet config"
			r.Agent.ActiveState, r.Agent.LoadState, r.Agent.UnitFileState, r.Agent.Lock = "inactive", "masked", "masked", LockAbsent
		}, CheckAgent, Warn, "gnsh.service is masked and inactive: the node agent is off",
			"if it should run: systemctl unmask gnsh.service, then systemctl enable --now gnsh.service"},
		{"agent running, disabled", func(r *Report) { r.Agent.UnitFileState = "disabled" }, CheckAgent, Warn,
			"the agent runs (gnsh.service is active), but the unit is disabled: it does not start after a reboot",
			"if it should: systemctl enable gnsh.service"},
		{"agent enabled", func(r *Report) { r.Agent.UnitFileState = "enabled" }, CheckAgent, OK, "holds its delay lock", ""},
		{"not a node, no agent", func(r *Report) {
			r.Kubeconfig, r.Kubelet.Error = KubeconfigFacts{}, "no kubelet config"
			r.Agent.ActiveState, r.Agent.Lock = "inactive", LockAbsent
		}, CheckAgent, Warn, "(not a Kubernetes node?)", ""},
		// API access
		{"access ok", func(*Report) {}, CheckAccess, OK,
			"drain: system:node:node1 from /etc/kubernetes/kubelet.conf (confined to this node): every request the drain makes is allowed (7 checked by SelfSubjectAccessReview)", ""},
		{"access: no binding", func(r *Report) {
			r.Access = &AccessFacts{User: "stranger"}
			for _, q := range GnshRequests("node1", true) {
				r.Access.Denied = append(r.Access.Denied, Denial{APIRequest: q})
			}
		}, CheckAccess, Fail,
			"drain: stranger from /etc/kubernetes/kubelet.conf: the API server refuses get nodes/node1, patch nodes/node1, list pods (spec.nodeName=node1), watch pods (spec.nodeName=node1), " +
				"create pods/eviction, create events in default: gnsh cannot drain this node; and get leases.coordination.k8s.io/node1 in kube-node-lease (gnsh does without it)",
			"drain with this node's kubelet kubeconfig, which may drain this node and no other: leave kubeconfig unset in /etc/gnsh/config.yaml " +
				"where the kubelet's is at /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig (kubeadm, k3s, rke2), else set it to the kubelet's; " +
				"gnsh's rbac.yaml grants only the reboot-slot gate's requests"},
		{"access: the drain falls back to gnsh's own kubeconfig", func(r *Report) {
			r.Kubeconfig.Path, r.Kubeconfig.Fallback = "/etc/gnsh/kubeconfig", true
			r.Access = &AccessFacts{User: "system:serviceaccount:kube-system:gnsh"}
			for _, q := range GnshRequests("node1", true) {
				r.Access.Denied = append(r.Access.Denied, Denial{APIRequest: q})
			}
		}, CheckAccess, Fail,
			"drain: system:serviceaccount:kube-system:gnsh from /etc/gnsh/kubeconfig (gnsh's own, for want of a kubelet kubeconfig at /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig): the API server refuses get nodes/node1",
			"else set it to the kubelet's"},
		{"access: a ServiceAccount without the Lease role", func(r *Report) {
			rs := GnshRequests("node1", true)
			r.Access = &AccessFacts{User: "system:serviceaccount:kube-system:gnsh", Allowed: rs[:5],
				Denied: []Denial{{APIRequest: rs[5], Reason: "no RBAC rule"}}}
		}, CheckAccess, Warn,
			"drain: system:serviceaccount:kube-system:gnsh from /etc/kubernetes/kubelet.conf: every request the drain needs is allowed, but not get leases.coordination.k8s.io/node1 in kube-node-lease (no RBAC rule)",
			"drain with this node's kubelet kubeconfig"},
		{"access: a node identity refused", func(r *Report) {
			rs := GnshRequests("node1", false)
			r.Access = &AccessFacts{User: "system:node:node1", Allowed: rs[1:], Denied: []Denial{{APIRequest: rs[0], Reason: "node 'node1' cannot read 'node1'"}}}
		}, CheckAccess, Fail, "drain: system:node:node1 from /etc/kubernetes/kubelet.conf (confined to this node): the API server refuses get nodes/node1 (node 'node1' cannot read 'node1')",
			"allowed all of these by the Node authorizer: run kube-apiserver with --authorization-mode=Node,RBAC"},
		{"access: user unknown, from the certificate", func(r *Report) { r.Access.User, r.Access.UserError = "", "404" }, CheckAccess, OK,
			"drain: system:node:node1 from /etc/kubernetes/kubelet.conf (confined to this node): every request the drain makes is allowed", ""},
		{"access: server does not answer reviews", func(r *Report) {
			r.Access = &AccessFacts{Unknown: []Denial{{APIRequest: GnshRequests("node1", false)[0], Reason: "Unauthorized"}}}
		}, CheckAccess, Warn, "cannot ask the API server (SelfSubjectAccessReview): Unauthorized", "API server answers"},
		{"access: some not answered", func(r *Report) {
			r.Access.Unknown = []Denial{{APIRequest: r.Access.Allowed[6], Reason: "timed out"}}
			r.Access.Allowed = r.Access.Allowed[:6]
		}, CheckAccess, Warn, "drain: system:node:node1 from /etc/kubernetes/kubelet.conf (confined to this node): 6 requests allowed, not answered for create events in default: timed out", "again"},
		{"access: not asked", func(r *Report) { r.Access = &AccessFacts{Error: "the API server did not answer within 5s"} }, CheckAccess, Warn,
			"not checked: the API server did not answer within 5s", "see the kubeconfig and node checks"},
		{"access: no kubeconfig", func(r *Report) { r.Kubeconfig, r.Access = KubeconfigFacts{}, &AccessFacts{Error: "no kubeconfig"} }, CheckAccess, Warn,
			"not checked: no kubeconfig", ""},
		// kubeconfig
		{"kubeconfig ok", func(*Report) {}, CheckKubeconfig, OK, "drain: /etc/kubernetes/kubelet.conf (mode 0600)", ""},
		{"kubeconfig open", func(r *Report) { r.Kubeconfig.Mode = "0644" }, CheckKubeconfig, Fail, "has mode 0644", "chmod 0600 /etc/kubernetes/kubelet.conf"},
		// Two identities (issue 22): the drain's and the gate's, each named.
		{"kubeconfig: the gate's own", func(r *Report) { r.Slots.Kubeconfig, r.Slots.Mode = "/etc/gnsh/kubeconfig", "0600" }, CheckKubeconfig, OK,
			"drain: /etc/kubernetes/kubelet.conf (mode 0600); gate: /etc/gnsh/kubeconfig (mode 0600)", ""},
		{"kubeconfig: the gate's open", func(r *Report) { r.Slots.Kubeconfig, r.Slots.Mode = "/etc/gnsh/kubeconfig", "0644" }, CheckKubeconfig, Fail,
			"/etc/gnsh/kubeconfig has mode 0644", "chmod 0600 /etc/gnsh/kubeconfig"},
		{"kubeconfig: the drain falls back to gnsh's own", func(r *Report) {
			r.Kubeconfig.Path, r.Kubeconfig.Fallback = "/etc/gnsh/kubeconfig", true
			r.Slots.Kubeconfig, r.Slots.Mode = "/etc/gnsh/kubeconfig", "0600"
		}, CheckKubeconfig, Warn,
			"drain: gnsh's own /etc/gnsh/kubeconfig (mode 0600), the reboot-slot gate's identity, for want of a kubelet kubeconfig at /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig: the rbac.yaml of this gnsh does not let it cordon or evict",
			"set kubeconfig in /etc/gnsh/config.yaml to this node's kubelet kubeconfig"},
		{"kubeconfig: the gate's broken", func(r *Report) {
			r.Kubeconfig.GateError = "gnsh's own kubeconfig: /etc/gnsh/kubeconfig is not a regular file: every shutdown through gnsh is refused (but with --no-drain)"
			r.Kubeconfig.GateFix = "fix or remove /etc/gnsh/kubeconfig"
		}, CheckKubeconfig, Fail, "/etc/gnsh/kubeconfig is not a regular file: every shutdown through gnsh is refused", "fix or remove /etc/gnsh/kubeconfig"},
		{"slots: the gate's identity named", func(r *Report) {
			r.Slots.Kubeconfig, r.Slots.User = "/etc/gnsh/kubeconfig", "system:serviceaccount:kube-system:gnsh"
		}, CheckSlots, OK, "gate optional: gnsh/reboot-slots answers as system:serviceaccount:kube-system:gnsh from /etc/gnsh/kubeconfig; limit 1", ""},
		{"kubeconfig unreadable", func(r *Report) { r.Kubeconfig.Error = "cannot read /etc/kubernetes/kubelet.conf: permission denied" }, CheckKubeconfig, Fail,
			"permission denied", "as root"},
		{"no kubeconfig, kubelet configured", func(r *Report) { r.Kubeconfig = KubeconfigFacts{Error: "no kubeconfig found"} }, CheckKubeconfig, Fail,
			"no kubeconfig found, but kubelet is configured", "set kubeconfig in /etc/gnsh/config.yaml to the kubelet's kubeconfig"},
		{"no kubeconfig, no kubelet", func(r *Report) {
			r.Kubeconfig = KubeconfigFacts{Error: "no kubeconfig found"}
			r.Kubelet.Error = "none"
		},
			CheckKubeconfig, Warn, "no kubeconfig found", "set kubeconfig in /etc/gnsh/config.yaml to the kubelet's kubeconfig"},
		// config: a check of its own (issue 19), no longer inside the
		// kubeconfig line.
		{"config absent", func(*Report) {}, CheckConfig, OK, "no /etc/gnsh/config.yaml: the defaults apply", ""},
		{"config valid", func(r *Report) { r.Kubeconfig.ConfigFound = true }, CheckConfig, OK, "/etc/gnsh/config.yaml is valid", ""},
		{"bad config file", func(r *Report) {
			r.Kubeconfig.ConfigFound = true
			r.Kubeconfig.ConfigError = "/etc/gnsh/config.yaml: line 1: nod: unknown key; did you mean node?"
			r.Kubeconfig.ConfigProblems = []string{r.Kubeconfig.ConfigError}
		}, CheckConfig, Fail,
			"/etc/gnsh/config.yaml: line 1: nod: unknown key; did you mean node?; every shutdown through gnsh is refused (but with --no-drain), and these checks use the defaults",
			"fix /etc/gnsh/config.yaml ('gnsh config check' lists each problem"},
		{"bad config file, kubeconfig line", func(r *Report) { r.Kubeconfig.ConfigError = "/etc/gnsh/config.yaml: line 1: nod: unknown key" }, CheckKubeconfig, OK,
			"/etc/kubernetes/kubelet.conf (mode 0600)", ""},
		{"config unreadable", func(r *Report) {
			r.Kubeconfig.ConfigFound, r.Kubeconfig.ConfigError = true, "/etc/gnsh/config.yaml: open /etc/gnsh/config.yaml: permission denied"
		}, CheckConfig, Warn, "cannot read it (", "as root"},
		{"config names a kubeconfig that is not there", func(r *Report) {
			r.Kubeconfig.ConfigFound = true
			r.Kubeconfig.ConfigProblems = []string{"/etc/gnsh/config.yaml: line 3: kubeconfig: /etc/gnsh/kubeconfig does not exist; shutdowns through gnsh are refused"}
		}, CheckConfig, Fail, "line 3: kubeconfig: /etc/gnsh/kubeconfig does not exist", "fix or remove the kubeconfig key in /etc/gnsh/config.yaml"},
		{"kubeconfig named, not there", func(r *Report) {
			r.Kubeconfig = KubeconfigFacts{Named: "kubeconfig in /etc/gnsh/config.yaml", Config: "/etc/gnsh/config.yaml",
				Error: "kubeconfig in /etc/gnsh/config.yaml: /etc/gnsh/kubeconfig does not exist"}
			r.Kubelet.Error = "none" // not a node as far as the kubelet tells
		}, CheckKubeconfig, Fail, "/etc/gnsh/kubeconfig does not exist: every shutdown through gnsh is refused", "see the config check"},
		// gnsh's own, broken, with nothing named: refused as a named one is
		// (issue 19); the config check does not see it.
		{"gnsh's own kubeconfig broken", func(r *Report) {
			r.Kubeconfig = KubeconfigFacts{Named: "gnsh's own kubeconfig", Path: "/etc/gnsh/kubeconfig",
				Error: "gnsh's own kubeconfig: /etc/gnsh/kubeconfig is not a regular file"}
		}, CheckKubeconfig, Fail, "/etc/gnsh/kubeconfig is not a regular file: every shutdown through gnsh is refused",
			"fix or remove /etc/gnsh/kubeconfig"},
		{"--kubeconfig not there", func(r *Report) {
			r.Kubeconfig = KubeconfigFacts{Named: "--kubeconfig", Error: "--kubeconfig: /tmp/k does not exist"}
		}, CheckKubeconfig, Fail, "--kubeconfig: /tmp/k does not exist", "pass a kubeconfig that exists"},
		// node
		{"node ok", func(*Report) {}, CheckNode, OK, "Node node1 (name from certificate): Node node1 has this machine's machine ID abc", ""},
		{"node cordoned by gnsh", func(r *Report) {
			r.Node.Schedulable = ptr(false)
			r.Node.Cordon = &drain.Ownership{Action: "reboot", User: "alice", Time: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
		}, CheckNode, OK, "cordoned by gnsh (reboot by alice at 2026-11-22T10:00:00Z)", ""},
		{"node cordoned by others", func(r *Report) { r.Node.Schedulable = ptr(false) }, CheckNode, OK, "cordoned (not by gnsh)", ""},
		{"node missing", func(r *Report) {
			r.Node = NodeFacts{Name: "node1", NotFound: true, Error: `the cluster has no Node "node1"`}
		}, CheckNode, Fail,
			`the cluster has no Node "node1"`, "set node in /etc/gnsh/config.yaml"},
		{"another machine", func(r *Report) {
			r.Node.SameMachine, r.Node.SameWhy = ptr(false), "Node node1 is another machine: machine ID: …"
		}, CheckNode, Fail,
			"is another machine", "unset KUBECONFIG"},
		{"API down", func(r *Report) { r.Node = NodeFacts{Name: "node1", Error: "the API server did not answer within 5s"} }, CheckNode, Warn,
			"cannot read the Node: the API server did not answer within 5s", "API server answers"},
		{"no kubeconfig", func(r *Report) { r.Kubeconfig = KubeconfigFacts{}; r.Node = NodeFacts{Error: "no kubeconfig"} }, CheckNode, Warn, "not checked: no kubeconfig", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := healthy()
			tt.change(r)
			c := tt.check(r)
			if c.Verdict != tt.verdict || !strings.Contains(c.Message, tt.msg) || (tt.fix == "") != (c.Fix == "") || !strings.Contains(c.Fix, tt.fix) {
				t.Fatalf("got %s %q fix %q\nwant %s %q fix %q", c.Verdict, c.Message, c.Fix, tt.verdict, tt.msg, tt.fix)
			}
		})
	}
}

// Stock Debian 11 with kubelet and the unattended-upgrades drop-in: the
// gap, as doctor reports it.
func TestDoctorStockDebian11(t *testing.T) {
	r := healthy()
	r.Commands.Root, r.Commands.Sudo, r.Commands.Ansible = res("systemctl"), res("systemctl"), res("systemctl")[1]
	r.Logind.KubeletLock = false
	r.Logind.InhibitDelayMax, r.Logind.InhibitDelayMaxSec = "30s", 30
	r.LogindConf = LogindConfFacts{Effective: "30s", EffectiveSec: 30, EffectiveFile: "/usr/lib/systemd/logind.conf.d/" + uuName}
	cs := Doctor(r)
	var failed []string
	for _, c := range cs {
		if c.Verdict == Fail {
			failed = append(failed, c.Name)
		}
	}
	if got := strings.Join(failed, ","); got != "systemd,kubelet inhibitor,InhibitDelayMaxSec,commands (root),commands (sudo)" || Failed(cs) != 5 {
		t.Fatalf("failed checks: %s", got)
	}
}

// The least InhibitDelayMaxSec that lets the agent drain for d: the
// agent's own budget covers d with it, and not with a second less.
func TestAgentDelayMaxFor(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		time.Second: 3 * time.Second, 10 * time.Second: 12 * time.Second, 18 * time.Second: 20 * time.Second,
		19 * time.Second: 22 * time.Second, 30 * time.Second: 34 * time.Second, 5 * time.Minute: 334 * time.Second,
		90*time.Second + 500*time.Millisecond: 101 * time.Second,
	} {
		got := AgentDelayMaxFor(d)
		if got != want || agent.DrainBudget(got) < d || agent.DrainBudget(got-time.Second) >= d {
			t.Errorf("AgentDelayMaxFor(%s) = %s (budget %s), want %s", d, got, agent.DrainBudget(got), want)
		}
	}
}

func TestCheckSlots(t *testing.T) {
	for _, c := range []struct {
		sf      SlotsFacts
		verdict Verdict
		want    string
	}{
		{SlotsFacts{Gate: "off"}, OK, "gate off (slots.gate)"},
		{SlotsFacts{Gate: "optional", Lease: "gnsh/reboot-slots", MaxUnavailable: 2, Reachable: true, Holders: []string{"a (draining)"}, Waiting: 3, This: "none"},
			OK, "gate optional: gnsh/reboot-slots answers; limit 2; 1 held, 3 waiting; this node: none"},
		{SlotsFacts{Gate: "optional", Error: "these credentials may not use the Lease"}, Warn, "reboots go on without a slot: these credentials"},
		{SlotsFacts{Gate: "required", Error: "these credentials may not use the Lease"}, Fail, "every reboot is refused (but with --no-drain or -f)"},
		// Not a node: nothing to warn about, whatever the mode.
		{SlotsFacts{Gate: "required", Cause: CauseNotANode, Error: "not a node (no kubeconfig found): the gate does not apply"}, OK,
			"not a node (no kubeconfig found): the gate does not apply"},
		// A review that failed is not a request allowed.
		{SlotsFacts{Gate: "optional", Lease: "gnsh/reboot-slots", MaxUnavailable: 1, Reachable: true, This: "none",
			Unchecked: "watch leases.coordination.k8s.io in kube-node-lease: the API server did not answer within 5s"}, Warn,
			"this node: none; not known whether these credentials may make every request of the gate (watch leases.coordination.k8s.io in kube-node-lease: the API server"},
	} {
		r := healthy()
		r.Slots = c.sf
		got := CheckSlots(r)
		if got.Verdict != c.verdict || !strings.Contains(got.Message, c.want) {
			t.Errorf("%+v: %+v", c.sf, got)
		}
	}
	// The fix is the failing step's.
	for cause, fix := range map[string]string{
		CauseKubeconfig: "see the kubeconfig and node checks",
		CauseNode:       "see the kubeconfig and node checks",
		CauseAPIServer:  "check that the API server answers",
		CauseAccess:     "give gnsh its own identity: kubectl apply -f rbac.yaml (from gnsh's release tarball, as a cluster admin)",
		CauseLease:      "give gnsh its own identity: kubectl apply -f rbac.yaml (from gnsh's release tarball, as a cluster admin)",
	} {
		r := healthy()
		r.Slots = SlotsFacts{Gate: "optional", Cause: cause, Error: "x"}
		if got := CheckSlots(r); got.Verdict != Warn || !strings.HasPrefix(got.Fix, fix) {
			t.Errorf("%s: %+v", cause, got)
		}
	}
}
