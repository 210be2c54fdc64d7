package faultproxy_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/test/internal/controlplane"
	"github.com/gnsh/gnsh/test/internal/faultproxy"
)

// A test puts the proxy in front of its control plane, points the
// identity it tests at the proxy, and makes requests fail while it runs.
// (Not run: it needs a control plane; TestControlPlane does the same.)
func Example() {
	var t *testing.T // the test's
	cp := controlplane.StartWith(t, controlplane.Options{Kwok: true, Nodes: []string{"node1"}})
	p := faultproxy.ForControlPlane(t, cp)
	kubeconfig := p.Kubeconfig(t, cp.NodeKubeconfig(t, "node1")) // system:node:node1, through the proxy

	// Pod lists and watches answer 503, and the watches open now end.
	podsDown := p.Fail("GET", `^/api/v1/pods$`, http.StatusServiceUnavailable)
	p.Interrupt()
	// Evictions are denied; an explicit Pass exempts one namespace.
	p.Fail("POST", `^/api/v1/namespaces/[^/]+/pods/[^/]+/eviction$`, http.StatusForbidden)
	p.Pass("POST", `^/api/v1/namespaces/kube-system/pods/[^/]+/eviction$`)
	// Node GETs hang until the client's own timeout.
	p.Hang("GET", `^/api/v1/nodes/`)

	_ = kubeconfig // … run the code under test with it …

	podsDown.Remove()
	fmt.Println(podsDown.Hits() > 0, p.Requests())
}

// pki is a throwaway CA with a serving certificate for 127.0.0.1 and
// client certificates, as PEM files.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
	serial int64
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caKey = key
	p.caFile = p.write(t, "ca.crt", "CERTIFICATE", der)
	p.serial = 1
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// cert issues a certificate: a server's for 127.0.0.1 if server, else a
// client's for cn in groups. It returns the cert and key files.
func (p *pki) cert(t *testing.T, name, cn string, server bool, groups ...string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn, Organization: groups},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".crt", "CERTIFICATE", der), p.write(t, name+".key", "EC PRIVATE KEY", kder)
}

// seen is what the fake upstream saw of a request.
type seen struct {
	ClientCN    string   `json:"clientCN"`
	User        string   `json:"user"`
	Groups      []string `json:"groups"`
	Auth        string   `json:"auth"`
	Path, Query string
}

// fixture is a proxy in front of a fake upstream that answers every
// request with what it saw, and streams /watch until the client leaves.
type fixture struct {
	pki   *pki
	proxy *faultproxy.Proxy
	node  *http.Client // client certificate CN=system:node:n1, O=system:nodes
	token *http.Client // no certificate; sends a bearer token
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	k := newPKI(t)
	srvCert, srvKey := k.cert(t, "server", "kube-apiserver", true)
	adminCert, adminKey := k.cert(t, "admin", "admin", false, "system:masters")
	nodeCert, nodeKey := k.cert(t, "node", "system:node:n1", false, "system:nodes")

	pool := x509.NewCertPool()
	pool.AddCert(k.ca)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{User: r.Header.Get("Impersonate-User"), Groups: r.Header.Values("Impersonate-Group"),
			Auth: r.Header.Get("Authorization"), Path: r.URL.Path, Query: r.URL.RawQuery}
		if len(r.TLS.PeerCertificates) > 0 {
			s.ClientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/watch" {
			_ = json.NewEncoder(w).Encode(s)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		_ = json.NewEncoder(w).Encode(s)
	}))
	kp, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	up.TLS = &tls.Config{Certificates: []tls.Certificate{kp}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	up.StartTLS()
	t.Cleanup(up.Close)

	p, err := faultproxy.New(faultproxy.Config{Upstream: up.URL, CAFile: k.caFile, CertFile: srvCert, KeyFile: srvKey,
		ImpersonatorCertFile: adminCert, ImpersonatorKeyFile: adminKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}}}
	}
	nkp, err := tls.LoadX509KeyPair(nodeCert, nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{pki: k, proxy: p, node: client(nkp), token: client()}
}

