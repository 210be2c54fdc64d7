package drainer

// TEMPORARY adapters to internal/drain's new Cordon/Uncordon signatures
// (branch drain-hardening); replaced by direct calls when it is merged.

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/drain"
)

func cordonNode(ctx context.Context, c kubernetes.Interface, n *corev1.Node, own drain.Ownership) (bool, error) {
	return drain.Cordon(ctx, c, n.Name, own)
}

func uncordonNode(ctx context.Context, c kubernetes.Interface, node string, only drain.Only) (bool, error) {
	if only != nil {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if o := drain.Owner(n); o == nil || !only(o) {
			return false, nil
		}
	}
	return drain.Uncordon(ctx, c, node, only != nil)
}
