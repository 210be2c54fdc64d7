// Package agent is gnsh's node agent, run by gnsh.service as `gnsh agent`.
//
// Its first job (this file) is the uncordon after boot: a reboot through
// gnsh leaves the node cordoned by gnsh, and nothing else makes it
// schedulable again. The Uncordoner waits until the kubelet has reported
// the Node Ready for this boot, then undoes gnsh's own cordon if, and only
// if, it was made for a shutdown in an earlier boot:
//
//   - gnsh's cordon stands (drain.Owner: the node is unschedulable, carries
//     gnsh's annotation, and managedFields still show gnsh as the manager
//     of spec.unschedulable), so an admin's cordon, or an admin's cordon
//     made again after a kubectl uncordon, is never undone;
//   - its Action is a shutdown (reboot, poweroff, halt, kexec): a
//     `gnsh drain` maintenance cordon stays until `gnsh uncordon`;
//   - its BootID is not this boot's: a cordon made in this boot belongs to
//     a shutdown that has not happened (yet).
//
// The decision and the patch are one resourceVersion-guarded
// drain.Uncordon, so a change made in between is never overwritten, and
// they run under the drain lock (/run/gnsh/drain.flock), so the agent never
// undoes a cordon that a drain running at that moment relies on (it waits
// for the drain to end). Nor while systemd-logind prepares for a shutdown,
// or has one due within drainTimeout (Shutdown): a reboot run right after
// boot drains under gnsh's cordon of the last boot, and releases the lock
// once logind has the shutdown.
//
// After the uncordon, or deciding there is nothing to do, `gnsh agent`
// keeps running (the shutdown handling of later phases lives there too).
//
// While the Node is not Ready for this boot the agent waits on a watch of
// that one Node, so the uncordon follows the kubelet's Ready at once; the
// poll stays as the upper bound and the fallback (readywatch.go).
//
// The API server may come up minutes after the node: every failure is
// retried with backoff (1 s doubling to 30 s) for as long as the agent
// runs, each request bounded, and the waiting is logged at most every
// 30 s, one line an event.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/kube"
)

// Defaults for the Uncordoner's timing.
const (
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 30 * time.Second
	DefaultReadyPoll      = 5 * time.Second
	DefaultLogEvery       = 30 * time.Second
	DefaultAPITimeout     = kube.DefaultConnectTimeout
	// DefaultKubeconfigPoll is how often the agent looks for a kubeconfig
	// on a machine that has none yet (the package or the role installed
	// gnsh before kubeadm join).
	DefaultKubeconfigPoll = 5 * time.Second
)

// DefaultReadyWatchMax bounds the wait on a watch of the Node for it to
// turn Ready for this boot: the Node is read again at least this often
// even if the watch shows nothing (readywatch.go).
const DefaultReadyWatchMax = 30 * time.Second

// ErrLockHeld is what Uncordoner.Lock wraps when another gnsh holds the
// drain lock.
var ErrLockHeld = errors.New("the drain lock is held")

// ShutdownActions are the Ownership actions of a cordon made before a
// shutdown; only those are undone after boot.
var ShutdownActions = drain.ShutdownActions

// Outcome is how the uncordon after boot ended.
type Outcome int

const (
	// Stopped: the context ended first (SIGTERM).
	Stopped Outcome = iota
	// Uncordoned: gnsh's cordon from an earlier boot was undone.
	Uncordoned
	// Left: nothing to undo; Result.Why says why.
	Left
)

var outcomeNames = [...]string{"stopped", "uncordoned", "left"}

func (o Outcome) String() string { return outcomeNames[o] }

// Result is what the Uncordoner did.
type Result struct {
	Outcome Outcome
	Node    string
	Why     string           // one sentence, for the log
	Owner   *drain.Ownership // gnsh's record of the cordon, when there was one
}

