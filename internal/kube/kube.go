// Package kube finds the cluster a node belongs to and the node's own name,
// using only what a node already has: a kubeconfig (the kubelet's for the
// drain, gnsh's own for the reboot-slot gate) and, failing an explicit name, the kubelet client
// certificate's CN or the host name.
package kube

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Kubeconfig locations after --kubeconfig and $KUBECONFIG: the kubelet's
// (kubeadm's, then k3s's and rke2's), then gnsh's own (see FindKubeconfig).
var (
	GnshKubeconfig        = "/etc/gnsh/kubeconfig"
	KubeletKubeconfig     = "/etc/kubernetes/kubelet.conf"
	K3sKubeletKubeconfig  = "/var/lib/rancher/k3s/agent/kubelet.kubeconfig"
	RKE2KubeletKubeconfig = "/var/lib/rancher/rke2/agent/kubelet.kubeconfig"
)

// KubeletKubeconfigs returns where kubeadm, k3s and rke2 keep the kubelet's
// kubeconfig, in the order FindKubeconfig looks at them.
func KubeletKubeconfigs() []string {
	return []string{KubeletKubeconfig, K3sKubeletKubeconfig, RKE2KubeletKubeconfig}
}

// KubeletKubeconfigList is KubeletKubeconfigs for a message: "a, b, c".
func KubeletKubeconfigList() string { return strings.Join(KubeletKubeconfigs(), ", ") }

// IsKubeletKubeconfig reports whether path (under root, "" = /) is one of
// KubeletKubeconfigs.
func IsKubeletKubeconfig(root, path string) bool {
	for _, p := range KubeletKubeconfigs() {
		if path == filepath.Join(root, p) {
			return true
		}
	}
	return false
}

// Drain-sized client rate limits. client-go's default (QPS 5, burst 10)
// makes a 200-pod drain take three minutes; a drain sends about one
// request per pod, so these let 1,000 pods go in seconds while the API
// server's own priority and fairness still protects it.
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// DefaultConnectTimeout bounds each request, so that a node stays
// rebootable while the control plane is down.
const DefaultConnectTimeout = 5 * time.Second

// ErrNoKubeconfig means no kubeconfig was found: this is not a Kubernetes
// node (or gnsh was not told how to reach the cluster).
var ErrNoKubeconfig = errors.New("no kubeconfig found")

// UnreadableError means a kubeconfig, or a file it names (certificate
// authority, client certificate or key, token file), exists but this user
// may not read it: typically a user other than root and the kubelet's 0600
// /etc/kubernetes/kubelet.conf. It is neither "no kubeconfig" (this is a
// Kubernetes node) nor an unreachable API server (nothing was asked).
type UnreadableError struct {
	Path string // the file that could not be read
	Err  error  // the error reading it (EACCES or EPERM)
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("cannot read %s: %v", e.Path, e.Reason())
}

// Reason is the error reading Path, without the path: "permission denied".
func (e *UnreadableError) Reason() error {
	var pe *fs.PathError
	if errors.As(e.Err, &pe) {
		return pe.Err // the path is already said
	}
	return e.Err
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// KubeconfigError is a kubeconfig named by --kubeconfig or the config
// file's kubeconfig key that cannot be used: it is not there, is not a
// regular file, or is not a kubeconfig (or one naming a file that is not
// there). It is a mistake in the configuration, found before anything is
// asked of the API server: unlike a kubeconfig that is merely not found,
// it does not mean "not a Kubernetes node". (One that exists but this user
// may not read is an *UnreadableError.)
type KubeconfigError struct {
	Path string // the kubeconfig named
	// From says where the name came from: "--kubeconfig", or "kubeconfig
	// in /etc/gnsh/config.yaml".
	From string
	Err  error // what is wrong with it
}

func (e *KubeconfigError) Error() string { return e.From + ": " + e.What() }

// What says what is wrong with the file, without where its name came
// from: "/etc/gnsh/kubeconfig does not exist".
func (e *KubeconfigError) What() string {
	reason := e.Err
	var de *danglingError
	if errors.As(e.Err, &de) {
		return e.Path + " is " + de.Error()
	}
	var pe *fs.PathError
	if errors.As(e.Err, &pe) && pe.Path == e.Path {
		if errors.Is(pe.Err, fs.ErrNotExist) {
			return e.Path + " does not exist"
		}
		reason = pe.Err // the path is already said
	}
	if errors.Is(e.Err, errNotRegular) {
		return e.Path + " is not a regular file"
	}
	return fmt.Sprintf("%s is not a usable kubeconfig (%v)", e.Path, reason)
}

func (e *KubeconfigError) Unwrap() error { return e.Err }

// FromFlag reports whether the kubeconfig was named by --kubeconfig (else
// by the config file).
func (e *KubeconfigError) FromFlag() bool { return e.From == FromFlag }

// FromFlag is the Locator's KubeconfigFrom for --kubeconfig.
const FromFlag = "--kubeconfig"

// FromGnsh is a KubeconfigError's From for gnsh's own kubeconfig
// (GnshKubeconfig), found with nothing named.
const FromGnsh = "gnsh's own kubeconfig"

// FromGnshOwn reports whether the kubeconfig is gnsh's own, found with
// nothing named.
func (e *KubeconfigError) FromGnshOwn() bool { return e.From == FromGnsh }

var errNotRegular = errors.New("not a regular file")

// danglingError is a symbolic link whose target does not exist.
type danglingError struct{ target string }

func (e *danglingError) Error() string {
	return "a symbolic link to " + e.target + ", which does not exist"
}

func (e *danglingError) Unwrap() error { return fs.ErrNotExist }

// Dangling reports whether path is a symbolic link whose target does not
// exist, and that target (as the link says it).
func Dangling(path string) (string, bool) {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return "", false
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	target, err := os.Readlink(path)
	return target, err == nil
}

// unreadable returns an *UnreadableError when err is a permission error.
func unreadable(path string, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return &UnreadableError{Path: path, Err: err}
	}
	return nil
}

