package nodefacts

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/gnsh/gnsh/internal/agent"
	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/kube"
)

// Verdict is a check's outcome.
type Verdict string

// Verdicts, from good to bad.
const (
	OK   Verdict = "ok"
	Warn Verdict = "warn"
	Fail Verdict = "fail"
)

// Check is one line of `gnsh doctor`.
type Check struct {
	Name    string  `json:"name"`
	Verdict Verdict `json:"verdict"`
	Message string  `json:"message"`
	Fix     string  `json:"fix,omitempty"`
}

// FirstLogindVersion is the first systemd whose legacy commands, run by
// root, go through logind (and so honour delay inhibitors).
const FirstLogindVersion = 251

// Doctor judges a report: one check per concern, in a fixed order.
func Doctor(r *Report) []Check {
	return []Check{
		CheckSystemd(r),
		CheckLogind(r),
		CheckGracePeriod(r),
		CheckKubeletLock(r),
		CheckBypass(r),
		CheckInhibitDelay(r),
		CheckCommands("commands (root)", r.Commands.Root, rootPathName(r.Commands), r.Commands.Self),
		CheckSudo(r),
		CheckAnsible(r),
		CheckConfig(r),
		CheckKubeconfig(r),
		CheckNode(r),
		CheckAccess(r),
		CheckAgent(r),
		CheckSlots(r),
		CheckGateToken(r),
	}
}

// CheckSlots judges the reboot-slot gate: off is a choice (ok), and so is
// a machine that is not a node (no kubeconfig: the gate does not apply); a
// gate that cannot be used warns when optional (reboots go on without it)
// and fails when required (reboots are refused), with the fix for the step
// that failed. A record that cannot be read fails whatever the mode: it
// refuses every reboot.
func CheckSlots(r *Report) Check {
	c := Check{Name: "reboot slots"}
	sf := r.Slots
	switch {
	case sf.Gate == "off":
		c.Verdict, c.Message = OK, "gate off (slots.gate): nothing limits how many nodes reboot at once"
	case sf.Cause == CauseNotANode:
		c.Verdict, c.Message = OK, sf.Error
	case sf.Reachable:
		c.Verdict, c.Message = OK, fmt.Sprintf("gate %s: %s answers%s; limit %d", sf.Gate, sf.Lease, gateWho(sf), sf.MaxUnavailable)
		if len(sf.Pools) > 0 {
			c.Message += ", pools " + strings.Join(sf.Pools, ", ")
		}
		c.Message += fmt.Sprintf("; %d held, %d waiting; this node: %s", len(sf.Holders), sf.Waiting, sf.This)
		if sf.Degraded != "" {
			c.Verdict = Warn
			c.Message += "; these credentials may not " + sf.Degraded + ": a holder whose shutdown was given up is freed only by its node agent"
			c.Fix = "apply the rbac.yaml of this gnsh, which grants them: " + r.Install.applyRBAC()
			if r.Install.byRole() {
				c.Fix = "run the Ansible role gnsh again with gnsh_kubectl_kubeconfig (it applies the rbac.yaml of this gnsh)"
			}
		}
		if sf.Unchecked != "" {
			// Not known to work: a warning, whatever the mode.
			c.Verdict = Warn
			c.Message += "; not known whether these credentials may make every request of the gate (" + sf.Unchecked + ")"
			c.Fix = "run gnsh doctor again"
		}
	case sf.Cause == CauseRecord, sf.Cause == CauseNewer:
		// The Lease answers but its record cannot be read: no limit can
		// be kept, so every reboot is refused, optional gate or not.
		c.Verdict, c.Message = Fail, "gate "+sf.Gate+": every reboot is refused (but with --no-drain or -f): the slots record cannot be read: "+sf.Error
		c.Fix = "gnsh slots reset (admin credentials) starts a new record: every slot free, nobody waiting"
		if sf.Cause == CauseNewer {
			c.Fix = "upgrade gnsh on this node"
		}
	case sf.Cause == CauseEtcdPods:
		c.Verdict, c.Message = Fail, "gate "+sf.Gate+": every reboot waits for slots.wait and is refused (but with --force-quorum, --no-drain or -f): "+sf.Error
		c.Fix = "apply the rbac.yaml of this gnsh, which grants it: " + r.Install.applyRBAC()
		if r.Install.byRole() {
			c.Fix = "run the Ansible role gnsh again with gnsh_kubectl_kubeconfig (it applies the rbac.yaml of this gnsh)"
		}
	default:
		c.Verdict, c.Message = Warn, "gate optional, unavailable: reboots go on without a slot: "+sf.Error
		if sf.Gate == "required" {
			c.Verdict, c.Message = Fail, "gate required, unavailable: every reboot is refused (but with --no-drain or -f): "+sf.Error
		}
		switch sf.Cause {
		case CauseKubeconfig, CauseNode:
			c.Fix = "see the kubeconfig and node checks"
		case CauseAPIServer:
			c.Fix = "check that the API server answers (see the node check)"
		default:
			c.Fix = "give gnsh its own identity: " + r.Install.identityFix() + "; or set slots.gate: off in " + orUnknown(r.Kubeconfig.Config)
		}
	}
	excessCheck(&c, sf)
	return c
}

