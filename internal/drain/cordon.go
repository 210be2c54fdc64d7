// Package drain cordons a node and evicts its pods through the Eviction API
// before gnsh hands a shutdown to logind. It needs nothing beyond what the
// kubelet's own credentials allow under the Node authorizer and
// NodeRestriction: it reads and patches only its own Node, lists pods only
// with spec.nodeName=NODE, never GETs DaemonSets (ownerReferences decide)
// and never GETs a pod after deleting it (that answers 403, not 404).
package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// CordonAnnotation marks a cordon that gnsh made. Its value is a JSON
// Ownership. gnsh uncordons only nodes that carry it and are still
// unschedulable: an admin's cordon is never undone.
const CordonAnnotation = "gnsh.io/cordoned"

// Ownership records who cordoned the node, for what, and in which boot.
type Ownership struct {
	Action string    `json:"action"`           // reboot, poweroff, halt, kexec
	User   string    `json:"user"`             // SUDO_USER, LOGNAME or the uid
	TTY    string    `json:"tty,omitempty"`    // the terminal, if any
	Time   time.Time `json:"time"`             // when
	BootID string    `json:"bootID,omitempty"` // /proc/sys/kernel/random/boot_id
	// When, for scheduled shutdowns, is the scheduled time.
	When *time.Time `json:"when,omitempty"`
}

// Cordon marks node unschedulable and records gnsh's ownership, but only
// if it is schedulable now. It reports whether gnsh made the cordon. The
// patch carries the resourceVersion it read, so a cordon made by someone
// else in between is not overwritten (the conflict is retried once read
// again).
func Cordon(ctx context.Context, c kubernetes.Interface, node string, own Ownership) (bool, error) {
	for attempt := 0; ; attempt++ {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("cordon %s: %w", node, err)
		}
		if n.Spec.Unschedulable {
			return false, nil
		}
		val, err := json.Marshal(own)
		if err != nil {
			return false, err
		}
		patch, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": map[string]string{CordonAnnotation: string(val)}},
			"spec":     map[string]any{"unschedulable": true},
		})
		_, err = c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) && attempt < 3 {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("cordon %s: %w", node, err)
		}
		return true, nil
	}
}

// Owner returns gnsh's ownership record of node's cordon, or nil.
func Owner(n *corev1.Node) *Ownership {
	v, ok := n.Annotations[CordonAnnotation]
	if !ok {
		return nil
	}
	var o Ownership
	if json.Unmarshal([]byte(v), &o) != nil {
		return &Ownership{} // ours, though unreadable
	}
	return &o
}

// Uncordon makes node schedulable again if gnsh cordoned it (the
// annotation is present and the node is still unschedulable) and removes
// the annotation in the same patch. With onlyIfOurs false it uncordons any
// cordon, as kubectl uncordon does, and still clears the annotation. It
// reports whether it uncordoned.
func Uncordon(ctx context.Context, c kubernetes.Interface, node string, onlyIfOurs bool) (bool, error) {
	for attempt := 0; ; attempt++ {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("uncordon %s: %w", node, err)
		}
		ours := Owner(n) != nil
		if onlyIfOurs && !ours {
			return false, nil
		}
		if !n.Spec.Unschedulable && !ours {
			return false, nil
		}
		meta := map[string]any{"resourceVersion": n.ResourceVersion}
		if ours {
			meta["annotations"] = map[string]any{CordonAnnotation: nil}
		}
		patch, _ := json.Marshal(map[string]any{"metadata": meta, "spec": map[string]any{"unschedulable": false}})
		_, err = c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) && attempt < 3 {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("uncordon %s: %w", node, err)
		}
		return n.Spec.Unschedulable, nil
	}
}
