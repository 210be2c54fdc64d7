package drain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Options control one drain.
type Options struct {
	Node string
	// Timeout bounds the whole drain (evictions, retries and waiting).
	Timeout time.Duration
	// GracePeriod overrides every pod's terminationGracePeriodSeconds.
	// IMPORTANT: nil means each pod's own grace period; 0 means kill now.
	GracePeriod *int64
	// RetryDelay is the first wait after a refused eviction (429: a
	// PodDisruptionBudget); it doubles up to MaxRetryDelay, with jitter.
	RetryDelay, MaxRetryDelay time.Duration
	// Workers bounds concurrent eviction requests.
	Workers int
	// Progress, if set, is called from the drain's goroutine on every change.
	Progress func(Status)
	// Warn, if set, receives one line per noteworthy pod (emptyDir data,
	// no controller).
	Warn func(string)
	// UnreachableAfter ends the drain with *UnreachableError once the API
	// server has been unusable for this long (DefaultUnreachableAfter if
	// zero); see UnreachableError for what counts.
	UnreachableAfter time.Duration
	// Strict refuses, as kubectl drain does without --force and
	// --delete-emptydir-data, pods with emptyDir volumes and pods no
	// controller recreates (config strictDrain): they are not evicted
	// (Refused), and the node does not count as drained while one is on
	// it. Without EvictRest the drain then ends at once with a
	// *BlockedError naming them (Refused), having evicted nothing; with
	// it, it evicts every other pod and waits for them first.
	Strict, EvictRest bool
	// Clock runs the drain's time: its Timeout and UnreachableAfter, the
	// retry backoff, the watcher's pauses and the kubelet checks. nil is
	// the real clock; tests use k8s.io/utils/clock/testing.FakeClock. (Each
	// request's own timeout is the client's, on the real clock.)
	Clock clock.WithTicker
}

// Defaults for Options.
const (
	DefaultRetryDelay    = time.Second
	DefaultMaxRetryDelay = 5 * time.Second
	DefaultWorkers       = 16
)

