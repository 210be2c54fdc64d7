//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/agent"
)

// waitNodeLease waits until kubelet's node Lease (kube-node-lease/NODE)
// exists with a renewTime of this boot (not before since). A real node has
// it: gnsh's drain reads the kubelet's life from it. kubelet's lease
// controller makes its first attempt before the Node is registered (its
// ownerReference to the Node cannot be set: "Failed to get node when
// trying to set owner ref to the node lease"), creates nothing then, and
// tries again only a renew interval later (a quarter of
// nodeLeaseDurationSeconds: 10 s): a case that shuts down sooner measures
// a node without its Lease.
func (a *agentRun) waitNodeLease(since time.Time, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := a.d.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, a.d.node, metav1.GetOptions{})
		cancel()
		if err == nil && l.Spec.RenewTime != nil && !l.Spec.RenewTime.Time.Before(since.Truncate(time.Second)) {
			holder := ""
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			if holder != a.d.node {
				a.t.Fatalf("Lease %s/%s held by %q, want the Node's kubelet %q", corev1.NamespaceNodeLease, a.d.node, holder, a.d.node)
			}
			return l.Spec.RenewTime.Time
		}
		if time.Now().After(deadline) {
			j := a.c.in(20*time.Second, "journalctl", "--no-pager", "-b", "-u", "kubelet.service", "-g", "lease")
			a.t.Fatalf("no Lease %s/%s renewed in this boot %v after kubelet started (%v); kubelet's lines on leases:\n%s",
				corev1.NamespaceNodeLease, a.d.node, timeout, err, j.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// agentDrainEnd returns the agent's journal line (gnsh: … after the
// ident) that ended its drain for the shutdown after from: "drained NODE
// in …" or "agent: drain for the shutdown ended: …", and when.
func (a *agentRun) agentDrainEnd(from time.Time) (string, time.Time) {
	for _, l := range strings.Split(a.hostJournal("-u", agentUnit), "\n") {
		i := strings.Index(l, "gnsh: ")
		if i < 0 || !(strings.Contains(l, "gnsh: drained "+a.d.node+" in ") || strings.Contains(l, "drain for the shutdown ended:")) {
			continue
		}
		if at, ok := unixField(l); ok && !at.Before(from) {
			return l[i:], at
		}
	}
	return "", time.Time{}
}

// expectBypassAgent: on a shutdown that bypassed the wrapper, the agent's
// drain did not end with "kubelet down" (kubelet's own "node is shutting
// down" is a live kubelet), and the agent warned exactly once that the
// shutdown bypassed gnsh's commands while kubelet stops the pods too.
// Returns the line that ended its drain.
func (a *agentRun) expectBypassAgent(trigger time.Time) string {
	end, _ := a.agentDrainEnd(trigger)
	switch {
	case end == "":
		a.t.Errorf("the agent's journal has no line ending its drain (drained … / drain for the shutdown ended)")
	case strings.Contains(end, "kubelet down"):
		a.t.Errorf("the agent's drain ended with kubelet down; kubelet was shutting the node down, alive: %s", end)
	}
	if n := a.kubeletTooWarnings(trigger); n != 1 {
		a.t.Errorf("the agent's journal has its warning %q %d times after systemctl reboot, want once", agent.KubeletTooLine, n)
	}
	return end
}

// kubeletTooWarnings counts the agent's warning that a shutdown bypassed
// gnsh's commands (agent.KubeletTooLine) in its journal after from.
func (a *agentRun) kubeletTooWarnings(from time.Time) int {
	n := 0
	for _, l := range strings.Split(a.hostJournal("-u", agentUnit), "\n") {
		if !strings.Contains(l, "gnsh: agent: "+agent.KubeletTooLine) {
			continue
		}
		if at, ok := unixField(l); ok && !at.Before(from) {
			n++
		}
	}
	return n
}

// leaseNote says when kubelet's node Lease was renewed relative to ref.
func leaseNote(renewed, ref time.Time) string {
	return fmt.Sprintf("node Lease renewed %.1f s after node-setup.sh", renewed.Sub(ref).Seconds())
}

// doctorCheck returns gnsh doctor's check name as one line, "VERDICT
// message…", its wrapped continuation lines (indented) joined by single
// spaces; "" if doctor printed no such check.
func doctorCheck(out, name string) string {
	var got []string
	in := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case in && len(f) > 0 && strings.HasPrefix(l, " "):
			got = append(got, f...)
		case in:
			return strings.Join(got, " ")
		case len(f) > 0 && strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(l, f[0])), name+" "):
			in = true
			got = strings.Fields(l)
		}
	}
	return strings.Join(got, " ")
}
