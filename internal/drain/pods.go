package drain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
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
	// Refused: a pod kubectl drain refuses (emptyDir, no controller),
	// with Options.Strict: not evicted, and the node is not drained
	// while it is there.
	Refused
)

var verdictNames = [...]string{"evict", "terminating", "mirror pod", "DaemonSet pod", "finished", "refused (strictDrain)"}

func (v Verdict) String() string { return verdictNames[v] }

// Pod is a pod on the node and what the drain does with it.
type Pod struct {
	Pod     corev1.Pod
	Verdict Verdict
	// Warning says what evicting it costs (emptyDir data, no controller).
	Warning string
	// Kubectl is why kubectl drain refuses the pod ("uses emptyDir",
	// "declares no controller"; "" if it does not): what Options.Strict
	// refuses.
	Kubectl string
}

// Name is namespace/name.
func (p *Pod) Name() string { return p.Pod.Namespace + "/" + p.Pod.Name }

// listPageSize bounds one LIST response, as kubectl's --chunk-size.
const listPageSize = 500

// ListNodePods lists the pods bound to node (fieldSelector
// spec.nodeName=NODE, the only pod list the Node authorizer allows a
// kubelet) and returns them with the resourceVersion to watch from.
func ListNodePods(ctx context.Context, c kubernetes.Interface, node string) ([]corev1.Pod, string, error) {
	return listPods(ctx, c, node, false)
}

// listPods is ListNodePods. With once, and a real client, client-go's own
// retries are off: it otherwise retries an answer carrying Retry-After
// (429, 5xx) up to ten times, sleeping as told, and the drain would see
// an overloaded server's failures only after all of them, on no clock of
// its own.
func listPods(ctx context.Context, c kubernetes.Interface, node string, once bool) ([]corev1.Pod, string, error) {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(), Limit: listPageSize}
	rc, _ := c.CoreV1().RESTClient().(*rest.RESTClient)
	var pods []corev1.Pod
	for {
		var l *corev1.PodList
		var err error
		if once && rc != nil {
			// As the typed client's List, plus MaxRetries(0).
			l = &corev1.PodList{}
			err = rc.Get().Resource("pods").VersionedParams(&opts, scheme.ParameterCodec).MaxRetries(0).Do(ctx).Into(l)
		} else {
			l, err = c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		}
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