// gateWho names the gate's identity and kubeconfig: " as
// system:serviceaccount:kube-system:gnsh from /etc/gnsh/kubeconfig".
func gateWho(sf SlotsFacts) string {
	s := ""
	if sf.User != "" {
		s = " as " + sf.User
	}
	if sf.Kubeconfig != "" {
		s += " from " + sf.Kubeconfig
	}
	return s
}

// Failed counts the failed checks.
func Failed(cs []Check) int {
	n := 0
	for _, c := range cs {
		if c.Verdict == Fail {
			n++
		}
	}
	return n
}

func rootPathName(cf CommandFacts) string {
	if cf.RootPathFrom == "default" {
		return "root's default PATH " + cf.RootPath
	}
	return "root's PATH " + cf.RootPath
}

func allGnsh(rs []Resolution) bool {
	if len(rs) == 0 {
		return false
	}
	for _, r := range rs {
		if r.Is != "gnsh" {
			return false
		}
	}
	return true
}

// CheckSystemd: does systemd's own legacy commands bypass logind, and is
// gnsh standing in for them?
func CheckSystemd(r *Report) Check {
	c := Check{Name: "systemd"}
	s := r.Systemd
	covered := allGnsh(r.Commands.Root) && (len(r.Commands.Sudo) == 0 || allGnsh(r.Commands.Sudo))
	switch {
	case s.Major == 0 && !s.Booted:
		c.Verdict, c.Message = Warn, "PID 1 is not systemd (no /run/systemd/system)"
		c.Fix = "kubelet's graceful node shutdown and gnsh's hand-off need systemd-logind"
		if s.Error != "" {
			c.Message += "; " + s.Error
		}
	case s.Major == 0:
		c.Verdict, c.Message = Warn, "cannot read systemd's version: "+orUnknown(s.Error)
		c.Fix = "check that dbus and systemd answer: systemctl status dbus"
	case s.RHEL8 || s.Major < FirstLogindVersion:
		why := fmt.Sprintf("systemd %d: root's reboot, poweroff, halt and shutdown now bypass logind (before %d), so kubelet's inhibitor is skipped",
			s.Major, FirstLogindVersion)
		if s.RHEL8 {
			why = fmt.Sprintf("systemd %d (RHEL 8): root's legacy commands bypass logind unless SYSTEMD_NEW_SHUTDOWN=1, which sudo's env_reset drops and units and cron do not have", s.Major)
			if s.NewShutdownEnv != "" {
				why += fmt.Sprintf(" (set to %q here)", s.NewShutdownEnv)
			}
		}
		if covered {
			c.Verdict, c.Message = OK, why+"; gnsh stands in for them"
		} else {
			c.Verdict, c.Message = Fail, why
			c.Fix = "install gnsh over shutdown, reboot, poweroff and halt (see the commands checks)"
		}
	default:
		c.Verdict, c.Message = OK, fmt.Sprintf("systemd %d: its legacy commands go through logind", s.Major)
	}
	return c
}

