// Package kwok holds the Kubernetes objects and waits shared by the tests
// that run against the test control plane of test/internal/controlplane
// started with kwok: kwok plays the kubelet of every Node annotated
// kwok.x-k8s.io/node=fake, taking its pods through the stages of its
// stage configs (created, Ready, deleted).
//
// No ReplicaSet or DaemonSet controller runs in that control plane: the
// workload objects made here only give pods a real owner (and the
// disruption controller a scale); the tests create the pods themselves,
// bound to their Node.
package kwok

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// poll is how often the waits below ask the API server again.
const poll = 100 * time.Millisecond

// Node returns a Node for kwok to be the kubelet of: annotated
// kwok.x-k8s.io/node=fake, labelled kubernetes.io/hostname=name, with room
// for pods pods (capacity and allocatable). Callers may add labels and
// resources before creating it.
func Node(name string, pods int64) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI)},
			Allocatable: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI)},
		},
	}
}

// NodeReady reports whether n has the condition Ready=True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitNodeReady waits until kwok has made the Node name Ready, and returns
// it as last read. It fails t at the first error from the API server, or
// when ctx ends first.
func WaitNodeReady(t testing.TB, ctx context.Context, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	for {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if NodeReady(n) {
			return n
		}
		if ctx.Err() != nil {
			t.Fatalf("kwok did not make node %s Ready", name)
		}
		time.Sleep(poll)
	}
}

// PodAnnotations returns new annotations for a pod that make kwok create
// it and make it Ready at once, without its default random 1-5 s delays,
// and finalise its deletion (the final delete) at a random moment between
// deleteDelay and the end of its grace period (the deletionTimestamp), or
// at the end of the grace period when deleteDelay is as long or longer.
func PodAnnotations(deleteDelay time.Duration) map[string]string {
	return map[string]string{
		"pod-create.stage.kwok.x-k8s.io/delay":        "0s",
		"pod-create.stage.kwok.x-k8s.io/jitter-delay": "0s",
		"pod-ready.stage.kwok.x-k8s.io/delay":         "0s",
		"pod-ready.stage.kwok.x-k8s.io/jitter-delay":  "0s",
		"pod-delete.stage.kwok.x-k8s.io/delay":        deleteDelay.String(),
	}
}

// RunningReady reports whether p is Running and Ready and not being
// deleted: a pod that a PodDisruptionBudget counts as healthy (a Pending
// pod bypasses PodDisruptionBudgets).
func RunningReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodePods lists the pods bound to node, in every namespace.
func NodePods(ctx context.Context, c kubernetes.Interface, node string) ([]corev1.Pod, error) {
	l, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// ReplicaSet returns a ReplicaSet ns/name of replicas pods with the pod
// template spec, labelled and selecting app=name. Nothing creates its pods
// (see the package comment).
func ReplicaSet(ns, name string, replicas int32, spec corev1.PodSpec) *appsv1.ReplicaSet {
	labels := map[string]string{"app": name}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// DaemonSet returns a DaemonSet ns/name with the pod template spec,
// selecting app=name. Nothing creates its pods (see the package comment).
func DaemonSet(ns, name string, spec corev1.PodSpec) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// WaitPDB waits until the disruption controller has processed the current
// generation of the PodDisruptionBudget ns/name (status.observedGeneration)
// and ok holds for the status it worked out (healthy pods, disruptions
// allowed). It fails t at the first error from the API server, or when ctx
// ends first.
func WaitPDB(t testing.TB, ctx context.Context, c kubernetes.Interface, ns, name string, ok func(policyv1.PodDisruptionBudgetStatus) bool) {
	t.Helper()
	for {
		p, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.ObservedGeneration == p.Generation && ok(p.Status) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("PDB %s/%s not processed: %+v", ns, name, p.Status)
		}
		time.Sleep(poll)
	}
}
