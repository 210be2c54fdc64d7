// Package faultproxy is a reverse proxy for tests that stands in front of
// the test control plane's kube-apiserver (test/internal/controlplane) and
// makes chosen requests fail: answer a given status with a proper
// metav1.Status body (401, 403, 429, 500, 503, …), hang until the client
// gives up, pass through but cut the answer off half way, or pass
// through. Everything else passes through unchanged, watches included
// (streamed, not buffered).
//
// It serves TLS with the API server's own serving certificate, so a
// kubeconfig for the real server works against the proxy once its server
// URL is the proxy's (Proxy.Kubeconfig writes such a copy). Clients keep
// their identity:
//
//   - a client certificate (the kubelet's system:node:NAME, the admin's) is
//     verified against the control plane's CA, and the request is sent on
//     with the admin's certificate and Impersonate-User (the CN) and
//     Impersonate-Group (each O) headers, so the API server authorizes it
//     as that user: the Node authorizer and NodeRestriction see the node;
//   - a bearer token (a ServiceAccount's, the static tokens) is passed on
//     as it is, over a connection without a client certificate.
//
// Rules match a request by method and a regular expression on its URL
// path (the query is not part of it: a pod list and a pod watch are both
// GET /api/v1/pods). The most recently added matching rule decides, so a
// narrow Pass can exempt requests from a broad Fail. Rules apply to
// requests as they arrive; Interrupt ends the ones already being passed
// through (open watches), as a restarting load balancer would.
//
// The proxy listens on a loopback address only and refuses an upstream
// that is not on one. It is safe for concurrent use.
package faultproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/test/internal/controlplane"
)

// Config says where the API server is and which certificates to use.
type Config struct {
	// Upstream is the API server's URL (https://127.0.0.1:PORT); it must
	// be on a loopback address.
	Upstream string
	// CAFile is the CA that signed the API server's serving certificate
	// and the clients' certificates.
	CAFile string
	// CertFile and KeyFile are the proxy's serving certificate: the API
	// server's own, whose names include 127.0.0.1.
	CertFile, KeyFile string
	// ImpersonatorCertFile and ImpersonatorKeyFile are a client
	// certificate allowed to impersonate any user and group (group
	// system:masters): the proxy's own identity towards the API server.
	ImpersonatorCertFile, ImpersonatorKeyFile string
}

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	// URL is the proxy's https://127.0.0.1:PORT.
	URL string

	srv      *http.Server
	asUser   *httputil.ReverseProxy // client certificates: impersonated
	asIs     *httputil.ReverseProxy // tokens and anonymous requests
	requests atomic.Int64

	mu       sync.Mutex
	rules    []*Rule                              // in the order added
	inFlight map[*http.Request]context.CancelFunc // requests being passed through
	closed   chan struct{}
	log      []Request
}

// Request is one request the proxy saw and the status it answered with
// (0 when it never answered: hung until the client gave up, or
// interrupted before the upstream answered).
type Request struct {
	Method string
	Path   string
	Query  string
	Code   int
	Rule   *Rule // the rule that decided, nil when none matched
}

// Action is what a Rule does with a matching request.
type Action int

// Actions.
const (
	// Pass sends the request on to the API server.
	Pass Action = iota
	// Fail answers with the rule's Status.
	Fail
	// Hang holds the request until the client gives up, the rule is
	// removed (the request then passes through) or the proxy closes.
	Hang
	// Cut sends the request on to the API server, which acts on it, then
	// sends the client the answer's status line, headers and half its
	// body, and resets the stream (HTTP/2) or closes the connection.
	Cut
)

// Rule is one fault (or exemption) in force.
type Rule struct {
	p        *Proxy
	method   string
	path     *regexp.Regexp
	action   Action
	status   metav1.Status
	hits     atomic.Int64
	released chan struct{} // closed by Remove: hung requests go on
	once     sync.Once
	// every: the rule decides only each every-th matching request (the
	// others pass, after delay); 0 or 1 = each.
	every   int64
	seen    atomic.Int64
	delay   time.Duration
	delayed atomic.Int64
}

