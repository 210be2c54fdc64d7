package drainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/legacy"
)

// DrainCommand is `gnsh drain`: cordon, evict, wait, with the same lock,
// signals, Events and output as a drain before a shutdown. timeout 0 means
// the configured drainTimeout. A failed drain leaves gnsh's cordon in
// place (as kubectl drain does) and says how to undo it; an interrupted
// one undoes it.
func (d *Drainer) DrainCommand(ctx context.Context, timeout time.Duration, dryRun bool, stdout io.Writer) error {
	r := newRun(d, forMaintenance, "drain")
	if err := r.loadConfig(nil); err != nil {
		return &Refusal{Msg: configLines(err), Err: err}
	}
	if timeout > 0 {
		r.cfg.DrainTimeout = config.Duration(timeout)
	}
	if dryRun {
		s, err := d.connect(ctx, r.cfg, "", r.out)
		if err != nil {
			return r.refuse(classifyLocal(err), err)
		}
		return d.dryRun(ctx, r.cfg, s, stdout)
	}
	_, err := r.conclude(r.attempt(ctx, nil), r.err)
	r.end()
	return err
}

// refuse is the error for an outcome that ends a subcommand.
func (r *run) refuse(o outcome, err error) error {
	_, rerr := r.conclude(o, err)
	r.end()
	return rerr
}

