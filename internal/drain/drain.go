package drain

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
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
	// server has not answered for this long (DefaultUnreachableAfter if
	// zero).
	UnreachableAfter time.Duration
}

// Defaults for Options.
const (
	DefaultRetryDelay    = time.Second
	DefaultMaxRetryDelay = 5 * time.Second
	DefaultWorkers       = 16
)

// Status is the drain's progress.
type Status struct {
	Total       int // pods to see gone (evicted + already terminating)
	Evicted     int // evictions accepted
	Gone        int // pods deleted
	Terminating int // evicted or already terminating, not gone yet
	Blocked     int // pods whose last eviction was refused
	Elapsed     time.Duration
	BlockedPods []Blocked // sorted by pod name
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
// still refused or not yet gone.
type BlockedError struct {
	Node    string
	Blocked []Blocked
	Waiting []string // evicted or terminating pods not gone yet
	Timeout time.Duration
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
	msg := fmt.Sprintf("drain of %s did not finish within %s", e.Node, e.Timeout)
	if len(parts) > 0 {
		msg += "; eviction refused for " + strings.Join(parts, ", ")
	}
	if len(e.Waiting) > 0 {
		msg += "; still terminating: " + strings.Join(e.Waiting, ", ")
	}
	return msg
}

type evictOutcome struct {
	uid         types.UID
	err         error
	blocked     *Blocked
	unreachable bool // the API server did not answer
}

// Drain evicts every evictable pod on opts.Node and waits, on a watch,
// until they and the pods already terminating are gone. It does not
// cordon: call Cordon first.
func Drain(ctx context.Context, c kubernetes.Interface, opts Options) (*Result, error) {
	start := time.Now()
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = DefaultRetryDelay
	}
	if opts.MaxRetryDelay < opts.RetryDelay {
		opts.MaxRetryDelay = max(DefaultMaxRetryDelay, opts.RetryDelay)
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.UnreachableAfter <= 0 {
		opts.UnreachableAfter = DefaultUnreachableAfter
	}
	list, rv, err := ListNodePods(ctx, c, opts.Node)
	if err != nil {
		if IsUnreachable(err) && ctx.Err() == nil {
			return nil, &UnreachableError{Err: err}
		}
		return nil, err
	}
	res := &Result{}
	pending := map[types.UID]*Pod{} // must be seen gone
	var queue []*Pod
	for _, p := range list {
		cp := Classify(p)
		res.Pods = append(res.Pods, cp)
		switch cp.Verdict {
		case Evict:
			if cp.Warning != "" && opts.Warn != nil {
				opts.Warn(cp.Name() + " " + cp.Warning)
			}
			pending[p.UID] = &res.Pods[len(res.Pods)-1]
		case Terminating:
			pending[p.UID] = &res.Pods[len(res.Pods)-1]
		}
	}
	for _, p := range pending {
		if p.Verdict == Evict {
			queue = append(queue, p)
		}
	}
	st := &res.Status
	st.Total = len(pending)
	blocked := map[types.UID]Blocked{}
	terminating := map[types.UID]bool{}
	for uid, p := range pending {
		if p.Verdict == Terminating {
			terminating[uid] = true
		}
	}
	report := func() {
		st.Elapsed = time.Since(start)
		st.Terminating = len(terminating)
		st.Blocked = len(blocked)
		// A fresh slice: Progress may keep the Status it was given.
		st.BlockedPods = make([]Blocked, 0, len(blocked))
		for _, b := range blocked {
			st.BlockedPods = append(st.BlockedPods, b)
		}
		sort.Slice(st.BlockedPods, func(i, j int) bool { return st.BlockedPods[i].Pod < st.BlockedPods[j].Pod })
		if opts.Progress != nil {
			opts.Progress(*st)
		}
	}
	finish := func(err error) (*Result, error) {
		report()
		res.Elapsed = time.Since(start)
		return res, err
	}
	if len(pending) == 0 {
		return finish(nil)
	}

	gone := make(chan types.UID, 64)
	watchErr := make(chan error, 1)
	unreach := make(chan error, 1) // the watcher cannot reach the API server
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	tracked := make([]types.UID, 0, len(pending))
	for uid := range pending {
		tracked = append(tracked, uid)
	}
	go func() { watchErr <- watchGone(wctx, c, opts.Node, rv, tracked, gone, unreach) }()
	// unreachableSince is when the API server stopped answering; any
	// answer resets it.
	var unreachableSince time.Time
	var lastUnreachable error
	stillUnreachable := func(err error) bool {
		if unreachableSince.IsZero() {
			unreachableSince = time.Now()
		}
		lastUnreachable = err
		return time.Since(unreachableSince) < opts.UnreachableAfter
	}

	evictor := newEvictor(c, opts.GracePeriod)
	outcomes := make(chan evictOutcome, len(queue))
	retry := make(chan *Pod, len(queue))
	sem := make(chan struct{}, opts.Workers)
	inFlight := 0
	launch := func(p *Pod) {
		inFlight++
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			outcomes <- evictor.evict(ctx, &p.Pod)
		}()
	}
	for _, p := range queue {
		launch(p)
	}
	attempts := map[types.UID]int{}
	report()
	for {
		select {
		case <-ctx.Done():
			e := &BlockedError{Node: opts.Node, Timeout: opts.Timeout}
			for uid, p := range pending {
				if b, ok := blocked[uid]; ok {
					e.Blocked = append(e.Blocked, b)
				} else {
					e.Waiting = append(e.Waiting, p.Name())
				}
			}
			sort.Slice(e.Blocked, func(i, j int) bool { return e.Blocked[i].Pod < e.Blocked[j].Pod })
			sort.Strings(e.Waiting)
			if errors.Is(ctx.Err(), context.Canceled) {
				return finish(ctx.Err())
			}
			return finish(e)
		case err := <-watchErr:
			if ctx.Err() == nil {
				return finish(fmt.Errorf("watch pods on %s: %w", opts.Node, err))
			}
		case err := <-unreach:
			if !stillUnreachable(err) {
				return finish(&UnreachableError{For: time.Since(unreachableSince), Err: lastUnreachable})
			}
		case uid := <-gone:
			unreachableSince = time.Time{}
			if _, ok := pending[uid]; ok {
				delete(pending, uid)
				delete(blocked, uid)
				delete(terminating, uid)
				st.Gone++
				report()
				if len(pending) == 0 {
					return finish(nil)
				}
			}
		case o := <-outcomes:
			inFlight--
			p := pending[o.uid]
			if !o.unreachable {
				unreachableSince = time.Time{}
			} else if !stillUnreachable(o.err) {
				return finish(&UnreachableError{For: time.Since(unreachableSince), Err: lastUnreachable})
			}
			switch {
			case p == nil: // already gone
			case o.err == nil:
				delete(blocked, o.uid)
				terminating[o.uid] = true
				st.Evicted++
				report()
			case o.blocked != nil:
				blocked[o.uid] = *o.blocked
				report()
				n := attempts[o.uid]
				attempts[o.uid] = n + 1
				d := backoff(opts.RetryDelay, opts.MaxRetryDelay, n)
				time.AfterFunc(d, func() { retry <- p })
			default:
				return finish(fmt.Errorf("evict %s: %w", p.Name(), o.err))
			}
		case p := <-retry:
			if _, ok := pending[p.Pod.UID]; ok && ctx.Err() == nil {
				launch(p)
			}
		}
	}
}

