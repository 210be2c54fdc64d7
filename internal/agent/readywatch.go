package agent

import (
	"context"
	"math"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// waitReady waits, after a check found Node n not Ready for this boot,
// until it is worth reading the Node again: the Node's readiness changed
// (a watch of that one Node, fieldSelector metadata.name, from the
// resourceVersion just read: the Node authorizer lets a kubelet's
// credentials watch their own Node), or ReadyWatchMax went by. So the
// uncordon follows the kubelet's Ready at once instead of up to a
// ReadyPoll later.
//
// While Ready is True but from before this boot, the kubelet's node Lease
// may be what shows it alive, and the watch does not see the Lease: the
// bound is then ReadyPoll, as before the watch. A watch that cannot be
// opened, or ends early, falls back on the ReadyPoll, so a broken watch
// never stalls the uncordon; one refused (403: credentials that may not
// watch the Node) is not asked for again.
func (u *Uncordoner) waitReady(ctx context.Context, c kubernetes.Interface, n *corev1.Node) {
	poll := orDefault(u.ReadyPoll, DefaultReadyPoll)
	bound := orDefault(u.ReadyWatchMax, DefaultReadyWatchMax)
	if readyTrue(n) || bound < poll {
		bound = poll
	}
	if u.noWatch {
		u.sleep(ctx, poll)
		return
	}
	// The request's own bound: the API server ends the watch after
	// TimeoutSeconds, the context a moment later in any case.
	wctx, cancel := context.WithTimeout(ctx, bound+orDefault(u.APITimeout, DefaultAPITimeout))
	defer cancel()
	secs := int64(math.Ceil(bound.Seconds()))
	w, err := c.CoreV1().Nodes().Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", n.Name).String(),
		ResourceVersion: n.ResourceVersion,
		TimeoutSeconds:  &secs,
	})
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err) {
			// Refused for these credentials: not asked again.
			u.noWatch = true
		}
		u.debugf("%s: no watch of the Node (%v): looking again in %s", n.Name, err, poll)
		u.sleep(ctx, poll)
		return
	}
	defer w.Stop()
	start := u.clock().Now()
	t := u.clock().NewTimer(bound)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			return
		case ev, ok := <-w.ResultChan():
			switch {
			case !ok || ev.Type == watch.Error:
				// Ended early (the API server restarted, the
				// resourceVersion is too old): the old poll, within
				// the bound.
				w.Stop()
				t.Stop()
				d := min(poll, bound-u.clock().Since(start))
				if d <= 0 {
					return
				}
				f := u.clock().NewTimer(d)
				defer f.Stop()
				u.debugf("%s: the watch of the Node ended: looking again in %s", n.Name, d)
				select {
				case <-ctx.Done():
				case <-f.C():
				}
				return
			case ev.Type == watch.Deleted:
				return // the next read says so
			case ev.Type != watch.Added && ev.Type != watch.Modified:
				continue // a bookmark
			}
			m, ok := ev.Object.(*corev1.Node)
			if !ok || m.Name != n.Name || sameReadiness(n, m) {
				continue
			}
			u.debugf("%s changed: reading it again", n.Name)
			return
		}
	}
}

// sameReadiness reports whether Node b shows nothing that ReadyForBoot
// reads differently from a: the same resourceVersion, or the same Ready
// condition (status, reason, heartbeat) and boot ID. The watch may start
// with the Node as it was read (a fake clientset's does, as a real API
// server does without a resourceVersion): that is no reason to read it
// again.
func sameReadiness(a, b *corev1.Node) bool {
	if a.ResourceVersion != "" && a.ResourceVersion == b.ResourceVersion {
		return true
	}
	if a.Status.NodeInfo.BootID != b.Status.NodeInfo.BootID {
		return false
	}
	ca, cb := readyCondition(a), readyCondition(b)
	if ca == nil || cb == nil {
		return ca == nil && cb == nil
	}
	return ca.Status == cb.Status && ca.Reason == cb.Reason && ca.LastHeartbeatTime.Time.Equal(cb.LastHeartbeatTime.Time)
}