// Uncordoner is the uncordon after boot. Connect is required; every other
// field has a default.
type Uncordoner struct {
	// Connect returns a client and this node's name. An error wrapping
	// kube.ErrNoKubeconfig means this machine is not a Kubernetes node
	// (yet: gnsh may be installed before kubeadm join): it is asked again
	// every KubeconfigPoll until a kubeconfig appears. So is a
	// *kube.KubeconfigError (the kubeconfig named in the config file is
	// not usable: said as a waiting line, not as "not a node"). Any other
	// error is retried with backoff.
	Connect func(ctx context.Context) (kubernetes.Interface, string, error)
	// BootID is this boot's /proc/sys/kernel/random/boot_id
	// (drainer.BootID() if empty).
	BootID string
	// BootTime returns when this boot started (BootTimeFromUptime with the
	// clock if nil). It is asked afresh at each check, so a clock stepped
	// by NTP after boot does not skew it.
	BootTime func() (time.Time, error)
	Clock    clock.WithTicker // clock.RealClock if nil
	// APITimeout bounds each request (DefaultAPITimeout if zero).
	APITimeout time.Duration
	// Lock, if set, takes the drain lock for node, without waiting; it
	// returns ErrLockHeld (wrapped) while another gnsh drains, and the
	// agent then waits. The uncordon runs under it, so it never undoes a
	// cordon a drain (say, a reboot right after boot) is relying on.
	Lock func(node string) (release func(), err error)
	// Shutdown, if set, says whether a shutdown is under way or scheduled
	// (logind's PreparingForShutdown and ScheduledShutdown), as a phrase
	// ("" for none). It is asked under the drain lock, just before the
	// uncordon: a reboot run right after boot drains under gnsh's cordon
	// of the last boot and releases the lock once logind has it, and the
	// agent must not undo that cordon while logind waits for the delay
	// locks or for the scheduled time. While one is pending the agent
	// waits; if the shutdown is cancelled it goes on. An error (logind
	// unreachable) is said once and does not stop the uncordon.
	Shutdown func(ctx context.Context) (pending string, err error)
	// OnNode, if set, is called once, as soon as a Connect shows that this
	// machine is a Kubernetes node (a kubeconfig was found), whether or not
	// the API server answered: gnsh agent then starts guarding shutdowns
	// beside the wait for the Node to be Ready.
	OnNode func()
	// OnAPI, if set, is called once, when the API server first answers
	// the Node read (Ready for this boot or not, whatever comes next).
	OnAPI func()
	// NotNode, if set, is called once when the first Connect finds no
	// kubeconfig: gnsh agent says so to systemd and to the wrapper.
	NotNode func()
	// Check is asked about the Node before anything is decided, and goes
	// with the uncordon's patch (drain.Check): gnsh agent's is that the
	// Node is this machine (kube.HostID.Check), so that a wrong node name
	// never makes another machine's Node, Ready with a heartbeat after this
	// boot, lose a cordon its own reboot relies on. nil checks nothing.
	Check drain.Check
	// Events: post the GnshUncordoned Event on the Node.
	Events bool
	// Conditions: write the Node lifecycle conditions (KEP-5683) once it
	// uncordoned (config nodeConditions).
	Conditions bool
	// Out receives the log: one line an event, each starting "gnsh: ".
	Out io.Writer
	// Status, if set, receives each waiting line as it is logged (without
	// "gnsh: "): gnsh agent sends it to systemd as STATUS=.
	Status func(string)
	Debug  bool // also log each check's details

	// Timing; the Default… constants if zero. ReadyPoll is how often the
	// agent looks again while it waits for anything but the Node (the
	// drain lock, a pending shutdown), and while it waits for the Node
	// without a watch of it; ReadyWatchMax bounds a wait on the watch.
	InitialBackoff, MaxBackoff, ReadyPoll, ReadyWatchMax, LogEvery, KubeconfigPoll time.Duration

	toldShutdownErr bool
	lastLog         time.Time
	lastKey         string
	quiet           int // lines held back since the last one written

	// notReady is the Node as last read while it was not Ready for this
	// boot (nil for any other wait): Run then waits on a watch of it.
	notReady *corev1.Node
	noWatch  bool // the API server refused the watch of the Node
}