// backoff is delay·2^n capped at max, with ±20 % jitter so that refused
// pods do not retry in lockstep.
func backoff(delay, maxDelay time.Duration, n int) time.Duration {
	d := delay
	for i := 0; i < n && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// watchGone reports the UIDs of tracked pods as they are deleted from
// node, watching from rv. A watch the server ended after delivering
// events is resumed from its last resourceVersion; otherwise (a quiet or
// failed watch, or 410 Gone) watchGone re-lists: a tracked pod missing
// from the list is gone too. One watch replaces kubectl's GET per pod per
// second.
//
// When the API server does not answer, watchGone keeps trying every second
// and reports each failure on unreach (without blocking); Drain decides
// when to give up.
func watchGone(ctx context.Context, c kubernetes.Interface, node, rv string, tracked []types.UID, gone chan<- types.UID, unreach chan<- error) error {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	seen := map[types.UID]bool{}
	for _, uid := range tracked {
		seen[uid] = true
	}
	for ctx.Err() == nil {
		started := time.Now()
		w, err := watchPods(ctx, c, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err == nil {
			var last string
			last, err = drainEvents(ctx, w, seen, gone)
			w.Stop()
			if last != "" {
				rv = last
			}
			// The server ends every watch at the request timeout (5 s):
			// resume from the last resourceVersion, one request, instead
			// of re-listing. Only after a watch that delivered events:
			// client-go turns a watch request that timed out into an
			// empty watch without an error, so a quiet watch may mean a
			// hung API server, which only the re-list below notices. A
			// watch that ends at once re-lists too, so a misbehaving
			// server cannot make this spin.
			if errors.Is(err, errWatchClosed) && last != "" && ctx.Err() == nil && time.Since(started) > time.Second {
				continue
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if IsUnreachable(err) {
			notify(unreach, err)
		} else if err != nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) && !isTransient(err) {
			return err
		}
		// Re-list: whatever is no longer there is gone.
		time.Sleep(200 * time.Millisecond)
		pods, newRV, lerr := ListNodePods(ctx, c, node)
		if lerr != nil {
			if IsUnreachable(lerr) {
				notify(unreach, lerr)
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
				continue
			}
			if isTransient(lerr) {
				continue
			}
			return lerr
		}
		present := map[types.UID]bool{}
		for _, p := range pods {
			present[p.UID] = true
		}
		for uid := range seen {
			if !present[uid] {
				select {
				case gone <- uid:
				case <-ctx.Done():
					return nil
				}
				delete(seen, uid)
			}
		}
		rv = newRV
	}
	return nil
}

// watchPods starts a watch of all pods matching opts. With a real client
// it turns off client-go's own retries: a watch request that times out or
// loses its connection is otherwise retried up to ten times, a second
// apart, each bounded only by the request timeout, and then "succeeds" as
// an empty watch without an error. Against an API server that accepts
// connections but does not answer, that hid the outage from watchGone for
// about a minute, whatever UnreachableAfter said.
func watchPods(ctx context.Context, c kubernetes.Interface, opts metav1.ListOptions) (watch.Interface, error) {
	if rc, ok := c.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
		// As the typed client's Watch, plus MaxRetries(0).
		var timeout time.Duration
		if opts.TimeoutSeconds != nil {
			timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
		}
		opts.Watch = true
		return rc.Get().Resource("pods").VersionedParams(&opts, scheme.ParameterCodec).Timeout(timeout).MaxRetries(0).Watch(ctx)
	}
	return c.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, opts)
}

// notify sends err on ch unless a report is already waiting there.
func notify(ch chan<- error, err error) {
	select {
	case ch <- err:
	default:
	}
}

func drainEvents(ctx context.Context, w watch.Interface, seen map[types.UID]bool, gone chan<- types.UID) (string, error) {
	rv := ""
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, errWatchClosed
			}
			switch ev.Type {
			case watch.Error:
				return rv, apierrors.FromObject(ev.Object)
			case watch.Deleted:
				if p, ok := ev.Object.(*corev1.Pod); ok {
					delete(seen, p.UID)
					select {
					case gone <- p.UID:
					case <-ctx.Done():
						return rv, nil
					}
				}
			}
			if o, ok := ev.Object.(metav1.Object); ok && o.GetResourceVersion() != "" {
				rv = o.GetResourceVersion()
			}
		}
	}
}

