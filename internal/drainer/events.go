package drainer

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Event reasons gnsh posts on its Node.
const (
	ReasonDrainStarted  = "GnshDrainStarted"
	ReasonDrainFinished = "GnshDrainFinished"
	ReasonDrainFailed   = "GnshDrainFailed"
	ReasonHandOff       = "GnshShutdown"
	ReasonUncordoned    = "GnshUncordoned"
	// ReasonScheduleCancelled: the node agent cancelled a scheduled
	// shutdown for which no reboot slot came in time.
	ReasonScheduleCancelled = "GnshScheduleCancelled"
	// ReasonScheduleUncancelled: one it could not cancel before its time.
	ReasonScheduleUncancelled = "GnshScheduleNotCancelled"
	// ReasonSlotNotChecked: a shutdown went on without a reboot slot
	// because the gate was unavailable (slots.gate: optional): the
	// warning line's text, on the Node. Not for the kubelet's own
	// credentials, which cannot use the gate by design.
	ReasonSlotNotChecked = "GnshSlotNotChecked"
	// ReasonRefused: a shutdown through the commands refused before its
	// drain began (no reboot slot in time, the gate required and down, the
	// drain lock held): the drain's refusals post GnshDrainFailed.
	ReasonRefused = "GnshShutdownRefused"
)

// eventNamespace is where Node events live (kubectl describe node reads
// them from there).
const eventNamespace = metav1.NamespaceDefault

// PostEvent records a core/v1 Event on node, which the kubelet's
// credentials may create (create only: gnsh never patches an Event). It is
// bounded by timeout; callers treat failures as a debug line only.
func PostEvent(ctx context.Context, c kubernetes.Interface, node, typ, reason, msg string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: node + ".gnsh.", Namespace: eventNamespace},
		// kubelet refers to its Node with the name as UID; kubectl
		// describe node matches on that.
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID(node)},
		Reason:         reason,
		Message:        msg,
		Type:           typ,
		Source:         corev1.EventSource{Component: "gnsh", Host: node},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	_, err := c.CoreV1().Events(eventNamespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}