func (u *Uncordoner) clock() clock.WithTicker {
	if u.Clock == nil {
		return clock.RealClock{}
	}
	return u.Clock
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func (u *Uncordoner) printf(format string, args ...any) {
	if u.Out == nil {
		return
	}
	line := fmt.Sprintf(format, args...)
	line = strings.ReplaceAll(line, "\n", " ")
	fmt.Fprintf(u.Out, "gnsh: %s\n", line)
}

func (u *Uncordoner) debugf(format string, args ...any) {
	if u.Debug {
		u.printf("debug: "+format, args...)
	}
}

// waiting logs a line about why the agent is still waiting: at once when
// the kind of wait (key) changes, else at most every LogEvery.
func (u *Uncordoner) waiting(key string, format string, args ...any) {
	now := u.clock().Now()
	if key == u.lastKey && !u.lastLog.IsZero() && now.Sub(u.lastLog) < orDefault(u.LogEvery, DefaultLogEvery) {
		u.quiet++
		u.debugf(format, args...)
		return
	}
	if u.quiet > 0 {
		format += " (" + strconv.Itoa(u.quiet) + " more attempts since the last line)"
	}
	u.printf(format, args...)
	if u.Status != nil {
		u.Status(strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " "))
	}
	u.lastLog, u.lastKey, u.quiet = now, key, 0
}

// Run waits until the Node is Ready for this boot and then undoes gnsh's
// cordon from an earlier boot, if one stands. It retries every failure
// until it is done or ctx ends (Outcome Stopped, with ctx's error).
func (u *Uncordoner) Run(ctx context.Context) (Result, error) {
	if u.Connect == nil {
		return Result{}, errors.New("agent: Uncordoner.Connect is nil")
	}
	bootID := u.BootID
	if bootID == "" {
		bootID = drainer.BootID()
	}
	backoff := orDefault(u.InitialBackoff, DefaultInitialBackoff)
	var (
		c            kubernetes.Interface
		node         string
		noKubeconfig bool // the last Connect found none, and said so
		badNamed     bool // the last Connect found the kubeconfig named unusable
	)
	for {
		if err := ctx.Err(); err != nil {
			return Result{Outcome: Stopped, Node: node, Why: "stopped"}, err
		}
		var wait time.Duration
		grow := false // an error: the backoff grows
		if c == nil {
			var err error
			c, node, err = u.Connect(ctx)
			if errors.Is(err, kube.ErrNoKubeconfig) {
				c = nil
				poll := orDefault(u.KubeconfigPoll, DefaultKubeconfigPoll)
				if !noKubeconfig {
					noKubeconfig = true
					u.printf("no kubeconfig found: not a Kubernetes node (yet); looking for one every %s", poll)
					if u.NotNode != nil {
						u.NotNode()
					}
				}
				u.sleep(ctx, poll)
				continue
			}
			if ke := (*kube.KubeconfigError)(nil); errors.As(err, &ke) {
				// The kubeconfig named in the config file (or gnsh's own
				// /etc/gnsh/kubeconfig) is not there (yet: kubeadm join
				// writes kubelet.conf) or not a kubeconfig: a
				// mistake in the configuration, and every shutdown through
				// the wrapper is refused. Looked at again as often as for
				// a kubeconfig that is not there, and said as a waiting
				// line (the journal and systemctl status).
				c, badNamed = nil, true
				poll := orDefault(u.KubeconfigPoll, DefaultKubeconfigPoll)
				u.waiting("kubeconfig", "%v: shutdowns through gnsh are refused (but with --no-drain) and the node is not guarded until it is fixed or removed; looking again every %s", err, poll)
				u.sleep(ctx, poll)
				continue
			}
			if noKubeconfig || badNamed {
				u.printf("found a kubeconfig: this machine is a Kubernetes node now")
				noKubeconfig, badNamed = false, false
			}
			if u.OnNode != nil {
				u.OnNode()
				u.OnNode = nil
			}
			if err != nil {
				c = nil
				wait, grow = backoff, true
				u.waiting("connect", "cannot reach the cluster yet (%v); retrying in %s", err, wait)
			}
		}
		if c != nil {
			r, ready, err := u.check(ctx, c, node, bootID)
			switch {
			case err == nil && ready: // done, even if a signal came meanwhile
				u.printf("%s", r.Why)
				return r, nil
			case ctx.Err() != nil:
				continue
			case err != nil:
				wait, grow = backoff, true
				u.waiting("api", "%s: %v; retrying in %s", node, err, wait)
			default: // not ready yet
				backoff = orDefault(u.InitialBackoff, DefaultInitialBackoff)
				wait = orDefault(u.ReadyPoll, DefaultReadyPoll)
				kind, _, _ := strings.Cut(r.Why, ":")
				u.waiting(kind, "%s", r.Why)
				if n := u.notReady; n != nil {
					u.notReady = nil
					u.waitReady(ctx, c, n)
					continue
				}
			}
		}
		if grow {
			backoff = min(2*backoff, orDefault(u.MaxBackoff, DefaultMaxBackoff))
		}
		u.sleep(ctx, wait)
	}
}