// CheckLogind: does logind answer?
func CheckLogind(r *Report) Check {
	c := Check{Name: "logind"}
	l := r.Logind
	if !l.Reachable {
		c.Verdict, c.Message = Fail, "cannot reach systemd-logind: "+orUnknown(l.Error)
		c.Fix = "start dbus and systemd-logind (systemctl status dbus systemd-logind)"
		return c
	}
	c.Verdict = OK
	c.Message = fmt.Sprintf("systemd-logind answers: InhibitDelayMaxSec %s, %d inhibitor(s)", orUnknown(l.InhibitDelayMax), len(l.Inhibitors))
	if l.Scheduled != nil {
		c.Message += fmt.Sprintf(", %s scheduled", l.Scheduled.Type)
		if l.Scheduled.Time != "" {
			c.Message += " for " + l.Scheduled.Time
		}
	}
	return c
}

// CheckGracePeriod: is kubelet's graceful node shutdown on?
func CheckGracePeriod(r *Report) Check {
	c := Check{Name: "kubelet grace period"}
	k := r.Kubelet
	switch {
	case k.Error != "" && !r.Kubeconfig.Found:
		c.Verdict, c.Message = Warn, "no kubelet config ("+k.Error+"): not a Kubernetes node?"
		c.Fix = "on a node whose kubelet reads another file, pass --kubelet-config FILE"
	case k.Error != "":
		c.Verdict, c.Message = Warn, "cannot read kubelet's config: "+k.Error
		c.Fix = "pass kubelet's --config file as --kubelet-config FILE"
	case k.RequestedSec <= 0:
		c.Verdict = Fail
		c.Message = "kubelet's graceful node shutdown is off: shutdownGracePeriod is unset or 0 in " + k.ConfigPath
		c.Fix = "set shutdownGracePeriod (e.g. 60s) and shutdownGracePeriodCriticalPods (e.g. 10s) in " + k.ConfigPath + ", then restart kubelet"
	default:
		c.Verdict = OK
		if k.ByPodPrioritySec > 0 {
			c.Message = fmt.Sprintf("shutdownGracePeriodByPodPriority totals %ds (%s)", k.ByPodPrioritySec, k.ConfigPath)
		} else {
			c.Message = fmt.Sprintf("shutdownGracePeriod %s, shutdownGracePeriodCriticalPods %s (%s)",
				k.ShutdownGracePeriod, orNone(k.ShutdownGracePeriodCriticalPods), k.ConfigPath)
		}
	}
	return c
}

// CheckKubeletLock: does kubelet hold its delay lock?
func CheckKubeletLock(r *Report) Check {
	c := Check{Name: "kubelet inhibitor"}
	l := r.Logind
	switch {
	case !l.Reachable || l.InhibitorsError != "":
		c.Verdict, c.Message = Warn, "cannot list logind's inhibitors: "+orUnknown(firstNonEmpty(l.InhibitorsError, l.Error))
		c.Fix = "see the logind check"
	case l.KubeletLock:
		c.Verdict, c.Message = OK, "kubelet holds a delay lock on shutdown"
	case r.Kubelet.Error == "" && r.Kubelet.RequestedSec <= 0:
		c.Verdict, c.Message = Fail, "kubelet holds no delay lock on shutdown: its graceful node shutdown is off"
		c.Fix = "see the kubelet grace period check"
	case r.Kubelet.Error != "" && !r.Kubeconfig.Found:
		c.Verdict, c.Message = Warn, "no kubelet delay lock on shutdown (not a Kubernetes node?)"
	default:
		c.Verdict, c.Message = Fail, "kubelet holds no delay lock on shutdown: pods are not stopped gracefully when logind shuts down"
		c.Fix = "kubelet could not start its shutdown manager: see journalctl -u kubelet | grep -i 'shutdown manager' " +
			"(often InhibitDelayMaxSec below its period: see the next check); is kubelet running?"
	}
	return c
}

// AgentDelayMaxFor is the least InhibitDelayMaxSec (whole seconds) that
// gives the agent's drain of a shutdown that bypasses the wrapper (which
// has agent.DrainBudget of it) the whole drainTimeout d.
func AgentDelayMaxFor(d time.Duration) time.Duration {
	x := d + 2*time.Second // the 2 s margin, up to 20 s
	if x > 20*time.Second {
		x = (d*10 + 8) / 9 // the 10 % margin beyond: d ≤ 0.9·x
	}
	x = (x + time.Second - 1).Truncate(time.Second)
	for agent.DrainBudget(x) < d {
		x += time.Second
	}
	return x
}

