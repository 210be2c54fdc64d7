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
	"math/big"
	"os"
	"path/filepath"
	"strings"
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
	write(t, filepath.Join(root, GnshKubeconfig), kubeconfig)
	if p, _ := l.FindKubeconfig(); p != filepath.Join(root, GnshKubeconfig) {
		t.Fatalf("gnsh's own first: %q", p)
	}
	envFile := filepath.Join(root, "env.conf")
	write(t, envFile, kubeconfig)
	env["KUBECONFIG"] = filepath.Join(root, "missing") + ":" + envFile
	if p, _ := l.FindKubeconfig(); p != envFile {
		t.Fatalf("$KUBECONFIG list: %q", p)
	}
	flag := filepath.Join(root, "flag.conf")
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