// sleep waits for d on the clock, or until ctx ends.
func (u *Uncordoner) sleep(ctx context.Context, d time.Duration) {
	t := u.clock().NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
	case <-t.C():
	}
}

// check is one attempt: read the Node, see whether it is Ready for this
// boot, and if so decide and uncordon under the drain lock. ready false
// means wait; r.Why is then the log line, "waiting for …: why" (the part
// before the colon tells kinds of waits apart).
func (u *Uncordoner) check(ctx context.Context, c kubernetes.Interface, node, bootID string) (r Result, ready bool, err error) {
	timeout := orDefault(u.APITimeout, DefaultAPITimeout)
	u.notReady = nil
	boot, err := u.bootTime()
	if err != nil {
		return Result{}, false, err
	}
	n, err := get(ctx, timeout, func(ctx context.Context) (*corev1.Node, error) {
		return c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	})
	if err != nil {
		return Result{}, false, fmt.Errorf("read Node: %w", err)
	}
	if u.OnAPI != nil {
		u.OnAPI()
		u.OnAPI = nil
	}
	ok, why := ReadyForBoot(n, boot, bootID, nil)
	if !ok && readyTrue(n) {
		// The Node's heartbeat may be minutes old while the kubelet is
		// well alive: it renews its Lease every 10 s.
		l, lerr := get(ctx, timeout, func(ctx context.Context) (*leaseTime, error) {
			l, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil {
				return nil, err
			}
			return &leaseTime{l.Spec.RenewTime.Time}, nil
		})
		switch {
		case lerr != nil:
			u.debugf("%s: Lease not read: %v", node, lerr)
		case l != nil:
			ok, why = ReadyForBoot(n, boot, bootID, &l.t)
		}
	}
	if !ok {
		u.notReady = n
		return Result{Node: node, Why: "waiting for " + node + " to be Ready for this boot: " + why}, false, nil
	}
	u.debugf("%s is Ready for this boot: %s", node, why)
	if u.Check != nil {
		// Only now: before the kubelet has reported in this boot, the
		// Node may still show this machine's IDs of before (a reimage).
		if err := u.Check(n); err != nil {
			return notThisMachine(node, err), false, nil
		}
	}
	if o := drain.Owner(n); o == nil || !isShutdown(o.Action) {
		// Nothing of gnsh's for a shutdown: no need for the drain lock,
		// which a shutdown typed meanwhile would wait for. (A cordon of
		// this boot may be an earlier boot's taken over by a drain for a
		// shutdown under way: it is given back if that shutdown is
		// cancelled, so the wait under the lock below stays for it.)
		return u.left(node, n, o, bootID, boot), true, nil
	}

	unlock := func() {}
	if u.Lock != nil {
		release, err := u.Lock(node)
		if errors.Is(err, ErrLockHeld) {
			return Result{Node: node, Why: "waiting for the drain of " + node + " to end: " + err.Error()}, false, nil
		}
		if err != nil {
			return Result{}, false, err
		}
		var once sync.Once
		unlock = func() { once.Do(release) }
		defer unlock()
	}
	if u.Shutdown != nil {
		pending, err := get(ctx, timeout, u.Shutdown)
		switch {
		case err != nil && !u.toldShutdownErr:
			u.toldShutdownErr = true
			u.printf("cannot ask systemd-logind whether a shutdown is pending (%v); going on", err)
		case pending != "":
			return Result{Node: node, Why: "waiting for the pending shutdown: " + pending + "; gnsh's cordon stays while it is"}, false, nil
		}
	}
	var seen *drain.Ownership
	only := func(o *drain.Ownership) bool {
		seen = o
		return u.fromEarlierBoot(o, bootID, boot)
	}
	uctx, cancel := context.WithTimeout(ctx, 2*timeout)
	defer cancel()
	undone, err := drain.Uncordon(uctx, c, node, only, u.Check)
	unlock() // the Event needs no lock: a drain may start now
	if errors.As(err, new(*kube.OtherMachineError)) {
		return notThisMachine(node, err), false, nil
	}
	if err != nil {
		return Result{}, false, err
	}
	if undone {
		r = Result{Outcome: Uncordoned, Node: node, Owner: seen,
			Why: fmt.Sprintf("%s uncordoned after boot: cordoned by gnsh for a %s requested by %s at %s, in an earlier boot",
				node, seen.Action, seen.Requester(), seen.Time.UTC().Format(time.RFC3339))}
		if u.Events {
			msg := fmt.Sprintf("Uncordoned after boot: cordoned by gnsh for a %s requested by %s at %s",
				seen.Action, seen.Requester(), seen.Time.UTC().Format(time.RFC3339))
			if err := drainer.PostEvent(ctx, c, node, "Normal", drainer.ReasonUncordoned, msg, timeout); err != nil {
				u.printf("event %s not posted: %v", drainer.ReasonUncordoned, err)
			}
		}
		if u.Conditions {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			err := drain.SetLifecycle(cctx, c, node, drain.Lifecycle{Reason: drain.ConditionReasonUncordoned, Message: "uncordoned after boot by gnsh's node agent"}, u.clock().Now())
			cancel()
			if err != nil {
				u.printf("node conditions not written: %v", err)
			}
		}
		return r, true, nil
	}
	// Left as it is: say why, from the Node as it was when Uncordon read
	// it (seen) or as read above.
	o := seen
	if o == nil {
		o = drain.Owner(n)
	}
	return u.left(node, n, o, bootID, boot), true, nil
}

