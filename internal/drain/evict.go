package drain

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// evictResult is how the API server answered one eviction.
type evictResult int

const (
	// evictAccepted: the pod is being deleted, or already gone.
	evictAccepted evictResult = iota
	// evictRefused: a PodDisruptionBudget (an answer with the
	// DisruptionBudget cause: 429, or 403 while the budget's status is
	// off), more than one budget (500 saying so), or a terminating
	// namespace (403) refused it for now; retried after a backoff.
	evictRefused
	// evictServerFailing: no answer, a 5xx that is not about budgets, or
	// a 429 without the DisruptionBudget cause (API Priority and Fairness
	// shedding load, a rate-limiting proxy); retried after a backoff, and
	// counted toward UnreachableAfter.
	evictServerFailing
	// evictFailed ends the drain: 401, another 403, or anything else the
	// retries cannot change.
	evictFailed
)

// evictOutcome is the answer to one eviction of pod.
type evictOutcome struct {
	pod     *Pod
	result  evictResult
	err     error
	blocked *Blocked // refused or failing: why, for Status and BlockedError
}

// multiplePDBs is in the message of the 500 the eviction subresource
// answers for a pod selected by more than one PodDisruptionBudget
// (k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go: "This pod
// has more than one PodDisruptionBudget, which the eviction subresource
// does not support."). It is a refusal that lasts until an admin fixes
// the budgets, not a failing server.
const multiplePDBs = "more than one PodDisruptionBudget"

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

// evict asks for p's eviction, with a UID precondition so that a new pod
// of the same name is never evicted by mistake.
func (e *evictor) evict(ctx context.Context, p *Pod) evictOutcome {
	pod := &p.Pod
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
	return classifyEviction(ctx, p, err)
}

// classifyEviction turns the answer to p's eviction into an outcome.
func classifyEviction(ctx context.Context, p *Pod, err error) evictOutcome {
	o := evictOutcome{pod: p, err: err}
	refused := func(reason, pdb string) evictOutcome {
		o.result, o.blocked = evictRefused, &Blocked{Pod: p.Name(), PDB: pdb, Reason: reason}
		return o
	}
	code := statusCode(err)
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// NotFound: already deleted. Conflict: the UID precondition
		// failed, so this pod is gone and another has its name. The watch
		// reports both as gone.
		o.err = nil
		return o
	case hasCause(err, policyv1.DisruptionBudgetCause), budgetForbidden(err):
		// Only the budget's own refusal: a 429 without this cause is the
		// API server shedding load (Priority and Fairness), a failure.
		b := pdbBlock(p, err)
		return refused(b.Reason, b.PDB)
	case code == http.StatusInternalServerError && strings.Contains(err.Error(), multiplePDBs):
		return refused(statusMessage(err), "")
	case apierrors.IsForbidden(err) && hasCause(err, corev1.NamespaceTerminatingCause):
		return refused("namespace terminating", "")
	case ctx.Err() != nil:
		// The drain is over (deadline or interrupt); the loop reports it.
		return refused(err.Error(), "")
	case serverFailing(err):
		o.result = evictServerFailing
		reason := "API server unreachable"
		if code != 0 {
			reason = fmt.Sprintf("API server failing: %d %s", code, http.StatusText(code))
		}
		o.blocked = &Blocked{Pod: p.Name(), Reason: reason}
		return o
	default:
		o.result = evictFailed
		return o
	}
}

// budgetForbidden reports whether err is the 403 the eviction subresource
// answers while a budget's status is off (disruptionsAllowed negative, too
// many evictions the disruption controller has not confirmed): its Status
// names the poddisruptionbudget (group policy) as the object refusing,
// whatever cause it carries (none before the DisruptionBudget cause was
// added to it).
func budgetForbidden(err error) bool {
	var se apierrors.APIStatus
	if !apierrors.IsForbidden(err) || !errors.As(err, &se) || se.Status().Details == nil {
		return false
	}
	d := se.Status().Details
	return d.Group == "policy" && d.Kind == "poddisruptionbudget"
}

// statusMessage is the message of the API server's Status in err.
func statusMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return se.Status().Message
	}
	return err.Error()
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

// pdbBlock turns a budget's refusal into a Blocked, naming the PodDisruptionBudget from
// the DisruptionBudget cause ("The disruption budget NAME needs …"), else
// from a 403's Details.
func pdbBlock(p *Pod, err error) *Blocked {
	b := &Blocked{Pod: p.Name(), Reason: err.Error()}
	var se apierrors.APIStatus
	if budgetForbidden(err) && errors.As(err, &se) {
		b.PDB = se.Status().Details.Name
	}
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
