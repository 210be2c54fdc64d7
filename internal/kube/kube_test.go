package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {client-certificate: pki/client.pem, client-key: pki/client.pem}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func TestFindKubeconfigOrder(t *testing.T) {
	root := t.TempDir()
	env := map[string]string{}
	l := &Locator{Root: root, Getenv: func(k string) string { return env[k] }}
	if _, err := l.FindKubeconfig(); !errors.Is(err, ErrNoKubeconfig) {
		t.Fatalf("empty node: %v", err)
	}
	write(t, filepath.Join(root, KubeletKubeconfig), kubeconfig)
	if p, _ := l.FindKubeconfig(); p != filepath.Join(root, KubeletKubeconfig) {
		t.Fatalf("kubelet.conf: %q", p)
	}
	if l.Fallback() {
		t.Fatal("kubelet.conf taken for the fallback")
	}
	write(t, filepath.Join(root, GnshKubeconfig), kubeconfig)
	// The kubelet's stays the drain's; gnsh's own is the gate's, and must
	// be usable: the client certificate it names too.
	if p, _ := l.FindKubeconfig(); p != filepath.Join(root, KubeletKubeconfig) {
		t.Fatalf("kubelet.conf before gnsh's own: %q", p)
	}
	if _, err := l.GateKubeconfig(filepath.Join(root, KubeletKubeconfig)); !strings.Contains(fmt.Sprint(err), "is not a usable kubeconfig") {
		t.Fatalf("gnsh's own without its certificate: %v", err)
	}
	write(t, filepath.Join(root, filepath.Dir(GnshKubeconfig), "pki/client.pem"), string(certPEM(t, "system:node:worker-7")))
	if p, _ := l.GateKubeconfig(filepath.Join(root, KubeletKubeconfig)); p != filepath.Join(root, GnshKubeconfig) {
		t.Fatalf("the gate's: %q", p)
	}
	// Without kubelet.conf, gnsh's own is the drain's too, a fallback.
	if err := os.Remove(filepath.Join(root, KubeletKubeconfig)); err != nil {
		t.Fatal(err)
	}
	if p, _ := l.FindKubeconfig(); p != filepath.Join(root, GnshKubeconfig) || !l.Fallback() {
		t.Fatalf("gnsh's own as the fallback: %q %v", p, l.Fallback())
	}
	if p, _ := l.GateKubeconfig(filepath.Join(root, GnshKubeconfig)); p != filepath.Join(root, GnshKubeconfig) {
		t.Fatalf("the gate's with the fallback: %q", p)
	}
	write(t, filepath.Join(root, KubeletKubeconfig), kubeconfig)
	envFile := filepath.Join(root, "env.conf")
	write(t, envFile, kubeconfig)
	env["KUBECONFIG"] = filepath.Join(root, "missing") + ":" + envFile
	if p, _ := l.FindKubeconfig(); p != envFile || l.Fallback() {
		t.Fatalf("$KUBECONFIG list: %q", p)
	}
	// Nothing of gnsh's own: the gate uses the drain's.
	if p, _ := (&Locator{Root: t.TempDir()}).GateKubeconfig(envFile); p != envFile {
		t.Fatalf("one kubeconfig for both: %q", p)
	}
	flag := filepath.Join(root, "flag.conf")
	write(t, filepath.Join(root, "pki/client.pem"), string(certPEM(t, "system:node:worker-7")))
	l.Kubeconfig = flag
	if _, err := l.FindKubeconfig(); err == nil {
		t.Fatal("a missing --kubeconfig must be an error")
	}
	write(t, flag, kubeconfig)
	if p, _ := l.FindKubeconfig(); p != flag {
		t.Fatalf("--kubeconfig first: %q", p)
	}
}

func certPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	// kubelet-client-current.pem holds the certificate and the key.
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})...)
}

func TestRESTConfigAndIdentity(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "kubelet.conf"), kubeconfig)
	write(t, filepath.Join(dir, "pki/client.pem"), string(certPEM(t, "system:node:worker-7")))
	l := &Locator{}
	cfg, err := l.RESTConfig(filepath.Join(dir, "kubelet.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// The per-request bound is in the transport (singleShot), not in
	// http.Client.Timeout.
	if cfg.QPS != DefaultQPS || cfg.Burst != DefaultBurst || cfg.Timeout != 0 || cfg.UserAgent != "gnsh" {
		t.Fatalf("limits %v/%v/%v, agent %q", cfg.QPS, cfg.Burst, cfg.Timeout, cfg.UserAgent)
	}
	if got := NodeIdentity(cfg); got != "worker-7" {
		t.Fatalf("NodeIdentity = %q (cert file resolved relative to the kubeconfig)", got)
	}
	other := &rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: certPEM(t, "admin")}}
	if got := NodeIdentity(other); got != "" {
		t.Fatalf("non-node CN gave %q", got)
	}
}

