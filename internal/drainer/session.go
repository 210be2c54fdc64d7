package drainer

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
)

// session is a connection to the cluster with this node's name. check
// (this machine's kube.HostID.Check) goes with every write to the Node.
type session struct {
	c     kubernetes.Interface
	node  string
	check drain.Check
}

// connect loads the kubeconfig at path (found by the caller) and resolves
// the node's name, each request bounded by apiTimeout. API-server warnings
// go to warn.
func (d *Drainer) connect(ctx context.Context, cfg config.Config, path string, warn func(string)) (*session, error) {
	if d.Connect != nil {
		c, node, err := d.Connect(ctx)
		if err != nil {
			return nil, err
		}
		return &session{c: c, node: node, check: d.hostID().Check}, nil
	}
	loc := d.locator(cfg)
	loc.Warn = warn
	if path == "" {
		var err error
		if path, err = loc.FindKubeconfig(); err != nil {
			return nil, err
		}
	}
	rc, err := loc.RESTConfig(path)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.APITimeout.D())
	defer cancel()
	node, err := loc.ResolveNodeName(ctx, rc, c)
	if err != nil {
		return nil, err
	}
	return &session{c: c, node: node, check: d.hostID().Check}, nil
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