// CheckInhibitDelay: is logind's InhibitDelayMaxSec at least kubelet's
// period (else fail) and long enough for the agent to drain within
// drainTimeout (else warn), and which file caps it?
func CheckInhibitDelay(r *Report) Check {
	c := Check{Name: "InhibitDelayMaxSec"}
	conf := r.LogindConf
	have, from := r.Logind.InhibitDelayMaxSec, "logind"
	if !r.Logind.Reachable || r.Logind.InhibitDelayMax == "" {
		have, from = conf.EffectiveSec, "logind.conf"
	}
	if have < 0 { // infinity
		have = float64(1 << 53)
	}
	setBy := "logind's default"
	if conf.EffectiveFile != "" {
		setBy = conf.EffectiveFile
	}
	want := r.Kubelet.RequestedSec
	// gnsh's need: the agent drains a shutdown that bypasses the wrapper
	// within InhibitDelayMax less its margin; on a Kubernetes node with
	// the drain on, that should cover drainTimeout.
	var gnshWant, budget float64
	drainTimeout := time.Duration(r.Drain.TimeoutSec * float64(time.Second))
	if r.Drain.Enabled && r.Kubeconfig.Found && drainTimeout > 0 {
		gnshWant = AgentDelayMaxFor(drainTimeout).Seconds()
		budget = agent.DrainBudget(time.Duration(min(have, 1e9) * float64(time.Second))).Seconds()
	}
	need := max(want, gnshWant)
	sortsAfter := ""
	if conf.EffectiveFile != "" {
		sortsAfter = " (sorts after " + filepath.Base(conf.EffectiveFile) + ")"
	}
	fix := fmt.Sprintf("write [Login] InhibitDelayMaxSec=%.0f to %s%s, then systemctl kill -s HUP systemd-logind",
		math.Ceil(need), laterDropIn(conf.EffectiveFile), sortsAfter)
	sideBySide := ""
	if gnshWant > 0 && want > 0 {
		sideBySide = fmt.Sprintf("; kubelet's lock and gnsh's run side by side from PrepareForShutdown, so logind waits for the longer (%s), not the sum",
			secs(need))
	}
	switch {
	case want <= 0 && gnshWant <= 0:
		c.Verdict = OK
		c.Message = fmt.Sprintf("%s (%s, set by %s); kubelet asks for no delay", secs(have), from, setBy)
		if r.Kubelet.Error != "" {
			c.Verdict, c.Message = Warn, fmt.Sprintf("%s (%s, set by %s); kubelet's period unknown", secs(have), from, setBy)
		}
	case have+1e-9 < want:
		c.Verdict = Fail
		c.Message = fmt.Sprintf("%s (%s, set by %s%s) is below kubelet's %s: kubelet cannot take its lock, or pods are cut short",
			secs(have), from, setBy, overrides(conf), secs(want))
		if gnshWant > want {
			c.Message += fmt.Sprintf(", and gnsh's agent needs %s to drain within drainTimeout %s", secs(gnshWant), secs(r.Drain.TimeoutSec))
		}
		c.Message += sideBySide
		c.Fix = fix
		if from == "logind" && (conf.EffectiveSec < 0 || conf.EffectiveSec+1e-9 >= want) {
			c.Message = fmt.Sprintf("%s (logind) is below kubelet's %s, though logind.conf says %s (%s): logind has not reloaded it",
				secs(have), secs(want), secs(conf.EffectiveSec), setBy)
			c.Fix = "systemctl kill -s HUP systemd-logind, then restart kubelet"
		}
	case have+1e-9 < gnshWant:
		c.Verdict = Warn
		c.Message = fmt.Sprintf("%s (%s, set by %s%s)", secs(have), from, setBy, overrides(conf))
		if want > 0 {
			c.Message += " ≥ kubelet's " + secs(want) + ", but"
		} else {
			c.Message += ":"
		}
		c.Message += fmt.Sprintf(" gnsh's agent drains a shutdown that bypasses the wrapper (systemctl reboot, the power button) "+
			"within InhibitDelayMaxSec less max(10%%, 2s): %s, short of drainTimeout %s, so such a drain is cut short (it needs %s)%s",
			secs(budget), secs(r.Drain.TimeoutSec), secs(gnshWant), sideBySide)
		c.Fix = fix + "; or lower drainTimeout in " + orUnknown(r.Kubeconfig.Config)
	default:
		c.Verdict = OK
		c.Message = fmt.Sprintf("%s (%s, set by %s)", secs(have), from, setBy)
		switch {
		case want > 0 && gnshWant > 0:
			c.Message += fmt.Sprintf(" ≥ kubelet's %s and gnsh's %s (the agent's drain of drainTimeout %s plus its margin)%s",
				secs(want), secs(gnshWant), secs(r.Drain.TimeoutSec), sideBySide)
		case want > 0:
			c.Message += " ≥ kubelet's " + secs(want)
		default:
			c.Message += fmt.Sprintf(" ≥ gnsh's %s (the agent's drain of drainTimeout %s plus its margin); kubelet asks for no delay",
				secs(gnshWant), secs(r.Drain.TimeoutSec))
			if r.Kubelet.Error != "" {
				c.Verdict = Warn
				c.Message = strings.Replace(c.Message, "kubelet asks for no delay", "kubelet's period unknown", 1)
			}
		}
	}
	if conf.EffectiveSec < 0 {
		conf.EffectiveSec = float64(1 << 53)
	}
	if c.Verdict != Fail && from == "logind" && conf.EffectiveSec != have {
		c.Message += fmt.Sprintf("; logind.conf now says %s: logind has not reloaded it", secs(conf.EffectiveSec))
	}
	return c
}

