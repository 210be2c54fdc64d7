package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
)

// DefaultUnreachableAfter is how long the API server may stay unusable in
// the middle of a drain before Drain gives up with *UnreachableError. A
// node must stay rebootable while its control plane is down, so the
// caller then hands off anyway.
const DefaultUnreachableAfter = 10 * time.Second

// UnreachableError means the API server could not be used for the drain.
// Either the drain's first request (the pod list) failed that way, or, in
// the middle of the drain, for longer than Options.UnreachableAfter, a
// kind of request the drain depends on (listing and watching the node's
// pods; evicting them) got nothing but failures:
//
//   - no answer: connection refused or reset, TLS or DNS failure, no
//     answer within the request timeout, an answer cut off (stream reset);
//   - an answer saying the server itself is failing: any 5xx (a load
//     balancer without backends, etcd without a leader, a crashing
//     apiserver), or 429 Too Many Requests (API Priority and Fairness
//     shedding load, a rate-limiting proxy).
//
// Only an answer that is not such a failure ends a run of failures. An
// eviction's answer that carries the DisruptionBudget cause (429, or 403
// while the budget's status is off) is a PodDisruptionBudget's refusal,
// not a failure, and so is the 500 an eviction gets for a pod under more
// than one PodDisruptionBudget: those make the drain blocked, not
// unreachable.
type UnreachableError struct {
	For time.Duration // how long it has been failing; 0 at the start
	Err error         // the last failure
}

// Error says what the drain last saw: "API server unreachable for 10s:
// … connection refused" or "API server failing for 10s: 503 Service
// Unavailable: …".
func (e *UnreachableError) Error() string {
	what, detail := "unreachable", fmt.Sprint(e.Err)
	if code := statusCode(e.Err); code != 0 {
		what, detail = "failing", fmt.Sprintf("%d %s: %v", code, http.StatusText(code), e.Err)
	}
	if e.For > 0 {
		return fmt.Sprintf("API server %s for %s: %s", what, e.For.Round(time.Second), detail)
	}
	return fmt.Sprintf("API server %s: %s", what, detail)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// IsUnreachable reports whether err means the API server did not answer
// at all (as opposed to answering with an error status), or is an
// *UnreachableError.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return true
	}
	if statusCode(err) != 0 {
		return false // an answer, whatever its transport wrapping
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	// An answer cut off after its headers: client-go reads the body
	// itself and wraps the HTTP/2 error in a plain error ("stream error
	// when reading response body, may be caused by closed connection"),
	// not a *url.Error. A load balancer restarting mid-answer does this;
	// the request may or may not have taken effect, and is retried.
	var se http2.StreamError
	var ge http2.GoAwayError
	var ce http2.ConnectionError
	if errors.As(err, &se) || errors.As(err, &ge) || errors.As(err, &ce) {
		return true
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		// Any transport failure: DNS, TLS handshake, timeouts.
		return true
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	// client-go's per-request timeout surfaces as a deadline on the
	// request's own context.
	return errors.Is(err, context.DeadlineExceeded)
}

// IsAPIFailure reports whether err means that the API server cannot be
// used for a drain at all, so that a shutdown should go ahead without one
// rather than be refused: unreachable (IsUnreachable, which includes
// *UnreachableError), 401 Unauthorized (credentials no longer accepted),
// 403 Forbidden (the identity may not do what a drain needs), 429 Too
// Many Requests, or any 5xx. It is meant for errors from a drain's Node
// GET and PATCH and from Drain; Drain itself reports a PodDisruptionBudget's
// refusal as *BlockedError, never as a 429.
func IsAPIFailure(err error) bool {
	if IsUnreachable(err) {
		return true
	}
	switch code := statusCode(err); {
	case code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusTooManyRequests:
		return true
	default:
		return code >= 500 && code <= 599
	}
}

// serverFailing reports whether err, from any request but an eviction,
// means the API server is not usable: no answer, 429, or any 5xx. Such
// failures count toward Options.UnreachableAfter.
func serverFailing(err error) bool {
	if err == nil {
		return false
	}
	code := statusCode(err)
	return IsUnreachable(err) || code == http.StatusTooManyRequests || code >= 500 && code <= 599
}

// statusCode is the HTTP status of the API server's answer carried by err
// (a Status object, or a bare status line from a proxy), or 0 if err is
// not an answer.
func statusCode(err error) int {
	var se apierrors.APIStatus
	if err == nil || !errors.As(err, &se) {
		return 0
	}
	return int(se.Status().Code)
}

// requestKind is a kind of request the drain depends on. Each kind has its
// own run of failures: a server that answers lists from its cache while
// every eviction fails (etcd without a leader) is as unusable as one that
// fails everything.
type requestKind int

const (
	podRequests   requestKind = iota // list and watch the node's pods
	evictRequests                    // evictions
	requestKinds
)

// health tracks, per kind of request, since when the API server has done
// nothing but fail (serverFailing; evictServerFailing). Safe for
// concurrent use: the watcher reports from its own goroutine.
type health struct {
	clk   clock.PassiveClock
	mu    sync.Mutex
	since [requestKinds]time.Time // zero: the last request of that kind was answered
	last  [requestKinds]error
}

// answered ends kind's run of failures.
func (h *health) answered(kind requestKind) {
	h.mu.Lock()
	h.since[kind] = time.Time{}
	h.last[kind] = nil
	h.mu.Unlock()
}

// failed records a failure of a request of kind.
func (h *health) failed(kind requestKind, err error) {
	h.mu.Lock()
	if h.since[kind].IsZero() {
		h.since[kind] = h.clk.Now()
	}
	h.last[kind] = err
	h.mu.Unlock()
}

// worst is the longest current run of failures and its last error.
func (h *health) worst() (time.Duration, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var d time.Duration
	var err error
	for k := range requestKinds {
		if !h.since[k].IsZero() {
			if s := h.clk.Since(h.since[k]); err == nil || s > d {
				d, err = s, h.last[k]
			}
		}
	}
	return d, err
}