// Every makes the rule decide only every n-th request it matches (the
// n-th, 2n-th, …); the others pass through. It returns r.
func (r *Rule) Every(n int) *Rule {
	r.p.mu.Lock()
	r.every = int64(n)
	r.p.mu.Unlock()
	return r
}

// Delay holds each matching request the rule does not fail for d before
// passing it on (a slow API server, or a slow network). It returns r.
func (r *Rule) Delay(d time.Duration) *Rule {
	r.p.mu.Lock()
	r.delay = d
	r.p.mu.Unlock()
	return r
}

// Delayed is how many requests the rule delayed.
func (r *Rule) Delayed() int { return int(r.delayed.Load()) }

// ForControlPlane starts a proxy in front of cp, with cp's serving
// certificate and CA and its admin certificate as impersonator, and
// closes it when t ends.
func ForControlPlane(t testing.TB, cp *controlplane.ControlPlane) *Proxy {
	t.Helper()
	// controlplane.sh keeps its PKI under DIR/pki: apiserver.{crt,key} is
	// the serving pair (IP SAN 127.0.0.1), admin.{crt,key} the
	// system:masters client certificate.
	pki := filepath.Join(cp.Dir, "pki")
	p, err := New(Config{
		Upstream: cp.Server, CAFile: cp.CAFile,
		CertFile: filepath.Join(pki, "apiserver.crt"), KeyFile: filepath.Join(pki, "apiserver.key"),
		ImpersonatorCertFile: filepath.Join(pki, "admin.crt"), ImpersonatorKeyFile: filepath.Join(pki, "admin.key"),
	})
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// New starts a proxy for cfg on a free loopback port.
func New(cfg Config) (*Proxy, error) {
	up, err := url.Parse(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	if up.Scheme != "https" || !loopback(up.Hostname()) {
		return nil, fmt.Errorf("upstream %q: only https on a loopback address", cfg.Upstream)
	}
	caPEM, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", cfg.CAFile)
	}
	serving, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	impersonator, err := tls.LoadX509KeyPair(cfg.ImpersonatorCertFile, cfg.ImpersonatorKeyFile)
	if err != nil {
		return nil, fmt.Errorf("impersonator certificate: %w", err)
	}
	plain := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second,
	}
	asAdmin := plain.Clone()
	asAdmin.TLSClientConfig.Certificates = []tls.Certificate{impersonator}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: "https://" + l.Addr().String(), inFlight: map[*http.Request]context.CancelFunc{}, closed: make(chan struct{})}
	newRP := func(rt http.RoundTripper) *httputil.ReverseProxy {
		return &httputil.ReverseProxy{
			Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(up); pr.Out.Host = up.Host },
			Transport:     rt,
			FlushInterval: -1, // watch events as they come
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				if r.Context().Err() != nil {
					return // the client went away, or Interrupt
				}
				writeStatus(w, r, statusFor(http.StatusBadGateway, "faultproxy: upstream: "+err.Error()))
			},
		}
	}
	p.asUser, p.asIs = newRP(asAdmin), newRP(plain)
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.VerifyClientCertIfGiven,
			ClientCAs: ca, MinVersion: tls.VersionTLS12},
	}
	go func() { _ = p.srv.ServeTLS(l, "", "") }()
	return p, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Close stops the proxy: hung and passing requests end, connections
// close.
func (p *Proxy) Close() {
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		return
	default:
		close(p.closed)
	}
	p.mu.Unlock()
	p.Interrupt()
	_ = p.srv.Close()
}

// Kubeconfig writes a copy of kubeconfig whose clusters all point at the
// proxy, next to nothing else (in a temporary directory of t), and returns
// its path. Certificates and keys named by path stay where they are.
func (p *Proxy) Kubeconfig(t testing.TB, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = p.URL
	}
	f := filepath.Join(t.TempDir(), "faultproxy-"+filepath.Base(kubeconfig))
	if err := clientcmd.WriteToFile(*cfg, f); err != nil {
		t.Fatal(err)
	}
	return f
}

