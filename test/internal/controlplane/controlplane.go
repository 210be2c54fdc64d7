// Package controlplane starts a real, throwaway Kubernetes control plane for
// tests: etcd, kube-apiserver (authorization Node,RBAC; NodeRestriction) and
// kube-controller-manager running only the disruption controller, optionally
// kwok as a fake kubelet. The binaries come from test/k8s/build.sh (cached
// outside the repository) or from $GNSH_K8S_BIN; the processes are run by
// test/k8s/controlplane.sh with their state in t.TempDir(). Standard library
// only, so the root module needs no Kubernetes dependencies.
package controlplane

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ControlPlane is a running control plane.
type ControlPlane struct {
	Dir             string // state directory (t.TempDir())
	Server          string // https://127.0.0.1:PORT
	CAFile          string // CA of the serving and client certificates
	AdminKubeconfig string // client cert in group system:masters
	AdminToken      string // bearer token for user "admin" (system:masters)
	Node1Token      string // bearer token for system:node:node1 (system:nodes)
	BinDir          string // kube-apiserver, kubectl, etcd, kwok, ...
	AuditLog        string // with Options.Audit: JSON lines, level Metadata, Lease writes in namespace gnsh RequestResponse, nodes/status and pods/status writes Request (rotated to audit-*.log after 1 GB); else ""
	Startup         time.Duration

	script string
}

// Options tunes Start.
type Options struct {
	// Nodes get client-cert identities at start (default: node1); more can
	// be made later with NodeKubeconfig.
	Nodes []string
	// Kwok runs kwok as fake kubelet for Nodes annotated
	// kwok.x-k8s.io/node=fake (Ready heartbeats, Running pods, finished
	// deletions).
	Kwok bool
	// Audit has the apiserver log every request (level Metadata, stages
	// ResponseStarted and ResponseComplete) to AuditLog, e.g. to count a
	// client's requests by user.
	Audit bool
	// FeatureGates is the kube-apiserver's --feature-gates ("" for none),
	// e.g. NodeLifecycleConditions=true.
	FeatureGates string
}

// Need skips t unless a control plane can be started here; with
// GNSH_REQUIRE_RIGS=1 (make test) it fails instead.
func Need(t testing.TB) {
	t.Helper()
	if _, err := need(t); err != nil {
		if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
			t.Fatalf("kubernetes control plane: %v (GNSH_REQUIRE_RIGS=1)", err)
		}
		t.Skipf("kubernetes control plane: %v", err)
	}
}

// need finds the scripts and the binaries, building them if there is time.
func need(t testing.TB) (rt paths, err error) {
	var missing []string
	for _, c := range []string{"openssl", "curl", "ss", "setsid", "base64"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	rt.dir, err = k8sDir()
	if err != nil {
		missing = append(missing, err.Error())
	}
	if len(missing) > 0 {
		return rt, fmt.Errorf("needs %s", strings.Join(missing, ", "))
	}
	if b := os.Getenv("GNSH_K8S_BIN"); b != "" {
		for _, f := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
			if _, err := os.Stat(filepath.Join(b, f)); err != nil {
				return rt, fmt.Errorf("GNSH_K8S_BIN: %v", err)
			}
		}
		rt.bin = b
		return rt, nil
	}
	for _, c := range []string{"go", "flock"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return rt, fmt.Errorf("needs %s (or GNSH_K8S_BIN)", strings.Join(missing, ", "))
	}
	build := filepath.Join(rt.dir, "build.sh")
	if out, err := exec.Command(build, "--check").Output(); err == nil {
		rt.bin = lastLine(out)
		return rt, nil
	}
	cache := os.Getenv("GNSH_CACHE")
	if cache == "" {
		cache = "/var/cache/gnsh"
	}
	if err := os.MkdirAll(filepath.Join(cache, "k8s"), 0o755); err != nil {
		return rt, fmt.Errorf("needs root or a writable GNSH_CACHE: %v", err)
	}
	// A cold build takes 6-8 minutes: do not start one that the test
	// deadline (go test's -timeout, 10m by default) would cut short.
	if d, ok := deadline(t); ok && time.Until(d) < 15*time.Minute {
		return rt, fmt.Errorf("binaries not built and the test deadline is too close: run %s first", "test/k8s/build.sh")
	}
	t.Logf("building the control plane binaries (cold: 6-8 min): %s", build)
	cmd := exec.Command(build)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return rt, fmt.Errorf("build.sh: %v\n%s", err, stderr.String())
	}
	rt.bin = lastLine(out)
	return rt, nil
}