// overrides names the earlier files whose setting the effective one
// overrides (kubelet's 99-kubelet.conf under unattended-upgrades').
func overrides(conf LogindConfFacts) string {
	var o []string
	for _, f := range conf.Files {
		if f.Path == conf.EffectiveFile {
			break
		}
		if f.InhibitDelayMaxSec != "" && !f.Masked && f.Error == "" {
			o = append(o, filepath.Base(f.Path)+"'s "+f.InhibitDelayMaxSec)
		}
	}
	if len(o) == 0 {
		return ""
	}
	return ", overriding " + strings.Join(o, ", ")
}

// laterDropIn names a drop-in that sorts after file.
func laterDropIn(file string) string {
	name := "zz-gnsh-inhibit-delay.conf"
	if b := filepath.Base(file); file != "" && b >= name {
		name = b + "-zz.conf"
	}
	return "/etc/systemd/logind.conf.d/" + name
}

// CheckCommands: do the four commands resolve to gnsh?
func CheckCommands(name string, rs []Resolution, where, self string) Check {
	c := Check{Name: name}
	var bad []string
	for _, r := range rs {
		if r.Is == "gnsh" {
			continue
		}
		switch r.Is {
		case "missing":
			bad = append(bad, r.Name+" not found")
		default:
			bad = append(bad, fmt.Sprintf("%s → %s (%s)", r.Name, r.Target, r.Is))
		}
	}
	if len(bad) == 0 {
		c.Verdict, c.Message = OK, "reboot, shutdown, poweroff and halt run gnsh ("+where+")"
		return c
	}
	c.Verdict, c.Message = Fail, strings.Join(bad, ", ")+" ("+where+"): these bypass gnsh's drain"
	c.Fix = "install gnsh over them: " + installFix(self) + " (links made by hand, such as ln -sf over " + firstPath(rs) +
		", are undone by the next systemd package update)"
	return c
}

// installFix is the command that switches the four commands to gnsh so
// that package updates keep it: gnsh install (default mode: divert on
// Debian/Ubuntu and the RHEL family), named by the path gnsh runs from.
func installFix(self string) string {
	if self == "" {
		self = "gnsh"
	}
	return self + " install"
}

// firstPath is the path of the first resolution that has one, for an
// example ("/usr/sbin/reboot" if none).
func firstPath(rs []Resolution) string {
	for _, r := range rs {
		if r.Path != "" {
			return r.Path
		}
	}
	return "/usr/sbin/reboot"
}