func get(t *testing.T, c *http.Client, url string, header ...string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestPassKeepsIdentity(t *testing.T) {
	f := newFixture(t)
	if !strings.HasPrefix(f.proxy.URL, "https://127.0.0.1:") {
		t.Fatalf("URL %s", f.proxy.URL)
	}
	code, body := get(t, f.node, f.proxy.URL+"/api/v1/nodes/n1?x=1")
	var s seen
	if err := json.Unmarshal(body, &s); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	if s.ClientCN != "admin" || s.User != "system:node:n1" || len(s.Groups) != 1 || s.Groups[0] != "system:nodes" ||
		s.Path != "/api/v1/nodes/n1" || s.Query != "x=1" {
		t.Fatalf("upstream saw %+v", s)
	}
	// A token goes on as it is, without a client certificate.
	_, body = get(t, f.token, f.proxy.URL+"/api", "Authorization", "Bearer abc")
	s = seen{}
	if err := json.Unmarshal(body, &s); err != nil || s.ClientCN != "" || s.User != "" || s.Auth != "Bearer abc" {
		t.Fatalf("upstream saw %+v (%v)", s, err)
	}
	// A certificate's request may not impersonate on its own.
	if code, body := get(t, f.node, f.proxy.URL+"/api", "Impersonate-User", "admin"); code != http.StatusBadRequest {
		t.Fatalf("impersonation passed: %d %s", code, body)
	}
}

func TestFail(t *testing.T) {
	f := newFixture(t)
	r := f.proxy.Fail("get", `^/api/v1/pods$`, http.StatusServiceUnavailable)
	code, body := get(t, f.node, f.proxy.URL+"/api/v1/pods?watch=true")
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || code != 503 || st.Kind != "Status" || st.Code != 503 ||
		st.Reason != metav1.StatusReasonServiceUnavailable || !strings.Contains(st.Message, "faultproxy") {
		t.Fatalf("%d %s", code, body)
	}
	// client-go reads it as the API server's own 503.
	if err := apierrors.FromObject(&st); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("%v", err)
	}
	// Other paths and methods pass.
	if code, _ := get(t, f.node, f.proxy.URL+"/api/v1/pods/x"); code != 200 {
		t.Fatalf("other path: %d", code)
	}
	// The latest rule wins: a Pass over the Fail, then a 429 over both.
	pass := f.proxy.Pass("", `^/api/v1/pods$`)
	if code, _ := get(t, f.node, f.proxy.URL+"/api/v1/pods"); code != 200 {
		t.Fatalf("Pass over Fail: %d", code)
	}
	f.proxy.FailWith("*", `pods`, metav1.Status{Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
		Message: "slow down", Details: &metav1.StatusDetails{RetryAfterSeconds: 3}})
	resp, err := f.node.Get(f.proxy.URL + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	if r.Hits() != 1 || pass.Hits() != 1 {
		t.Fatalf("hits %d %d", r.Hits(), pass.Hits())
	}
	f.proxy.Reset()
	if code, _ := get(t, f.node, f.proxy.URL+"/api/v1/pods"); code != 200 {
		t.Fatalf("after Reset: %d", code)
	}
	if n, log := f.proxy.Requests(), f.proxy.Log(); n != 5 || len(log) != 5 || log[0].Code != 503 || log[0].Rule != r || log[4].Rule != nil || log[4].Code != 200 {
		t.Fatalf("%d requests, log %+v", n, log)
	}
}

func TestHang(t *testing.T) {
	f := newFixture(t)
	r := f.proxy.Hang("GET", `^/slow$`)
	// Until the client gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.proxy.URL+"/slow", nil)
	if _, err := f.node.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung request: %v", err)
	}
	// Or until the rule goes: then it passes.
	done := make(chan int, 1)
	go func() {
		resp, err := f.node.Get(f.proxy.URL + "/slow")
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	for r.Hits() < 2 {
		time.Sleep(time.Millisecond)
	}
	select {
	case code := <-done:
		t.Fatalf("answered while hung: %d", code)
	default:
	}
	r.Remove()
	if code := <-done; code != 200 {
		t.Fatalf("after Remove: %d", code)
	}
}

// Interrupt ends a stream being passed through; the client comes back to
// the rules in force.
func TestInterrupt(t *testing.T) {
	f := newFixture(t)
	resp, err := f.node.Get(f.proxy.URL + "/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	var s seen
	if err := dec.Decode(&s); err != nil || s.User != "system:node:n1" {
		t.Fatalf("first event: %+v %v", s, err)
	}
	f.proxy.Fail("GET", `^/watch$`, http.StatusServiceUnavailable)
	f.proxy.Interrupt()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("stream ended cleanly: want an error")
	}
	if code, _ := get(t, f.node, f.proxy.URL+"/watch"); code != 503 {
		t.Fatalf("after Interrupt: %d", code)
	}
}

// Cut: the request reaches the upstream, its answer breaks off half way.
func TestCut(t *testing.T) {
	f := newFixture(t)
	r := f.proxy.Cut("GET", `^/api/v1/nodes/n1$`)
	resp, err := f.node.Get(f.proxy.URL + "/api/v1/nodes/n1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil || resp.StatusCode != 200 || resp.ProtoMajor != 2 || !strings.HasPrefix(string(b), `{"clientCN":"admin"`) {
		t.Fatalf("%s %d, body %q, read error %v; want the upstream's 200 and half its body, then a stream error", resp.Proto, resp.StatusCode, b, err)
	}
	if log := f.proxy.Log(); r.Hits() != 1 || len(log) != 1 || log[0].Code != 200 || log[0].Rule != r {
		t.Fatalf("hits %d, log %+v", r.Hits(), log)
	}
	// Other requests pass whole.
	if code, body := get(t, f.node, f.proxy.URL+"/api/v1/nodes/n2"); code != 200 || !json.Valid(body) {
		t.Fatalf("other path: %d %q", code, body)
	}
}

// Rules change while requests flow (run with -race).
func TestConcurrent(t *testing.T) {
	f := newFixture(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				r := f.proxy.Fail("GET", fmt.Sprintf("^/c/%d/%d$", i, j), 500)
				if code, _ := get(t, f.node, f.proxy.URL+fmt.Sprintf("/c/%d/%d", i, j)); code != 500 {
					t.Errorf("%d/%d: %d", i, j, code)
				}
				r.Remove()
				f.proxy.Interrupt()
			}
		})
	}
	wg.Wait()
	if n := f.proxy.Requests(); n != 160 {
		t.Fatalf("%d requests", n)
	}
}

