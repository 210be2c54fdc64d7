package drain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// MirrorAnnotation marks the API copy of a static pod.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// Verdict is what the drain does with a pod.
type Verdict int

// Verdicts.
const (
	Evict         Verdict = iota // evict through the Eviction API
	Terminating                  // already being deleted: wait for it
	SkipMirror                   // static pod: the kubelet owns it
	SkipDaemonSet                // DaemonSet pod: would be recreated on this node
	SkipFinished                 // Succeeded or Failed: nothing runs
)

var verdictNames = [...]string{"evict", "terminating", "mirror pod", "DaemonSet pod", "finished"}

func (v Verdict) String() string { return verdictNames[v] }

// Pod is a pod on the node and what the drain does with it.
type Pod struct {
	Pod     corev1.Pod
	Verdict Verdict
	// Warning says what evicting it costs (emptyDir data, no controller).
	Warning string
}

// Name is namespace/name.
func (p *Pod) Name() string { return p.Pod.Namespace + "/" + p.Pod.Name }

// Classify decides a pod's fate from the pod alone: DaemonSet ownership is
// read from the controller ownerReference, never by GETting the DaemonSet
// (the kubelet's credentials may not).
func Classify(pod corev1.Pod) Pod {
	p := Pod{Pod: pod, Verdict: Evict}
	switch {
	case pod.Annotations[MirrorAnnotation] != "":
		p.Verdict = SkipMirror
	case pod.DeletionTimestamp != nil:
		p.Verdict = Terminating
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		p.Verdict = SkipFinished
	default:
		ref := metav1.GetControllerOf(&pod)
		switch {
		case ref != nil && ref.Kind == "DaemonSet":
			p.Verdict = SkipDaemonSet
		case ref == nil:
			p.Warning = "declares no controller: it will not be recreated elsewhere"
		}
		if p.Verdict == Evict && hasEmptyDir(pod) {
			w := "uses emptyDir: its data is lost"
			if p.Warning != "" {
				w = p.Warning + "; " + w
			}
			p.Warning = w
		}
	}
	return p
}

func hasEmptyDir(pod corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil {
			return true
		}
	}
	return false
}

// listPageSize bounds one LIST response, as kubectl's --chunk-size.
const listPageSize = 500

// ListNodePods lists the pods bound to node (fieldSelector
// spec.nodeName=NODE, the only pod list the Node authorizer allows a
// kubelet) and returns them with the resourceVersion to watch from.
func ListNodePods(ctx context.Context, c kubernetes.Interface, node string) ([]corev1.Pod, string, error) {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(), Limit: listPageSize}
	var pods []corev1.Pod
	for {
		l, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, "", fmt.Errorf("list pods on %s: %w", node, err)
		}
		pods = append(pods, l.Items...)
		if l.Continue == "" {
			return pods, l.ResourceVersion, nil
		}
		opts.Continue = l.Continue
	}
}
