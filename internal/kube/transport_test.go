package kube

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
)

// apiServer is an httptest TLS server standing in for the API server; it
// counts the requests it gets.
type apiServer struct {
	*httptest.Server
	mu    sync.Mutex
	count map[string]int // "GET /api/v1/nodes/n1" → requests
	done  chan struct{}  // closed at the end of the test: hung handlers return
}

func newAPIServer(t *testing.T, h func(s *apiServer, w http.ResponseWriter, r *http.Request)) *apiServer {
	t.Helper()
	s := &apiServer{count: map[string]int{}, done: make(chan struct{})}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.count[r.Method+" "+r.URL.Path]++
		s.mu.Unlock()
		h(s, w, r)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.done) }) // runs before Close
	return s
}

func (s *apiServer) requests(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[key]
}

// hang never answers (until the client gives up or the test ends).
func (s *apiServer) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.done:
	}
}

// client builds a clientset the way gnsh does: a kubeconfig trusting the
// server's certificate, through Locator.RESTConfig.
func (s *apiServer) client(t *testing.T, l *Locator) kubernetes.Interface {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	path := filepath.Join(t.TempDir(), "kubeconfig")
	write(t, path, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: u
  user: {token: secret}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, s.URL, base64.StdEncoding.EncodeToString(ca)))
	cfg, err := l.RESTConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func status(w http.ResponseWriter, code int, reason metav1.StatusReason) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"code":%d}`, reason, code)
}

func getNode(ctx context.Context, c kubernetes.Interface) error {
	_, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	return err
}

func evict(ctx context.Context, c kubernetes.Interface) error {
	return c.PolicyV1().Evictions("ns").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}})
}

var calls = []struct {
	name string
	key  string
	do   func(context.Context, kubernetes.Interface) error
}{
	{"Nodes().Get", "GET /api/v1/nodes/n1", getNode},
	{"eviction POST", "POST /api/v1/namespaces/ns/pods/p/eviction", evict},
}

// client-go retries a 429 or 5xx carrying Retry-After up to ten times,
// sleeping that long each time; gnsh's clients must not. (The request
// count catches a retry; the time, a sleep before giving up: 5 s asked
// for, so that a loaded machine's slowness is not taken for one.)
func TestNoRetryAfterRetries(t *testing.T) {
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		for _, call := range calls {
			t.Run(fmt.Sprintf("%d %s", code, call.name), func(t *testing.T) {
				s := newAPIServer(t, func(_ *apiServer, w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Retry-After", "5")
					status(w, code, metav1.StatusReason(http.StatusText(code)))
				})
				c := s.client(t, &Locator{Timeout: 5 * time.Second})
				start := time.Now()
				err := call.do(context.Background(), c)
				took := time.Since(start)
				if n := s.requests(call.key); n != 1 {
					t.Errorf("%d requests, want 1", n)
				}
				if took > 4*time.Second {
					t.Errorf("took %v: a wait for Retry-After: 5?", took)
				}
				var se *apierrors.StatusError
				if !errors.As(err, &se) || int(se.Status().Code) != code {
					t.Errorf("err = %#v, want a StatusError %d", err, code)
				}
			})
		}
	}
}

// closeConn ends the connection under r without answering: reset sends a
// TCP RST, else the connection is closed (the client reads EOF).
func closeConn(t *testing.T, w http.ResponseWriter, reset bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Error(err)
		return
	}
	if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = tc.NetConn() // under TLS: no close_notify, just TCP
	}
	if tcp, ok := conn.(*net.TCPConn); ok && reset {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// client-go retries a GET whose connection was reset or closed (and a
// watch's probable EOF); gnsh's clients must not, and the error must still
// say what happened.
func TestNoRetryOnTransportErrors(t *testing.T) {
	for _, reset := range []bool{true, false} {
		name := map[bool]string{true: "reset", false: "EOF"}[reset]
		t.Run(name, func(t *testing.T) {
			s := newAPIServer(t, func(_ *apiServer, w http.ResponseWriter, _ *http.Request) { closeConn(t, w, reset) })
			c := s.client(t, &Locator{Timeout: 5 * time.Second})
			err := getNode(context.Background(), c)
			if n := s.requests("GET /api/v1/nodes/n1"); n != 1 {
				t.Errorf("GET: %d requests, want 1 (err %v)", n, err)
			}
			// client-go would wait a second before its retry; the request
			// count above catches it without a bound on the time.
			var ue *url.Error
			if !errors.As(err, &ue) {
				t.Errorf("err = %#v, want a *url.Error (a transport failure)", err)
			}
			if reset && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("err = %v: errors.Is(ECONNRESET) lost", err)
			}
			if utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err) {
				t.Errorf("err = %v: client-go would retry it", err)
			}

			_, err = c.CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{})
			if n := s.requests("GET /api/v1/pods"); n != 1 {
				t.Errorf("watch: %d requests, want 1", n)
			}
			if err == nil {
				t.Error("watch: no error (client-go's empty watch)")
			}
		})
	}
}

// Each request, a watch included, is bounded by Locator.Timeout, once.
func TestRequestTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s := newAPIServer(t, func(s *apiServer, w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" && r.URL.Query().Get("fieldSelector") == "headers" {
			// Answers, then sends no event.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
		}
		s.hang(r)
	})
	c := s.client(t, &Locator{Timeout: timeout})
	within := func(t *testing.T, start time.Time) {
		t.Helper()
		// A retry would take at least two timeouts and client-go's
		// second between them (1.6 s).
		if took := time.Since(start); took < timeout || took > timeout+time.Second {
			t.Errorf("took %v, want about %v", took, timeout)
		}
	}
	for _, call := range calls {
		t.Run(call.name, func(t *testing.T) {
			start := time.Now()
			err := call.do(context.Background(), c)
			within(t, start)
			if n := s.requests(call.key); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 300ms") {
				t.Errorf("err = %v", err)
			}
		})
	}
	t.Run("watch that never answers", func(t *testing.T) {
		start := time.Now()
		w, err := c.CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{FieldSelector: "silent"})
		within(t, start)
		if err == nil {
			w.Stop()
			t.Error("no error: client-go's empty watch after a timeout")
		}
		if n := s.requests("GET /api/v1/pods"); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
	t.Run("watch that answers, then hangs", func(t *testing.T) {
		start := time.Now()
		w, err := c.CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{FieldSelector: "headers"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		select {
		case ev, ok := <-w.ResultChan():
			if ok {
				t.Errorf("event %v", ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the watch outlived the timeout")
		}
		within(t, start)
		if n := s.requests("GET /api/v1/pods"); n != 2 { // one per subtest
			t.Errorf("%d watch requests in all, want 2", n)
		}
	})
	t.Run("watch with its own bound", func(t *testing.T) {
		// A waiter's watch (WithBound) outlives the client's timeout,
		// and ends at its own bound.
		const bound = 3 * timeout
		ctx := WithBound(context.Background(), bound)
		w, err := c.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "headers"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		start := time.Now()
		select {
		case ev, ok := <-w.ResultChan():
			if ok {
				t.Errorf("event %v", ev)
			}
			if took := time.Since(start); took < 2*timeout {
				t.Errorf("ended after %v, within the client's timeout (%v), not at its own bound (%v)", took, timeout, bound)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the watch outlived its own bound")
		}
	})
}

func TestWarnings(t *testing.T) {
	s := newAPIServer(t, func(_ *apiServer, w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Warning", `299 - "v1 Foo is deprecated"`)
		w.Header().Add("Warning", `299 - "`+r.URL.Path+` is odd"`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1"}}`))
	})
	var mu sync.Mutex
	var got []string
	c := s.client(t, &Locator{Warn: func(m string) { mu.Lock(); got = append(got, m); mu.Unlock() }})
	for range 3 {
		if _, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().Nodes().Get(context.Background(), "n2", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"v1 Foo is deprecated", "/api/v1/nodes/n1 is odd", "/api/v1/nodes/n2 is odd"}
	if !slices.Equal(got, want) {
		t.Errorf("warnings %q, want %q (each once)", got, want)
	}
	// Without Warn they are dropped, not logged.
	c = s.client(t, &Locator{})
	if _, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The rewording must keep every apimachinery retry test false, whatever
// the underlying failure.
func TestAttemptErrorIsNotRetryable(t *testing.T) {
	for _, inner := range []error{
		errors.New("read tcp 1.2.3.4:5->6.7.8.9:443: read: connection reset by peer"),
		&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		errors.New("EOF"),
		errors.New("unexpected EOF"),
		errors.New("write tcp: use of closed network connection"),
		errors.New("http: can't write HTTP request on broken connection"),
		errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1"),
		errors.New("http2: client connection lost"),
		&net.DNSError{Err: "timeout", IsTimeout: true},
	} {
		err := &url.Error{Op: "Get", URL: "https://h/api", Err: &attemptError{err: inner}}
		if utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err) || utilnet.IsTimeout(err) {
			t.Errorf("%q: still retryable as %q", inner, err)
		}
	}
	timeout := &url.Error{Op: "Get", URL: "https://h/api", Err: &attemptError{err: context.DeadlineExceeded, timeout: time.Second}}
	if utilnet.IsTimeout(timeout) || !errors.Is(timeout, context.DeadlineExceeded) || timeout.Error() != `Get "https://h/api": no answer within 1s` {
		t.Errorf("timeout: %v", timeout)
	}
}
