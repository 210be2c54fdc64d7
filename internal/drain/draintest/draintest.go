// Package draintest is a fake API server for drain unit tests: a fake
// clientset whose evictions act like a kubelet (the pod goes a moment
// later) and like a PodDisruptionBudget (429 for protected pods), and
// which records every eviction.
//
// Like a real API server, the fake records managedFields for every
// create, update and patch with the FieldManager given (fake.NewClientset
// does that itself), which drain.Owner reads. KubectlCordon changes a
// Node as an admin's kubectl cordon or uncordon would.
package draintest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// These are drain.FieldManager and drain.CordonAnnotation (draintest cannot
// import drain: drain's own tests use draintest); drain's tests check that
// they agree.
const (
	GnshFieldManager = "gnsh"
	CordonAnnotation = "gnsh.io/cordoned"
)

// KubectlFieldManager is the field manager of kubectl cordon and uncordon.
const KubectlFieldManager = "kubectl-cordon"

// PDB names the PodDisruptionBudget that refuses protected pods.
const PDB = "db-pdb"

// Cluster is the fake. Evictions must carry a UID precondition.
type Cluster struct {
	*fake.Clientset
	mu        sync.Mutex
	protected map[string]bool
	stuck     map[string]bool
	evictions map[string]int
	total     int
	// podWatch is closed when the first watch of pods opens: the fake's
	// watches start from now, not from a resourceVersion as a real API
	// server's do, so a pod removed before the drain's watch opened would
	// never be seen to go.
	podWatch     chan struct{}
	podWatchOnce sync.Once
}

// New returns a Cluster holding objs.
//
// A Node given unschedulable, with gnsh's annotation and without
// managedFields, is taken as cordoned by gnsh: it gets the managedFields
// the API server records for drain.Cordon's patch (gnsh manages
// spec.unschedulable and the annotation). To seed anyone else's cordon
// with a leftover annotation, give the Node managedFields of its own, or
// seed it and then call KubectlCordon.
func New(objs ...runtime.Object) *Cluster {
	objs = append([]runtime.Object(nil), objs...) // the caller's slice stays as it was
	for i, o := range objs {
		if n, ok := o.(*corev1.Node); ok && n.Spec.Unschedulable && n.ManagedFields == nil {
			if _, ok := n.Annotations[CordonAnnotation]; ok {
				n = n.DeepCopy()
				n.ManagedFields = []metav1.ManagedFieldsEntry{GnshCordonFields()}
				objs[i] = n
			}
		}
	}
	c := &Cluster{Clientset: fake.NewClientset(objs...), protected: map[string]bool{}, stuck: map[string]bool{},
		evictions: map[string]int{}, podWatch: make(chan struct{})}
	c.PrependReactor("create", "pods", c.evict)
	c.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		c.podWatchOnce.Do(func() { close(c.podWatch) })
		return false, nil, nil // the fake's own watch, registered as this returns
	})
	// The fake tracker does not fill in generateName: accept Events as sent.
	c.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, a.(k8stesting.CreateAction).GetObject(), nil
	})
	return c
}

func (c *Cluster) evict(a k8stesting.Action) (bool, runtime.Object, error) {
	if a.GetSubresource() != "eviction" {
		return false, nil, nil
	}
	ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
	c.mu.Lock()
	c.evictions[ev.Name]++
	c.total++
	prot, stuck := c.protected[ev.Name], c.stuck[ev.Name]
	c.mu.Unlock()
	if prot && !c.terminal(ev.Namespace, ev.Name) {
		err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause,
			Message: "The disruption budget " + PDB + " needs 3 healthy pods and has 3 currently"}}
		return true, nil, err
	}
	if ev.DeleteOptions == nil || ev.DeleteOptions.Preconditions == nil || ev.DeleteOptions.Preconditions.UID == nil {
		return true, nil, errors.New("eviction without a UID precondition")
	}
	if !stuck {
		go func() { // the kubelet removes the pod a little later
			select {
			case <-c.podWatch:
			case <-time.After(5 * time.Second): // a test that never watches
			}
			time.Sleep(10 * time.Millisecond)
			_ = c.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.Namespace, ev.Name)
		}()
	}
	return true, nil, nil
}

// terminal is whether the pod is in a terminal phase: as the API server
// does (canIgnorePDB), the budget does not refuse such a pod's eviction.
func (c *Cluster) terminal(ns, name string) bool {
	o, err := c.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ns, name)
	if err != nil {
		return false
	}
	p, ok := o.(*corev1.Pod)
	return ok && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)
}

// StopByKubelet writes what kubelet writes on a pod it stops on a node
// shutdown: phase Failed, Ready false, and the DisruptionTarget condition
// with reason TerminationByKubelet. It waits for the first watch of pods
// to open, so that the watch sees the change.
func (c *Cluster) StopByKubelet(ctx context.Context, ns, name string) error {
	<-c.podWatch // as for evictions: the fake's watches start from now
	time.Sleep(10 * time.Millisecond)
	p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	p.Status.Phase = corev1.PodFailed
	p.Status.Conditions = append(p.Status.Conditions,
		corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse},
		corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet",
			Message: "Pod was terminated in response to imminent node shutdown."})
	_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// Protect makes evictions of these pods fail with PDB's 429, while they
// are not in a terminal phase.
func (c *Cluster) Protect(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		c.protected[n] = true
	}
}

// Stick makes evictions of these pods succeed without the pod ever going.
func (c *Cluster) Stick(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		c.stuck[n] = true
	}
}

// Evicted is how many evictions of the pod called name were requested.
func (c *Cluster) Evicted(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evictions[name]
}

// Requests is how many verb requests on resource (e.g. "get", "nodes")
// were made.
func (c *Cluster) Requests(verb, resource string) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// Evictions is how many evictions were requested in all.
func (c *Cluster) Evictions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// GnshCordonFields is the managedFields entry a real API server records
// for drain.Cordon's patch: manager gnsh, owning spec.unschedulable and the
// annotation.
func GnshCordonFields() metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{
		Manager: GnshFieldManager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: time.Now().UTC().Truncate(time.Second)}, FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{".":{},"f:` + CordonAnnotation +
			`":{}}},"f:spec":{"f:unschedulable":{}}}`)},
	}
}

// KubectlCordon does to node what an admin's "kubectl cordon" (unschedulable
// true) or "kubectl uncordon" (false) does: nothing if it already is so,
// else a strategic-merge patch of spec.unschedulable alone, as field
// manager "kubectl-cordon", which leaves any gnsh annotation in place. It
// works on any client: this fake or a real API server.
func KubectlCordon(ctx context.Context, c kubernetes.Interface, node string, unschedulable bool) error {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Spec.Unschedulable == unschedulable {
		return nil
	}
	_, err = c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType,
		fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, unschedulable), metav1.PatchOptions{FieldManager: KubectlFieldManager})
	return err
}

// NodeLease is the Lease kube-node-lease/node that a kubelet renewing every
// so often last renewed at renewed, with leaseDurationSeconds duration.
func NodeLease(node string, renewed time.Time, duration time.Duration) *coordinationv1.Lease {
	secs := int32(duration / time.Second)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs,
			RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}
