package agent

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/kube"
)

// LocatorConnect is an Uncordoner.Connect that finds the drain's
// kubeconfig and the node's name as the drain does (loc: --kubeconfig,
// the config file, $KUBECONFIG, the kubelet's kubeconfig of kubeadm, k3s
// or rke2 (kube.KubeletKubeconfigs), then /etc/gnsh/kubeconfig as a fallback; --node, the config file, the
// kubelet certificate's CN, the host name). Each request is bounded by
// loc.Timeout; resolving the name by 2 × that. It looks for the
// kubeconfig afresh at every call.
func LocatorConnect(loc kube.Locator) func(ctx context.Context) (kubernetes.Interface, string, error) {
	return func(ctx context.Context) (kubernetes.Interface, string, error) {
		c, _, node, err := connect(ctx, loc, false)
		return c, node, err
	}
}

// LocatorConnectGate is LocatorConnect with the reboot-slot gate's client
// too (kube.Locator.GateKubeconfig: gnsh's own /etc/gnsh/kubeconfig if it
// is there, else the drain's client): the drain's client for the Node
// and its Events, the gate's for the slots.
func LocatorConnectGate(loc kube.Locator) func(ctx context.Context) (kubernetes.Interface, kubernetes.Interface, string, error) {
	return func(ctx context.Context) (kubernetes.Interface, kubernetes.Interface, string, error) {
		return connect(ctx, loc, true)
	}
}

func connect(ctx context.Context, loc kube.Locator, gate bool) (kubernetes.Interface, kubernetes.Interface, string, error) {
	path, err := loc.FindKubeconfig()
	if err != nil {
		return nil, nil, "", err
	}
	rc, err := loc.RESTConfig(path)
	if err != nil {
		return nil, nil, "", err
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	g := kubernetes.Interface(c)
	if gate {
		gp, err := loc.GateKubeconfig(path)
		if err != nil {
			return nil, nil, "", err
		}
		if gp != path {
			grc, err := loc.RESTConfig(gp)
			if err != nil {
				return nil, nil, "", err
			}
			if g, err = kubernetes.NewForConfig(grc); err != nil {
				return nil, nil, "", fmt.Errorf("kubeconfig %s: %w", gp, err)
			}
		}
	}
	timeout := loc.Timeout
	if timeout <= 0 {
		timeout = kube.DefaultConnectTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, 2*timeout)
	defer cancel()
	node, err := loc.ResolveNodeName(ctx, rc, c)
	if err != nil {
		return nil, nil, "", err
	}
	return c, g, node, nil
}
