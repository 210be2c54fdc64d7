package agent

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/kube"
)

// LocatorConnect is an Uncordoner.Connect that finds the kubeconfig and
// the node's name as the drain does (loc: --kubeconfig, the config file,
// $KUBECONFIG, /etc/gnsh/kubeconfig, /etc/kubernetes/kubelet.conf; --node,
// the config file, the kubelet certificate's CN, the host name). Each
// request is bounded by loc.Timeout; resolving the name by 2 × that.
// It looks for the kubeconfig afresh at every call.
func LocatorConnect(loc kube.Locator) func(ctx context.Context) (kubernetes.Interface, string, error) {
	return func(ctx context.Context) (kubernetes.Interface, string, error) {
		path, err := loc.FindKubeconfig()
		if err != nil {
			return nil, "", err
		}
		rc, err := loc.RESTConfig(path)
		if err != nil {
			return nil, "", err
		}
		c, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, "", fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		timeout := loc.Timeout
		if timeout <= 0 {
			timeout = kube.DefaultConnectTimeout
		}
		ctx, cancel := context.WithTimeout(ctx, 2*timeout)
		defer cancel()
		node, err := loc.ResolveNodeName(ctx, rc, c)
		if err != nil {
			return nil, "", err
		}
		return c, node, nil
	}
}