// Locator finds the kubeconfig and the node name.
type Locator struct {
	// Kubeconfig is the kubeconfig named by --kubeconfig or the config
	// file; it must be usable if given (see FindKubeconfig).
	Kubeconfig string
	// KubeconfigFrom says where Kubeconfig came from, for messages:
	// FromFlag (if empty), or "kubeconfig in FILE" for the config file.
	KubeconfigFrom string
	// GateKubeconfigPath is the reboot-slot gate's kubeconfig named by
	// the config file (slots.kubeconfig), GateKubeconfigFrom where:
	// "slots.kubeconfig in FILE". Empty: gnsh's own, else the drain's.
	GateKubeconfigPath string
	GateKubeconfigFrom string
	NodeName           string // --node or the config file
	Getenv             func(string) string
	Root               string // prefix for the well-known paths ("" = /); for tests
	Hostname           func() (string, error)
	// Timeout bounds each API request, from sending it to the end of
	// reading its answer (a watch ends after it too); DefaultConnectTimeout
	// if zero.
	Timeout time.Duration
	// Warn receives the API server's warnings (deprecations and the like),
	// each distinct text once per RESTConfig; nil drops them.
	Warn func(string)
}

func (l *Locator) path(p string) string {
	if l.Root == "" {
		return p
	}
	return filepath.Join(l.Root, p)
}

// FindKubeconfig returns the drain's kubeconfig: the first in order of
// the one named (Kubeconfig: --kubeconfig or the config file), the first
// existing file of $KUBECONFIG (a colon list), the kubelet's
// /etc/kubernetes/kubelet.conf (kubeadm), then
// /var/lib/rancher/k3s/agent/kubelet.kubeconfig (k3s) and
// /var/lib/rancher/rke2/agent/kubelet.kubeconfig (rke2) (the Node
// authorizer confines the kubelet's identity to this node), and only
// then gnsh's own /etc/gnsh/kubeconfig, as a fallback
// (see Fallback). It returns ErrNoKubeconfig when there is none, and an
// *UnreadableError when the first one that exists (or whose directory may
// not be searched) cannot be read: the next one may belong to another
// cluster, or be a wider identity, so it does not go on. A kubeconfig
// named must be usable: one that is not there, not a regular file or not
// a kubeconfig is a *KubeconfigError, never ErrNoKubeconfig (a typo in the
// config file must not make a node look like no node at all, which is not
// drained). So must /etc/gnsh/kubeconfig once it is there at all (a
// dangling link included), when it is the one reached: only an admin or
// the Ansible role puts it there (From: FromGnsh).
func (l *Locator) FindKubeconfig() (string, error) {
	p, _, err := l.findKubeconfig()
	return p, err
}

// Fallback reports whether the drain's kubeconfig (FindKubeconfig) is
// gnsh's own /etc/gnsh/kubeconfig, reached because nothing was named and
// this node has none of the kubelet's kubeconfigs (KubeletKubeconfigs): the drain then runs with the gate's
// identity, which a narrowed rbac.yaml does not let cordon or evict.
func (l *Locator) Fallback() bool {
	_, fb, err := l.findKubeconfig()
	return err == nil && fb
}