func TestLoopbackOnly(t *testing.T) {
	k := newPKI(t)
	c, key := k.cert(t, "s", "s", true)
	for _, up := range []string{"https://10.0.0.1:6443", "https://example.com", "http://127.0.0.1:6443"} {
		if _, err := faultproxy.New(faultproxy.Config{Upstream: up, CAFile: k.caFile, CertFile: c, KeyFile: key,
			ImpersonatorCertFile: c, ImpersonatorKeyFile: key}); err == nil {
			t.Errorf("upstream %s accepted", up)
		}
	}
}

// In front of the real API server: a node's client certificate is still
// that node (the Node authorizer sees system:node:node1), a token still
// its user, and injected answers are what client-go expects.
func TestControlPlane(t *testing.T) {
	controlplane.Need(t)
	cp := controlplane.StartWith(t, controlplane.Options{Nodes: []string{"node1"}})
	p := faultproxy.ForControlPlane(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := func(kc string) kubernetes.Interface {
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != p.URL {
			t.Fatalf("kubeconfig points at %s", cfg.Host)
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	node := client(p.Kubeconfig(t, cp.NodeKubeconfig(t, "node1")))
	ssr, err := node.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := ssr.Status.UserInfo; u.Username != "system:node:node1" || !slices.Contains(u.Groups, "system:nodes") {
		t.Fatalf("through the proxy the node is %+v", u)
	}
	// The Node authorizer applies: another node's Lease is refused.
	if _, err := node.CoordinationV1().Leases("kube-node-lease").Get(ctx, "node2", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("another node's Lease: %v", err)
	}
	admin := client(p.Kubeconfig(t, cp.AdminKubeconfig))
	if ssr, err := admin.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{}); err != nil ||
		!slices.Contains(ssr.Status.UserInfo.Groups, "system:masters") {
		t.Fatalf("admin: %+v %v", ssr, err)
	}

	r := p.Fail("GET", `^/api/v1/namespaces$`, http.StatusServiceUnavailable)
	if _, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("injected 503: %v", err)
	}
	r.Remove()
	if _, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("after Remove: %v", err)
	}
}
