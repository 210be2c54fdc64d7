package gnshcli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/agent"
	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/logind"
	"github.com/gnsh/gnsh/internal/signals"
	"github.com/gnsh/gnsh/internal/version"
)

func agentCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run the node agent, gnsh.service",
		Description: "Run by systemd as gnsh.service; it never shuts anything down. After boot it uncordons " +
			"the node if gnsh cordoned it for the shutdown. It drains shutdowns that bypass the wrapper " +
			"(systemctl reboot, the power button; kubelet stops their pods at the same time) and ahead of far schedules, " +
			"and keeps this node's reboot slot.",
		Flags: []cli.Flag{nodeFlag(), kubeFlag()},
		Action: func(c *cli.Context) error {
			getenv := func(k string) string { v, _ := env.LookupEnv(k); return v }
			*code = runAgent(c.Context, newDrainer(c, env), getenv, env)
			return nil
		},
	}
}

// pendingShutdown asks logind and systemd whether a shutdown may rely on
// gnsh's cordon record rec (nil: on any of gnsh's cordons): systemd stopping
// the system (a shutdown started without logind: the wrapper's fallback),
// logind preparing for one (PreparingForShutdown, or an immediate action
// in ScheduledShutdown), the very schedule rec was made for (rec.When, to
// the second: whatever the drain timeout the wrapper drained with), or one
// due within drainTimeout of now (the wrapper drains now for such a
// schedule, under gnsh's cordon). A schedule further out was not drained
// for. v219's missing ScheduledShutdown counts as none.
func pendingShutdown(ctx context.Context, address string, rec *drain.Ownership, drainTimeout time.Duration, now time.Time) (string, error) {
	conn, err := logind.Dial(ctx, address, false)
	if err != nil {
		return "", fmt.Errorf("system bus %s: %w", address, err)
	}
	defer conn.Close()
	switch st, err := conn.Systemd().SystemState(ctx); {
	case errors.Is(err, logind.ErrNoService):
		// No systemd1 on the bus: nothing could have started a shutdown
		// through it; logind's answers decide.
	case err != nil:
		return "", fmt.Errorf("systemd's SystemState: %w", err)
	case st == "stopping":
		return "systemd is stopping the system", nil
	}
	l := conn.Logind()
	preparing, err := l.PreparingForShutdown(ctx)
	if err != nil {
		return "", err
	}
	if preparing {
		return "systemd-logind is preparing for shutdown", nil
	}
	typ, usec, err := l.ScheduledShutdown(ctx)
	var be *handoff.BusError
	if errors.As(err, &be) && be.Name == "org.freedesktop.DBus.Error.UnknownProperty" {
		return "", nil
	}
	if err != nil || typ == "" {
		return "", err
	}
	at, ok := logind.ScheduledTime(usec)
	switch {
	case !ok && usec == 0:
		return "a " + typ + " is under way", nil
	case !ok:
		return "", nil // nothing scheduled (v252's UINT64_MAX), or for ever
	case rec != nil && rec.When != nil && at.Truncate(time.Second).Equal(rec.When.Truncate(time.Second)):
		return fmt.Sprintf("the %s scheduled for %s, which gnsh's cordon was made for", typ, at.UTC().Format(time.RFC3339)), nil
	case at.Sub(now) <= drainTimeout:
		return fmt.Sprintf("a %s is scheduled for %s", typ, at.UTC().Format(time.RFC3339)), nil
	}
	return "", nil
}

// ShutdownRelies is drainer.Relies on this machine: pendingShutdown over
// the system bus getenv names, now (time.Now if nil) being the time. The
// node agent's undos and keeper ask it, and shutdown -c whether a
// shutdown is under way.
func ShutdownRelies(getenv func(string) string, now func() time.Time) drainer.Relies {
	if now == nil {
		now = time.Now
	}
	return func(ctx context.Context, rec *drain.Ownership, drainTimeout time.Duration) (string, error) {
		return pendingShutdown(ctx, logind.SystemBusAddress(getenv), rec, drainTimeout, now())
	}
}