// withDefaults fills in the zero fields.
func (o Options) withDefaults() Options {
	if o.RetryDelay <= 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.MaxRetryDelay < o.RetryDelay {
		o.MaxRetryDelay = max(DefaultMaxRetryDelay, o.RetryDelay)
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.UnreachableAfter <= 0 {
		o.UnreachableAfter = DefaultUnreachableAfter
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Status is the drain's progress.
type Status struct {
	Total       int // pods to see gone (evicted + already terminating)
	Evicted     int // evictions accepted
	Gone        int // pods deleted
	Terminating int // evicted or already terminating, not gone yet
	Blocked     int // pods whose last eviction was refused
	Elapsed     time.Duration
	BlockedPods []Blocked // sorted by pod name

	// AlreadyStopped are the accepted evictions (of Evicted) of pods that
	// had already stopped on the node, as far as the drain's watch had
	// seen: a terminal phase, or kubelet's DisruptionTarget condition
	// (TerminationByKubelet); StoppedByKubelet are those (of
	// AlreadyStopped) with that condition. On a shutdown that bypasses
	// gnsh, kubelet stops the pods itself, and the evictions only remove
	// what it stopped.
	AlreadyStopped, StoppedByKubelet int
}

// Blocked is a pod whose eviction is refused, with the reason.
type Blocked struct {
	Pod    string // namespace/name
	PDB    string // the PodDisruptionBudget, when the API server names it
	Reason string
}

// Result is a finished (or failed) drain.
type Result struct {
	Pods    []Pod // every pod on the node with its verdict
	Status  Status
	Elapsed time.Duration
}

// BlockedError is returned when the drain's deadline passes while pods are
// still refused or not yet gone, or, with Options.Strict, when pods
// kubectl drain refuses are on the node (Refused).
type BlockedError struct {
	Node    string
	Blocked []Blocked
	Waiting []string // evicted or terminating pods not gone yet
	// Refused are the pods Options.Strict does not evict, each with why
	// (Reason: "uses emptyDir", "declares no controller").
	Refused []Blocked
	Timeout time.Duration
}

// StrictOnly reports whether only Options.Strict stopped the drain: every
// other pod went (or none was evicted, without EvictRest).
func (e *BlockedError) StrictOnly() bool {
	return len(e.Refused) > 0 && len(e.Blocked) == 0 && len(e.Waiting) == 0
}

func (e *BlockedError) Error() string {
	var parts []string
	for _, b := range e.Blocked {
		s := b.Pod
		if b.PDB != "" {
			s += " (PodDisruptionBudget " + b.PDB + ")"
		}
		parts = append(parts, s)
	}
	var refused []string
	for _, b := range e.Refused {
		refused = append(refused, b.Pod+" ("+b.Reason+")")
	}
	if e.StrictOnly() {
		return fmt.Sprintf("strictDrain: %s holds pods that kubectl drain refuses to evict (without --delete-emptydir-data or --force): %s",
			e.Node, strings.Join(refused, ", "))
	}
	msg := fmt.Sprintf("drain of %s did not finish within %s", e.Node, e.Timeout)
	if len(parts) > 0 {
		msg += "; eviction refused for " + strings.Join(parts, ", ")
	}
	if len(e.Waiting) > 0 {
		msg += "; still terminating: " + strings.Join(e.Waiting, ", ")
	}
	if len(refused) > 0 {
		msg += "; not evicted (strictDrain): " + strings.Join(refused, ", ")
	}
	return msg
}

// errTimedOut cancels a drain's context at its Timeout.
var errTimedOut = errors.New("drain timeout")

// Drain evicts every evictable pod on opts.Node and waits, on a watch,
// until they and the pods already terminating are gone. It does not
// cordon: call Cordon first.
//
// It ends with nil (drained), *BlockedError (Timeout passed),
// *UnreachableError (the API server unusable for UnreachableAfter),
// *NodeNotReadyError (every eviction accepted, but the kubelet that would
// finish the pods' deletion is not alive), the caller's context.Canceled,
// or another error (e.g. an eviction answered 401 or 403, for which
// IsAPIFailure is true). The Result is filled in as far as the drain got.
func Drain(ctx context.Context, c kubernetes.Interface, opts Options) (*Result, error) {
	opts = opts.withDefaults()
	r := &run{
		c: c, opts: opts, clk: opts.Clock, start: opts.Clock.Now(),
		res:          &Result{},
		pending:      map[types.UID]*Pod{},
		blocked:      map[types.UID]Blocked{},
		terminating:  map[types.UID]bool{},
		attempts:     map[types.UID]int{},
		serverFailed: map[types.UID]bool{},
		state:        map[types.UID]podState{},
		due:          map[types.UID]int{},
		timers:       map[types.UID]clock.Timer{},
		hurried:      map[types.UID]bool{},
		stoppedFirst: map[types.UID]podState{},
		evictor:      newEvictor(c, opts.GracePeriod),
		sem:          make(chan struct{}, opts.Workers),
		health:       &health{clk: opts.Clock},
		failing:      make(chan struct{}, 1),
		gone:         make(chan types.UID, 64),
		watchErr:     make(chan error, 1),
		checked:      make(chan kubeletState, 1),
	}
	return r.drain(ctx)
}

// run is one drain. Its fields belong to the goroutine running drain;
// the watcher, the evictions, the retry timers and the kubelet checks
// talk to it through the channels (and health, which locks).
type run struct {
	c     kubernetes.Interface
	opts  Options
	clk   clock.WithTicker
	start time.Time
	ctx   context.Context // ends at Timeout or with the caller's

	res         *Result
	refused     []Blocked             // Options.Strict's, in list order
	pending     map[types.UID]*Pod    // must be seen gone
	blocked     map[types.UID]Blocked // last eviction refused or failed
	terminating map[types.UID]bool    // evicted or already terminating
	attempts    map[types.UID]int     // refused or failed evictions so far
	// serverFailed are the pods whose last eviction failed with the
	// server (evictServerFailing): while there are any, the evictions'
	// run of failures in health counts.
	serverFailed map[types.UID]bool
	// state is what the watch last saw of each pending pod that changed.
	state map[types.UID]podState
	// due are the pods waiting for a retry, with its retryTick's gen
	// (from retryGen), and timers their backoff timers; hurried are the
	// pods whose eviction was retried early, once they had stopped
	// (podChanged, hurry).
	due      map[types.UID]int
	timers   map[types.UID]clock.Timer
	retryGen int
	hurried  map[types.UID]bool
	// stoppedFirst is what the watch saw of a pod stopped before it was
	// seen being deleted, kubelet's word kept (countStopped).
	stoppedFirst map[types.UID]podState
	// accepted are the pods whose eviction was accepted, counted those
	// countStopped has counted.
	accepted, counted map[types.UID]bool
	// inflight counts each pod's evictions sent and not answered yet.
	inflight map[types.UID]int

	evictor  *evictor
	sem      chan struct{} // bounds concurrent evictions (Workers)
	outcomes chan evictOutcome
	retry    chan retryTick
	changed  chan podState // the watcher's podStates of pending pods

	health  *health
	failing chan struct{} // the watcher recorded a failure in health

	gone     chan types.UID
	watchErr chan error

	checking  bool              // a kubelet check is under way
	checked   chan kubeletState // its answer
	nextCheck clock.Timer       // the next check, once the last said alive
	noLease   bool              // no Lease to read: check the Node
}

func (r *run) drain(parent context.Context) (*Result, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	r.ctx = ctx
	if r.opts.Timeout > 0 {
		t := r.clk.NewTimer(r.opts.Timeout)
		defer t.Stop()
		go func() {
			select {
			case <-t.C():
				cancel(errTimedOut)
			case <-ctx.Done():
			}
		}()
	}
	defer func() {
		if r.nextCheck != nil {
			r.nextCheck.Stop()
		}
	}()

	list, rv, err := ListNodePods(ctx, r.c, r.opts.Node)
	if err != nil {
		if serverFailing(err) && ctx.Err() == nil {
			return nil, &UnreachableError{Err: err}
		}
		return nil, err
	}
	queue := r.classify(list)
	if len(r.refused) > 0 && !r.opts.EvictRest {
		// As kubectl drain: nothing is evicted.
		return r.finish(r.strictError())
	}
	if len(r.pending) == 0 {
		return r.finish(r.strictError())
	}
	r.outcomes = make(chan evictOutcome, len(queue))
	r.retry = make(chan retryTick, len(queue))
	r.changed = make(chan podState, len(queue))
	w := &watcher{c: r.c, clk: r.clk, node: r.opts.Node, tracked: map[types.UID]bool{}, gone: r.gone,
		health: r.health, failing: r.failing, changed: r.changed, seen: map[types.UID]podState{}}
	for uid := range r.pending {
		w.tracked[uid] = true
	}
	go func() { r.watchErr <- w.run(ctx, rv) }()
	for _, p := range queue {
		r.launch(p)
	}
	r.report()
	return r.loop(parent)
}

// classify decides each listed pod's fate, warns, and returns the pods to
// evict, in list order.
func (r *run) classify(list []corev1.Pod) []*Pod {
	r.res.Pods = make([]Pod, 0, len(list))
	for _, p := range list {
		r.res.Pods = append(r.res.Pods, Classify(p, r.opts.Strict))
	}
	var queue []*Pod
	for i := range r.res.Pods {
		p := &r.res.Pods[i]
		switch p.Verdict {
		case Refused:
			r.refused = append(r.refused, Blocked{Pod: p.Name(), Reason: p.Kubectl})
		case Evict:
			if p.Warning != "" && r.opts.Warn != nil {
				r.opts.Warn(p.Name() + " " + p.Warning)
			}
			r.pending[p.Pod.UID] = p
			queue = append(queue, p)
		case Terminating:
			r.pending[p.Pod.UID] = p
			r.terminating[p.Pod.UID] = true
		}
	}
	r.res.Status.Total = len(r.pending)
	return queue
}

// loop runs the drain until every pending pod is gone or it ends otherwise.
func (r *run) loop(parent context.Context) (*Result, error) {
	for {
		r.maybeCheckKubelet()
		select {
		case <-r.ctx.Done():
			return r.finish(r.stopped(parent))
		case err := <-r.watchErr:
			if r.ctx.Err() == nil {
				return r.finish(fmt.Errorf("watch pods on %s: %w", r.opts.Node, err))
			}
		case <-r.failing:
			if err := r.unusable(); err != nil {
				return r.finish(err)
			}
		case uid := <-r.gone:
			// The watcher sent the pod's changes before its deletion:
			// take them first (select picks a ready channel at random).
			r.takeChanges()
			if r.podGone(uid) {
				return r.finish(r.strictError())
			}
		case s := <-r.changed:
			r.podChanged(s)
		case o := <-r.outcomes:
			r.takeChanges() // what the watch saw before this answer
			if err := r.evicted(o); err != nil {
				return r.finish(err)
			}
		case t := <-r.retry:
			uid := t.pod.Pod.UID
			if g, ok := r.due[uid]; !ok || g != t.gen {
				break // stale: retried early, or dropped
			}
			delete(r.due, uid)
			delete(r.timers, uid)
			if _, ok := r.pending[uid]; ok && r.ctx.Err() == nil {
				r.launch(t.pod)
			}
		case <-r.checkDue():
			r.nextCheck = nil
		case k := <-r.checked:
			if err := r.kubeletChecked(k); err != nil {
				return r.finish(err)
			}
		}
	}
}

// strictError is the end of a drain whose every pod to evict is gone (or
// none was evicted): nil, or with Options.Strict the *BlockedError naming
// the pods it refused.
func (r *run) strictError() error {
	if len(r.refused) == 0 {
		return nil
	}
	return &BlockedError{Node: r.opts.Node, Timeout: r.opts.Timeout, Refused: r.refused}
}

// stopped is why the drain's context ended: the caller's cancellation, or
// the deadline (Timeout, or the caller's own) as a *BlockedError.
func (r *run) stopped(parent context.Context) error {
	if errors.Is(parent.Err(), context.Canceled) {
		return parent.Err()
	}
	e := &BlockedError{Node: r.opts.Node, Timeout: r.opts.Timeout, Refused: r.refused}
	for uid, p := range r.pending {
		if b, ok := r.blocked[uid]; ok {
			e.Blocked = append(e.Blocked, b)
		} else {
			e.Waiting = append(e.Waiting, p.Name())
		}
	}
	sort.Slice(e.Blocked, func(i, j int) bool { return e.Blocked[i].Pod < e.Blocked[j].Pod })
	sort.Strings(e.Waiting)
	return e
}

// launch evicts p on its own goroutine once a worker slot is free.
func (r *run) launch(p *Pod) {
	if r.inflight == nil {
		r.inflight = map[types.UID]int{}
	}
	r.inflight[p.Pod.UID]++
	go func() {
		r.sem <- struct{}{}
		defer func() { <-r.sem }()
		r.outcomes <- r.evictor.evict(r.ctx, p)
	}()
}

// evicted takes in the answer to one eviction.
func (r *run) evicted(o evictOutcome) error {
	uid := o.pod.Pod.UID
	if n := r.inflight[uid]; n > 1 {
		r.inflight[uid] = n - 1
	} else {
		delete(r.inflight, uid)
	}
	_, pending := r.pending[uid]
	if o.result == evictServerFailing {
		if !pending {
			return nil // gone meanwhile: nothing depends on this eviction
		}
		r.serverFailed[uid] = true
		r.health.failed(evictRequests, o.err)
	} else {
		delete(r.serverFailed, uid)
		r.health.answered(evictRequests)
	}
	if !pending {
		return nil
	}
	switch o.result {
	case evictAccepted:
		delete(r.blocked, uid)
		r.terminating[uid] = true
		r.res.Status.Evicted++
		r.accept(uid)
		r.report()
	case evictRefused, evictServerFailing:
		if o.result == evictRefused && r.state[uid].deleting {
			r.deletedMeanwhile(uid)
			return nil
		}
		r.blocked[uid] = *o.blocked
		r.report()
		if o.result == evictRefused && r.hurry(uid) {
			r.launch(o.pod)
		} else {
			r.retryLater(o.pod)
		}
		return r.unusable()
	default:
		return fmt.Errorf("evict %s: %w", o.pod.Name(), o.err)
	}
	return nil
}

// retryLater evicts p again after its backoff.
func (r *run) retryLater(p *Pod) {
	n := r.attempts[p.Pod.UID]
	r.attempts[p.Pod.UID] = n + 1
	t := r.clk.NewTimer(backoff(r.opts.RetryDelay, r.opts.MaxRetryDelay, n))
	r.retryGen++
	tick := retryTick{pod: p, gen: r.retryGen}
	r.due[p.Pod.UID] = tick.gen
	r.timers[p.Pod.UID] = t
	ctx := r.ctx
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			select { // buffered for every pod; a stale tick waits for the loop
			case r.retry <- tick:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
}

// podGone takes in a pod the watcher saw gone; true once none is left.
func (r *run) podGone(uid types.UID) bool {
	p, ok := r.pending[uid]
	if !ok {
		return false
	}
	if _, refused := r.blocked[uid]; p.Verdict == Evict && !r.terminating[uid] && (!refused || r.inflight[uid] > 0 && r.hurried[uid]) {
		// Its eviction went through, but the watch saw the pod go before
		// the answer came back (and the drain may end before it does):
		// count it now; evicted ignores the late answer. So too for a
		// refused pod whose early retry, made once it stopped, is under
		// way (a stopped pod's eviction deletes it at once); not for a
		// running pod's ordinary retry, which someone else's deletion may
		// have beaten.
		r.res.Status.Evicted++
		r.accept(uid)
	}
	if r.accepted[uid] {
		r.countStopped(uid)
	}
	delete(r.pending, uid)
	delete(r.blocked, uid)
	delete(r.terminating, uid)
	r.cancelRetry(uid)
	delete(r.state, uid)
	delete(r.stoppedFirst, uid)
	delete(r.accepted, uid)
	delete(r.counted, uid)
	if r.serverFailed[uid] {
		delete(r.serverFailed, uid)
		if len(r.serverFailed) == 0 {
			// No eviction left that the failing server holds up.
			r.health.answered(evictRequests)
		}
	}
	r.res.Status.Gone++
	r.report()
	return len(r.pending) == 0
}

// unusable is an *UnreachableError once a kind of request the drain
// depends on has done nothing but fail for UnreachableAfter.
func (r *run) unusable() error {
	if d, err := r.health.worst(); err != nil && d >= r.opts.UnreachableAfter {
		return &UnreachableError{For: d, Err: err}
	}
	return nil
}

// allAccepted: every pod still to go is terminating (its eviction was
// accepted, or it was being deleted already); none waits for its
// eviction or is being refused it.
func (r *run) allAccepted() bool {
	return len(r.pending) > 0 && len(r.terminating) == len(r.pending)
}

func (r *run) checkDue() <-chan time.Time {
	if r.nextCheck == nil {
		return nil
	}
	return r.nextCheck.C()
}

// maybeCheckKubelet starts a kubelet check when every eviction is
// accepted and none is under way or scheduled: at once the first time,
// then every kubeletCheckInterval.
func (r *run) maybeCheckKubelet() {
	if r.checking || r.nextCheck != nil || !r.allAccepted() || r.ctx.Err() != nil {
		return
	}
	r.checking = true
	noLease := r.noLease
	go func() { r.checked <- checkKubelet(r.ctx, r.c, r.clk, r.opts.Node, noLease) }()
}

// kubeletChecked takes in a kubelet check: a *NodeNotReadyError if the
// kubelet is dead while every remaining pod is terminating.
func (r *run) kubeletChecked(k kubeletState) error {
	r.checking = false
	r.noLease = k.noLease
	if k.dead && r.allAccepted() && r.ctx.Err() == nil {
		e := &NodeNotReadyError{Node: r.opts.Node, Reason: k.reason}
		for _, p := range r.pending {
			e.Waiting = append(e.Waiting, p.Name())
		}
		sort.Strings(e.Waiting)
		return e
	}
	r.nextCheck = r.clk.NewTimer(kubeletCheckInterval)
	return nil
}

// report updates the Status and passes it to Progress.
func (r *run) report() {
	st := &r.res.Status
	st.Elapsed = r.clk.Since(r.start)
	st.Terminating = len(r.terminating)
	st.Blocked = len(r.blocked)
	// A fresh slice: Progress may keep the Status it was given.
	st.BlockedPods = make([]Blocked, 0, len(r.blocked))
	for _, b := range r.blocked {
		st.BlockedPods = append(st.BlockedPods, b)
	}
	sort.Slice(st.BlockedPods, func(i, j int) bool { return st.BlockedPods[i].Pod < st.BlockedPods[j].Pod })
	if r.opts.Progress != nil {
		r.opts.Progress(*st)
	}
}

// finish reports a last time and returns the Result with err.
func (r *run) finish(err error) (*Result, error) {
	r.report()
	r.res.Elapsed = r.clk.Since(r.start)
	return r.res, err
}
