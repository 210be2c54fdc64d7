// Package drainer is gnsh's drain policy: it drains the node before a
// legacy command hands off to logind (as a handoff.Preparer), and runs the
// `gnsh drain` and `gnsh uncordon` subcommands. It decides what happens
// when the cluster is unreachable, the drain is blocked, the admin presses
// Ctrl-C or the ssh session drops, and it keeps one drain per node at a
// time.
//
// The rules, in short: no kubeconfig means not a Kubernetes node (one
// debug line, hand off); an unreachable API server never stops a reboot
// (a warning, hand off); a drain that cannot finish in time refuses the
// shutdown and undoes gnsh's cordon, unless forced; gnsh never removes a
// cordon it did not make.
package drainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/legacy"
)

// Drainer drains this node. The zero value needs Stderr and Getenv.
type Drainer struct {
	Stderr io.Writer
	TTY    bool // stderr is a terminal: one live status line
	Getenv func(string) string

	ConfigPath string // config.Path, or $GNSH_CONFIG, if empty
	LockDir    string // DefaultLockDir if empty
	// KubeRoot prefixes the well-known kubeconfig paths (tests only).
	KubeRoot   string
	Kubeconfig string // --kubeconfig (subcommands); overrides the config
	Node       string // --node (subcommands); overrides the config
	Hostname   func() (string, error)

	Who    Requester // who asks; WhoAsks() if empty
	BootID string    // BootID() if empty
	// Signals subscribes to SIGINT and SIGTERM (os/signal if nil).
	Signals func() (<-chan os.Signal, func())
	// Connect, if set, replaces kubeconfig discovery (unit tests).
	Connect func(ctx context.Context) (kubernetes.Interface, string, error)

	cfg      config.Config
	sess     *session
	cordoned bool // this run made the cordon
	prog     *progress
	// holdSignals keeps SIGINT/SIGTERM caught after a successful drain
	// until releaseSignals: once drained, the hand-off is not interrupted
	// half way (it takes milliseconds and is bounded).
	holdSignals    bool
	releaseSignals func() syscall.Signal
}

// session is a connection to the cluster with this node's name.
type session struct {
	c    kubernetes.Interface
	node string
}

func (d *Drainer) getenv(k string) string {
	if d.Getenv == nil {
		return ""
	}
	return d.Getenv(k)
}

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
	if d.Who.User == "" {
		d.Who = WhoAsks(d.getenv)
	}
	return d.Who
}

func (d *Drainer) bootID() string {
	if d.BootID == "" {
		d.BootID = BootID()
	}
	return d.BootID
}

// Output: every line starts with "gnsh: " and goes to stderr.
func (d *Drainer) out() *progress {
	if d.prog == nil {
		d.prog = newProgress(d.Stderr, d.TTY, "")
	}
	return d.prog
}
func (d *Drainer) info(format string, args ...any) { d.out().printf(format, args...) }
func (d *Drainer) warn(format string, args ...any) {
	d.out().printf("warning: "+format, args...)
}
func (d *Drainer) debug(format string, args ...any) {
	if d.cfg.Debug || d.getenv("GNSH_DEBUG") == "1" {
		d.out().printf("debug: "+format, args...)
	}
}

// LoadConfig reads the configuration file.
func (d *Drainer) LoadConfig() error {
	c, err := config.Load(d.configPath())
	d.cfg = c
	return err
}

func (d *Drainer) locator() kube.Locator {
	loc := kube.Locator{Kubeconfig: d.Kubeconfig, NodeName: d.Node, Getenv: d.getenv, Root: d.KubeRoot,
		Hostname: d.Hostname, Timeout: d.cfg.APITimeout.D()}
	if loc.Kubeconfig == "" {
		loc.Kubeconfig = d.cfg.Kubeconfig
	}
	if loc.NodeName == "" {
		loc.NodeName = d.cfg.Node
	}
	return loc
}

// isNode reports whether a kubeconfig can be found, without asking the API
// server: a machine without one is not a Kubernetes node.
func (d *Drainer) isNode() bool {
	if d.Connect != nil {
		return true
	}
	loc := d.locator()
	_, err := loc.FindKubeconfig()
	return !errors.Is(err, kube.ErrNoKubeconfig)
}

