package drainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/legacy"
)

// connectForCommand is connect for the subcommands, where a missing
// kubeconfig is an error.
func (d *Drainer) connectForCommand(ctx context.Context) (*session, error) {
	if err := d.LoadConfig(); err != nil {
		return nil, legacy.Fail("gnsh: %v", err)
	}
	s, err := d.connect(ctx)
	if errors.Is(err, kube.ErrNoKubeconfig) {
		return nil, legacy.Fail("gnsh: no kubeconfig found ($KUBECONFIG, %s, %s); pass --kubeconfig", kube.GnshKubeconfig, kube.KubeletKubeconfig)
	}
	if err != nil {
		return nil, legacy.Fail("gnsh: %v", err)
	}
	return s, nil
}

// DrainCommand is `gnsh drain`: cordon, evict, wait, with the same lock,
// signals, Events and output as a drain before a shutdown. timeout 0 means
// the configured drainTimeout. A failed drain leaves gnsh's cordon in
// place (as kubectl drain does) and says how to undo it; an interrupted
// one undoes it.
func (d *Drainer) DrainCommand(ctx context.Context, timeout time.Duration, dryRun bool, stdout io.Writer) error {
	s, err := d.connectForCommand(ctx)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = d.cfg.DrainTimeout.D()
	}
	if dryRun {
		return d.dryRun(ctx, s, stdout)
	}
	d.sess = s
	_, err = d.drainNode(ctx, s, d.ownership("drain", nil), timeout)
	var intr *interrupted
	switch {
	case err == nil:
		return nil
	case errors.As(err, &intr):
		return &legacy.ExitError{Code: 128 + int(intr.sig), Msg: fmt.Sprintf("gnsh: drain %s", intr)}
	case d.cordoned:
		return legacy.Fail("gnsh: %v\ngnsh: %s stays cordoned; 'gnsh uncordon' makes it schedulable again", err, s.node)
	}
	return legacy.Fail("gnsh: %v", err)
}

// dryRun lists what a drain would do with each pod, changing nothing.
func (d *Drainer) dryRun(ctx context.Context, s *session, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 4*d.cfg.APITimeout.D())
	defer cancel()
	n, err := s.c.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
	if err != nil {
		return legacy.Fail("gnsh: %v", err)
	}
	pods, _, err := drain.ListNodePods(ctx, s.c, s.node)
	if err != nil {
		return legacy.Fail("gnsh: %v", err)
	}
	switch {
	case !n.Spec.Unschedulable:
		fmt.Fprintf(stdout, "would cordon %s\n", s.node)
	case drain.Owner(n) != nil:
		fmt.Fprintf(stdout, "%s is already cordoned by gnsh\n", s.node)
	default:
		fmt.Fprintf(stdout, "%s is already cordoned (not by gnsh; left as it is)\n", s.node)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tACTION\tNOTE")
	evict := 0
	for _, p := range pods {
		cp := drain.Classify(p)
		action := "skip: " + cp.Verdict.String()
		switch cp.Verdict {
		case drain.Evict:
			action = "evict"
			evict++
		case drain.Terminating:
			action = "wait: terminating"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", cp.Name(), action, cp.Warning)
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "%d of %d pods would be evicted (dry run: nothing changed)\n", evict, len(pods))
	return nil
}

// UncordonCommand is `gnsh uncordon`: make the node schedulable again. With
// onlyIfOurs it leaves any cordon gnsh did not make.
func (d *Drainer) UncordonCommand(ctx context.Context, onlyIfOurs bool, stdout io.Writer) error {
	s, err := d.connectForCommand(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*d.cfg.APITimeout.D())
	defer cancel()
	n, err := s.c.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
	if err != nil {
		return legacy.Fail("gnsh: %v", err)
	}
	ours := drain.Owner(n) != nil
	if onlyIfOurs && !ours {
		if n.Spec.Unschedulable {
			fmt.Fprintf(stdout, "%s is cordoned, but not by gnsh; left as it is\n", s.node)
		} else {
			fmt.Fprintf(stdout, "%s is not cordoned\n", s.node)
		}
		return nil
	}
	only := drain.Only(nil)
	if onlyIfOurs {
		only = drain.Ours
	}
	undone, err := drain.Uncordon(ctx, s.c, s.node, only)
	if err != nil {
		return legacy.Fail("gnsh: %v", err)
	}
	if !undone {
		fmt.Fprintf(stdout, "%s is not cordoned\n", s.node)
		return nil
	}
	fmt.Fprintf(stdout, "%s uncordoned\n", s.node)
	d.event(ctx, s, "Normal", ReasonUncordoned, "Uncordoned by %s (gnsh uncordon)", d.who().User)
	return nil
}

// Describe says what the drain would do for req, for gnsh plan. It reads
// the config file and looks for a kubeconfig; it never contacts the
// cluster, takes the lock or changes anything. "" means nothing to say
// (--help, --show).
func (d *Drainer) Describe(req *legacy.Request) string {
	switch {
	case req.Help != "" || req.Action == legacy.Show:
		return ""
	case req.DryRun:
		return "none: a dry run never drains"
	case req.Drain.Skip:
		return "none: --no-drain"
	}
	if err := d.LoadConfig(); err != nil {
		if req.Force != 0 {
			return fmt.Sprintf("none: %v (-f goes on without a cordon)", err)
		}
		return fmt.Sprintf("refuse: %v (exit 1 before any call; --no-drain skips the drain)", err)
	}
	if !d.cfg.Drain {
		return "none: drain: false in " + d.configPath()
	}
	loc := d.locator()
	path, err := loc.FindKubeconfig()
	switch {
	case errors.Is(err, kube.ErrNoKubeconfig):
		return "none: no kubeconfig, not a Kubernetes node"
	case err != nil:
		return fmt.Sprintf("none: %v (a warning, then the hand-off)", err)
	}
	timeout := d.cfg.DrainTimeout.D()
	if req.Drain.Timeout > 0 {
		timeout = req.Drain.Timeout
	}
	onBlock := "refuse (exit 1, gnsh's cordon undone)"
	if req.Drain.Force || d.cfg.ForceDrain {
		onBlock = "hand off anyway (--force-drain)"
	}
	switch {
	case req.Action == legacy.Cancel:
		return "after the cancel: undo gnsh's cordon if it was made for a scheduled shutdown (kubeconfig " + path + ")"
	case req.Force != 0:
		return fmt.Sprintf("cordon only, best effort within %s, no drain (kubeconfig %s)", d.cfg.ForceCordonTimeout.D(), path)
	case req.When > 0 && time.Until(legacy.FromUsec(req.When)) > timeout:
		return fmt.Sprintf("none now: due beyond the drain timeout (%s); the node agent drains before it", timeout)
	}
	return fmt.Sprintf("cordon, evict, wait up to %s, then the calls; not drained in time: %s; API server unreachable: a warning, then the calls (kubeconfig %s)",
		timeout, onBlock, path)
}