// notThisMachine is the wait while Check says the Node is another
// machine's (err): nothing of it is touched.
func notThisMachine(node string, err error) Result {
	return Result{Node: node, Why: "waiting for " + node + " to be this machine: " + err.Error() +
		"; nothing is uncordoned (set node in /etc/gnsh/config.yaml, or --node, to this machine's Node name)"}
}

// left explains why nothing was uncordoned.
func (u *Uncordoner) left(node string, n *corev1.Node, o *drain.Ownership, bootID string, boot time.Time) Result {
	r := Result{Outcome: Left, Node: node, Owner: o}
	switch {
	case o == nil && !n.Spec.Unschedulable:
		r.Why = node + " is schedulable: nothing to uncordon after boot"
	case o == nil:
		r.Why = node + " is cordoned, but not by gnsh (or cordoned again since gnsh did): left as it is"
	case !isShutdown(o.Action):
		r.Why = fmt.Sprintf("%s is cordoned by %s (requested by %s at %s): left until 'gnsh uncordon'",
			node, o.Request(), o.Requester(), o.Time.UTC().Format(time.RFC3339))
	case !u.fromEarlierBoot(o, bootID, boot):
		r.Why = fmt.Sprintf("%s is cordoned by gnsh for a %s requested by %s at %s in this boot: that %s has not happened, left as it is",
			node, o.Action, o.Requester(), o.Time.UTC().Format(time.RFC3339), o.Action)
	default:
		// Uncordon met a Node that changed in between (say, kubectl
		// uncordon): nothing of gnsh's to undo any more.
		r.Why = node + " changed while gnsh looked: nothing of gnsh's to uncordon"
	}
	return r
}