// connect finds the kubeconfig and the node name, each request bounded by
// apiTimeout. It returns kube.ErrNoKubeconfig when there is none.
func (d *Drainer) connect(ctx context.Context) (*session, error) {
	if d.Connect != nil {
		c, node, err := d.Connect(ctx)
		if err != nil {
			return nil, err
		}
		return &session{c: c, node: node}, nil
	}
	loc := d.locator()
	path, err := loc.FindKubeconfig()
	if err != nil {
		return nil, err
	}
	// A Kubernetes node: from here on a dropped ssh session (SIGHUP, and
	// SIGPIPE on writes to it) must not stop the command half way.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	rc, err := loc.RESTConfig(path)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*d.cfg.APITimeout.D())
	defer cancel()
	node, err := loc.ResolveNodeName(ctx, rc, c)
	if err != nil {
		return nil, err
	}
	d.debug("kubeconfig %s, node %s", path, node)
	return &session{c: c, node: node}, nil
}

func (d *Drainer) ownership(action string, when *time.Time) drain.Ownership {
	w := d.who()
	return drain.Ownership{Action: action, User: w.User, TTY: w.TTY, Time: time.Now().UTC().Truncate(time.Second),
		BootID: d.bootID(), When: when}
}

func (d *Drainer) event(ctx context.Context, s *session, typ, reason, format string, args ...any) {
	if !d.cfg.Events || s == nil {
		return
	}
	// A cancelled drain still reports why, so detach from ctx's
	// cancellation but keep the time bound.
	ctx = context.WithoutCancel(ctx)
	if err := PostEvent(ctx, s.c, s.node, typ, reason, fmt.Sprintf(format, args...), d.cfg.APITimeout.D()); err != nil {
		d.debug("event %s not posted: %v", reason, err)
	}
}

// notRegistered means the cluster has no Node of this name: there is
// nothing to drain.
type notRegistered struct{ node string }

func (e *notRegistered) Error() string { return "the cluster has no Node " + e.node }

// interrupted is a drain stopped by SIGINT or SIGTERM.
type interrupted struct{ sig syscall.Signal }

func (e *interrupted) Error() string { return "interrupted by " + sigName(e.sig) }

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// watchSignals makes the drain survive a dropped ssh session (SIGHUP and
// SIGPIPE ignored: output to a dead terminal fails quietly and the command
// carries on) and turns SIGINT/SIGTERM into a cancelled context. caught
// returns the signal received so far, if any; stop also restores SIGINT
// and SIGTERM.
func (d *Drainer) watchSignals(ctx context.Context) (_ context.Context, caught, stop func() syscall.Signal) {
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	var ch <-chan os.Signal
	var unsub func()
	if d.Signals != nil {
		ch, unsub = d.Signals()
	} else {
		c := make(chan os.Signal, 2)
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
		ch, unsub = c, func() { signal.Stop(c) }
	}
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var got syscall.Signal
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			mu.Lock()
			got = syscall.SIGTERM
			if ss, ok := s.(syscall.Signal); ok {
				got = ss
			}
			mu.Unlock()
			cancel()
		case <-quit:
		}
	}()
	caught = func() syscall.Signal {
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	var once sync.Once
	stop = func() syscall.Signal {
		once.Do(func() {
			close(quit)
			unsub()
			cancel()
		})
		return caught()
	}
	return ctx, caught, stop
}

