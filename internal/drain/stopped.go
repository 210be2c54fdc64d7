package drain

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// terminationByKubelet is the reason of the DisruptionTarget condition
// kubelet writes on the pods it stops itself: on a node shutdown (its
// Graceful Node Shutdown) or to reclaim resources.
const terminationByKubelet = "TerminationByKubelet"

// podState is what the drain's watch last saw of a pod it waits for:
// whether it has stopped on the node (a terminal phase), whether kubelet
// says it stopped it (DisruptionTarget, TerminationByKubelet), and whether
// it is being deleted.
type podState struct {
	uid       types.UID
	terminal  bool
	byKubelet bool
	deleting  bool
}

// stopped: the pod no longer runs on the node. A PodDisruptionBudget
// does not refuse its eviction (the API server ignores budgets for
// terminal pods).
func (s podState) stopped() bool { return s.terminal || s.byKubelet }

// stateOf reads p's podState.
func stateOf(p *corev1.Pod) podState {
	s := podState{uid: p.UID, deleting: p.DeletionTimestamp != nil,
		terminal: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == terminationByKubelet {
			s.byKubelet = true
		}
	}
	return s
}

// retryTick is a refused pod's retry come due; gen tells a stale one
// (its retry was made early, or rescheduled) from the current.
type retryTick struct {
	pod *Pod
	gen int
}

// podChanged takes in a change the watch saw in a pod the drain waits
// for. Once a pod whose eviction was refused has stopped (kubelet stopped
// it, or it ended), its eviction is retried at once rather than after its
// backoff: no budget refuses it any more. Once it is being deleted by
// someone else, the drain waits for it as for a pod already terminating
// at its start, and evicts it no more.
//
// Only a pod waiting for its retry is acted on here; a pod whose eviction
// is under way is decided when the answer comes (evicted).
func (r *run) podChanged(s podState) {
	p, ok := r.pending[s.uid]
	if !ok {
		return
	}
	r.state[s.uid] = s
	if s.stopped() && !s.deleting {
		// Once seen, kubelet's word stays: the eviction of a stopped pod
		// replaces its DisruptionTarget condition (EvictionByEvictionAPI)
		// before deleting it.
		f := r.stoppedFirst[s.uid]
		f.uid, f.terminal, f.byKubelet = s.uid, f.terminal || s.terminal, f.byKubelet || s.byKubelet
		r.stoppedFirst[s.uid] = f
	}
	if s.deleting && r.cancelRetry(s.uid) {
		if r.serverFailed[s.uid] {
			// Its last eviction's answer was lost (cut off, a 5xx): the
			// deletion is most likely that eviction, carried out.
			r.res.Status.Evicted++
			r.accept(s.uid)
		}
		r.deletedMeanwhile(s.uid)
		return
	}
	// Only a terminal phase lets the eviction past its budget (the API
	// server's canIgnorePDB): kubelet's condition alone does not.
	if s.terminal && !r.hurried[s.uid] && r.cancelRetry(s.uid) {
		r.hurried[s.uid] = true
		r.launch(p)
	}
}

// deletedMeanwhile takes a pod whose eviction was refused (or its answer
// lost) and that is being deleted meanwhile as terminating: the drain
// waits for it, and evicts it no more.
func (r *run) deletedMeanwhile(uid types.UID) {
	delete(r.blocked, uid)
	r.terminating[uid] = true
	// Its last eviction may have failed on the server (an answer cut off:
	// perhaps gnsh's own eviction deleting it): it is evicted no more, so
	// that failure no longer holds the drain up, as when it is gone.
	if r.serverFailed[uid] {
		delete(r.serverFailed, uid)
		if len(r.serverFailed) == 0 {
			r.health.answered(evictRequests)
		}
	}
	r.report()
}

// cancelRetry drops uid's pending retry, if it has one; true if it had.
func (r *run) cancelRetry(uid types.UID) bool {
	if _, ok := r.due[uid]; !ok {
		return false
	}
	delete(r.due, uid)
	if t := r.timers[uid]; t != nil {
		t.Stop()
	}
	delete(r.timers, uid)
	return true
}

// hurry is whether a refused pod's eviction is to be retried at once: it
// has stopped, and has not been retried early yet (once per pod: the
// rest of its retries keep their backoff).
func (r *run) hurry(uid types.UID) bool {
	if r.hurried[uid] || !r.state[uid].terminal {
		return false
	}
	r.hurried[uid] = true
	return true
}

// countStopped counts an accepted eviction of a pod that had already
// stopped, once, as far as the drain's watch has seen: stopped before it
// was seen being deleted. It runs when the eviction is accepted and again
// when the pod is gone, as the watch may show kubelet's status write
// after the eviction's answer. A stop the watch shows without a deletion
// came before the eviction: accepting the eviction of a running pod marks
// it deleted at once (a pod seen stopped only once it was being deleted
// stopped because of that deletion: not counted).
func (r *run) countStopped(uid types.UID) {
	s, ok := r.stoppedFirst[uid]
	if !ok || r.counted[uid] {
		return
	}
	if r.counted == nil {
		r.counted = map[types.UID]bool{}
	}
	r.counted[uid] = true
	r.res.Status.AlreadyStopped++
	if s.byKubelet {
		r.res.Status.StoppedByKubelet++
	}
}

// accept notes that uid's eviction was accepted (countStopped).
func (r *run) accept(uid types.UID) {
	if r.accepted == nil {
		r.accepted = map[types.UID]bool{}
	}
	r.accepted[uid] = true
	r.countStopped(uid)
}

// takeChanges takes in the podStates the watcher has sent and the loop
// not yet read, without waiting.
func (r *run) takeChanges() {
	for {
		select {
		case s := <-r.changed:
			r.podChanged(s)
		default:
			return
		}
	}
}