// CheckSudo: the four commands through sudo's secure_path.
func CheckSudo(r *Report) Check {
	cf := r.Commands
	switch {
	case cf.SudoersErr != "" && cf.SecurePath == "":
		return Check{Name: "commands (sudo)", Verdict: Warn, Message: "cannot read sudo's policy: " + cf.SudoersErr,
			Fix: "run gnsh doctor as root"}
	case cf.SecurePath == "":
		return Check{Name: "commands (sudo)", Verdict: OK, Message: "sudo has no secure_path: sudo keeps the caller's PATH"}
	}
	return CheckCommands("commands (sudo)", cf.Sudo, "sudo's secure_path "+cf.SecurePath, cf.Self)
}

// CheckAnsible: does ansible.builtin.reboot's shutdown run gnsh? A warning
// only: not every node is rebooted by Ansible.
func CheckAnsible(r *Report) Check {
	c := Check{Name: "ansible reboot"}
	a := r.Commands.Ansible
	switch a.Is {
	case "gnsh":
		c.Verdict, c.Message = OK, "ansible.builtin.reboot runs "+a.Path+": gnsh"
	case "missing":
		c.Verdict, c.Message = Warn, "ansible.builtin.reboot finds no shutdown in "+AnsibleShutdownPath
	default:
		c.Verdict = Warn
		c.Message = fmt.Sprintf("ansible.builtin.reboot runs the first shutdown of %s: %s → %s (%s), not gnsh", AnsibleShutdownPath, a.Path, a.Target, a.Is)
		c.Fix = "install gnsh over " + a.Path + ": " + installFix(r.Commands.Self)
	}
	return c
}

// CheckAgent: does the node agent run (else fail), and does it hold its
// delay lock on shutdown (else warn)?
func CheckAgent(r *Report) Check {
	c := Check{Name: "agent"}
	a := r.Agent
	state := a.Unit + " is " + orUnknown(a.ActiveState)
	if a.LoadState != "" && a.LoadState != "loaded" {
		state += " (" + a.LoadState + ")"
	}
	if a.ActiveState == "unknown" || a.ActiveState == "" {
		state = a.Unit + ": state unknown (" + orUnknown(a.Error) + ")"
	}
	path := a.LockPath
	if path == "" {
		path = AgentLockPath
	}
	var lock string
	switch {
	case a.Lock == LockHeld:
		lock = "an agent holds " + path
	case a.Lock == LockRootOnly:
		lock = path + " is root's (gnsh doctor as root probes it)"
	case a.LockError != "":
		lock = "cannot probe " + path + ": " + a.LockError
	default:
		lock = "no agent holds " + path
	}
	l := r.Logind
	running := agentRunning(a)
	notNode := !r.Kubeconfig.Found && r.Kubelet.Error != ""
	// off: an admin disabled or masked the unit (gnsh install leaves it so).
	off := a.UnitFileState == "disabled" || strings.HasPrefix(a.UnitFileState, "masked")
	enable := "systemctl enable --now " + a.Unit
	if strings.HasPrefix(a.UnitFileState, "masked") {
		enable = "systemctl unmask " + a.Unit + ", then " + enable
	}
	switch {
	case !running && off:
		c.Verdict = Warn
		c.Message = a.Unit + " is " + a.UnitFileState + " and " + orUnknown(a.ActiveState) + ": the node agent is off (left so by gnsh install): " +
			"nothing uncordons the node after a reboot, and shutdowns that bypass the wrapper (systemctl reboot, the power button) are not drained"
		c.Fix = "if it should run: " + r.Install.enableFix(enable)
	case !running && notNode:
		c.Verdict, c.Message = Warn, state+", "+lock+" (not a Kubernetes node?)"
	case !running:
		c.Verdict = Fail
		c.Message = state + ", " + lock + ": nothing uncordons the node after a reboot, and shutdowns that bypass the wrapper " +
			"(systemctl reboot, the power button) are not drained"
		c.Fix = r.Install.enableFix("systemctl enable --now "+a.Unit) + "; if it stops again, journalctl -u " + a.Unit + " says why"
		if a.LoadState == "not-found" || (a.LoadState == "" && r.Install.Unit == "") {
			c.Fix = "no " + a.Unit + " on this node: " + r.Install.unitFix()
		}
	case a.ActiveState != "unknown" && a.ActiveState != "" && a.ActiveState != "active" && a.ActiveState != "activating" && a.ActiveState != "reloading":
		// The lock is held, but not by the unit: an agent run by hand.
		c.Verdict = Warn
		c.Message = lock + ", but " + state + ": an agent runs outside the unit, and none will after a reboot"
		c.Fix = "stop that agent, then systemctl enable --now " + a.Unit
	case off:
		c.Verdict = Warn
		c.Message = "the agent runs (" + state + "), but the unit is " + a.UnitFileState + ": it does not start after a reboot"
		c.Fix = "if it should: " + r.Install.enableFix(strings.Replace(enable, " --now", "", 1))
	case !l.Reachable || l.InhibitorsError != "":
		c.Verdict = Warn
		c.Message = "the agent runs (" + state + "); cannot list logind's inhibitors to see its delay lock: " +
			orUnknown(firstNonEmpty(l.InhibitorsError, l.Error))
		c.Fix = "see the logind check"
	case !l.GnshLock:
		c.Verdict = Warn
		c.Message = "the agent runs (" + state + ") but holds no delay lock on shutdown (who " + agent.InhibitWho +
			"): a shutdown that bypasses the wrapper is not drained. It takes the lock once it has found a kubeconfig " +
			"and reached logind (it may be reconnecting to the bus), or it is not a node (no kubeconfig)"
		c.Fix = "see systemctl status " + a.Unit + " (its STATUS= line) and journalctl -u " + a.Unit
	default:
		c.Verdict = OK
		c.Message = "the agent runs (" + state + ") and holds its delay lock on shutdown (who " + agent.InhibitWho + ")"
	}
	if a.Queued != "" {
		// It carries a queued reboot: said whatever the verdict.
		c.Message += "; " + a.Queued
	}
	if !running && !notNode {
		c.Message += "; and a reboot asked by automation (slots.queue) that finds no reboot slot free waits and is refused instead of queued"
	}
	return c
}