// drainNode takes the lock, cordons (recording own), evicts and waits,
// posting Events and printing progress and a one-line summary. The cordon
// is left in place on failure, except when interrupted: then gnsh's own
// cordon is undone and *interrupted returned. Unreachable API servers
// return *drain.UnreachableError.
func (d *Drainer) drainNode(ctx context.Context, s *session, own drain.Ownership, timeout time.Duration) (*drain.Result, error) {
	lock, err := d.lock(own.Action, s.node)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	ctx, caught, stopSignals := d.watchSignals(ctx)
	drained := false
	defer func() {
		if drained && d.holdSignals {
			d.releaseSignals = stopSignals
		} else {
			stopSignals()
		}
	}()

	p := newProgress(d.Stderr, d.TTY, s.node)
	d.prog = p
	start := time.Now()
	made := false
	n, err := s.c.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
	if err != nil {
		err = fmt.Errorf("cordon %s: %w", s.node, err)
	} else {
		made, err = drain.Cordon(ctx, s.c, n, own)
	}
	if err != nil {
		if sg := caught(); sg != 0 {
			return nil, &interrupted{sg}
		}
		if drain.IsUnreachable(err) {
			return nil, &drain.UnreachableError{Err: err}
		}
		if apierrors.IsNotFound(err) {
			return nil, &notRegistered{s.node}
		}
		return nil, err
	}
	d.cordoned = d.cordoned || made
	if !made {
		d.sayAlreadyCordoned(ctx, s)
	}
	d.event(ctx, s, "Normal", ReasonDrainStarted, "Draining before %s requested by %s (timeout %s)", what(own.Action), who(own), timeout)
	ticker := time.NewTicker(time.Second)
	tickDone := make(chan struct{})
	go func() {
		for {
			select {
			case <-ticker.C:
				p.tick()
			case <-tickDone:
				return
			}
		}
	}()
	res, err := drain.Drain(ctx, s.c, drain.Options{
		Node: s.node, Timeout: timeout, GracePeriod: d.cfg.PodGracePeriod,
		UnreachableAfter: d.cfg.UnreachableAfter.D(),
		Progress:         p.update,
		Warn:             func(l string) { p.printf("evicting %s", l) },
	})
	ticker.Stop()
	close(tickDone)
	p.done()
	elapsed := time.Since(start).Round(100 * time.Millisecond)
	if sg := caught(); sg != 0 {
		d.undoCordon(s, "drain "+(&interrupted{sg}).Error())
		d.event(ctx, s, "Warning", ReasonDrainFailed, "Drain %s after %s; gnsh's cordon undone", (&interrupted{sg}).Error(), elapsed)
		return res, &interrupted{sg}
	}
	if err != nil {
		var ue *drain.UnreachableError
		if !errors.As(err, &ue) {
			d.event(ctx, s, "Warning", ReasonDrainFailed, "Drain failed after %s: %v", elapsed, err)
		}
		p.printf("drain of %s failed after %s: %s", s.node, elapsed, progressOf(res))
		return res, err
	}
	p.printf("drained %s in %s: %s", s.node, elapsed, summary(res))
	d.event(ctx, s, "Normal", ReasonDrainFinished, "Drained in %s: %s", elapsed, summary(res))
	drained = true
	return res, nil
}

// sayAlreadyCordoned tells whose cordon was there before this drain; it
// stays whatever happens.
func (d *Drainer) sayAlreadyCordoned(ctx context.Context, s *session) {
	n, err := s.c.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
	if err == nil {
		if o := drain.Owner(n); o != nil {
			d.info("%s was already cordoned by gnsh (%s requested by %s at %s); that cordon stays",
				s.node, what(o.Action), who(*o), o.Time.Local().Format("2006-01-02 15:04"))
			return
		}
	}
	d.info("%s was already cordoned, not by gnsh; that cordon stays", s.node)
}

// what names the request in messages: "reboot", or "gnsh drain".
func what(action string) string {
	if action == "drain" {
		return "gnsh drain"
	}
	return action
}

func who(o drain.Ownership) string {
	if o.TTY != "" {
		return o.User + " on " + o.TTY
	}
	return o.User
}

// lock takes the drain lock for action on node, as this process and user.
func (d *Drainer) lock(action, node string) (*Lock, error) {
	w := d.who()
	return Acquire(d.lockDir(), Holder{PID: os.Getpid(), Action: action, User: w.User, TTY: w.TTY, Node: node, Since: time.Now()})
}

func (d *Drainer) lockDir() string {
	if d.LockDir != "" {
		return d.LockDir
	}
	return DefaultLockDir
}

// undoCordon removes gnsh's cordon made by this run, with a fresh bounded
// context (the drain's own may be cancelled), and says so.
func (d *Drainer) undoCordon(s *session, why string) {
	if !d.cordoned {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*d.cfg.APITimeout.D())
	defer cancel()
	undone, err := drain.Uncordon(ctx, s.c, s.node, drain.Ours)
	switch {
	case err != nil:
		d.warn("%s, but uncordoning %s failed (%v); run 'gnsh uncordon --only-if-ours' when the API server answers", why, s.node, err)
	case undone:
		d.cordoned = false
		d.info("%s; %s uncordoned", why, s.node)
	}
}

