// Package draintest is a fake API server for drain unit tests: a fake
// clientset whose evictions act like a kubelet (the pod goes a moment
// later) and like a PodDisruptionBudget (429 for protected pods), and
// which records every eviction.
package draintest

import (
	"errors"
	"sync"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

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
}

// New returns a Cluster holding objs.
func New(objs ...runtime.Object) *Cluster {
	c := &Cluster{Clientset: fake.NewClientset(objs...), protected: map[string]bool{}, stuck: map[string]bool{},
		evictions: map[string]int{}}
	c.PrependReactor("create", "pods", c.evict)
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
	if prot {
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
			time.Sleep(10 * time.Millisecond)
			_ = c.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.Namespace, ev.Name)
		}()
	}
	return true, nil, nil
}

// Protect makes evictions of these pods fail with PDB's 429.
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

// Evictions is how many evictions were requested in all.
func (c *Cluster) Evictions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
