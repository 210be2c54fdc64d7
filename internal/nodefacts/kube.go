package nodefacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/slots"
)

// KubeOptions is how the kubeconfig and the Node are found.
type KubeOptions struct {
	Kubeconfig string // --kubeconfig; overrides the config file
	Node       string // --node; overrides the config file
	// ConfigPath is gnsh's config file: $GNSH_CONFIG, else config.Path
	// below Root.
	ConfigPath string
	Hostname   func() (string, error)
	HostID     *kube.HostID // this machine's IDs; kube.ReadHostID(Root) if nil
	// Connect, if set, replaces loading the kubeconfig (tests).
	Connect func(path string, timeout time.Duration) (kubernetes.Interface, *rest.Config, error)
	// Reviewer, if set, replaces asking the client (tests).
	Reviewer Reviewer
}

// configPath is gnsh's config file: KubeOptions.ConfigPath, else
// $GNSH_CONFIG, else config.Path below Root.
func (s *Sources) configPath() string {
	p := s.Kube.ConfigPath
	if p == "" {
		p = s.getenv("GNSH_CONFIG")
	}
	if p == "" {
		p = s.path(config.Path)
	}
	return p
}

func (s *Sources) config() (config.Config, string, error) {
	p := s.configPath()
	cfg, err := config.Load(p)
	if err != nil {
		return config.Default(), p, err
	}
	return cfg, p, nil
}