// summary is the one-line result of a finished drain.
func summary(r *drain.Result) string {
	if r == nil {
		return "nothing to do"
	}
	counts := map[drain.Verdict]int{}
	warned := 0
	for _, p := range r.Pods {
		counts[p.Verdict]++
		if p.Verdict == drain.Evict && p.Warning != "" {
			warned++
		}
	}
	parts := []string{plural(counts[drain.Evict], "pod") + " evicted"}
	if warned > 0 {
		parts[0] += fmt.Sprintf(" (%d with warnings)", warned)
	}
	if n := counts[drain.Terminating]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d already terminating", n))
	}
	var left []string
	for _, v := range []drain.Verdict{drain.SkipDaemonSet, drain.SkipMirror, drain.SkipFinished} {
		if n := counts[v]; n > 0 {
			if name, ok := strings.CutSuffix(v.String(), " pod"); ok {
				left = append(left, plural(n, name+" pod"))
			} else {
				left = append(left, fmt.Sprintf("%d %s", n, v))
			}
		}
	}
	if len(left) > 0 {
		parts = append(parts, "left: "+strings.Join(left, ", "))
	}
	return strings.Join(parts, "; ")
}

// plural is "1 pod", "2 pods".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func progressOf(r *drain.Result) string {
	if r == nil {
		return "no pods evicted"
	}
	return fmt.Sprintf("%d/%d pods gone", r.Status.Gone, r.Status.Total)
}

// Prepare is handoff.Preparer: it drains before the hand-off.
func (d *Drainer) Prepare(ctx context.Context, req *legacy.Request) error {
	verb := req.Action.String()
	if req.Drain.Skip {
		d.debug("--no-drain: not draining")
		return nil
	}
	if err := d.LoadConfig(); err != nil {
		if req.Force != 0 {
			d.warn("%v; not cordoning", err)
			return nil
		}
		return legacy.Fail("gnsh: %v\ngnsh: nothing was shut down; fix the file, or run the command again with --no-drain", err)
	}
	if !d.cfg.Drain {
		d.debug("drain: false in %s: not draining", d.configPath())
		return nil
	}
	if req.Drain.Timeout > 0 {
		d.cfg.DrainTimeout = config.Duration(req.Drain.Timeout)
	}
	if req.Drain.Force {
		d.cfg.ForceDrain = true
	}
	var when *time.Time
	if req.Force == 0 && req.When > 0 {
		t := legacy.FromUsec(req.When).UTC()
		if left := time.Until(t); left > d.cfg.DrainTimeout.D() {
			if !d.isNode() {
				d.notConnected(kube.ErrNoKubeconfig, verb)
				return nil
			}
			d.info("not draining now: the %s is due in %s, beyond the drain timeout (%s); the node agent drains before it",
				verb, left.Round(time.Second), d.cfg.DrainTimeout.D())
			return nil
		}
		when = &t
	}
	if req.Force != 0 {
		// -f: the admin wants the machine down now. A best-effort cordon
		// within a short deadline, so that nothing new lands here.
		ctx, cancel := context.WithTimeout(ctx, d.cfg.ForceCordonTimeout.D())
		defer cancel()
		d.cfg.APITimeout = min(d.cfg.APITimeout, d.cfg.ForceCordonTimeout)
		s, err := d.connect(ctx)
		if err != nil {
			d.notConnected(err, verb)
			return nil
		}
		own := d.ownership(verb, nil)
		made := false
		n, err := s.c.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
		if err != nil {
			err = fmt.Errorf("cordon %s: %w", s.node, err)
		} else {
			made, err = drain.Cordon(ctx, s.c, n, own)
		}
		if err != nil {
			d.warn("cordoning %s failed (%v); %s -f goes on", s.node, err, verb)
		} else if made {
			d.info("cordoned %s; %s -f does not drain", s.node, verb)
		}
		d.event(ctx, s, "Warning", ReasonHandOff, "%s -f requested by %s: no drain", verb, who(own))
		return nil
	}
	s, err := d.connect(ctx)
	if err != nil {
		d.notConnected(err, verb)
		return nil
	}
	d.sess = s
	own := d.ownership(verb, when)
	d.holdSignals = true
	res, err := d.drainNode(ctx, s, own, d.cfg.DrainTimeout.D())
	var ue *drain.UnreachableError
	var intr *interrupted
	var held *HeldError
	var nr *notRegistered
	switch {
	case err == nil:
		d.event(ctx, s, "Normal", ReasonHandOff, "%s requested by %s: drained, handing off to systemd-logind", verb, who(own))
		return nil
	case errors.As(err, &ue) && res == nil:
		d.warn("%v; %s without draining", err, verbing(verb))
		return nil
	case errors.As(err, &ue):
		d.warn("%v; %s without finishing the drain of %s", err, verbing(verb), s.node)
		return nil
	case errors.As(err, &nr):
		d.warn("%v; %s without draining", err, verbing(verb))
		return nil
	case errors.As(err, &intr):
		return &legacy.ExitError{Code: 128 + int(intr.sig), Msg: fmt.Sprintf("gnsh: drain %s; nothing was shut down", intr)}
	case errors.As(err, &held):
		return legacy.Fail("gnsh: %v", err)
	case d.cfg.ForceDrain:
		d.warn("%v; --force-drain: %s anyway", err, verbing(verb))
		d.event(ctx, s, "Warning", ReasonHandOff, "%s requested by %s: drain incomplete, forced; handing off to systemd-logind", verb, who(own))
		return nil
	}
	d.undoCordon(s, "nothing was shut down")
	return legacy.Fail("gnsh: %v\ngnsh: %s refused. To %s anyway, run the command again with --force-drain (evict what can be evicted, then go on) or --no-drain; or give the drain more time with --drain-timeout=DURATION.",
		err, verb, verb)
}