// Fail makes requests of method (any if "" or "*") whose path matches the
// regular expression path answer code, with the metav1.Status the API
// server would send for it (reason Unauthorized, Forbidden,
// TooManyRequests, InternalError, ServiceUnavailable, …) and a message
// saying faultproxy sent it.
func (p *Proxy) Fail(method, path string, code int) *Rule {
	return p.FailWith(method, path, statusFor(code, fmt.Sprintf("faultproxy: injected %d %s", code, http.StatusText(code))))
}

// FailWith is Fail with a Status of the caller's, e.g. a 429 with a
// DisruptionBudget cause. Its Code is the HTTP status; a
// Details.RetryAfterSeconds also goes out as a Retry-After header (which
// makes client-go retry on its own).
func (p *Proxy) FailWith(method, path string, st metav1.Status) *Rule {
	if st.Code == 0 {
		panic("faultproxy: Status without a Code")
	}
	st.Kind, st.APIVersion, st.Status = "Status", "v1", metav1.StatusFailure
	return p.add(method, path, Fail, st)
}

// Hang makes matching requests wait, unanswered, until the client gives
// up (its request timeout), the rule is removed (they then pass through)
// or the proxy closes.
func (p *Proxy) Hang(method, path string) *Rule { return p.add(method, path, Hang, metav1.Status{}) }

// Cut makes matching requests reach the API server (an eviction is
// carried out) but their answers break off half way, as when a load
// balancer restarts while it relays them: the client sees an HTTP/2
// stream reset (client-go: "stream error when reading response body") or
// an unexpected EOF. Not for watches: the answer is read whole first.
func (p *Proxy) Cut(method, path string) *Rule { return p.add(method, path, Cut, metav1.Status{}) }

// Pass lets matching requests through, whatever rules added before it say.
func (p *Proxy) Pass(method, path string) *Rule { return p.add(method, path, Pass, metav1.Status{}) }

func (p *Proxy) add(method, path string, a Action, st metav1.Status) *Rule {
	r := &Rule{p: p, method: strings.ToUpper(method), path: regexp.MustCompile(path), action: a, status: st,
		released: make(chan struct{})}
	if r.method == "*" {
		r.method = ""
	}
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
	return r
}

// Remove takes the rule out of force; requests it holds hung pass through.
func (r *Rule) Remove() {
	r.p.mu.Lock()
	for i, x := range r.p.rules {
		if x == r {
			r.p.rules = append(r.p.rules[:i:i], r.p.rules[i+1:]...)
			break
		}
	}
	r.p.mu.Unlock()
	r.once.Do(func() { close(r.released) })
}

// Hits is how many requests the rule decided.
func (r *Rule) Hits() int { return int(r.hits.Load()) }

// Reset removes every rule.
func (p *Proxy) Reset() {
	p.mu.Lock()
	rules := p.rules
	p.rules = nil
	p.mu.Unlock()
	for _, r := range rules {
		r.once.Do(func() { close(r.released) })
	}
}

// Interrupt ends every request being passed through right now, open
// watches included: their clients see the stream (or connection) reset,
// and come back to meet the rules in force.
func (p *Proxy) Interrupt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cancel := range p.inFlight {
		cancel()
	}
}

// Requests is how many requests the proxy has received.
func (p *Proxy) Requests() int { return int(p.requests.Load()) }

// Log is every request the proxy has finished with, in order.
func (p *Proxy) Log() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.log...)
}

// rule is the most recently added rule matching r, or nil.
func (p *Proxy) rule(r *http.Request) *Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.rules) - 1; i >= 0; i-- {
		x := p.rules[i]
		if (x.method == "" || x.method == r.Method) && x.path.MatchString(r.URL.Path) {
			return x
		}
	}
	return nil
}

