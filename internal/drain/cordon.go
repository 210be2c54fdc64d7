// Package drain cordons a node and evicts its pods through the Eviction API
// before gnsh hands a shutdown to logind. It needs nothing beyond what the
// kubelet's own credentials allow under the Node authorizer and
// NodeRestriction: it reads and patches only its own Node, lists pods only
// with spec.nodeName=NODE, never GETs DaemonSets (ownerReferences decide)
// and never GETs a pod after deleting it (that answers 403, not 404); it
// GETs its node's Lease, which a kubelet may.
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

// CordonAnnotation records who had gnsh cordon the node, as a JSON
// Ownership. It describes gnsh's cordon only while that cordon stands:
// see Owner.
const CordonAnnotation = "gnsh.io/cordoned"

// FieldManager is the field manager of every write gnsh makes to a Node.
// The API server then records in the Node's managedFields whether
// spec.unschedulable is still the value gnsh set: anyone who changes it
// afterwards (kubectl uncordon and cordon use "kubectl-cordon") becomes its
// manager. gnsh's client also sends the user agent "gnsh", which the API
// server would take as manager name anyway.
const FieldManager = "gnsh"

// Check is asked about a Node as read, before every write gnsh makes to
// it (Cordon, Adopt, GiveBack, Uncordon, MarkDrained, each after every
// read): an error refuses the write and is returned as it is. gnsh's check
// is that the Node is this machine (kube.HostID.Check): a wrong node name
// (a copied config, the host name under another identity) must never make
// gnsh cordon, uncordon or annotate another machine's Node. nil checks
// nothing (tests).
type Check func(*corev1.Node) error

func (c Check) ok(n *corev1.Node) error {
	if c == nil {
		return nil
	}
	return c(n)
}

// conflictRetries is how often Cordon and Uncordon read the Node again
// after their resourceVersion-guarded patch met a newer Node.
const conflictRetries = 3

// ShutdownActions are the Ownership actions of a cordon made before a
// shutdown: only those are lifted after the boot (by the node agent); an
// admin's cordon and a gnsh drain's stay.
var ShutdownActions = []string{"reboot", "poweroff", "halt", "kexec"}

// Ownership records who cordoned the node, for what, and in which boot.
type Ownership struct {
	Action string    `json:"action"`           // reboot, poweroff, halt, kexec
	User   string    `json:"user"`             // SUDO_USER, LOGNAME or the uid
	TTY    string    `json:"tty,omitempty"`    // the terminal, if any
	Time   time.Time `json:"time"`             // when
	BootID string    `json:"bootID,omitempty"` // /proc/sys/kernel/random/boot_id
	// When, for scheduled shutdowns, is the scheduled time.
	When *time.Time `json:"when,omitempty"`
	// Drained is when a drain under this cordon finished (the node's
	// pods gone), written by MarkDrained; nil while none has. A cordon
	// whose drain was cut short (a signal, an API failure, the budget
	// running out) has none, so a later drain for the same request runs
	// again instead of taking the node for drained.
	Drained *time.Time `json:"drained,omitempty"`
}

// Owner returns gnsh's record of n's cordon while gnsh's own cordon
// stands, else nil. That is: n is unschedulable, carries CordonAnnotation
// holding a readable Ownership, and its managedFields show FieldManager
// as the manager of spec.unschedulable, i.e. nobody has set it since gnsh
// did. The annotation alone does not do: kubectl uncordon leaves it in
// place, so after an admin's uncordon and later cordon it would claim the
// admin's cordon. An unreadable annotation is not gnsh's either.
func Owner(n *corev1.Node) *Ownership {
	if n == nil || !n.Spec.Unschedulable {
		return nil
	}
	v, ok := n.Annotations[CordonAnnotation]
	if !ok {
		return nil
	}
	var o Ownership
	if json.Unmarshal([]byte(v), &o) != nil {
		return nil
	}
	if !managesUnschedulable(n.ManagedFields, FieldManager) {
		return nil
	}
	return &o
}