func verbing(v string) string {
	switch v {
	case "poweroff":
		return "powering off"
	case "reboot":
		return "rebooting"
	case "halt":
		return "halting"
	case "kexec":
		return "rebooting with kexec"
	}
	return v
}

// notConnected reports why there is no drain: no kubeconfig is normal on a
// machine that is not a Kubernetes node (debug only); anything else is a
// warning, and the shutdown goes on.
func (d *Drainer) notConnected(err error, verb string) {
	if errors.Is(err, kube.ErrNoKubeconfig) {
		d.debug("no kubeconfig ($KUBECONFIG, %s, %s): not a Kubernetes node, not draining",
			filepath.Join(d.KubeRoot, kube.GnshKubeconfig), filepath.Join(d.KubeRoot, kube.KubeletKubeconfig))
		return
	}
	var ue *drain.UnreachableError
	switch {
	case errors.As(err, &ue):
		d.warn("%v; %s without draining", err, verbing(verb))
		return
	case drain.IsUnreachable(err):
		d.warn("API server unreachable (%v); %s without draining", err, verbing(verb))
		return
	}
	d.warn("cannot drain (%v); %s without draining", err, verbing(verb))
}

// Finish is handoff.Preparer: a refused hand-off undoes gnsh's cordon; a
// cancelled schedule undoes the cordon gnsh made for a schedule.
func (d *Drainer) Finish(ctx context.Context, req *legacy.Request, err error) {
	if d.releaseSignals != nil {
		d.releaseSignals()
		d.releaseSignals = nil
	}
	if req.Action == legacy.Cancel {
		if err == nil && !req.Drain.Skip {
			d.uncordonCancelled(ctx)
		}
		return
	}
	if err == nil || d.sess == nil || !d.cordoned {
		return
	}
	d.undoCordon(d.sess, "the "+req.Action.String()+" was not handed off")
	d.event(ctx, d.sess, "Warning", ReasonDrainFailed, "%s requested by %s was not handed off: %v", req.Action, d.who().User, err)
}

func (d *Drainer) uncordonCancelled(ctx context.Context) {
	if d.LoadConfig() != nil || !d.cfg.Drain {
		return
	}
	s, err := d.connect(ctx)
	if err != nil {
		if !errors.Is(err, kube.ErrNoKubeconfig) {
			d.warn("cannot check %s for gnsh's cordon (%v); 'gnsh uncordon --only-if-ours' undoes it", "the node", err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*d.cfg.APITimeout.D())
	defer cancel()
	n, err := s.c.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
	if err != nil {
		d.warn("cannot check %s for gnsh's cordon (%v); 'gnsh uncordon --only-if-ours' undoes it", s.node, err)
		return
	}
	if o := drain.Owner(n); o == nil || o.When == nil {
		return // not cordoned by gnsh for a schedule
	}
	// A drain for the schedule may still be running: it would schedule
	// its shutdown when done, after this cancel.
	lock, err := d.lock("cancel", s.node)
	var held *HeldError
	if errors.As(err, &held) {
		pid := "it"
		if held.Holder != nil && held.Holder.PID != 0 {
			pid = fmt.Sprintf("pid %d", held.Holder.PID)
		}
		d.warn("%v. It will still schedule its shutdown when its drain ends: interrupt %s (SIGINT), which also undoes its cordon", held, pid)
		return
	}
	defer lock.Release()
	d.cordoned = true
	d.undoCordon(s, "the scheduled shutdown was cancelled")
	d.event(ctx, s, "Normal", ReasonUncordoned, "Scheduled shutdown cancelled by %s; uncordoned", d.who().User)
}