// fromEarlierBoot reports whether gnsh's cordon record o was made for a
// shutdown in an earlier boot than this one. A record without a boot ID
// (it could not be read) falls back on its time against the boot time.
func (u *Uncordoner) fromEarlierBoot(o *drain.Ownership, bootID string, boot time.Time) bool {
	if !isShutdown(o.Action) {
		return false
	}
	if o.BootID != "" && bootID != "" {
		return !strings.EqualFold(strings.TrimSpace(o.BootID), bootID)
	}
	return !o.Time.IsZero() && o.Time.Before(boot)
}

func isShutdown(action string) bool {
	for _, a := range ShutdownActions {
		if action == a {
			return true
		}
	}
	return false
}

func (u *Uncordoner) bootTime() (time.Time, error) {
	if u.BootTime != nil {
		return u.BootTime()
	}
	return BootTimeFromUptime(u.clock().Now(), "/proc/uptime")
}

// BootTimeFromUptime is now minus the uptime read from path (/proc/uptime).
func BootTimeFromUptime(now time.Time, path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return time.Time{}, fmt.Errorf("%s: empty", path)
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	return now.Add(-time.Duration(secs * float64(time.Second))), nil
}

type leaseTime struct{ t time.Time }

// get runs one request bounded by timeout.
func get[T any](ctx context.Context, timeout time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(ctx)
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func readyTrue(n *corev1.Node) bool {
	c := readyCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue
}

// ReadyForBoot reports whether the kubelet has reported Node n Ready since
// this boot started at boot: the Ready condition is True and either the
// kubelet reports this boot's ID (status.nodeInfo.bootID), or the
// condition's lastHeartbeatTime, or the node Lease's renewTime (leaseRenew,
// if known), is later than boot. A Ready=True from before the boot (the
// kubelet did not report the shutdown, and the node controller has not yet
// marked it Unknown) does not count. why says what decided.
func ReadyForBoot(n *corev1.Node, boot time.Time, bootID string, leaseRenew *time.Time) (ok bool, why string) {
	c := readyCondition(n)
	switch {
	case c == nil:
		return false, "the kubelet has not reported a Ready condition"
	case c.Status != corev1.ConditionTrue:
		why = fmt.Sprintf("Ready is %s", c.Status)
		if c.Reason != "" {
			why += " (" + c.Reason + ")"
		}
		return false, why
	case bootID != "" && strings.EqualFold(strings.TrimSpace(n.Status.NodeInfo.BootID), bootID):
		return true, "Ready, and the kubelet reports this boot's ID"
	case c.LastHeartbeatTime.After(boot):
		return true, "Ready, heartbeat at " + c.LastHeartbeatTime.UTC().Format(time.RFC3339) + ", after this boot began"
	case leaseRenew != nil && leaseRenew.After(boot):
		return true, "Ready, node Lease renewed at " + leaseRenew.UTC().Format(time.RFC3339) + ", after this boot began"
	}
	return false, fmt.Sprintf("Ready=True was last reported at %s, before this boot began at %s",
		c.LastHeartbeatTime.UTC().Format(time.RFC3339), boot.UTC().Format(time.RFC3339))
}