// managesUnschedulable reports whether manager owns spec.unschedulable of
// the Node itself (not a subresource), per its managedFields.
func managesUnschedulable(entries []metav1.ManagedFieldsEntry, manager string) bool {
	for _, e := range entries {
		if e.Manager != manager || e.Subresource != "" || e.FieldsType != "FieldsV1" || e.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if json.Unmarshal(e.FieldsV1.Raw, &fields) != nil {
			continue
		}
		if _, ok := fields.Spec["f:unschedulable"]; ok {
			return true
		}
	}
	return false
}

// Cordon marks n unschedulable and records gnsh's ownership, in one patch,
// if n is schedulable; n is the Node as the caller has just read it (and
// checked). It reports whether gnsh made the cordon. The patch carries n's
// resourceVersion, so a cordon someone else made in between is never
// overwritten: on a conflict Cordon reads the Node again and starts over
// (up to 3 times). check is asked about every Node read, n included.
func Cordon(ctx context.Context, c kubernetes.Interface, n *corev1.Node, own Ownership, check Check) (made bool, err error) {
	val, err := json.Marshal(own)
	if err != nil {
		return false, err
	}
	node := n.Name
	for attempt := 0; ; attempt++ {
		if err := check.ok(n); err != nil {
			return false, err
		}
		if n.Spec.Unschedulable {
			return false, nil
		}
		patch, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": map[string]string{CordonAnnotation: string(val)}},
			"spec":     map[string]any{"unschedulable": true},
		})
		err = patchNode(ctx, c, node, patch)
		if apierrors.IsConflict(err) && attempt < conflictRetries {
			if n, err = c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
				return false, fmt.Errorf("cordon %s: %w", node, err)
			}
			continue
		}
		if err != nil {
			return false, fmt.Errorf("cordon %s: %w", node, err)
		}
		return true, nil
	}
}

// Request names the request in messages: "reboot", "poweroff", …, and
// "gnsh drain" for a maintenance drain.
func (o Ownership) Request() string {
	if o.Action == "drain" {
		return "gnsh drain"
	}
	return o.Action
}

// Requester is who asked, for messages: "alice on pts/0", or "alice".
func (o Ownership) Requester() string {
	if o.TTY != "" {
		return o.User + " on " + o.TTY
	}
	return o.User
}

// Adopt takes over gnsh's own cordon left standing from an earlier boot
// (its record names another boot ID than own's): the record is rewritten
// to own, so that the cordon now stands for this request and the node
// agent does not lift it after this boot as a leftover of the last
// shutdown (a `gnsh drain` made right after a reboot would otherwise lose
// its cordon to the agent). Any other cordon, and a record of this boot,
// is left as it is. The patch carries n's resourceVersion; a conflict
// (the Node changed meanwhile) is returned, not retried. It reports whether
// it rewrote the record. check is asked about n first.
func Adopt(ctx context.Context, c kubernetes.Interface, n *corev1.Node, own Ownership, check Check) (bool, error) {
	if err := check.ok(n); err != nil {
		return false, err
	}
	o := Owner(n)
	if o == nil || own.BootID == "" || o.BootID == own.BootID {
		return false, nil
	}
	val, err := json.Marshal(own)
	if err != nil {
		return false, err
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": map[string]string{CordonAnnotation: string(val)}},
	})
	if err := patchNode(ctx, c, n.Name, patch); err != nil {
		return false, fmt.Errorf("adopt the cordon of %s: %w", n.Name, err)
	}
	return true, nil
}

// GiveBack puts back the record a drain took over with Adopt (prev, the
// annotation's exact text before), if the record standing is still the
// one only accepts: a drain over an earlier boot's cordon that ends
// undone (the shutdown cancelled, the hand-off refused) leaves that
// cordon to the node agent's uncordon after boot, as before it. Like
// Uncordon, every patch carries the resourceVersion read; on a conflict
// it reads the Node again (up to 3 times). It reports whether it did.
func GiveBack(ctx context.Context, c kubernetes.Interface, node string, only Only, prev string, check Check) (bool, error) {
	return patchAsRead(ctx, c, node, "give back the cordon of "+node, check, func(n *corev1.Node) (map[string]any, bool) {
		if o := Owner(n); o == nil || !only(o) {
			return nil, false
		}
		return map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": map[string]string{CordonAnnotation: prev}},
		}, true
	})
}