// CheckConfig: gnsh's config file is valid, as gnsh config check finds
// it (the kubeconfig it names included), or absent (the defaults apply).
func CheckConfig(r *Report) Check {
	c := Check{Name: "config"}
	k := r.Kubeconfig
	switch {
	case len(k.ConfigProblems) > 0 && k.ConfigError == "":
		// The file is valid; what its kubeconfig key names is not.
		c.Verdict, c.Message = Fail, strings.Join(k.ConfigProblems, " | ")
		c.Fix = "fix or remove the kubeconfig key in " + k.Config
	case len(k.ConfigProblems) > 0:
		c.Verdict = Fail
		c.Message = strings.Join(k.ConfigProblems, " | ") + "; every shutdown through gnsh is refused (but with --no-drain), and these checks use the defaults"
		c.Fix = "fix " + k.Config + " ('gnsh config check' lists each problem with its line)"
	case k.ConfigError != "":
		// Not root, most likely: a 0600 file.
		c.Verdict, c.Message = Warn, "cannot read it ("+k.ConfigError+"): these checks use the defaults"
		c.Fix = "run gnsh doctor as root"
	case !k.ConfigFound:
		c.Verdict, c.Message = OK, "no "+orUnknown(k.Config)+": the defaults apply"
	default:
		c.Verdict, c.Message = OK, k.Config+" is valid"
	}
	return c
}

