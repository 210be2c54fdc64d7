package drain

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// defaultLeaseDuration is a node Lease's leaseDurationSeconds when it does
// not say (the kubelet's default nodeLeaseDurationSeconds).
const defaultLeaseDuration = 40 * time.Second

// kubeletCheckInterval is how often, while every eviction is accepted and
// pods are still terminating, the drain asks whether the node's kubelet is
// alive: one GET each time.
const kubeletCheckInterval = 5 * time.Second

// NodeNotReadyError means that every eviction was accepted but pods are
// still terminating on a node whose kubelet is not alive: its Lease has
// not been renewed within its duration, or (without a Lease) the Node is
// not Ready for another reason than kubelet's own graceful node shutdown.
// Only the kubelet finishes a pod's deletion, so those pods
// would stay Terminating until the drain's Timeout and beyond; rebooting
// is what brings the kubelet back. kubectl drain's
// --skip-wait-for-delete-timeout is the precedent for not waiting.
type NodeNotReadyError struct {
	Node string
	// Reason is what showed the kubelet dead, e.g. "Lease last renewed
	// 3m0s ago (duration 40s)" or "Ready=False (KubeletNotReady): …".
	Reason string
	// Waiting are the pods still terminating (namespace/name, sorted).
	Waiting []string
}

func (e *NodeNotReadyError) Error() string {
	return fmt.Sprintf("the kubelet of %s is not alive: %s; it cannot finish the %d pods still terminating: %s",
		e.Node, e.Reason, len(e.Waiting), strings.Join(e.Waiting, ", "))
}

// kubeletState is the answer of one check of the kubelet.
type kubeletState struct {
	dead   bool
	reason string // why dead
	// noLease: the node has no Lease, or this identity may not GET
	// Leases (a dedicated one without that rule); later checks of this
	// drain go to the Node at once, one GET each.
	noLease bool
}

// checkKubelet says whether node's kubelet is alive, from its Lease
// (kube-node-lease/NODE, which kubelet credentials may GET) renewed within
// its leaseDurationSeconds, or, if there is no Lease or it may not be read
// (or noLease says so already), from the Node's Ready condition (where
// kubelet's own graceful node shutdown, see shuttingDown, is alive). An
// unanswered or failed request, or a Node without a Ready condition,
// leaves the kubelet presumed alive: only clear evidence stops the wait.
//
// The renewTime is the kubelet's own clock, and gnsh runs on the node, so
// comparing it with clk needs no allowance for skew.
func checkKubelet(ctx context.Context, c kubernetes.Interface, clk clock.PassiveClock, node string, noLease bool) kubeletState {
	st := kubeletState{noLease: noLease}
	if !noLease {
		l, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		switch {
		case err == nil && l.Spec.RenewTime != nil:
			d := defaultLeaseDuration
			if s := l.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
				d = time.Duration(*s) * time.Second
			}
			if ago := clk.Since(l.Spec.RenewTime.Time); ago > d {
				st.dead = true
				st.reason = fmt.Sprintf("Lease last renewed %s ago (duration %s)", ago.Round(time.Second), d)
			}
			return st
		case err == nil:
			// No renewal to go by: the Node's condition says.
		case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
			st.noLease = true
		default:
			return st
		}
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return st
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue && !shuttingDown(cond) {
			st.dead = true
			st.reason = fmt.Sprintf("Ready=%s", cond.Status)
			if cond.Reason != "" {
				st.reason += " (" + cond.Reason + ")"
			}
			if cond.Message != "" {
				st.reason += ": " + cond.Message
			}
		}
	}
	return st
}

// kubeletShuttingDown is the error of kubelet's shutdown manager
// (pkg/kubelet/nodeshutdown, ShutdownStatus) from PrepareForShutdown on,
// which kubelet's Ready setter writes as the Node's Ready=False message.
const kubeletShuttingDown = "node is shutting down"

// shuttingDown says whether a Ready condition that is not True is kubelet's
// own graceful node shutdown and nothing else: the kubelet is alive and is
// stopping the pods itself. kubelet joins several errors as "[a, b]" (then
// another one, e.g. its runtime down, decides) and may append ". WARNING: "
// and the container manager's soft requirements.
func shuttingDown(c corev1.NodeCondition) bool {
	if c.Status != corev1.ConditionFalse || c.Reason != "KubeletNotReady" {
		return false
	}
	m, _, _ := strings.Cut(c.Message, ". WARNING: ")
	return m == kubeletShuttingDown
}
