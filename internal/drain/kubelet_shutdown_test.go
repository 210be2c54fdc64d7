package drain

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// readyFalse is kubeletCluster's node1 without a Lease, Ready=False
// (KubeletNotReady) with msg.
func readyFalse(t *testing.T, msg string) *cluster {
	t.Helper()
	cl := kubeletCluster(corev1.ConditionFalse, time.Time{})
	n, err := cl.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions[0].Message = msg
	if _, err := cl.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cl
}

// kubelet's shutdown manager, on PrepareForShutdown, has the Node read
// Ready=False (KubeletNotReady) "node is shutting down" and then stops the
// pods itself: it is alive. Without a node Lease to read (a kubelet
// registered seconds ago, or an identity that may not GET Leases),
// checkKubelet took that for a dead kubelet and the agent's drain of a
// bypassing shutdown ended with "the kubelet of … is not alive" about
// 0.6 s in (issue 23's review, every systemctl_reboot_bypass journal).
func TestKubeletShuttingDownIsNotDead(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 13, 56, 0, time.UTC)
	for _, msg := range []string{
		"node is shutting down",
		// A soft requirement of the container manager is appended.
		"node is shutting down. WARNING: cpu hardcapping unsupported",
	} {
		cl := readyFalse(t, msg)
		st := checkKubelet(context.Background(), cl, clocktesting.NewFakePassiveClock(now), "node1", false)
		if st.dead {
			t.Errorf("%q: kubelet taken for dead while it shuts the node down gracefully: %q", msg, st.reason)
		}
		if !st.noLease {
			t.Errorf("%q: the missing Lease is not remembered", msg)
		}
	}
}

// A kubelet that is shutting down but whose runtime is also down cannot
// stop the pods: kubelet aggregates its errors, and anything beside the
// shutdown still reads as dead.
func TestKubeletShuttingDownRuntimeDownIsDead(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 13, 56, 0, time.UTC)
	msg := "[container runtime is down, node is shutting down]"
	cl := readyFalse(t, msg)
	st := checkKubelet(context.Background(), cl, clocktesting.NewFakePassiveClock(now), "node1", false)
	if !st.dead || st.reason != "Ready=False (KubeletNotReady): "+msg {
		t.Errorf("got dead=%v reason %q, want dead with the Node's message", st.dead, st.reason)
	}
}

// The whole drain, no Lease, kubelet shutting the node down: the drain
// waits for the pods (here until its Timeout: nothing finishes them in the
// fake) instead of ending at once with *NodeNotReadyError.
func TestDrainWaitsForShuttingDownKubelet(t *testing.T) {
	cl := readyFalse(t, kubeletShuttingDown)
	if _, err := cl.CoreV1().Pods("app").Create(context.Background(), pod("web-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cl.Stick("web-1")
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 30 * time.Second}, 100*time.Millisecond, nil)
	var be *BlockedError
	if !errors.As(d.err, &be) || !slices.Equal(be.Waiting, []string{"app/web-1"}) {
		t.Fatalf("err %v (%T), want *BlockedError after the Timeout", d.err, d.err)
	}
}
