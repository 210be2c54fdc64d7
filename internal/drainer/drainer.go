// Package drainer is gnsh's drain policy around a shutdown: it drains the
// node before a legacy command hands off to logind (as a
// handoff.Preparer), and runs the `gnsh drain` and `gnsh uncordon`
// subcommands.
//
// It is split by concern:
//
//   - policy.go: the rules, as one pure function from how a drain attempt
//     ended (an outcome) to what happens next (a verdict);
//   - run.go: one attempt: its steps, its state (lock, session, cordon,
//     signal modes) and, as handoff.Prepared, the undo after a refused
//     hand-off;
//   - session.go: the cluster connection, this machine's Node, cordon and
//     uncordon, Events;
//   - messages.go: every sentence an admin reads;
//   - lock.go, progress.go: the drain lock and the live status line.
//
// Signals are handled once, by the internal/signals.Handler made in main:
// the drainer only asks for its Drain and Hold modes.
package drainer

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/caller"
	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/signals"
)

// Drainer holds what every drain needs from the outside world. It keeps no
// per-run state: each Prepare (or subcommand) makes a run. The zero value
// needs Stderr and Getenv.
type Drainer struct {
	Stderr io.Writer
	// TTY: a person is at the terminal on stderr (caller.Answer.Live):
	// one live status line, rewritten in place. Otherwise (a captured
	// terminal: Ansible's ssh -tt) plain lines, each said once.
	TTY    bool
	Getenv func(string) string
	// Caller is who runs the command (internal/caller: a person at a
	// terminal, or automation, and why), for the decision to queue a
	// reboot that gets no slot (slots.queue: auto) and its lines; nil
	// when not asked (tests).
	Caller *caller.Answer

	ConfigPath string // config.Path, or $GNSH_CONFIG, if empty
	LockDir    string // DefaultLockDir if empty
	// KubeRoot prefixes the well-known kubeconfig paths, this machine's
	// ID files and logind's schedule file (tests only).
	KubeRoot   string
	Kubeconfig string // --kubeconfig (subcommands); overrides the config
	Node       string // --node (subcommands); overrides the config
	Hostname   func() (string, error)

	Who    Requester        // who asks; WhoAsks() if empty
	BootID string           // BootID() if empty
	HostID *kube.HostID     // this machine's IDs; kube.ReadHostID(KubeRoot) if nil
	Clock  clock.WithTicker // clock.RealClock if nil
	Signal *signals.Handler // the process's signal handler; nil handles none
	// Connect, if set, replaces kubeconfig discovery (unit tests).
	Connect func(ctx context.Context) (kubernetes.Interface, string, error)
	// ConnectGate, if set with Connect, is the reboot-slot gate's own
	// client (unit tests); without it the gate uses Connect's.
	ConnectGate func(ctx context.Context) (kubernetes.Interface, error)
	// Agent: this is the node agent's drainer. Its drain locks say so
	// (HolderAgent, HolderAgentDrain), so that a wrapper waits for them
	// rather than refuse the shutdown; and it never waits for a lock.
	Agent bool
	// Relies, if set, says whether a shutdown may rely on one of gnsh's
	// cordons: the agent's undos (UndoScheduleCordon, UndoOrphanCordon)
	// leave a cordon it names.
	Relies Relies

	// Automated, if set, says whether the command was asked with no
	// person at a terminal, and why (slots.queue: auto queues such
	// requests when no slot is free at once); nil: a person.
	Automated func() (bool, string)
	// Journal, if set, writes a line to the system journal (warning:
	// its priority), for the refusals and queued reboots of commands
	// whose output nobody may read.
	Journal func(warning bool, line string)

	// idMu guards the lazy filling of Who, BootID and HostID: the node
	// agent's uncordon, shutdown guard and schedule follower share one
	// Drainer from their own goroutines.
	idMu sync.Mutex
	// saidFallback: the drain's fallback to gnsh's own kubeconfig was
	// said (once per process).
	saidFallback atomic.Bool
}

var (
	_ handoff.Preparer     = (*Drainer)(nil)
	_ handoff.DryRunNoter  = (*Drainer)(nil)
	_ handoff.NoDrainNoter = (*Drainer)(nil)
	_ handoff.AcceptNoter  = (*Drainer)(nil)
)

func (d *Drainer) getenv(k string) string {
	if d.Getenv == nil {
		return ""
	}
	return d.Getenv(k)
}

func (d *Drainer) clock() clock.WithTicker {
	if d.Clock == nil {
		return clock.RealClock{}
	}
	return d.Clock
}