// dryRun lists what a drain would do with each pod, changing nothing.
func (d *Drainer) dryRun(ctx context.Context, cfg config.Config, s *session, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 4*cfg.APITimeout.D())
	defer cancel()
	n, err := s.readNode(ctx, cfg.APITimeout.D())
	if err != nil {
		return &Refusal{Msg: "gnsh: " + errText(err, ""), Err: err}
	}
	pods, _, err := drain.ListNodePods(ctx, s.c, s.node)
	if err != nil {
		return &Refusal{Msg: "gnsh: " + errText(err, ""), Err: err}
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
	evict, refused := 0, 0
	for _, p := range pods {
		cp := drain.Classify(p, cfg.StrictDrain)
		action, note := "skip: "+cp.Verdict.String(), cp.Warning
		switch cp.Verdict {
		case drain.Evict:
			action = "evict"
			evict++
		case drain.Terminating:
			action = "wait: terminating"
		case drain.Refused:
			action, note = "refuse (strictDrain)", "as kubectl drain: "+cp.Kubectl
			refused++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", cp.Name(), action, note)
	}
	_ = tw.Flush()
	if refused > 0 {
		shutdown := "a shutdown be refused"
		if cfg.ForceDrain {
			shutdown = "a shutdown evict the other pods and go on without these (forceDrain: true)"
		}
		fmt.Fprintf(stdout, "%d of %d pods are refused (strictDrain: true in %s): a drain would stop before any eviction, and %s (dry run: nothing changed)\n",
			refused, len(pods), d.configPath(), shutdown)
		return nil
	}
	fmt.Fprintf(stdout, "%d of %d pods would be evicted (dry run: nothing changed)\n", evict, len(pods))
	return nil
}

// UncordonCommand is `gnsh uncordon`: make the node schedulable again. With
// onlyIfOurs it leaves any cordon gnsh did not make. It takes the drain
// lock, so that it never races a drain's cordon.
func (d *Drainer) UncordonCommand(ctx context.Context, onlyIfOurs bool, stdout io.Writer) error {
	r := newRun(d, forMaintenance, "uncordon")
	if err := r.loadConfig(nil); err != nil {
		return &Refusal{Msg: configLines(err), Err: err}
	}
	s, err := d.connect(ctx, r.cfg, "", r.out)
	if err != nil {
		return r.refuse(classifyLocal(err), err)
	}
	r.sess = s
	if r.lock, err = d.lock("uncordon", s.node, false, time.Time{}); err != nil {
		return r.refuse(classifyLocal(err), err)
	}
	defer r.end()
	ctx, cancel := context.WithTimeout(ctx, 2*r.cfg.APITimeout.D())
	defer cancel()
	var only drain.Only
	if onlyIfOurs {
		only = drain.Ours
	}
	undone, err := drain.Uncordon(ctx, s.c, s.node, only, s.check)
	if err != nil {
		return &Refusal{Msg: "gnsh: " + errText(err, ""), Err: err}
	}
	if !undone {
		n, err := s.readNode(ctx, r.cfg.APITimeout.D())
		switch {
		case err == nil && n.Spec.Unschedulable:
			fmt.Fprintf(stdout, "%s is cordoned, but not by gnsh; left as it is\n", s.node)
		default:
			fmt.Fprintf(stdout, "%s is not cordoned\n", s.node)
		}
		return nil
	}
	fmt.Fprintf(stdout, "%s uncordoned\n", s.node)
	r.event(ctx, "Normal", ReasonUncordoned, "Uncordoned by %s (gnsh uncordon)", d.who().User)
	r.lifecycle(ctx, drain.Lifecycle{Reason: drain.ConditionReasonUncordoned, Message: "uncordoned by " + d.who().User + " (gnsh uncordon)"})
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
		return "none: --no-drain (no drain and no reboot slot)"
	}
	r := newRun(d, forShutdown, req.Action.String())
	// shutdown -c is never refused: what cannot be read costs only
	// gnsh's part after the cancel (FinishCancel).
	nothingAfter := func(err error) string {
		return fmt.Sprintf("after the cancel: nothing (%v); gnsh's cordon for a schedule, if any, stays", err)
	}
	if err := r.loadConfig(nil); err != nil {
		var what any = err
		if ce := (*config.Error)(nil); errors.As(err, &ce) && len(ce.Problems) > 1 {
			// Each is a line of the command's own message.
			what = fmt.Sprintf("%s is invalid (%d problems, each a line of the command's message)", ce.File, len(ce.Problems))
		}
		if req.Action == legacy.Cancel {
			return nothingAfter(fmt.Errorf("%v", what))
		}
		if req.Force != 0 {
			return fmt.Sprintf("none: %v (-f goes on without a cordon)", what)
		}
		return fmt.Sprintf("refuse: %v (exit 1 before any call to logind; --no-drain skips the drain)", what)
	}
	if !r.cfg.Drain {
		return "none: drain: false in " + d.configPath()
	}
	loc := d.locator(r.cfg)
	path, err := loc.FindKubeconfig()
	switch {
	case errors.Is(err, kube.ErrNoKubeconfig):
		return "none: no kubeconfig, not a Kubernetes node"
	case err != nil && req.Action == legacy.Cancel:
		return nothingAfter(err)
	case classifyLocal(err) == badConfig && req.Force != 0:
		return fmt.Sprintf("none: %v (-f goes on without a cordon)", err)
	case classifyLocal(err) == badConfig:
		return fmt.Sprintf("refuse: %v (exit 1 before any call to logind; --no-drain skips the drain)", err)
	case classifyLocal(err) == notPermitted:
		return fmt.Sprintf("refuse: %v (exit 1 before any call to logind: run it as root, or with --no-drain)", err)
	case err != nil:
		return fmt.Sprintf("none: %v (a warning, then the hand-off)", err)
	}
	timeout := r.cfg.DrainTimeout.D()
	if req.Drain.Timeout > 0 {
		timeout = req.Drain.Timeout
	}
	onBlock := "refuse (exit 1, gnsh's cordon undone)"
	if req.Drain.Force || r.cfg.ForceDrain {
		onBlock = "hand off anyway (--force-drain)"
	}
	gate := r.cfg.Slots.Gate != config.GateOff
	where := r.cfg.Slots.Namespace + "/" + r.cfg.Slots.Lease
	switch {
	case req.Action == legacy.Cancel:
		free := ""
		if gate {
			free = " and free the reboot slot of " + where + " this boot holds for it"
		}
		return "after the cancel: undo gnsh's cordon if it was made for a scheduled shutdown" + free + " (kubeconfig " + path + ")"
	case req.Force != 0:
		return fmt.Sprintf("cordon only, best effort within %s, no drain and no reboot slot (kubeconfig %s)", r.cfg.ForceCordonTimeout.D(), path)
	case req.When > 0 && req.DueIn(d.now()) > timeout:
		slot := ""
		if gate {
			slot = fmt.Sprintf(", once it has a reboot slot of %s (none before the schedule's time: it defers the %s until one comes, within slots.queueFor: %s)",
				where, req.Action, r.cfg.Slots.QueueFor.D())
			if r.cfg.Slots.Queue == config.QueueNever {
				slot = fmt.Sprintf(", once it has a reboot slot of %s (none before the schedule's time: it cancels the schedule)", where)
			}
		}
		return fmt.Sprintf("none now: due beyond the drain timeout (%s); the node agent (gnsh.service), if it runs, drains %s before it (the config file's drainTimeout)%s, else run 'gnsh drain'",
			timeout, r.agentTimeout, slot)
	}
	queue := d.queuePlan(r.cfg, req)
	if strings.HasPrefix(queue, "refuse") || strings.HasPrefix(queue, "none now") {
		return queue // nothing asked, nothing cordoned now
	}
	return slotStep(r.cfg, req.Drain.ForceQuorum, queue) + fmt.Sprintf("cordon, evict, wait up to %s, then the calls; not drained in time: %s; API server unreachable or failing, Node not this machine's, kubelet down: a warning, then the calls (kubeconfig %s)",
		timeout, onBlock, path)
}