func (l *Locator) findKubeconfig() (string, bool, error) {
	if l.Kubeconfig != "" {
		from := l.KubeconfigFrom
		if from == "" {
			from = FromFlag
		}
		if err := check(l.Kubeconfig, from); err != nil {
			return "", false, err
		}
		return l.Kubeconfig, false, nil
	}
	var candidates []string
	if l.Getenv != nil {
		for _, p := range filepath.SplitList(l.Getenv("KUBECONFIG")) {
			if p != "" {
				candidates = append(candidates, p)
			}
		}
	}
	own := l.path(GnshKubeconfig)
	for _, p := range KubeletKubeconfigs() {
		candidates = append(candidates, l.path(p))
	}
	candidates = append(candidates, own)
	for i, p := range candidates {
		if _, err := os.Lstat(p); err == nil && p == own && i == len(candidates)-1 {
			if err := check(p, FromGnsh); err != nil {
				return "", false, err
			}
			return p, true, nil
		}
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.Mode().IsRegular():
			if err := canRead(p); err != nil {
				return "", false, err
			}
			return p, false, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			if u := unreadable(p, err); u != nil {
				return "", false, u
			}
			return "", false, fmt.Errorf("kubeconfig %s: %w", p, err)
		}
	}
	return "", false, ErrNoKubeconfig
}

// GateKubeconfig returns the reboot-slot gate's kubeconfig, given the
// drain's (FindKubeconfig): the one the config file names
// (GateKubeconfigPath, which must be usable), else gnsh's own /etc/gnsh/kubeconfig once it is
// there at all (it must then be usable: a *KubeconfigError, From
// FromGnsh, if not), else the drain's, one kubeconfig for both (an admin
// kubeconfig named with kubeconfig: in the config file, a small cluster's
// or a test's).
func (l *Locator) GateKubeconfig(drain string) (string, error) {
	if p := l.GateKubeconfigPath; p != "" {
		from := l.GateKubeconfigFrom
		if from == "" {
			from = "slots.kubeconfig"
		}
		if err := check(p, from); err != nil {
			return "", err
		}
		return p, nil
	}
	own := l.path(GnshKubeconfig)
	if _, err := os.Lstat(own); err != nil {
		if u := unreadable(own, err); u != nil {
			return "", u
		}
		return drain, nil
	}
	if own == drain {
		return own, nil
	}
	if err := check(own, FromGnsh); err != nil {
		return "", err
	}
	return own, nil
}

// check checks the kubeconfig at path, named by from, as far as can be
// done without the API server: there, a regular file, readable, and a
// kubeconfig whose current context clientcmd can build a client from
// (the files it names there, certificates and keys, included).
func check(path, from string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if u := unreadable(path, err); u != nil {
			return u
		}
		if target, ok := Dangling(path); ok {
			err = &danglingError{target: target}
		}
		return &KubeconfigError{Path: path, From: from, Err: err}
	}
	if !fi.Mode().IsRegular() {
		return &KubeconfigError{Path: path, From: from, Err: errNotRegular}
	}
	if err := canRead(path); err != nil {
		return err
	}
	if err := checkReadable(path); err != nil {
		return err
	}
	silenceKlog()
	if _, err := clientcmd.BuildConfigFromFlags("", path); err != nil {
		if u := unreadable(path, err); u != nil {
			return u
		}
		return &KubeconfigError{Path: path, From: from, Err: err}
	}
	return nil
}

// canRead opens path for reading: stat succeeds on a file this user may
// not read. It returns an *UnreadableError for a permission error and nil
// otherwise (other errors show when the file is used).
func canRead(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return unreadable(path, err)
	}
	return f.Close()
}

// RESTConfig loads a kubeconfig for a drain. Relative paths inside it
// resolve against its directory, as kubectl does. It returns an
// *UnreadableError when the kubeconfig, or a file its current context
// names, exists but cannot be read.
//
// Every client made from the result:
//   - sends each request once, however it fails, and bounds it by
//     Timeout (see singleShot; rest.Config.Timeout is left at 0 on
//     purpose);
//   - has drain-sized rate limits (DefaultQPS, DefaultBurst) and the user
//     agent gnsh;
//   - hands API-server warnings to Warn.
//
// RESTConfig also silences klog, process wide, so that client-go prints
// nothing of its own.
func (l *Locator) RESTConfig(path string) (*rest.Config, error) {
	silenceKlog()
	if err := checkReadable(path); err != nil {
		return nil, err
	}
	stamp, _ := stampOf(path)
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	if cfg.BearerToken != "" && cfg.BearerTokenFile == "" {
		// An embedded token, renewed in place by the node agent: read
		// again when the file changes (tokenreread.go).
		cfg.Wrap(rereadToken(path, cfg.BearerToken, stamp))
		cfg.BearerToken = ""
	}
	cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	cfg.Timeout = 0
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &singleShot{next: rt, timeout: timeout} })
	cfg.WarningHandler = nil
	cfg.WarningHandlerWithContext = &warnings{warn: l.Warn}
	cfg.UserAgent = "gnsh"
	return cfg, nil
}