func (d *Drainer) now() time.Time { return d.clock().Now() }

func (d *Drainer) configPath() string {
	switch {
	case d.ConfigPath != "":
		return d.ConfigPath
	case d.getenv("GNSH_CONFIG") != "":
		return d.getenv("GNSH_CONFIG")
	}
	return config.Path
}

func (d *Drainer) who() Requester {
	d.idMu.Lock()
	defer d.idMu.Unlock()
	if d.Who.User == "" {
		d.Who = WhoAsks(d.getenv)
	}
	return d.Who
}

func (d *Drainer) bootID() string {
	d.idMu.Lock()
	defer d.idMu.Unlock()
	if d.BootID == "" {
		d.BootID = BootID()
	}
	return d.BootID
}

func (d *Drainer) hostID() kube.HostID {
	d.idMu.Lock()
	defer d.idMu.Unlock()
	if d.HostID == nil {
		h := kube.ReadHostID(d.KubeRoot)
		d.HostID = &h
	}
	return *d.HostID
}

func (d *Drainer) lockDir() string {
	if d.LockDir != "" {
		return d.LockDir
	}
	return DefaultLockDir
}

func (d *Drainer) debugOn(cfg config.Config) bool { return cfg.Debug || d.getenv("GNSH_DEBUG") == "1" }

// locator finds the kubeconfig and node name: flags, then the config file.
func (d *Drainer) locator(cfg config.Config) kube.Locator {
	loc := kube.Locator{Kubeconfig: d.Kubeconfig, NodeName: d.Node, Getenv: d.getenv, Root: d.KubeRoot,
		Hostname: d.Hostname, Timeout: cfg.APITimeout.D()}
	if loc.Kubeconfig == "" && cfg.Kubeconfig != "" {
		loc.Kubeconfig, loc.KubeconfigFrom = cfg.Kubeconfig, "kubeconfig in "+d.configPath()
	}
	if loc.NodeName == "" {
		loc.NodeName = cfg.Node
	}
	if cfg.Slots.Kubeconfig != "" {
		loc.GateKubeconfigPath, loc.GateKubeconfigFrom = cfg.Slots.Kubeconfig, "slots.kubeconfig in "+d.configPath()
	}
	return loc
}

// Prepare is handoff.Preparer: it drains before the hand-off. The returned
// run holds the lock, the cordon and the signal mode until Finish. For
// shutdown -c it first stops a run for a schedule that still waits for its
// reboot slot or drains (stopRuns), before logind cancels.
func (d *Drainer) Prepare(ctx context.Context, req *legacy.Request) (handoff.Prepared, error) {
	// The notes of the schedule that stands (a dry run's, a --no-drain
	// schedule's) stay until logind has taken another request (Accepted):
	// a refused request leaves that schedule standing.
	switch {
	case req.Action == legacy.Cancel:
		c := &cancelRun{d: d, req: req}
		c.stopRuns(ctx)
		return c, nil
	case req.Drain.Skip:
		newRun(d, forShutdown, req.Action.String()).debug("--no-drain: not draining")
		return d.noteNoDrain(req), nil
	}
	p := forShutdown
	if req.Force != 0 {
		p = forForce
	}
	r := newRun(d, p, req.Action.String())
	return r.prepare(ctx, req)
}

// ConfigFile is the config file this drainer reads: ConfigPath,
// $GNSH_CONFIG, else config.Path. (For the node agent.)
func (d *Drainer) ConfigFile() string { return d.configPath() }

// Locator is the kube.Locator a drain with cfg uses: --kubeconfig and
// --node, then the config file, then discovery. (For the node agent.)
func (d *Drainer) Locator(cfg config.Config) kube.Locator { return d.locator(cfg) }

// ThisBoot is this boot's ID: BootID, else /proc/sys/kernel/random/boot_id.
func (d *Drainer) ThisBoot() string { return d.bootID() }

// AcquireLock takes the drain lock for action on node, as this process and
// user, without waiting (a *HeldError if another gnsh holds it), for
// bookkeeping bounded by until. (For the node agent, which must not undo a
// cordon while a drain is using it.)
func (d *Drainer) AcquireLock(action, node string, until time.Time) (*Lock, error) {
	return d.lock(action, node, false, until)
}

// MachineCheck is the check every write to this node's Node goes through:
// that the Node is this machine (kube.HostID.Check). (For the node agent.)
func (d *Drainer) MachineCheck() drain.Check { return d.hostID().Check }