// errWatchClosed is a watch the server ended; the drain re-lists.
var errWatchClosed = errors.New("watch closed")

func isTransient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || errors.Is(err, errWatchClosed)
}

// evictor posts evictions. With a real client it bypasses client-go's
// hidden Retry-After loop (up to ten 429 retries, about 100 s per call)
// so that the drain's own backoff and deadline govern.
type evictor struct {
	c     kubernetes.Interface
	rc    *rest.RESTClient
	grace *int64
}

func newEvictor(c kubernetes.Interface, grace *int64) *evictor {
	e := &evictor{c: c, grace: grace}
	if core, ok := c.CoreV1().RESTClient().(*rest.RESTClient); ok && core != nil {
		e.rc = core
	}
	return e
}

func (e *evictor) evict(ctx context.Context, pod *corev1.Pod) evictOutcome {
	uid := pod.UID
	ev := &policyv1.Eviction{
		TypeMeta:      metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: e.grace, Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	var err error
	if e.rc != nil {
		err = e.rc.Post().AbsPath("/api/v1").Namespace(pod.Namespace).Resource("pods").Name(pod.Name).
			SubResource("eviction").Body(ev).MaxRetries(0).Do(ctx).Error()
	} else {
		err = e.c.PolicyV1().Evictions(pod.Namespace).Evict(ctx, ev)
	}
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// NotFound: already deleted. Conflict: the UID precondition
		// failed, so this pod is gone and another has its name. The watch
		// reports both as gone.
		return evictOutcome{uid: uid}
	case apierrors.IsTooManyRequests(err):
		return evictOutcome{uid: uid, err: err, blocked: pdbBlock(pod, err)}
	case apierrors.IsForbidden(err) && hasCause(err, corev1.NamespaceTerminatingCause):
		return evictOutcome{uid: uid, err: err, blocked: &Blocked{Pod: pod.Namespace + "/" + pod.Name, Reason: "namespace terminating"}}
	case ctx.Err() != nil || isTransient(err):
		return evictOutcome{uid: uid, err: err, blocked: &Blocked{Pod: pod.Namespace + "/" + pod.Name, Reason: err.Error()}}
	case IsUnreachable(err):
		return evictOutcome{uid: uid, err: err, unreachable: true,
			blocked: &Blocked{Pod: pod.Namespace + "/" + pod.Name, Reason: "API server unreachable"}}
	default:
		return evictOutcome{uid: uid, err: err}
	}
}

func hasCause(err error, t metav1.CauseType) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil {
		return false
	}
	for _, c := range se.Status().Details.Causes {
		if c.Type == t {
			return true
		}
	}
	return false
}

// pdbBlock turns a 429 into a Blocked, naming the PodDisruptionBudget from
// the DisruptionBudget cause ("The disruption budget NAME needs …").
func pdbBlock(pod *corev1.Pod, err error) *Blocked {
	b := &Blocked{Pod: pod.Namespace + "/" + pod.Name, Reason: err.Error()}
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Details != nil {
		for _, c := range se.Status().Details.Causes {
			if c.Type == policyv1.DisruptionBudgetCause {
				b.Reason = c.Message
				if rest, ok := strings.CutPrefix(c.Message, "The disruption budget "); ok {
					b.PDB, _, _ = strings.Cut(rest, " ")
				}
			}
		}
	}
	return b
}