func TestResolveNodeName(t *testing.T) {
	node := func(name string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	c := fake.NewClientset(
		node("cp-1.example.org"),
		node("ip-10-0-0-7", corev1.NodeAddress{Type: corev1.NodeHostName, Address: "worker-a.internal"}),
		node("worker-b"),
	)
	ctx := context.Background()
	plain := &rest.Config{}
	for host, want := range map[string]string{
		"cp-1.example.org":  "cp-1.example.org", // exact
		"worker-a.internal": "ip-10-0-0-7",      // by address
		"WORKER-B":          "worker-b",         // case-insensitive
		"worker-b.lan":      "worker-b",         // short name
		"cp-1":              "cp-1.example.org", // first label
	} {
		l := &Locator{Hostname: func() (string, error) { return host, nil }}
		got, err := l.ResolveNodeName(ctx, plain, c)
		if err != nil || got != want {
			t.Errorf("host %q: %q %v, want %q", host, got, err, want)
		}
	}
	l := &Locator{Hostname: func() (string, error) { return "stranger", nil }}
	if _, err := l.ResolveNodeName(ctx, plain, c); err == nil {
		t.Error("an unknown host must be an error")
	}
	// Kubelet-like credentials may not list Nodes: a GET by name still works.
	denied := fake.NewClientset(node("worker-b"))
	denied.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("cannot read all nodes"))
	})
	l = &Locator{Hostname: func() (string, error) { return "worker-b.lan", nil }}
	if got, err := l.ResolveNodeName(ctx, plain, denied); err != nil || got != "worker-b" {
		t.Errorf("GET by short name: %q %v", got, err)
	}
	l = &Locator{Hostname: func() (string, error) { return "elsewhere", nil }}
	if _, err := l.ResolveNodeName(ctx, plain, denied); err == nil || !strings.Contains(err.Error(), "cannot read all nodes") {
		t.Errorf("forbidden list: %v", err)
	}
	l = &Locator{NodeName: "given"}
	if got, _ := l.ResolveNodeName(ctx, plain, c); got != "given" {
		t.Errorf("configured name: %q", got)
	}
	l = &Locator{Hostname: func() (string, error) { t.Fatal("hostname used despite a node certificate"); return "", nil }}
	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: certPEM(t, "system:node:worker-b")}}
	if got, _ := l.ResolveNodeName(ctx, cfg, c); got != "worker-b" {
		t.Errorf("certificate CN: %q", got)
	}
}

// An API server that does not answer the lookups is not a wrong name
// (issue 19): the error is the requests' own, which callers word as any
// failed request ("API server unreachable (…)"), not a *NodeNameError
// telling the admin to set node.
func TestResolveNodeNameAPIFailure(t *testing.T) {
	ctx := context.Background()
	refused := &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api/v1/nodes/vm", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		name     string
		get      error // nil: NotFound
		list     error
		nameErr  bool // a *NodeNameError
		contains string
	}{
		{"unreachable", refused, refused, false, "connection refused"},
		{"failing", apierrors.NewInternalError(errors.New("etcd down")), apierrors.NewInternalError(errors.New("etcd down")), false, "etcd down"},
		{"unauthorized", apierrors.NewUnauthorized("expired"), apierrors.NewUnauthorized("expired"), false, "expired"},
		// The lookups by name were answered (no such Node): the name is
		// the problem, whatever the list says.
		{"not found, list refused", nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no list")), true,
			`no Node is called "vm", and listing Nodes to match it failed`},
	} {
		c := c
		cs := fake.NewClientset()
		if c.get != nil {
			cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, c.get })
		}
		cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, c.list })
		l := &Locator{Hostname: func() (string, error) { return "vm", nil }}
		_, err := l.ResolveNodeName(ctx, &rest.Config{}, cs)
		var ne *NodeNameError
		if err == nil || errors.As(err, &ne) != c.nameErr || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: %v (NodeNameError %v, want %v)", c.name, err, ne != nil, c.nameErr)
		}
		if !c.nameErr && strings.Contains(err.Error(), "set node in") {
			t.Errorf("%s: %v tells to set node", c.name, err)
		}
	}
}