// gatherKube finds the kubeconfig and reads the Node; with s.Access it
// also reviews gnsh's requests into af (nil: not asked).
func gatherKube(ctx context.Context, s *Sources, kf *KubeconfigFacts, nf *NodeFacts, df *DrainFacts, sf *SlotsFacts, af *AccessFacts) {
	cfg, cfgPath, err := s.config()
	kf.Config, kf.ConfigError = cfgPath, errString(err)
	// The config file as every shutdown reads it: the drainer's own check
	// (gnsh config check), the kubeconfig it names included.
	cd := &drainer.Drainer{Stderr: io.Discard, ConfigPath: cfgPath, Getenv: s.getenv, KubeRoot: s.Root}
	var cerr error
	kf.ConfigFound, cerr = cd.CheckConfig(false)
	if ce := (*config.Error)(nil); errors.As(cerr, &ce) {
		kf.ConfigProblems = ce.Lines()
	}
	if df != nil {
		*df = DrainFacts{Enabled: cfg.Drain, Timeout: cfg.DrainTimeout.D().String(), TimeoutSec: cfg.DrainTimeout.D().Seconds()}
	}
	*sf = SlotsFacts{Gate: cfg.Slots.Gate, Lease: cfg.Slots.Namespace + "/" + cfg.Slots.Lease, MaxUnavailable: cfg.Slots.MaxUnavailable, Pools: []string{}, Holders: []string{}}
	for _, p := range cfg.Slots.Pools {
		sf.Pools = append(sf.Pools, fmt.Sprintf("%s (%s): %d", p.Name, p.Selector, p.MaxUnavailable))
	}
	gate := cfg.Slots.Gate != config.GateOff
	// noAccess says why neither gnsh's requests nor the gate could be
	// checked (cause: SlotsFacts.Cause).
	noAccess := func(why, cause, gateWhy string) {
		if af != nil {
			af.Error = why
		}
		if gate {
			sf.Cause, sf.Error = cause, gateWhy
		}
	}
	loc := kube.Locator{Kubeconfig: s.Kube.Kubeconfig, NodeName: s.Kube.Node, Getenv: s.getenv, Root: s.Root,
		Hostname: s.Kube.Hostname, Timeout: cfg.APITimeout.D()}
	if loc.Kubeconfig == "" && cfg.Kubeconfig != "" {
		loc.Kubeconfig, loc.KubeconfigFrom = cfg.Kubeconfig, "kubeconfig in "+cfgPath
	}
	if loc.NodeName == "" {
		loc.NodeName = cfg.Node
	}
	if cfg.Slots.Kubeconfig != "" {
		loc.GateKubeconfigPath, loc.GateKubeconfigFrom = cfg.Slots.Kubeconfig, "slots.kubeconfig in "+cfgPath
	}
	path, err := loc.FindKubeconfig()
	var ue *kube.UnreadableError
	var ke *kube.KubeconfigError
	switch {
	case errors.As(err, &ke):
		// A mistake in the configuration, not "not a node": every
		// shutdown through the wrapper is refused.
		kf.Named, kf.Path, kf.Error = ke.From, ke.Path, err.Error()
		nf.Error = "kubeconfig unusable"
		noAccess("kubeconfig unusable", CauseKubeconfig, "kubeconfig unusable: "+err.Error())
		return
	case errors.Is(err, kube.ErrNoKubeconfig):
		kf.Error = "no kubeconfig found ($KUBECONFIG, " + kube.KubeletKubeconfigList() + ", " + kube.GnshKubeconfig + ")"
		nf.Error = "no kubeconfig"
		noAccess("no kubeconfig", CauseNotANode, "not a node (no kubeconfig found): the gate does not apply")
		return
	case errors.As(err, &ue):
		kf.Found, kf.Path, kf.Error = true, ue.Path, err.Error()
		nf.Error = "kubeconfig unreadable"
		noAccess("kubeconfig unreadable", CauseKubeconfig, "kubeconfig unreadable: "+err.Error())
		return
	case err != nil:
		// --kubeconfig or the config file names a file that is not
		// there, or a candidate cannot be looked at.
		kf.Error = err.Error()
		nf.Error = "no kubeconfig"
		noAccess("no kubeconfig", CauseKubeconfig, "no usable kubeconfig: "+err.Error())
		return
	}
	kf.Found, kf.Path, kf.Fallback = true, path, loc.Fallback()
	if fi, err := os.Stat(path); err == nil {
		kf.Mode = fmt.Sprintf("%04o", fi.Mode().Perm())
	}
	gatePath := ""
	if gate {
		gp, err := loc.GateKubeconfig(path)
		if err != nil {
			sf.Cause, sf.Error = CauseKubeconfig, "the gate's kubeconfig: "+err.Error()
			kf.GateError, kf.GateFix = err.Error(), "run gnsh doctor as root"
			var ke *kube.KubeconfigError
			if errors.As(err, &ke) {
				kf.GateError += ": every shutdown through gnsh is refused (but with --no-drain)"
				kf.GateFix = "fix or remove " + ke.Path + " (the reboot-slot gate then uses the drain's kubeconfig), or set slots.gate: off in " + cfgPath
				if !ke.FromGnshOwn() {
					kf.GateFix = "fix slots.kubeconfig in " + cfgPath + " or remove it"
				}
			}
		} else {
			gatePath, sf.Kubeconfig = gp, gp
			if fi, err := os.Stat(gp); err == nil {
				sf.Mode = fmt.Sprintf("%04o", fi.Mode().Perm())
			}
		}
	}
	gatherNode(ctx, s, &loc, cfg, path, gatePath, nf, sf, af)
}

