package drain

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Pauses of the watcher, on the drain's clock.
const (
	// relistPause comes before a re-list, so that a server ending every
	// watch at once cannot make the watcher spin.
	relistPause = 200 * time.Millisecond
	// failurePause comes after a failed list, before the next watch.
	failurePause = time.Second
	// minResumable is how long a watch must have run for the watcher to
	// resume from its last resourceVersion instead of re-listing.
	minResumable = time.Second
)

// watcher reports the UIDs of tracked pods as they are deleted from its
// node: one watch of spec.nodeName=NODE instead of kubectl's GET per pod
// per second.
type watcher struct {
	c    kubernetes.Interface
	clk  clock.Clock
	node string
	// tracked are the pods to report, until reported gone.
	tracked map[types.UID]bool
	gone    chan<- types.UID
	// health learns whether the API server answers the watcher's
	// requests; failing wakes the drain after a failure, to look.
	health  *health
	failing chan<- struct{}
	// changed receives a tracked pod's podState whenever it differs from
	// the last one sent (seen): kubelet stopping it, its deletion.
	changed chan<- podState
	seen    map[types.UID]podState
}

// run watches from rv until ctx ends. A watch the server ended after
// delivering events is resumed from its last resourceVersion; otherwise (a
// quiet or failed watch, or 410 Gone) run re-lists: a tracked pod missing
// from the list is gone too.
//
// When the API server does not answer or answers that it is failing, run
// reports each failure and keeps trying, about once a second; the drain
// decides when to give up. Any other error (401, 403, …) ends run with
// that error.
func (w *watcher) run(ctx context.Context, rv string) error {
	sel := fields.OneTermEqualSelector("spec.nodeName", w.node).String()
	for ctx.Err() == nil {
		started := w.clk.Now()
		wi, err := watchPods(ctx, w.c, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err == nil {
			var last string
			last, err = w.events(ctx, wi)
			wi.Stop()
			if last != "" {
				rv = last
			}
			// The client ends every watch at its request timeout (5 s):
			// resume from the last resourceVersion, one request, instead
			// of re-listing. Only after a watch that delivered events:
			// client-go turns a watch request that timed out into an
			// empty watch without an error, so a quiet watch may mean a
			// hung API server, which only the re-list below notices. A
			// watch that ends at once re-lists too, so a misbehaving
			// server cannot make this spin.
			if errors.Is(err, errWatchClosed) && last != "" && ctx.Err() == nil && w.clk.Since(started) > minResumable {
				continue
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case serverFailing(err):
			w.failed(err)
		case err != nil && !errors.Is(err, errWatchClosed) && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err):
			return err
		}
		// Re-list: whatever is no longer there is gone.
		if !w.pause(ctx, relistPause) {
			return nil
		}
		pods, newRV, err := listPods(ctx, w.c, w.node, true)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !serverFailing(err) {
				return err
			}
			w.failed(err)
			if !w.pause(ctx, failurePause) {
				return nil
			}
			continue
		}
		w.health.answered(podRequests)
		present := map[types.UID]bool{}
		for i := range pods {
			present[pods[i].UID] = true
			if !w.look(ctx, &pods[i]) {
				return nil
			}
		}
		for uid := range w.tracked {
			if !present[uid] && !w.report(ctx, uid) {
				return nil
			}
		}
		rv = newRV
	}
	return nil
}

// failed records a failure that serverFailing counts and wakes the drain,
// unless a wake-up is already waiting.
func (w *watcher) failed(err error) {
	w.health.failed(podRequests, err)
	select {
	case w.failing <- struct{}{}:
	default:
	}
}

// pause waits d on the drain's clock; false if ctx ended first.
func (w *watcher) pause(ctx context.Context, d time.Duration) bool {
	t := w.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// report sends uid on gone once; false if ctx ended first.
func (w *watcher) report(ctx context.Context, uid types.UID) bool {
	if !w.tracked[uid] {
		return true
	}
	delete(w.tracked, uid)
	select {
	case w.gone <- uid:
		return true
	case <-ctx.Done():
		return false
	}
}

// look sends p's podState on changed if p is tracked and its state
// differs from the last sent; false if ctx ended first.
func (w *watcher) look(ctx context.Context, p *corev1.Pod) bool {
	if !w.tracked[p.UID] || w.changed == nil {
		return true
	}
	s := stateOf(p)
	if last, ok := w.seen[p.UID]; ok && last == s || !ok && s == (podState{uid: p.UID}) {
		return true
	}
	w.seen[p.UID] = s
	select {
	case w.changed <- s:
		return true
	case <-ctx.Done():
		return false
	}
}

// events reads wi until it ends, reporting deleted pods, and returns the
// last resourceVersion seen. Every event is an answer from the server; a
// watch error event is returned as the error it carries.
func (w *watcher) events(ctx context.Context, wi watch.Interface) (string, error) {
	rv := ""
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return rv, errWatchClosed
			}
			if ev.Type == watch.Error {
				return rv, apierrors.FromObject(ev.Object)
			}
			w.health.answered(podRequests)
			if p, ok := ev.Object.(*corev1.Pod); ok {
				if ev.Type == watch.Deleted && !w.report(ctx, p.UID) || ev.Type != watch.Deleted && !w.look(ctx, p) {
					return rv, nil
				}
			}
			if o, ok := ev.Object.(metav1.Object); ok && o.GetResourceVersion() != "" {
				rv = o.GetResourceVersion()
			}
		}
	}
}

// errWatchClosed is a watch the server (or the client's timeout) ended.
var errWatchClosed = errors.New("watch closed")

// watchPods starts a watch of all pods matching opts. With a real client
// it turns off client-go's own retries: a watch request that times out or
// loses its connection is otherwise retried up to ten times, a second
// apart, each bounded only by the request timeout, and then "succeeds" as
// an empty watch without an error. Against an API server that accepts
// connections but does not answer, that hid the outage from the watcher
// for about a minute, whatever UnreachableAfter said.
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