// CheckKubeconfig: found, readable, mode 0600.
func CheckKubeconfig(r *Report) Check {
	c := Check{Name: "kubeconfig"}
	k := r.Kubeconfig
	switch {
	case k.Named != "" && !k.Found:
		// Named, but unusable: a mistake in the configuration, not "not a
		// node".
		c.Verdict, c.Message = Fail, orUnknown(k.Error)
		switch k.Named {
		case kube.FromFlag:
			c.Fix = "pass a kubeconfig that exists, or leave --kubeconfig out"
		case kube.FromGnsh:
			c.Message += ": every shutdown through gnsh is refused (but with --no-drain)"
			c.Fix = "fix or remove " + k.Path + "; the drain's kubeconfig is the kubelet's: set kubeconfig in " + config.Path +
				" to it on a node without " + kube.KubeletKubeconfigList()
		default:
			c.Message += ": every shutdown through gnsh is refused (but with --no-drain)"
			c.Fix = "see the config check"
		}
	case !k.Found && r.Kubelet.Error != "":
		c.Verdict, c.Message = Warn, orUnknown(k.Error)+": not a Kubernetes node?"
		c.Fix = "on a Kubernetes node, set kubeconfig in /etc/gnsh/config.yaml to the kubelet's kubeconfig; kubeadm's, k3s's and rke2's (" + kube.KubeletKubeconfigList() + ") are found by themselves"
	case !k.Found:
		c.Verdict, c.Message = Fail, orUnknown(k.Error)+", but kubelet is configured: gnsh will not drain"
		c.Fix = "set kubeconfig in /etc/gnsh/config.yaml to the kubelet's kubeconfig (gnsh looked at " + kube.KubeletKubeconfigList() + ")"
	case k.Error != "":
		c.Verdict, c.Message = Fail, k.Error
		c.Fix = "run gnsh as root"
	case k.Mode != "" && k.Mode != "0600" && k.Mode != "0400":
		c.Verdict, c.Message = Fail, fmt.Sprintf("%s has mode %s: its credentials are readable by others", k.Path, k.Mode)
		c.Fix = "chmod 0600 " + k.Path
	case k.GateError != "":
		c.Verdict, c.Message, c.Fix = Fail, k.GateError, k.GateFix
	case k.Fallback:
		// No kubelet kubeconfig: the drain runs with the gate's identity.
		c.Verdict = Warn
		c.Message = fmt.Sprintf("drain: gnsh's own %s (mode %s), the reboot-slot gate's identity, for want of a kubelet kubeconfig at %s: "+
			"the rbac.yaml of this gnsh does not let it cordon or evict", k.Path, orUnknown(k.Mode), kube.KubeletKubeconfigList())
		c.Fix = "set kubeconfig in " + config.Path + " to this node's kubelet kubeconfig, which may drain this node and no other"
	default:
		c.Verdict, c.Message = OK, fmt.Sprintf("drain: %s (mode %s)", k.Path, orUnknown(k.Mode))
	}
	// The gate's own kubeconfig, when it is another file.
	if g := r.Slots.Kubeconfig; g != "" && g != k.Path && c.Verdict != Fail {
		c.Message += fmt.Sprintf("; gate: %s (mode %s)", g, orUnknown(r.Slots.Mode))
		if m := r.Slots.Mode; m != "" && m != "0600" && m != "0400" {
			c.Verdict, c.Message = Fail, fmt.Sprintf("%s has mode %s: its credentials are readable by others", g, m)
			c.Fix = "chmod 0600 " + g
		}
	}
	return c
}

// CheckNode: the Node exists and is this machine.
func CheckNode(r *Report) Check {
	c := Check{Name: "node"}
	n := r.Node
	name := n.Name
	if n.NameFrom != "" {
		name += " (name from " + n.NameFrom + ")"
	}
	switch {
	case !r.Kubeconfig.Found || r.Kubeconfig.Error != "":
		c.Verdict, c.Message = Warn, "not checked: "+orUnknown(n.Error)
	case n.NotFound:
		c.Verdict, c.Message = Fail, n.Error
		c.Fix = "set node in /etc/gnsh/config.yaml (or pass --node) to this machine's Node name"
	case !n.Found:
		c.Verdict, c.Message = Warn, "cannot read the Node: "+orUnknown(n.Error)
		c.Fix = "check that the API server answers and the kubeconfig's credentials are valid"
	case n.SameMachine != nil && !*n.SameMachine:
		c.Verdict, c.Message = Fail, n.SameWhy
		c.Fix = "point gnsh at this machine's cluster: /etc/gnsh/kubeconfig, or unset KUBECONFIG"
	default:
		c.Verdict, c.Message = OK, "Node "+name+": "+n.SameWhy
		if n.Schedulable != nil && !*n.Schedulable {
			if n.Cordon != nil {
				c.Message += fmt.Sprintf("; cordoned by gnsh (%s by %s at %s)", n.Cordon.Action, n.Cordon.User, n.Cordon.Time.UTC().Format(time.RFC3339))
			} else {
				c.Message += "; cordoned (not by gnsh)"
			}
		}
	}
	return c
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "unset"
	}
	return s
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// secs writes seconds as a Go duration ("30s", "1m30s"), or "infinity".
func secs(s float64) string {
	if s < 0 || s >= float64(1<<53) {
		return "infinity"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
