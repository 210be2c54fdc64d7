package drainer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/kube"
)

// session is a connection to the cluster with this node's name: two
// identities, each used only for its own work. c is the drain's (cordon,
// the cordon record, evictions, the wait for pods, the kubelet check,
// uncordon, the Node conditions, and every Event about this node, the
// gate's too): the kubelet's own credentials where the node has them,
// which the Node authorizer and NodeRestriction confine to this node.
// gate is the reboot-slot gate's (internal/slots), made only when the gate
// is on: gnsh's own /etc/gnsh/kubeconfig if it is there, else c (one
// kubeconfig for both). check (this machine's kube.HostID.Check) goes with
// every write to the Node.
type session struct {
	c    kubernetes.Interface
	gate kubernetes.Interface
	// gatePath is the gate's kubeconfig ("" when not known: tests).
	gatePath string
	// gateShared: the gate has no kubeconfig of its own and uses the
	// drain's (gatePath is the drain's).
	gateShared bool
	node       string
	check      drain.Check
}

// gateClient is the client the reboot-slot gate uses: its own, else the
// drain's.
func (s *session) gateClient() kubernetes.Interface {
	if s.gate != nil {
		return s.gate
	}
	return s.c
}

// fallbackLine is said once per process when the drain runs with gnsh's
// own kubeconfig because the node has no kubelet kubeconfig where
// kubeadm, k3s or rke2 keep it.
func fallbackLine(root string) string {
	return fmt.Sprintf("draining with gnsh's own %s, the reboot-slot gate's identity, because this node has no kubelet kubeconfig at %s: "+
		"set kubeconfig in %s to the kubelet's kubeconfig, which may drain this node and no other",
		filepath.Join(root, kube.GnshKubeconfig), kube.KubeletKubeconfigList(), config.Path)
}

// connect loads the drain's kubeconfig at path (found by the caller, else
// here) and resolves the node's name, each request bounded by apiTimeout;
// with the gate on, it also makes the gate's client (kube.Locator's
// GateKubeconfig). API-server warnings and the one line saying the drain
// falls back to gnsh's own kubeconfig go to out.
func (d *Drainer) connect(ctx context.Context, cfg config.Config, path string, out *progress) (*session, error) {
	if d.Connect != nil {
		c, node, err := d.Connect(ctx)
		if err != nil {
			return nil, err
		}
		s := &session{c: c, node: node, check: d.hostID().Check}
		if d.ConnectGate != nil && cfg.Slots.Gate != config.GateOff {
			if s.gate, err = d.ConnectGate(ctx); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	loc := d.locator(cfg)
	loc.Warn = out.sayf
	if path == "" {
		var err error
		if path, err = loc.FindKubeconfig(); err != nil {
			return nil, err
		}
	}
	if path == filepath.Join(d.KubeRoot, kube.GnshKubeconfig) && loc.Fallback() && d.saidFallback.CompareAndSwap(false, true) {
		out.printf("%s", fallbackLine(d.KubeRoot))
	}
	rc, err := loc.RESTConfig(path)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	s := &session{c: c, check: d.hostID().Check}
	if cfg.Slots.Gate != config.GateOff {
		gp, err := loc.GateKubeconfig(path)
		if err != nil {
			return nil, err
		}
		s.gatePath, s.gateShared = gp, gp == path
		if gp != path {
			grc, err := loc.RESTConfig(gp)
			if err != nil {
				return nil, err
			}
			if s.gate, err = kubernetes.NewForConfig(grc); err != nil {
				return nil, fmt.Errorf("kubeconfig %s: %w", gp, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.APITimeout.D())
	defer cancel()
	if s.node, err = loc.ResolveNodeName(ctx, rc, c); err != nil {
		return nil, err
	}
	return s, nil
}

// readNode reads this node's Node object.
func (s *session) readNode(ctx context.Context, timeout time.Duration) (*corev1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return s.c.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
}

// event posts an Event on the Node, bounded by timeout and by ctx's
// deadline but not cancelled with ctx: an interrupted drain still reports
// why.
func (s *session) event(ctx context.Context, timeout time.Duration, typ, reason, format string, args ...any) error {
	ectx := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ectx, cancel = context.WithDeadline(ectx, dl)
		defer cancel()
	}
	return PostEvent(ectx, s.c, s.node, typ, reason, fmt.Sprintf(format, args...), timeout)
}

// lock takes the drain lock for action on node, as this process and user,
// without waiting. The node agent's drainer (Agent) says so in the lock:
// a drain (isDrain) as HolderAgentDrain, anything else as HolderAgent;
// until is its bound (zero: none said).
func (d *Drainer) lock(action, node string, isDrain bool, until time.Time) (*Lock, error) {
	w := d.who()
	h := Holder{PID: os.Getpid(), Action: action, User: w.User, TTY: w.TTY, Node: node, Since: d.now(), Until: until}
	switch {
	case d.Agent && isDrain:
		h.Kind = HolderAgentDrain
	case d.Agent:
		h.Kind = HolderAgent
	}
	return Acquire(d.lockDir(), h)
}

// deadline is ctx's deadline, zero if it has none.
func deadline(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}
