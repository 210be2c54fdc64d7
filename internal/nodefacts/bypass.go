package nodefacts

import (
	"fmt"
	"time"

	"github.com/gnsh/gnsh/internal/agent"
)

// bypassVia names the shutdowns that bypass gnsh's commands.
const bypassVia = "systemctl reboot and the power button bypass gnsh's commands"

// pdbOnlyThrough is where PodDisruptionBudgets are kept on this node.
const pdbOnlyThrough = "PodDisruptionBudgets hold only through reboot, shutdown, poweroff and halt"

// CheckBypass says what happens to the pods on a shutdown that bypasses
// gnsh's commands (systemctl reboot, the power button, kured's default),
// with this node's own kubelet settings. logind sends PrepareForShutdown
// to kubelet and to gnsh's agent at the same instant: kubelet's graceful
// node shutdown stops every pod at once while the agent's evictions are on
// their way, so the pods' PodDisruptionBudgets are not kept (issue 23,
// measured with the real kubelet). The commands drain before they ask
// logind. A fact of the node, not a fault: ok while the agent guards the
// node; a warning when nothing drains that path or kubelet's part is
// unknown (the faults themselves are the agent's and kubelet's checks).
func CheckBypass(r *Report) Check {
	c := Check{Name: "bypass path"}
	if !r.Kubeconfig.Found && r.Kubelet.Error != "" {
		c.Verdict, c.Message = OK, "not a Kubernetes node (no kubeconfig, no kubelet config): no pods to drain on any path"
		return c
	}
	l, k, a := r.Logind, r.Kubelet, r.Agent
	locksKnown := l.Reachable && l.InhibitorsError == ""
	// Does kubelet act on PrepareForShutdown? Its delay lock says so; its
	// config when the locks cannot be listed; unknown when neither.
	kubeletKnown, kubeletActs := true, false
	switch {
	case locksKnown:
		kubeletActs = l.KubeletLock
	case k.Error == "":
		kubeletActs = k.RequestedSec > 0
	default:
		kubeletKnown = false
	}
	var kubelet string
	switch {
	case !kubeletKnown:
		kubelet = "whether kubelet stops the pods too is unknown (its config cannot be read: " + k.Error + "; and logind's inhibitors cannot be listed)"
	case kubeletActs:
		kubelet = "kubelet stops " + kubeletStops(k)
	case k.Error == "" && k.RequestedSec <= 0:
		kubelet = "kubelet does not act on them (its graceful node shutdown is off)"
	default:
		kubelet = "kubelet does not act on them (it holds no delay lock on shutdown)"
	}
	running := agentRunning(a)
	guards := running && r.Drain.Enabled && (!locksKnown || l.GnshLock)
	switch {
	case !r.Drain.Enabled:
		c.Verdict = OK
		c.Message = fmt.Sprintf("gnsh's drain is off (drain: false in %s): no shutdown is drained, through gnsh's commands or not; on every path %s",
			orUnknown(r.Kubeconfig.Config), kubelet)
	case guards && kubeletKnown && kubeletActs && agentWindow(r) == "":
		c.Verdict = Warn
		c.Message = bypassVia + ": " + kubelet + ", and gnsh's agent has no time to evict (InhibitDelayMaxSec 2s or less), so " + pdbOnlyThrough
		c.Fix = "see the InhibitDelayMaxSec check"
	case guards && kubeletKnown && kubeletActs:
		c.Verdict = OK
		c.Message = bypassVia + ": logind tells kubelet and gnsh's agent at the same instant, and " + kubelet +
			" while the agent evicts, so " + pdbOnlyThrough + ": use those (or gnsh drain first)"
	case guards && kubeletKnown:
		c.Verdict = OK
		if w := agentWindow(r); w != "" {
			c.Message = bypassVia + ": " + kubelet + ", so gnsh's agent alone evicts the pods, PodDisruptionBudgets honoured, " +
				w + "; pods still there when logind goes on are not stopped gracefully"
		} else {
			c.Verdict = Warn
			c.Message = bypassVia + ": " + kubelet + ", and gnsh's agent has no time to drain them (InhibitDelayMaxSec 2s or less): " +
				"the pods are not stopped before the machine goes down"
			c.Fix = "see the InhibitDelayMaxSec check"
		}
	case guards:
		c.Verdict = Warn
		c.Message = bypassVia + ": gnsh's agent evicts the pods, but " + kubelet + "; if kubelet's graceful node shutdown is on, it stops every pod at the same instant, so " + pdbOnlyThrough
		c.Fix = "see the kubelet grace period and kubelet inhibitor checks"
	default:
		why := "gnsh's agent is not running"
		if running {
			why = "gnsh's agent holds no delay lock on shutdown"
		}
		c.Verdict = Warn
		c.Fix = "see the agent check"
		switch {
		case !kubeletKnown:
			c.Message = bypassVia + ", and nothing drains them (" + why + "); " + kubelet
		case kubeletActs:
			c.Message = bypassVia + ", and nothing drains them (" + why + "): " + kubelet + ", so " + pdbOnlyThrough
		default:
			c.Message = bypassVia + ", and nothing drains them (" + why + ") and " + kubelet + ": the pods are not stopped before the machine goes down"
			c.Fix = "see the agent and kubelet grace period checks"
		}
	}
	return c
}

// kubeletStops says how kubelet stops the pods, with k's periods.
func kubeletStops(k KubeletFacts) string {
	switch {
	case k.Error != "" || k.RequestedSec <= 0:
		return "every pod at once" // its lock is held, its config not known
	case k.ByPodPrioritySec > 0:
		return fmt.Sprintf("the pods by priority, each priority group at once, lowest first (shutdownGracePeriodByPodPriority, %ds in all)", k.ByPodPrioritySec)
	case k.ShutdownGracePeriodCriticalPods != "":
		return "every pod at once (within shutdownGracePeriod " + k.ShutdownGracePeriod + ", critical pods last within " + k.ShutdownGracePeriodCriticalPods + ")"
	}
	return "every pod at once (within shutdownGracePeriod " + k.ShutdownGracePeriod + ")"
}

// agentWindow is how long the agent drains a shutdown that bypassed the
// commands: InhibitDelayMaxSec less its margin, at most drainTimeout; ""
// when that leaves no time.
func agentWindow(r *Report) string {
	have := r.Logind.InhibitDelayMaxSec
	if !r.Logind.Reachable || r.Logind.InhibitDelayMax == "" {
		have = r.LogindConf.EffectiveSec
	}
	if have < 0 { // infinity
		have = 1e9
	}
	budget := agent.DrainBudget(time.Duration(min(have, 1e9) * float64(time.Second)))
	if t := time.Duration(r.Drain.TimeoutSec * float64(time.Second)); t > 0 && t < budget {
		return "within drainTimeout " + t.String()
	}
	if budget <= 0 {
		return ""
	}
	return "within " + budget.String() + " (InhibitDelayMaxSec less max(10%, 2s))"
}