type paths struct{ dir, bin string }

func deadline(t testing.TB) (time.Time, bool) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		return d.Deadline()
	}
	return time.Time{}, false
}

func lastLine(b []byte) string {
	s := strings.Split(strings.TrimSpace(string(b)), "\n")
	return s[len(s)-1]
}

// k8sDir finds test/k8s: $GNSH_K8S_DIR, or upwards from the working
// directory (go test runs in the package directory).
func k8sDir() (string, error) {
	if d := os.Getenv("GNSH_K8S_DIR"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "test", "k8s", "controlplane.sh")); err == nil {
			return filepath.Join(d, "test", "k8s"), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("test/k8s/controlplane.sh (not found above the working directory; set GNSH_K8S_DIR)")
		}
	}
}

// Start starts a control plane with default options (see StartWith).
func Start(t testing.TB) *ControlPlane { t.Helper(); return StartWith(t, Options{}) }

// StartWith starts a control plane in t.TempDir() and stops it when t ends
// (or, should the test binary die, when this process is gone). It skips or
// fails t like Need if that is impossible.
func StartWith(t testing.TB, o Options) *ControlPlane {
	t.Helper()
	rt, err := need(t)
	if err != nil {
		if os.Getenv("GNSH_REQUIRE_RIGS") == "1" {
			t.Fatalf("kubernetes control plane: %v (GNSH_REQUIRE_RIGS=1)", err)
		}
		t.Skipf("kubernetes control plane: %v", err)
	}
	c := &ControlPlane{Dir: t.TempDir(), BinDir: rt.bin, script: filepath.Join(rt.dir, "controlplane.sh")}
	nodes := "node1"
	if o.Nodes != nil {
		nodes = strings.Join(o.Nodes, " ")
	}
	kwok := "0"
	if o.Kwok {
		kwok = "1"
	}
	audit := "0"
	if o.Audit {
		audit = "1"
	}
	t.Cleanup(c.Stop)
	out, err := c.run(nil, []string{"CP_NODES=" + nodes, "CP_KWOK=" + kwok, "CP_AUDIT=" + audit, "CP_FEATURE_GATES=" + o.FeatureGates}, "start", c.Dir)
	if err != nil {
		t.Fatalf("controlplane.sh start: %v\n%s", err, out)
	}
	env, err := readEnv(filepath.Join(c.Dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	c.Server, c.CAFile, c.AdminKubeconfig = env["SERVER"], env["CA"], env["ADMIN_KUBECONFIG"]
	c.AdminToken, c.Node1Token = env["ADMIN_TOKEN"], env["NODE1_TOKEN"]
	c.AuditLog = env["AUDIT_LOG"]
	ms, _ := strconv.Atoi(env["STARTUP_MS"])
	c.Startup = time.Duration(ms) * time.Millisecond
	t.Logf("control plane at %s ready in %v (state in %s)", c.Server, c.Startup, c.Dir)
	return c
}

func (c *ControlPlane) run(stdin []byte, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command(c.script, args...)
	cmd.Env = append(os.Environ(), "GNSH_K8S_BIN="+c.BinDir, fmt.Sprintf("CP_OWNER_PID=%d", os.Getpid()))
	cmd.Env = append(cmd.Env, env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	return cmd.CombinedOutput()
}

// Stop stops the control plane; Start registers it as a cleanup.
func (c *ControlPlane) Stop() {
	if out, err := c.run(nil, nil, "stop", c.Dir); err != nil {
		fmt.Fprintf(os.Stderr, "controlplane.sh stop %s: %v\n%s", c.Dir, err, out)
	}
}

// NodeKubeconfig returns a kubeconfig shaped like kubeadm's kubelet.conf
// whose client certificate is CN=system:node:<name>, O=system:nodes (and
// pem file paths, like a rotated kubelet-client-current.pem), creating the
// identity on first use.
func (c *ControlPlane) NodeKubeconfig(t testing.TB, name string) string {
	t.Helper()
	f := filepath.Join(c.Dir, "node-"+name+".kubeconfig")
	if _, err := os.Stat(f); err == nil {
		return f
	}
	if out, err := c.run(nil, nil, "node", c.Dir, name); err != nil {
		t.Fatalf("controlplane.sh node %s: %v\n%s", name, err, out)
	}
	return f
}

// NodeKubeconfigData is NodeKubeconfig with the certificate and key embedded
// (client-certificate-data, client-key-data).
func (c *ControlPlane) NodeKubeconfigData(t testing.TB, name string) string {
	t.Helper()
	c.NodeKubeconfig(t, name)
	return filepath.Join(c.Dir, "node-"+name+"-data.kubeconfig")
}

// NodeCert returns the node identity's certificate and key files.
func (c *ControlPlane) NodeCert(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	c.NodeKubeconfig(t, name)
	p := filepath.Join(c.Dir, "pki", "node-"+name)
	return p + ".crt", p + ".key"
}

// UserKubeconfig returns a kubeconfig with a client certificate for user
// name in groups, e.g. a dedicated drain identity bound by RBAC.
func (c *ControlPlane) UserKubeconfig(t testing.TB, name string, groups ...string) string {
	t.Helper()
	out, err := c.run(nil, nil, "user", c.Dir, name, strings.Join(groups, ","))
	if err != nil {
		t.Fatalf("controlplane.sh user %s: %v\n%s", name, err, out)
	}
	return lastLine(out)
}

// TokenKubeconfig writes a kubeconfig for the API server with a bearer
// token (mode 0600, in a temporary directory of t), built with kubectl
// config as install/kubernetes/README.md describes, and returns its path.
func (c *ControlPlane) TokenKubeconfig(t testing.TB, token string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "kubeconfig")
	kubectl := filepath.Join(c.BinDir, "kubectl")
	for _, args := range [][]string{
		{"config", "set-cluster", "default", "--server=" + c.Server, "--certificate-authority=" + c.CAFile, "--embed-certs=true"},
		{"config", "set-credentials", "gnsh", "--token=" + token},
		{"config", "set-context", "default", "--cluster=default", "--user=gnsh"},
		{"config", "use-context", "default"},
	} {
		if out, err := exec.Command(kubectl, append(args, "--kubeconfig="+f)...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args[:2], " "), err, out)
		}
	}
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// Kubectl runs the built kubectl as admin with stdin (may be nil) and
// returns its stdout; a failure fails t.
func (c *ControlPlane) Kubectl(t testing.TB, stdin []byte, args ...string) string {
	t.Helper()
	out, err := c.KubectlErr(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// KubectlErr is Kubectl returning the error (with stderr) instead.
func (c *ControlPlane) KubectlErr(stdin []byte, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.AdminKubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		return so.String(), fmt.Errorf("%v: %s", err, strings.TrimSpace(se.String()))
	}
	return so.String(), nil
}

// HTTPClient returns a client trusting the CA that authenticates with the
// given client certificate files (none if empty).
func (c *ControlPlane) HTTPClient(t testing.TB, certFile, keyFile string) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("no certificate in %s", c.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// PIDs returns the running processes by name (etcd, kube-apiserver, ...).
func (c *ControlPlane) PIDs() map[string]int {
	m := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(c.Dir, "run", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			m[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
		}
	}
	return m
}

// readEnv parses the KEY=VALUE / KEY='VALUE' lines controlplane.sh writes.
func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		m[k] = strings.Trim(v, "'")
	}
	return m, s.Err()
}