// MarkerMaxAge is how old the marker (drainer.MarkerName) may be for the
// agent to take a shutdown as drained for already; a marker written ahead
// of a scheduled shutdown counts until MarkerMaxAge after its deadline.
const MarkerMaxAge = 10 * time.Minute

// drainForShutdown is the guard's drain: DrainForShutdown, tried again
// while another gnsh holds the drain lock for a moment (the uncordon after
// boot, one patch), as long as the budget leaves room for a drain. The
// ShutdownDrain it returns is never nil.
func drainForShutdown(ctx context.Context, d *drainer.Drainer, action string, budget time.Duration) (*drainer.ShutdownDrain, error) {
	const retry = 250 * time.Millisecond
	deadline := time.Now().Add(budget)
	for {
		sd, err := d.DrainForShutdown(ctx, action, time.Until(deadline))
		if !drainer.IsLockHeld(err) || time.Until(deadline) < 4*retry+2*time.Second {
			return sd, err
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return sd, err
		case <-t.C:
		}
	}
}

// agentStatus is the agent's one STATUS= line for systemd, from two
// sources: the uncordon after boot and the shutdown guard with the
// schedule follower. While the uncordon waits its line comes first
// ("waiting for …; meanwhile holding a delay lock on shutdown; idle");
// once it is done its outcome comes last ("holding a delay lock on
// shutdown; idle; uncordoned node-1 after boot").
type agentStatus struct {
	send     func(string) error
	mu       sync.Mutex
	waiting  string // the uncordon's latest line while it waits
	outcome  string // how the uncordon ended, once it has
	guarding string // the guard's or follower's latest line
	queued   string // the queue runner's latest line
}

func (s *agentStatus) uncordon(line string) { s.update(func() { s.waiting = line }) }
func (s *agentStatus) guard(line string)    { s.update(func() { s.guarding = line }) }
func (s *agentStatus) queue(line string)    { s.update(func() { s.queued = line }) }

// uncordonDone replaces the uncordon's waiting line by its outcome.
func (s *agentStatus) uncordonDone(outcome string) {
	s.update(func() { s.waiting, s.outcome = "", outcome })
}

func (s *agentStatus) update(change func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change()
	var parts []string
	if s.waiting != "" {
		parts = append(parts, s.waiting)
		if s.guarding != "" {
			parts = append(parts, "meanwhile "+s.guarding)
		}
	} else {
		parts = append(parts, s.guarding, s.outcome)
	}
	parts = append(parts, s.queued)
	out := strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), "; ")
	if out != "" {
		_ = s.send(out)
	}
}