// ServeHTTP applies the rules to one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	rec := &recorder{ResponseWriter: w}
	rule := p.rule(r)
	defer func() {
		p.mu.Lock()
		p.log = append(p.log, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Code: rec.code, Rule: rule})
		p.mu.Unlock()
	}()
	if rule != nil {
		p.mu.Lock()
		every, delay := rule.every, rule.delay
		p.mu.Unlock()
		if n := rule.seen.Add(1); every > 1 && n%every != 0 {
			if delay > 0 {
				rule.delayed.Add(1)
				select {
				case <-r.Context().Done():
					return
				case <-time.After(delay):
				}
			}
			p.pass(rec, r)
			return
		}
		rule.hits.Add(1)
		switch rule.action {
		case Fail:
			writeStatus(rec, r, rule.status)
			return
		case Cut:
			p.cut(rec, r)
			return
		case Hang:
			select {
			case <-r.Context().Done():
				return
			case <-p.closed:
				return
			case <-rule.released:
			}
		}
	}
	p.pass(rec, r)
}

// pass sends r on to the API server as its client.
func (p *Proxy) pass(w http.ResponseWriter, r *http.Request) {
	client := r.Context()
	ctx, cancel := context.WithCancel(client)
	defer cancel()
	defer func() {
		// Interrupted while the client still listens: reset its stream, as
		// a restarting load balancer does, instead of letting it end as if
		// the answer were complete (which one it was depended on timing).
		if ctx.Err() != nil && client.Err() == nil {
			panic(http.ErrAbortHandler)
		}
	}()
	r = r.WithContext(ctx)
	p.mu.Lock()
	p.inFlight[r] = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.inFlight, r)
		p.mu.Unlock()
	}()
	for h := range r.Header {
		if strings.HasPrefix(strings.ToLower(h), "impersonate-") && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			writeStatus(w, r, statusFor(http.StatusBadRequest, "faultproxy: a client certificate's request cannot impersonate"))
			return
		}
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		p.asIs.ServeHTTP(w, r)
		return
	}
	subject := r.TLS.PeerCertificates[0].Subject
	r.Header.Set("Impersonate-User", subject.CommonName)
	r.Header.Del("Impersonate-Group")
	for _, g := range subject.Organization {
		r.Header.Add("Impersonate-Group", g)
	}
	p.asUser.ServeHTTP(w, r)
}

// cut passes r on, reads the whole answer, and sends w its status,
// headers and the first half of its body before aborting.
func (p *Proxy) cut(w http.ResponseWriter, r *http.Request) {
	full := httptest.NewRecorder()
	p.pass(full, r)
	body := full.Body.Bytes()
	for k, v := range full.Header() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(full.Code)
	_, _ = w.Write(body[:len(body)/2])
	_ = http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}

// recorder notes the status sent.
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush passes on a flush, for watches.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// statusReasons are the reasons the API server gives with these codes
// (k8s.io/apimachinery/pkg/api/errors).
var statusReasons = map[int]metav1.StatusReason{
	http.StatusBadRequest:          metav1.StatusReasonBadRequest,
	http.StatusUnauthorized:        metav1.StatusReasonUnauthorized,
	http.StatusForbidden:           metav1.StatusReasonForbidden,
	http.StatusNotFound:            metav1.StatusReasonNotFound,
	http.StatusMethodNotAllowed:    metav1.StatusReasonMethodNotAllowed,
	http.StatusConflict:            metav1.StatusReasonConflict,
	http.StatusGone:                metav1.StatusReasonExpired,
	http.StatusUnprocessableEntity: metav1.StatusReasonInvalid,
	http.StatusTooManyRequests:     metav1.StatusReasonTooManyRequests,
	http.StatusInternalServerError: metav1.StatusReasonInternalError,
	http.StatusServiceUnavailable:  metav1.StatusReasonServiceUnavailable,
	http.StatusGatewayTimeout:      metav1.StatusReasonTimeout,
}

// statusFor is the Status of an answer code with message.
func statusFor(code int, message string) metav1.Status {
	return metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: statusReasons[code], Message: message,
	}
}

// writeStatus answers r with st as the API server does (JSON, the code as
// HTTP status).
func writeStatus(w http.ResponseWriter, _ *http.Request, st metav1.Status) {
	body, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, private")
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(body)
}