// PlanPreparer is the drain's part in gnsh plan: a handoff.Preparer that
// refuses where the command's drain refuses before it asks the cluster
// anything (an invalid or unreadable config file, a kubeconfig named that
// cannot be used, one that cannot be read), with the same message, and
// otherwise lets the plan go on. It changes nothing.
func (d *Drainer) PlanPreparer() handoff.Preparer { return planPreparer{d} }

type planPreparer struct{ d *Drainer }

func (p planPreparer) Prepare(_ context.Context, req *legacy.Request) (handoff.Prepared, error) {
	if req.Action == legacy.Cancel || req.Drain.Skip {
		return nil, nil
	}
	d := p.d
	purpose := forShutdown
	if req.Force != 0 {
		purpose = forForce
	}
	r := newRun(d, purpose, req.Action.String())
	var o outcome
	err := r.loadConfig(req)
	switch {
	case errors.As(err, new(*configUnreadable)):
		o = notPermitted
	case err != nil:
		o = badConfig
	case !r.cfg.Drain:
		return nil, nil
	default:
		if err = r.namedKubeconfig(); err != nil {
			o = badConfig
			break
		}
		if purpose == forShutdown && r.cfg.Slots.Gate != config.GateOff && r.isNode() {
			// Outside slots.window, a request that would be queued is
			// decided without the cluster: queued (exit 0, nothing handed
			// off), or refused when the window does not open in time.
			switch q := d.queuePlan(r.cfg, req); {
			case strings.HasPrefix(q, "refuse"):
				return nil, &Refusal{Msg: "gnsh: " + strings.TrimPrefix(q, "refuse (exit 1 before any call to logind, nothing asked): ")}
			case strings.HasPrefix(q, "none now: "):
				return nil, &QueuedError{Msg: "gnsh: " + strings.TrimPrefix(q, "none now: ")}
			}
		}
		if d.Connect != nil {
			return nil, nil
		}
		loc := d.locator(r.cfg)
		if _, err = loc.FindKubeconfig(); classifyLocal(err) != notPermitted {
			return nil, nil
		}
		o = notPermitted
	}
	v := decide(o, purpose, r.cfg.ForceDrain)
	if v.proceed {
		return nil, nil
	}
	return nil, &Refusal{Msg: safeLines(r.tell(o, v, err)), Err: err}
}

