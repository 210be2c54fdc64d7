package nodefacts

import (
	"testing"
)

func TestCheckBypass(t *testing.T) {
	const via = "systemctl reboot and the power button bypass gnsh's commands"
	const pdb = "PodDisruptionBudgets hold only through reboot, shutdown, poweroff and halt"
	const use = ": use those (or gnsh drain first)" // an ok line has no fix: what to do is in it
	for _, tt := range []struct {
		name    string
		change  func(r *Report)
		verdict Verdict
		msg     string // the whole message
		fix     string
	}{
		{"kubelet and the agent", func(*Report) {}, OK,
			via + ": logind tells kubelet and gnsh's agent at the same instant, and kubelet stops every pod at once " +
				"(within shutdownGracePeriod 1m0s, critical pods last within 10s) while the agent evicts, so " + pdb + use, ""},
		{"no critical period", func(r *Report) { r.Kubelet.ShutdownGracePeriod, r.Kubelet.ShutdownGracePeriodCriticalPods = "20s", "" }, OK,
			via + ": logind tells kubelet and gnsh's agent at the same instant, and kubelet stops every pod at once " +
				"(within shutdownGracePeriod 20s) while the agent evicts, so " + pdb + use, ""},
		{"by priority", func(r *Report) { r.Kubelet.ByPodPrioritySec = 35 }, OK,
			via + ": logind tells kubelet and gnsh's agent at the same instant, and kubelet stops the pods by priority, each priority group at once, " +
				"lowest first (shutdownGracePeriodByPodPriority, 35s in all) while the agent evicts, so " + pdb + use, ""},
		{"kubelet's config unreadable, its lock held", func(r *Report) { r.Kubelet = KubeletFacts{Error: "permission denied"} }, OK,
			via + ": logind tells kubelet and gnsh's agent at the same instant, and kubelet stops every pod at once while the agent evicts, so " + pdb + use, ""},
		{"kubelet acts, the agent has no time", func(r *Report) {
			r.Logind.InhibitDelayMax, r.Logind.InhibitDelayMaxSec = "2s", 2
		}, Warn, via + ": kubelet stops every pod at once (within shutdownGracePeriod 1m0s, critical pods last within 10s), " +
			"and gnsh's agent has no time to evict (InhibitDelayMaxSec 2s or less), so " + pdb, "see the InhibitDelayMaxSec check"},
		{"kubelet's graceful shutdown off", func(r *Report) {
			r.Logind.KubeletLock, r.Kubelet.ShutdownGracePeriod, r.Kubelet.RequestedSec = false, "", 0
		}, OK, via + ": kubelet does not act on them (its graceful node shutdown is off), so gnsh's agent alone evicts the pods, " +
			"PodDisruptionBudgets honoured, within drainTimeout 30s; pods still there when logind goes on are not stopped gracefully", ""},
		{"kubelet without its lock, short window", func(r *Report) {
			r.Logind.KubeletLock, r.Logind.InhibitDelayMax, r.Logind.InhibitDelayMaxSec = false, "20s", 20
			r.Drain.TimeoutSec = 300
		}, OK, via + ": kubelet does not act on them (it holds no delay lock on shutdown), so gnsh's agent alone evicts the pods, " +
			"PodDisruptionBudgets honoured, within 18s (InhibitDelayMaxSec less max(10%, 2s)); pods still there when logind goes on are not stopped gracefully", ""},
		{"kubelet off, no time to drain", func(r *Report) {
			r.Logind.KubeletLock, r.Kubelet.RequestedSec = false, 0
			r.Logind.InhibitDelayMax, r.Logind.InhibitDelayMaxSec = "2s", 2
		}, Warn, via + ": kubelet does not act on them (its graceful node shutdown is off), and gnsh's agent has no time to drain them " +
			"(InhibitDelayMaxSec 2s or less): the pods are not stopped before the machine goes down", "see the InhibitDelayMaxSec check"},
		{"locks not listed, kubelet on by its config", func(r *Report) { r.Logind = LogindFacts{Error: "timed out"} }, OK,
			via + ": logind tells kubelet and gnsh's agent at the same instant, and kubelet stops every pod at once " +
				"(within shutdownGracePeriod 1m0s, critical pods last within 10s) while the agent evicts, so " + pdb + use, ""},
		{"kubelet unknown", func(r *Report) {
			r.Logind = LogindFacts{Error: "timed out"}
			r.Kubelet = KubeletFacts{Error: "permission denied"}
		}, Warn, via + ": gnsh's agent evicts the pods, but whether kubelet stops the pods too is unknown (its config cannot be read: permission denied; " +
			"and logind's inhibitors cannot be listed); if kubelet's graceful node shutdown is on, it stops every pod at the same instant, so " + pdb,
			"see the kubelet grace period and kubelet inhibitor checks"},
		{"no agent", func(r *Report) {
			r.Agent.ActiveState, r.Agent.Lock, r.Agent.Running, r.Logind.GnshLock = "inactive", LockAbsent, false, false
		}, Warn, via + ", and nothing drains them (gnsh's agent is not running): kubelet stops every pod at once " +
			"(within shutdownGracePeriod 1m0s, critical pods last within 10s), so " + pdb, "see the agent check"},
		{"agent without its lock", func(r *Report) { r.Logind.GnshLock = false }, Warn,
			via + ", and nothing drains them (gnsh's agent holds no delay lock on shutdown): kubelet stops every pod at once " +
				"(within shutdownGracePeriod 1m0s, critical pods last within 10s), so " + pdb, "see the agent check"},
		{"no agent, kubelet off", func(r *Report) {
			r.Agent.ActiveState, r.Agent.Lock, r.Agent.Running, r.Logind.GnshLock = "inactive", LockAbsent, false, false
			r.Logind.KubeletLock, r.Kubelet.RequestedSec = false, 0
		}, Warn, via + ", and nothing drains them (gnsh's agent is not running) and kubelet does not act on them (its graceful node shutdown is off): " +
			"the pods are not stopped before the machine goes down", "see the agent and kubelet grace period checks"},
		{"no agent, kubelet unknown", func(r *Report) {
			r.Agent.ActiveState, r.Agent.Lock, r.Agent.Running = "inactive", LockAbsent, false
			r.Logind = LogindFacts{Error: "timed out"}
			r.Kubelet = KubeletFacts{Error: "permission denied"}
		}, Warn, via + ", and nothing drains them (gnsh's agent is not running); whether kubelet stops the pods too is unknown " +
			"(its config cannot be read: permission denied; and logind's inhibitors cannot be listed)", "see the agent check"},
		{"drain off", func(r *Report) { r.Drain.Enabled = false }, OK,
			"gnsh's drain is off (drain: false in /etc/gnsh/config.yaml): no shutdown is drained, through gnsh's commands or not; " +
				"on every path kubelet stops every pod at once (within shutdownGracePeriod 1m0s, critical pods last within 10s)", ""},
		{"not a node", func(r *Report) {
			r.Kubelet = KubeletFacts{Error: "no kubelet config file"}
			r.Kubeconfig = KubeconfigFacts{}
		}, OK, "not a Kubernetes node (no kubeconfig, no kubelet config): no pods to drain on any path", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := healthy()
			tt.change(r)
			c := CheckBypass(r)
			if c.Name != "bypass path" || c.Verdict != tt.verdict || c.Message != tt.msg || c.Fix != tt.fix {
				t.Errorf("got  %s %q\n  fix %q\nwant %s %q\n  fix %q", c.Verdict, c.Message, c.Fix, tt.verdict, tt.msg, tt.fix)
			}
		})
	}
}

func TestDoctorBypassAfterKubeletInhibitor(t *testing.T) {
	cs := Doctor(healthy())
	for i, c := range cs {
		if c.Name == "kubelet inhibitor" {
			if i+1 >= len(cs) || cs[i+1].Name != "bypass path" {
				t.Fatalf("the check after kubelet inhibitor is not bypass path: %+v", cs)
			}
			return
		}
	}
	t.Fatal("no kubelet inhibitor check")
}