// runAgent runs the agent until SIGTERM/SIGINT and returns the exit status.
func runAgent(ctx context.Context, d *drainer.Drainer, getenv func(string) string, env *dispatch.Env) int {
	say := func(format string, args ...any) { fmt.Fprintf(env.Stderr, "gnsh: "+format+"\n", args...) }
	cfg, err := config.Load(d.ConfigFile())
	if err != nil {
		say("agent: %v", err)
		return 1
	}
	// Its drain locks say they are the agent's: a wrapper waits for them.
	d.Agent = true
	// Its undos ask logind and systemd whether a shutdown relies on the
	// cordon, with the drain timeout of the config file as it is then.
	d.Relies = ShutdownRelies(getenv, env.Now)
	// The agent's lock, held for its whole life, tells the wrapper (and
	// gnsh status) that a schedule beyond drainTimeout will be drained.
	alock, err := d.HoldAgentLock()
	var running *drainer.AgentRunningError
	switch {
	case errors.As(err, &running):
		say("agent: %v", err)
		return 1
	case err != nil:
		say("agent: warning: %v; the wrapper will take the agent for not running", err)
	}
	defer alock.Release()
	notify := agent.Notifier{Socket: getenv("NOTIFY_SOCKET")}
	// The agent's whole life is one Drain mode of the signal handler:
	// SIGINT and SIGTERM cancel ctx, SIGHUP and SIGPIPE are ignored.
	ctx, leave := d.Signal.Drain(ctx)
	defer leave()

	bootID := d.ThisBoot()
	u := &agent.Uncordoner{
		Connect:    agent.LocatorConnect(d.Locator(cfg)),
		BootID:     bootID,
		Clock:      d.Clock,
		APITimeout: cfg.APITimeout.D(),
		Check:      d.MachineCheck(),
		Events:     cfg.Events,
		Conditions: cfg.NodeConditions,
		Out:        env.Stderr,
		Debug:      cfg.Debug || getenv("GNSH_DEBUG") == "1",
	}
	connectGate := agent.LocatorConnectGate(d.Locator(cfg))
	if d.Connect != nil {
		u.Connect = d.Connect
		connectGate = func(ctx context.Context) (kubernetes.Interface, kubernetes.Interface, string, error) {
			c, node, err := d.Connect(ctx)
			if err != nil || d.ConnectGate == nil {
				return c, c, node, err
			}
			g, err := d.ConnectGate(ctx)
			return c, g, node, err
		}
	}
	u.Lock = func(node string) (func(), error) {
		// Under the lock: logind's answer and the uncordon, each bounded.
		l, err := d.AcquireLock("uncordon after boot", node, time.Now().Add(3*cfg.APITimeout.D()+time.Second))
		if held := (*drainer.HeldError)(nil); errors.As(err, &held) {
			if held.Holder != nil && held.Holder.PID != 0 {
				return nil, fmt.Errorf("%w (%s)", agent.ErrLockHeld, held.Holder)
			}
			return nil, agent.ErrLockHeld
		}
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
	u.Shutdown = func(ctx context.Context) (string, error) { return d.Relies(ctx, nil, cfg.DrainTimeout.D()) }
	st := &agentStatus{send: notify.Status}
	u.Status = st.uncordon
	// A SIGINT or SIGTERM during an undo or a drain's final steps is held
	// (reported, not acted on: they are bounded); the agent stops once
	// that step is over.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	afterHold := func() {
		if d.Signal.Held() != 0 {
			stop()
		}
	}
	// The gate's short-lived token is renewed from the start, whatever
	// else waits (the API server after boot, the Node to be Ready).
	renewed := renewGateToken(ctx, d, cfg, env.Stderr)
	isNode := make(chan struct{})
	u.OnNode = func() { close(isNode) }
	// The slot keeper waits for the API server to answer the uncordon
	// once: while it is down after boot, one agent retries it, not two.
	apiUp := make(chan struct{})
	u.OnAPI = func() { close(apiUp) }
	u.NotNode = func() {
		// Installed before kubeadm join: nothing to guard until a
		// kubeconfig appears, and the wrapper must not promise a drain.
		alock.SetState(drainer.AgentNoKubeconfig)
		_ = notify.Status("not a Kubernetes node yet (no kubeconfig); looking for one every " + agent.DefaultKubeconfigPoll.String())
	}
	say("agent %s started (boot %s)", version.Version, bootID)
	if err := notify.Notify("READY=1\nSTATUS=waiting for the Node to be Ready for this boot, to undo gnsh's cordon from before it"); err != nil {
		say("sd_notify: %v", err)
	}
	uncordoned := make(chan agent.Result, 1)
	uncordonOver := make(chan struct{})
	go func() { r, _ := u.Run(ctx); close(uncordonOver); uncordoned <- r }()
	var r agent.Result
	done := false
	select {
	case <-isNode:
	case r = <-uncordoned:
		done = true
	}
	if done && r.Outcome != agent.Uncordoned && r.Outcome != agent.Left {
		// Stopped before a kubeconfig was found.
	} else {
		// A Kubernetes node: shutdowns are guarded from now on, beside
		// the wait for the Node to be Ready for this boot (which may last
		// minutes while the API server comes up). The uncordon and the
		// drains take the drain lock, and the uncordon waits while logind
		// prepares a shutdown or has one due within drainTimeout.
		var f *agent.ScheduleFollower // the guard's drain preempts its drain
		g := &agent.ShutdownGuard{
			Dial: func(ctx context.Context) (*logind.Conn, error) {
				return logind.Dial(ctx, logind.SystemBusAddress(getenv), false)
			},
			Drain: func(ctx context.Context, action string, budget time.Duration) (func(string), error) {
				defer afterHold()
				// The drain ahead of a schedule, if one runs, gives way:
				// this shutdown is under way, and its drain needs the
				// drain lock that drain holds while it drains. (While it
				// only waits for a reboot slot it holds no lock; it stops
				// all the same: nothing gates this shutdown.)
				if f.Preempt(ctx) {
					say("agent: the drain ahead of the schedule stopped: a shutdown is under way")
				}
				sd, err := drainForShutdown(ctx, d, action, budget)
				return func(why string) {
					// The shutdown was cancelled: a schedule that stands
					// is drained for, and gated, again.
					defer f.Resume()
					defer afterHold()
					sd.Undo(why)
				}, err
			},
			Drained: func() (string, bool) {
				if at, ok := d.NoDrainDue(MarkerMaxAge); ok {
					return "asked with --no-drain (a schedule for " + at.Format(time.RFC3339) + "): not draining", true
				}
				m, ok := d.DrainedFor(MarkerMaxAge)
				if m.NoDrain {
					return "asked with --no-drain (gnsh " + m.Action + " at " + m.Time.Format(time.RFC3339) + "): not draining", ok
				}
				return drainedWhat(m), ok
			},
			Forget: d.RemoveMarker,
			Out:    env.Stderr,
			Status: st.guard,
		}
		f = &agent.ScheduleFollower{
			Read: func(ctx context.Context) (agent.LogindSchedule, error) {
				return agent.ReadLogindSchedule(ctx, logind.SystemBusAddress(getenv))
			},
			File:         filepath.Join(d.KubeRoot, agent.DefaultScheduleFile),
			DrainTimeout: cfg.DrainTimeout.D(),
			Drained:      d.ScheduleDrained,
			DryRun:       d.DryRunAt,
			NoDrain:      d.NoDrainAt,
			Drain: func(ctx context.Context, action string, at time.Time, budget time.Duration) error {
				defer afterHold()
				_, err := d.DrainForSchedule(ctx, action, at, budget)
				return err
			},
			Undo: func(ctx context.Context, why string, pending func(context.Context) bool) (bool, error) {
				defer afterHold()
				return d.UndoScheduleCordon(ctx, why, pending)
			},
			Cancel: func(ctx context.Context, typ string, usec uint64, at time.Time, why string) (bool, error) {
				defer afterHold()
				return d.CancelSchedule(ctx, typ, at, why, cfg.Slots.Queue != config.QueueNever, func(ctx context.Context) (bool, error) {
					return cancelSchedule(ctx, logind.SystemBusAddress(getenv), typ, usec)
				})
			},
			Slot: func(ctx context.Context, action string, at time.Time) error {
				defer afterHold()
				return d.SlotForSchedule(ctx, action, at)
			},
			Uncancelled: func(ctx context.Context, action string, at time.Time, why string) {
				d.ScheduleUncancelled(ctx, action, at, why)
			},
			Defers: cfg.Slots.Queue != config.QueueNever,
			Out:    env.Stderr,
			Status: st.guard,
			Clock:  d.Clock,
		}
		qr := &agent.QueueRunner{
			Read:   d.ReadQueued,
			Save:   d.SaveQueued,
			Remove: d.RemoveQueued,
			Reboot: func(ctx context.Context, q *drainer.QueuedReboot, wait time.Duration) error {
				defer afterHold()
				// The wrapper's own path: its drain (the slot asked for
				// with the request's place, for at most wait) and the
				// hand-off to logind, every inhibitor honoured.
				h := env.Runner()
				h.Stdout, h.Stderr = env.Stderr, env.Stderr
				// The drain ends with ctx (withdrawn, the agent
				// stopping); the hand-off, once prepared, does not:
				// an ended ctx must never turn it into the fallbacks
				// (reboot.target, reboot(2)). Each D-Bus call is
				// bounded all the same (CallTimeout).
				h.Preparer = d.QueuedPreparer(ctx, q, wait)
				return h.Run(context.WithoutCancel(ctx), q.Request())
			},
			GiveUp: d.QueuedGivenUp,
			Out:    env.Stderr,
			Status: st.queue,
			Clock:  d.Clock,
		}
		if w, err := cfg.QueueWindow(); err == nil && w != nil {
			qr.Window, qr.Lead = w, cfg.DrainTimeout.D() // (a config that loaded has a window that parses)
		}
		o := &agent.OrphanWatcher{
			Note: d.ReadCordonNote,
			Gone: d.HolderGone,
			Undo: func(ctx context.Context, n drainer.CordonNote) (bool, error) {
				defer afterHold()
				return d.UndoOrphanCordon(ctx, n)
			},
			Out:    env.Stderr,
			Status: st.guard,
			Clock:  d.Clock,
		}
		var wg sync.WaitGroup
		wg.Add(5)
		// The reboot slots are kept from now on, beside the uncordon
		// after boot, which may wait long (for the API server, for the
		// Node to be Ready, for a shutdown due within drainTimeout): a
		// slot this boot took meanwhile (shutdown -r +5 right after boot)
		// must be renewed, or others reclaim it. The slot of the last boot
		// is freed only once the node has settled, uncordoned. It starts
		// once the API server has answered the uncordon (or that is over):
		// an API server down after boot is retried by the uncordon alone.
		go func() {
			defer wg.Done()
			if !done {
				select {
				case <-apiUp:
				case <-uncordonOver:
				case <-ctx.Done():
					return
				}
			}
			keepSlots(ctx, d, cfg, connectGate, say, u.Debug)
		}()
		go func() { defer wg.Done(); _ = f.Run(ctx) }()
		go func() { defer wg.Done(); _ = g.Run(ctx) }()
		go func() { defer wg.Done(); _ = o.Run(ctx) }()
		go func() { defer wg.Done(); _ = qr.Run(ctx) }()
		alock.SetState(drainer.AgentGuarding)
		if !done {
			r = <-uncordoned
		}
		switch r.Outcome {
		case agent.Uncordoned:
			st.uncordonDone("uncordoned " + r.Node + " after boot")
		case agent.Left:
			st.uncordonDone("nothing to uncordon after boot (" + r.Why + ")")
		default:
			st.uncordonDone("")
		}
		wg.Wait()
	}
	stop()
	<-renewed
	_ = notify.Notify("STOPPING=1")
	if sig := d.Signal.Caught(); sig != 0 {
		say("agent stopping on %s", signals.Name(sig))
	} else {
		say("agent stopping")
	}
	return 0
}

// cancelSchedule cancels logind's scheduled shutdown if it is still typ
// at usec (false if another stands, or none): a schedule made meanwhile is
// someone's new request, not the one refused.
func cancelSchedule(ctx context.Context, address, typ string, usec uint64) (bool, error) {
	conn, err := logind.Dial(ctx, address, false)
	if err != nil {
		return false, fmt.Errorf("system bus %s: %w", address, err)
	}
	defer conn.Close()
	l := conn.Logind()
	t, u, err := l.ScheduledShutdown(ctx)
	if err != nil || t != typ || u != usec {
		return false, err
	}
	return l.CancelScheduledShutdown(ctx)
}

// drainedWhat is the shutdown guard's phrase for the marker of a drain
// that gnsh made for the shutdown under way. A drain ahead of a schedule
// names it; a request whose time had come by the drain's end (shutdown -r
// 0, +0, a time within the drain) had no schedule to be ahead of: logind
// acted at once.
func drainedWhat(m drainer.Marker) string {
	what := "already drained for by gnsh " + m.Action + " at " + m.Time.Format(time.RFC3339)
	if m.Deadline != nil && m.Deadline.After(m.Time) {
		what += " ahead of the schedule for " + m.Deadline.Format(time.RFC3339)
	}
	return what
}