// slotStep is the reboot-slot step ahead of the cordon, for Describe:
// which slot, how long it waits, what a refusal and an unusable gate do.
func slotStep(cfg config.Config, forceQuorum bool, queue string) string {
	if cfg.Slots.Gate == config.GateOff {
		return "no reboot slot (slots.gate: off); "
	}
	unusable := "go on without a slot (slots.gate: optional)"
	if cfg.Slots.Gate == config.GateRequired {
		unusable = "refuse, exit 1 (slots.gate: required)"
	}
	quorum := "a control-plane or etcd node also needs the etcd quorum kept"
	if forceQuorum {
		quorum = "--force-quorum: a control-plane or etcd node goes without the etcd quorum guard (a warning and a GnshQuorumOverridden Event)"
	}
	if strings.HasPrefix(queue, "queued") {
		return fmt.Sprintf("take a reboot slot of %s first, if one is free at once (none: %s; gate unusable: %s; %s), then ",
			cfg.Slots.Namespace+"/"+cfg.Slots.Lease, queue, unusable, quorum)
	}
	return fmt.Sprintf("take a reboot slot of %s first, waiting up to %s in arrival order (slots.wait; none in time: refuse, exit 1, nothing cordoned%s; "+
		"gate unusable: %s; %s), then ", cfg.Slots.Namespace+"/"+cfg.Slots.Lease, cfg.SlotWait(), queue, unusable, quorum)
}

// queuePlan is gnsh plan's account of a request that would be queued
// (queue.go's rule, as far as it can be told without the cluster), ""
// for one that waits in the command.
func (d *Drainer) queuePlan(cfg config.Config, req *legacy.Request) string {
	r := newRun(d, forShutdown, "plan")
	r.cfg, r.forceQuorum, r.req = cfg, req.Drain.ForceQuorum, req
	forceQuorum := req.Drain.ForceQuorum
	why := r.queueWhy()
	switch {
	case why == "" && r.queueLost != "":
		return "; " + r.queueLost
	case why == "" && cfg.Slots.Queue == config.QueueAuto && !forceQuorum && !req.Drain.NoQueue:
		if held, state, _ := AgentState(d.lockDir()); held && state == AgentGuarding {
			return "; asked with no person at a terminal (a service, cron, Ansible) it would be queued instead (slots.queue: auto)"
		}
		return ""
	case why == "":
		return ""
	}
	if cfg.Slots.Queue == config.QueueAuto && why != "--queue" {
		why += "; slots.queue: auto"
	}
	window := ""
	if w, _ := cfg.QueueWindow(); w != nil {
		window = ", within the window " + w.String()
		if now := d.now(); !w.Contains(now) {
			open, _ := w.Next(now)
			if open.IsZero() || !open.Before(now.Add(cfg.Slots.QueueFor.D())) {
				return fmt.Sprintf("refuse (exit 1 before any call to logind, nothing asked): it would be queued (%s), but now is outside the window %s, which does not open before slots.queueFor (%s) would give it up",
					why, w, cfg.Slots.QueueFor.D())
			}
			return fmt.Sprintf("none now: queued (%s) without asking for a reboot slot, outside the window %s, which opens %s: exit 0, nothing cordoned; the node agent drains and hands off once it is open and a slot is free, in arrival order, or gives up after %s (slots.queueFor)",
				why, w, open.Local().Format("Mon 15:04 MST"), cfg.Slots.QueueFor.D())
		}
	}
	return fmt.Sprintf("queued (%s): exit 0, nothing cordoned, and the node agent drains and hands off once one is free%s, in arrival order, or gives up after %s (slots.queueFor)",
		why, window, cfg.Slots.QueueFor.D())
}