// A kubeconfig named by --kubeconfig or the config file must be usable: a
// missing one is a *KubeconfigError naming where the name came from, never
// ErrNoKubeconfig, which makes a node look like no node, not drained
// (issue 19).
func TestFindKubeconfigNamed(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.conf")
	write(t, good, kubeconfig)
	write(t, filepath.Join(dir, "pki/client.pem"), string(certPEM(t, "system:node:worker-7")))
	noCert := filepath.Join(dir, "other/nocert.conf")
	write(t, noCert, kubeconfig) // other/pki/client.pem is not there
	garbage := filepath.Join(dir, "garbage.conf")
	write(t, garbage, "this is: [not a kubeconfig\n")
	empty := filepath.Join(dir, "empty.conf")
	write(t, empty, "")
	const from = "kubeconfig in /etc/gnsh/config.yaml"
	for _, c := range []struct {
		path, from, want string
	}{
		{"/nonexistent/kubeconfig", from, "kubeconfig in /etc/gnsh/config.yaml: /nonexistent/kubeconfig does not exist"},
		{"/nonexistent/kubeconfig", "", "--kubeconfig: /nonexistent/kubeconfig does not exist"},
		{dir, from, from + ": " + dir + " is not a regular file"},
		{garbage, from, from + ": " + garbage + " is not a usable kubeconfig ("},
		{empty, from, from + ": " + empty + " is not a usable kubeconfig ("},
		{noCert, from, from + ": " + noCert + " is not a usable kubeconfig ("},
	} {
		l := &Locator{Kubeconfig: c.path, KubeconfigFrom: c.from, Root: t.TempDir()}
		_, err := l.FindKubeconfig()
		var ke *KubeconfigError
		if !errors.As(err, &ke) || errors.Is(err, ErrNoKubeconfig) || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want %s…", c.path, err, c.want)
		}
		if ke != nil && ke.FromFlag() != (c.from == "") {
			t.Errorf("%s: FromFlag %v", c.path, ke.FromFlag())
		}
	}
	l := &Locator{Kubeconfig: good, KubeconfigFrom: from}
	if p, err := l.FindKubeconfig(); p != good || err != nil {
		t.Errorf("usable: %q %v", p, err)
	}
}

// gnsh's own /etc/gnsh/kubeconfig, when nothing names a kubeconfig, is
// checked as a named one: only an admin or the Ansible role puts it there,
// so one that is there but cannot be used is a mistake in the
// configuration (a *KubeconfigError), never passed over for kubelet.conf
// nor taken for "not a node" (issue 19). $KUBECONFIG and kubelet.conf are
// not held to that.
func TestFindKubeconfigGnshOwnBroken(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, own string)
		want  string
	}{
		{"not a kubeconfig", func(t *testing.T, own string) { write(t, own, "this is: [not a kubeconfig\n") }, " is not a usable kubeconfig ("},
		{"a directory", func(t *testing.T, own string) {
			if err := os.MkdirAll(own, 0o755); err != nil {
				t.Fatal(err)
			}
		}, " is not a regular file"},
		{"a dangling link", func(t *testing.T, own string) {
			if err := os.MkdirAll(filepath.Dir(own), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/nonexistent/sa.conf", own); err != nil {
				t.Fatal(err)
			}
		}, " is a symbolic link to /nonexistent/sa.conf, which does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			own := filepath.Join(root, GnshKubeconfig)
			c.setup(t, own)
			l := &Locator{Root: root, Getenv: func(string) string { return "" }}
			// Reached as the drain's fallback, and as the gate's beside
			// kubelet.conf: a mistake either way.
			_, err := l.FindKubeconfig()
			var ke *KubeconfigError
			if !errors.As(err, &ke) || ke.From != FromGnsh || ke.Path != own || !strings.HasPrefix(err.Error(), FromGnsh+": "+own+c.want) {
				t.Errorf("%v, want %s: %s%s…", err, FromGnsh, own, c.want)
			}
			write(t, filepath.Join(root, KubeletKubeconfig), kubeconfig)
			_, err = l.GateKubeconfig(filepath.Join(root, KubeletKubeconfig))
			if !errors.As(err, &ke) || ke.From != FromGnsh || ke.Path != own || !strings.HasPrefix(err.Error(), FromGnsh+": "+own+c.want) {
				t.Errorf("gate: %v, want %s: %s%s…", err, FromGnsh, own, c.want)
			}
			// $KUBECONFIG, first, still wins; a broken one is passed over
			// as before.
			env := filepath.Join(root, "env.conf")
			write(t, env, kubeconfig)
			l.Getenv = func(k string) string { return map[string]string{"KUBECONFIG": env}[k] }
			if p, err := l.FindKubeconfig(); p != env || err != nil {
				t.Errorf("$KUBECONFIG: %q %v", p, err)
			}
		})
	}
	// A broken kubelet.conf is not gnsh's to judge: as before.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, KubeletKubeconfig), 0o755); err != nil {
		t.Fatal(err)
	}
	l := &Locator{Root: root}
	if _, err := l.FindKubeconfig(); !errors.Is(err, ErrNoKubeconfig) {
		t.Errorf("kubelet.conf a directory: %v", err)
	}
}