// MarkDrained records in gnsh's standing cordon record that a drain under
// it finished at at (Ownership.Drained), if the record is one only
// accepts; the rest of the record stays as it is. Like Uncordon, every
// patch carries the resourceVersion read (up to 3 retries on a conflict),
// and check is asked about every Node read. It reports whether it did.
func MarkDrained(ctx context.Context, c kubernetes.Interface, node string, only Only, at time.Time, check Check) (bool, error) {
	return patchAsRead(ctx, c, node, "record the drain of "+node, check, func(n *corev1.Node) (map[string]any, bool) {
		o := Owner(n)
		if o == nil || !only(o) {
			return nil, false
		}
		at := at.UTC()
		o.Drained = &at
		val, err := json.Marshal(o)
		if err != nil {
			return nil, false
		}
		return map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": map[string]string{CordonAnnotation: string(val)}},
		}, true
	})
}

// Only chooses which of gnsh's cordons Uncordon undoes, from their
// Ownership.
type Only func(*Ownership) bool

// Ours undoes any cordon of gnsh's own that still stands.
var Ours Only = func(*Ownership) bool { return true }

// Uncordon makes node schedulable again and reports whether it did.
//
// With only nil it undoes any cordon, as kubectl uncordon does, and
// clears gnsh's annotation. Otherwise it undoes only gnsh's own standing
// cordon (Owner) that only accepts, clearing the annotation in the same
// patch; anyone else's cordon is left as it is.
//
// A schedulable node that still carries gnsh's annotation (someone
// uncordoned it) only loses the annotation, and Uncordon reports false.
// Every patch carries the resourceVersion read, so a change made in
// between is never overwritten: on a conflict Uncordon reads the Node
// again and starts over (up to 3 times). check is asked about every Node
// read before its patch.
func Uncordon(ctx context.Context, c kubernetes.Interface, node string, only Only, check Check) (uncordoned bool, err error) {
	return patchAsRead(ctx, c, node, "uncordon "+node, check, func(n *corev1.Node) (map[string]any, bool) {
		_, annotated := n.Annotations[CordonAnnotation]
		meta := map[string]any{"resourceVersion": n.ResourceVersion}
		if annotated {
			meta["annotations"] = map[string]any{CordonAnnotation: nil}
		}
		patch := map[string]any{"metadata": meta}
		switch o := Owner(n); {
		case !n.Spec.Unschedulable && !annotated:
			return nil, false
		case !n.Spec.Unschedulable:
			// Only the stale annotation goes.
		case only != nil && (o == nil || !only(o)):
			return nil, false
		default:
			patch["spec"] = map[string]any{"unschedulable": false}
		}
		return patch, n.Spec.Unschedulable
	})
}

// patchAsRead reads node and sends the patch decide makes of it (nil: no
// patch, and patchAsRead reports false), carrying the resourceVersion
// read, so that a change made in between is never overwritten: on a
// conflict it reads the Node again and starts over (up to 3 times). It
// reports what decide reported for the patch sent; errors start with what,
// but for check's, returned as they are.
func patchAsRead(ctx context.Context, c kubernetes.Interface, node, what string, check Check, decide func(*corev1.Node) (map[string]any, bool)) (bool, error) {
	for attempt := 0; ; attempt++ {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if err := check.ok(n); err != nil {
			return false, err
		}
		patch, result := decide(n)
		if patch == nil {
			return false, nil
		}
		body, _ := json.Marshal(patch)
		err = patchNode(ctx, c, node, body)
		if apierrors.IsConflict(err) && attempt < conflictRetries {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return result, nil
	}
}

// patchNode sends a strategic-merge patch of node as FieldManager.
func patchNode(ctx context.Context, c kubernetes.Interface, node string, patch []byte) error {
	_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	return err
}
