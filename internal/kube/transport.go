package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// singleShot is the innermost transport of every client built from
// Locator.RESTConfig. It makes each API request exactly one HTTP exchange,
// bounded by a timeout, whatever the client-go call.
//
// client-go's rest.Request retries by itself and no rest.Config field turns
// that off: NewRequest hard-codes ten retries, and only Request.MaxRetries
// changes that, which the typed clients (Nodes().Get and Patch, Pods().List,
// Events().Create, Leases().Get, Evictions) never call. It retries
//
//   - a 429 or 5xx response that carries Retry-After, after sleeping that
//     long (checkWait in rest/with_retry.go);
//   - a GET whose transport error is a connection reset, an EOF or a lost
//     HTTP/2 connection, judged by apimachinery's IsConnectionReset (an
//     errno found with errors.As), IsProbableEOF and IsHTTP2ConnectionLost
//     (error texts);
//   - a watch whose transport error is a probable EOF or a timeout
//     (net.Error.Timeout), which, once the retries are spent, "succeeds" as
//     an empty watch without an error.
//
// The drain has its own backoff and deadlines, and an API server that does
// not answer must count as down within the request timeout, not after ten
// hidden attempts. A transport is the one place every request of every
// client passes through, so singleShot hands client-go each outcome in a
// form none of those tests match:
//
//   - it deletes Retry-After from 429 and 5xx responses (status and body,
//     which the error is made of, are unchanged);
//   - it wraps transport errors in *attemptError, whose text avoids the
//     phrases client-go looks for, which has no Timeout method, and which
//     errors.As does not see through (errors.Is does, so
//     errors.Is(err, syscall.ECONNRESET) still holds).
//
// The per-request bound is enforced here as well, and http.Client.Timeout
// (rest.Config.Timeout) stays 0: when http.Client's own deadline fires it
// replaces the transport's error with a timeout error of its own, which a
// watch would retry. The bound covers the whole exchange, reading the body
// included, as http.Client.Timeout does: a watch ends after it too.
type singleShot struct {
	next    http.RoundTripper
	timeout time.Duration
}

func (s *singleShot) RoundTrip(req *http.Request) (*http.Response, error) {
	timeout := s.timeout
	if d, ok := req.Context().Value(boundKey{}).(time.Duration); ok && d > 0 {
		timeout = d
	}
	ctx, cancel := context.WithTimeout(req.Context(), timeout)
	resp, err := s.next.RoundTrip(req.WithContext(ctx))
	if err == nil && ctx.Err() != nil && req.Context().Err() == nil {
		// The bound ran out while the response came in. net/http can
		// still hand one over then (seen as a 200 with an empty body
		// from a server whose handler returned because the exchange
		// was being cancelled), and client-go would take that empty
		// body for an answer. Past the bound it is a timeout.
		resp.Body.Close()
		resp, err = nil, ctx.Err()
	}
	if err != nil {
		timedOut := ctx.Err() != nil
		cancel()
		if req.Context().Err() != nil {
			// The caller's context ended: client-go looks at it before
			// any retry, so its error goes up as it is.
			return nil, err
		}
		e := &attemptError{err: err}
		if timedOut {
			e.timeout = timeout
		}
		return nil, e
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		resp.Header.Del("Retry-After")
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// boundKey carries a request's own bound (WithBound).
type boundKey struct{}

// WithBound bounds the requests made with ctx by d instead of the client's
// Timeout: for a watch meant to stay open longer than one request (a
// waiter's, which sets its own timeoutSeconds for the API server to end
// it), so that it is not cut and started again every few seconds.
func WithBound(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, boundKey{}, d)
}

// cancelBody releases the request's deadline once the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// attemptError is a failed HTTP exchange, in a form client-go does not
// retry (see singleShot). net/http wraps it in a *url.Error, so it is
// still recognisably a transport failure.
type attemptError struct {
	err     error
	timeout time.Duration // the bound that ran out, or 0
}

// retryPhrases rewords the texts that apimachinery's IsProbableEOF and
// IsHTTP2ConnectionLost take for a reason to retry.
var retryPhrases = strings.NewReplacer(
	"connection reset by peer", "connection reset by the peer",
	"use of closed network connection", "use of a closed network connection",
	"http: can't write HTTP request on broken connection", "http: can't write HTTP request on a broken connection",
	"http2: server sent GOAWAY and closed the connection", "http2: the server sent GOAWAY and closed the connection",
	"http2: client connection lost", "http2: the client connection was lost",
)

func (e *attemptError) Error() string {
	if e.timeout > 0 {
		return fmt.Sprintf("no answer within %s", e.timeout)
	}
	return retryPhrases.Replace(e.err.Error())
}

// Is lets errors.Is find what the exchange failed with (ECONNREFUSED,
// ECONNRESET, io.EOF, context.DeadlineExceeded for the timeout). There is
// deliberately no Unwrap: errors.As would then find the errno that makes
// client-go retry.
func (e *attemptError) Is(target error) bool {
	if e.timeout > 0 && target == context.DeadlineExceeded {
		return true
	}
	return errors.Is(e.err, target)
}

// warnings passes the API server's warnings (Warning headers with code
// 299, e.g. deprecations) to warn, each distinct text once, instead of
// client-go's default handler, which logs them through klog. A nil warn
// drops them.
type warnings struct {
	warn func(string)
	mu   sync.Mutex
	seen map[string]bool
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, code int, _, text string) {
	if code != 299 || text == "" || w.warn == nil {
		return
	}
	w.mu.Lock()
	dup := w.seen[text]
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	w.seen[text] = true
	w.mu.Unlock()
	if !dup {
		w.warn(text)
	}
}

var silenceOnce sync.Once

// silenceKlog makes klog, and with it client-go, print nothing, process
// wide: every line gnsh prints starts "gnsh: ". With a logger set, klog
// hands every line to it instead of writing to stderr or files; a
// discarding logger therefore silences all severities. (SetOutput with
// LogToStderr(false) is not enough: lines at or above -stderrthreshold,
// ERROR by default, still go to stderr.)
func silenceKlog() {
	silenceOnce.Do(func() { klog.SetLogger(logr.Discard()) })
}

// SilenceKlog is silenceKlog for a process that builds clients some other
// way (tests with fake clientsets): called before any informer runs, so
// that klog's logger is never set while one logs.
func SilenceKlog() { silenceKlog() }