// gatherNode reads the Node with the drain's kubeconfig (path) and, with
// the gate on (gatePath set), the slots with the gate's.
func gatherNode(ctx context.Context, s *Sources, loc *kube.Locator, cfg config.Config, path, gatePath string, nf *NodeFacts, sf *SlotsFacts, af *AccessFacts) {
	timeout := cfg.APITimeout.D()
	gate := gatePath != ""
	connect := func(path string) (kubernetes.Interface, *rest.Config, error) {
		if s.Kube.Connect != nil {
			return s.Kube.Connect(path, timeout)
		}
		rc, err := loc.RESTConfig(path)
		if err != nil {
			return nil, nil, err
		}
		c, err := kubernetes.NewForConfig(rc)
		return c, rc, err
	}
	c, rc, err := connect(path)
	if err != nil {
		nf.Error = err.Error()
		if af != nil {
			af.Error = "cannot connect: " + err.Error()
		}
		if gate {
			sf.Cause, sf.Error = CauseKubeconfig, "kubeconfig invalid: "+err.Error()
			if ue := (*kube.UnreadableError)(nil); errors.As(err, &ue) {
				// A file it names (CA, client key, token file).
				sf.Error = "kubeconfig unreadable: " + err.Error()
			}
		}
		return
	}
	if rc == nil {
		rc = &rest.Config{}
	}
	switch {
	case s.Kube.Node != "":
		nf.Name, nf.NameFrom = s.Kube.Node, "--node"
	case cfg.Node != "":
		nf.Name, nf.NameFrom = cfg.Node, "config"
	case kube.NodeIdentity(rc) != "":
		nf.Name, nf.NameFrom = kube.NodeIdentity(rc), "certificate"
	default:
		rctx, cancel := context.WithTimeout(ctx, 2*timeout)
		name, err := loc.ResolveNodeName(rctx, rc, c)
		cancel()
		if err != nil {
			nf.Error = err.Error()
			// The API server said no Node has this name (a
			// *kube.NodeNameError), or could not say: unreachable,
			// failing, refusing the credentials.
			unknown := errors.As(err, new(*kube.NodeNameError))
			if !unknown {
				nf.Error = "the lookup of this node's name at the API server failed: " + err.Error()
			}
			if af != nil {
				af.Error = "node name unknown"
				if !unknown {
					af.Error = "the API server failed the lookup of this node's name"
				}
			}
			if gate {
				sf.Cause, sf.Error = CauseNode, "this node's name is unknown: "+err.Error()
				if !unknown {
					sf.Cause, sf.Error = CauseAPIServer, "the lookup of this node's name at the API server failed: "+err.Error()
				}
			}
			return
		}
		nf.Name, nf.NameFrom = name, "hostname"
	}
	gctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := c.CoreV1().Nodes().Get(gctx, nf.Name, metav1.GetOptions{})
	if af != nil {
		if timedOut(err) {
			af.Error = "the API server did not answer within " + timeout.String()
		} else {
			rv := s.Kube.Reviewer
			if rv == nil {
				rv = ClientReviewer{C: c}
			}
			*af = GatherAccess(ctx, rv, GnshRequests(nf.Name, cfg.Events), timeout)
		}
	}
	if gate {
		var status apierrors.APIStatus
		switch {
		case timedOut(err):
			// Not asked again: the gate would wait as long for nothing.
			sf.Cause, sf.Error = CauseAPIServer, "cannot reach the API server: it did not answer within "+timeout.String()
		case err != nil && !errors.As(err, &status):
			// No answer at all (refused, reset, TLS): not the gate's fault.
			sf.Cause, sf.Error = CauseAPIServer, "cannot reach the API server: "+err.Error()
		default:
			// gnsh doctor (af) also reviews the gate's requests; gnsh
			// status only reads. The etcd pods are reviewed for a node
			// the gate guards (control-plane, master or etcd label).
			var rv Reviewer
			if af != nil {
				if rv = s.Kube.Reviewer; rv == nil {
					rv = ClientReviewer{C: c}
				}
			}
			controlPlane := err == nil && slots.StateOf(n).ControlPlane
			gc := c
			if gatePath != path {
				var gerr error
				if gc, _, gerr = connect(gatePath); gerr != nil {
					sf.Cause, sf.Error = CauseKubeconfig, "the gate's kubeconfig "+gatePath+" is invalid: "+gerr.Error()
					break
				}
				if rv != nil && s.Kube.Reviewer == nil {
					rv = ClientReviewer{C: gc}
				}
			}
			gatherSlots(ctx, gc, rv, cfg, nf.Name, controlPlane, gatePath == path, sf)
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		nf.NotFound, nf.Error = true, fmt.Sprintf("the cluster has no Node %q", nf.Name)
		return
	case err != nil:
		if timedOut(err) {
			err = fmt.Errorf("the API server did not answer within %s: %w", timeout, err)
		}
		nf.Error = err.Error()
		return
	}
	nf.Found = true
	sched := !n.Spec.Unschedulable
	nf.Schedulable = &sched
	nf.Cordon = drain.Owner(n)
	h := s.Kube.HostID
	if h == nil {
		id := kube.ReadHostID(s.Root)
		h = &id
	}
	same, why := kube.SameMachine(n, *h)
	nf.SameMachine, nf.SameWhy = &same, why
}

func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// gatherSlots reads the slots record: the holders, the waiters, this
// node's place. With rv it also reviews every request the gate sends
// (SlotRequests): one refused makes the gate unavailable; one whose review
// failed leaves the gate's access unknown (Unchecked), not granted.
// shared: the gate uses the drain's kubeconfig (no gate kubeconfig of its
// own), so a refusal names where the gate's own token belongs instead.
func gatherSlots(ctx context.Context, c kubernetes.Interface, rv Reviewer, cfg config.Config, node string, controlPlane, shared bool, sf *SlotsFacts) {
	g := slots.NewGate(c, cfg)
	if !shared {
		g.Kubeconfig = sf.Kubeconfig
	}
	rec, l, err := g.Read(ctx)
	switch {
	case slots.Broken(err):
		sf.Cause, sf.Error = CauseRecord, err.Error()
		return
	case slots.Unreadable(err):
		sf.Cause, sf.Error = CauseNewer, err.Error()
		return
	case err != nil:
		sf.Cause, sf.Error = CauseLease, (g.Unavailable(err)).Error()
		return
	}
	if rv == nil {
		gatherQueue(rec, node, sf)
		return
	}
	// Reading is not enough: every request the gate makes, reviewed.
	// And the rights it must not have (ExcessRequests).
	af := GatherAccess(ctx, rv, append(SlotRequests(cfg.Slots.Namespace, cfg.Slots.Lease, controlPlane, l != nil), ExcessRequests()...), cfg.APITimeout.D())
	sf.User = af.User
	sf.Excess = strings.Join(excessOf(&af), ", ")
	var denied, optional []string
	onlyPods := true
	for _, d := range af.Denied {
		if !d.Optional {
			denied = append(denied, d.String())
			onlyPods = onlyPods && d.Resource == "pods" && d.Namespace == metav1.NamespaceSystem
		} else if d.Namespace == corev1.NamespaceNodeLease {
			optional = append(optional, d.String())
		}
	}
	if len(denied) > 0 && onlyPods {
		// The gate works, but no node can judge etcd's quorum (whether it
		// hosts a member, or a member's state): every reboot waits for it
		// and is refused after slots.wait, optional gate or not.
		sf.Cause, sf.Error = CauseEtcdPods, fmt.Sprintf("these credentials may use the Lease %s but not %s, so etcd's quorum cannot be judged", g.Where(), strings.Join(denied, ", "))
		return
	}
	if len(denied) > 0 {
		sf.Cause, sf.Error = CauseAccess, fmt.Sprintf("these credentials may read the Lease %s but not %s", g.Where(), strings.Join(denied, ", "))
		return
	}
	gatherQueue(rec, node, sf)
	sf.Degraded = strings.Join(optional, ", ")
	if len(af.Unknown) > 0 {
		var us []string
		for _, u := range af.Unknown {
			us = append(us, u.String()+": "+u.Reason)
		}
		sf.Unchecked = strings.Join(us, "; ")
	}
}

// gatherQueue fills in the holders, the queue and this node's place.
func gatherQueue(rec slots.Record, node string, sf *SlotsFacts) {
	sf.Reachable, sf.Error, sf.This = true, "", "none"
	for _, h := range rec.Holders {
		sf.Holders = append(sf.Holders, h.Node+" ("+string(h.Phase)+")")
		if h.Node == node {
			sf.This = "holder (" + string(h.Phase) + ")"
		}
	}
	sf.Waiting = len(rec.Waiters)
	for i, w := range rec.Waiters {
		if w.Node == node {
			sf.This = fmt.Sprintf("waiting (place %d)", i+1)
		}
	}
}
