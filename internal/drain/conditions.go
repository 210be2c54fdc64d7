package drain

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The Node lifecycle conditions of KEP-5683 (Kubernetes 1.37 alpha, feature
// gate NodeLifecycleConditions) that gnsh writes when nodeConditions is on.
const (
	ConditionDrainInProgress corev1.NodeConditionType = "DrainInProgress"
	ConditionDrained         corev1.NodeConditionType = "Drained"
)

// Reasons of gnsh's lifecycle conditions.
const (
	ConditionReasonDraining    = "GnshDraining"
	ConditionReasonDrained     = "GnshDrained"
	ConditionReasonDrainFailed = "GnshDrainFailed"
	ConditionReasonUncordoned  = "GnshUncordoned"
)

// Lifecycle is what gnsh says of a Node's drain.
type Lifecycle struct {
	InProgress, Drained bool
	Reason, Message     string
}

// SetLifecycle writes DrainInProgress and Drained on node's status, one
// strategic-merge patch of the status subresource (conditions merge by
// type: the kubelet's and others' stay as they are). Both times are now:
// each write is a transition gnsh made.
func SetLifecycle(ctx context.Context, c kubernetes.Interface, node string, l Lifecycle, now time.Time) error {
	t := metav1.NewTime(now.UTC().Truncate(time.Second))
	status := func(b bool) corev1.ConditionStatus {
		if b {
			return corev1.ConditionTrue
		}
		return corev1.ConditionFalse
	}
	patch := map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{
		{Type: ConditionDrainInProgress, Status: status(l.InProgress), Reason: l.Reason, Message: l.Message, LastHeartbeatTime: t, LastTransitionTime: t},
		{Type: ConditionDrained, Status: status(l.Drained), Reason: l.Reason, Message: l.Message, LastHeartbeatTime: t, LastTransitionTime: t},
	}}}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	return err
}