// checkReadable reports an *UnreadableError for the kubeconfig at path or
// for a file its current context names. clientcmd would fail on them too,
// but with a message that does not say which file, or only once a request
// is made.
func checkReadable(path string) error {
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		if u := unreadable(path, err); u != nil {
			return u
		}
		return nil // BuildConfigFromFlags reports it
	}
	if err := clientcmd.ResolveLocalPaths(raw); err != nil {
		return nil
	}
	ctx := raw.Contexts[raw.CurrentContext]
	if ctx == nil {
		return nil
	}
	var files []string
	if c := raw.Clusters[ctx.Cluster]; c != nil {
		files = append(files, c.CertificateAuthority)
	}
	if a := raw.AuthInfos[ctx.AuthInfo]; a != nil {
		files = append(files, a.ClientCertificate, a.ClientKey, a.TokenFile)
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		if err := canRead(f); err != nil {
			return err
		}
	}
	return nil
}

// NodeIdentity returns NAME when the client certificate's subject is
// system:node:NAME (the kubelet's own credentials), else "".
func NodeIdentity(cfg *rest.Config) string {
	data := cfg.TLSClientConfig.CertData
	if len(data) == 0 && cfg.TLSClientConfig.CertFile != "" {
		b, err := os.ReadFile(cfg.TLSClientConfig.CertFile)
		if err != nil {
			return ""
		}
		data = b
	}
	for len(data) > 0 {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return ""
		}
		if name, ok := strings.CutPrefix(cert.Subject.CommonName, "system:node:"); ok && name != "" {
			return name
		}
		return ""
	}
	return ""
}

// ResolveNodeName returns the node's name: the configured one, else the
// CN system:node:NAME of the client certificate, else the host name: a
// Node of that name (or its first label), else one whose hostname or
// internal DNS address matches, or whose first label matches.
//
// When the API server said there is no such Node, the error is a
// *NodeNameError. When it could not say (unreachable, or answering 5xx,
// 401 or 403 to the lookup by name and to the list), the error is that
// failure, as the requests returned it: the name is not known to be
// wrong, and the caller words it as it words any request that failed.
func (l *Locator) ResolveNodeName(ctx context.Context, cfg *rest.Config, c kubernetes.Interface) (string, error) {
	if l.NodeName != "" {
		return l.NodeName, nil
	}
	if n := NodeIdentity(cfg); n != "" {
		return n, nil
	}
	hostname := l.Hostname
	if hostname == nil {
		hostname = os.Hostname
	}
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("node name: %w", err)
	}
	h = strings.ToLower(h)
	// A GET by name works with the kubelet's credentials, which may read
	// only their own Node; listing all Nodes needs a wider identity.
	short, _, _ := strings.Cut(h, ".")
	var getErr error // the first lookup by name that got no answer
	for _, name := range []string{h, short} {
		_, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return name, nil
		}
		if !apierrors.IsNotFound(err) && getErr == nil {
			getErr = err
		}
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	switch {
	case err != nil && getErr != nil:
		// Neither request was answered: nothing is known of the name.
		return "", getErr
	case err != nil:
		return "", &NodeNameError{Host: h, Err: err}
	}
	if n := matchNode(nodes.Items, h); n != "" {
		return n, nil
	}
	return "", &NodeNameError{Host: h}
}

// NodeNameError is a Node name the cluster does not know: no Node has
// this machine's host name, nor matches it.
type NodeNameError struct {
	Host string // this machine's host name, lower case
	// Err: the list of Nodes that would have matched it failed (the
	// lookups by name were answered: no such Node).
	Err error
}

func (e *NodeNameError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("node name: no Node is called %q, and listing Nodes to match it failed (%v); "+
			"set node in /etc/gnsh/config.yaml or pass --node", e.Host, e.Err)
	}
	return fmt.Sprintf("node name: no Node matches host name %q; set node in /etc/gnsh/config.yaml or pass --node", e.Host)
}

// (No Unwrap: a list refused with 403 says nothing of the credentials'
// drain, only that the name could not be matched.)

func matchNode(nodes []corev1.Node, h string) string {
	short, _, _ := strings.Cut(h, ".")
	for _, n := range nodes {
		if n.Name == h {
			return n.Name
		}
	}
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if (a.Type == corev1.NodeHostName || a.Type == corev1.NodeInternalDNS) && strings.ToLower(a.Address) == h {
				return n.Name
			}
		}
	}
	for _, n := range nodes {
		if first, _, _ := strings.Cut(n.Name, "."); first == short {
			return n.Name
		}
	}
	return ""
}
