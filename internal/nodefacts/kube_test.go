package nodefacts

import (
	"encoding/json"
	"errors"
	"fmt"
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

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/slots"
)

func kubeconfigFor(url string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: t
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, url)
}

// closedURL is the URL of a port nothing listens on: connection refused.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "https://" + l.Addr().String()
}

// The real kubeconfig path (kube.Locator, RESTConfig): the Node is found
// by host name against an API server that knows it as node1.
func TestGatherKubeRealClient(t *testing.T) {
	node := cordonedNode(t)
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/node1" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(node)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}))
	defer srv.Close()
	root := tree(t, map[string]string{"/etc/gnsh/kubeconfig": kubeconfigFor(srv.URL)})
	s := &Sources{Root: root, Getenv: envOf(nil), Kube: KubeOptions{
		Hostname: func() (string, error) { return "node1.example.com", nil }, HostID: &kube.HostID{MachineID: "other"}}}
	var kf KubeconfigFacts
	var nf NodeFacts
	gatherKube(testCtx(t), s, &kf, &nf, nil, &SlotsFacts{}, nil)
	if !kf.Found || !strings.HasSuffix(kf.Path, "/etc/gnsh/kubeconfig") || kf.Mode != "0644" {
		t.Errorf("kubeconfig %+v", kf)
	}
	if !nf.Found || nf.Name != "node1" || nf.NameFrom != "hostname" || nf.Cordon == nil || nf.SameMachine == nil || *nf.SameMachine {
		t.Errorf("node %+v", nf)
	}
	if CheckNode(&Report{Kubeconfig: kf, Node: nf}).Verdict != Fail {
		t.Errorf("another machine's Node passed")
	}
	// Only GETs.
	mu.Lock()
	defer mu.Unlock()
	for _, p := range paths {
		if !strings.HasPrefix(p, "GET ") {
			t.Errorf("request %s", p)
		}
	}
}

// An API server that never answers: the Node is given up after
// apiTimeout, and the rest of the report does not wait for it.
func TestGatherKubeHungServer(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stop)
	root := tree(t, map[string]string{
		"/etc/kubernetes/kubelet.conf": kubeconfigFor(srv.URL),
		"/etc/gnsh/config.yaml":        "node: node1\napiTimeout: 500ms\n",
	})
	s := &Sources{Root: root, Getenv: envOf(nil)}
	var kf KubeconfigFacts
	var nf NodeFacts
	var af AccessFacts
	start := time.Now()
	gatherKube(testCtx(t), s, &kf, &nf, nil, &SlotsFacts{}, &af)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s", d)
	}
	// No reviews are sent to a server that did not answer the Node GET.
	if af.Error != "the API server did not answer within 500ms" || len(af.Allowed)+len(af.Denied)+len(af.Unknown) != 0 {
		t.Errorf("access %+v", af)
	}
	if !kf.Found || nf.Found || nf.NotFound || nf.Error == "" || nf.Name != "node1" || nf.NameFrom != "config" {
		t.Errorf("kubeconfig %+v node %+v", kf, nf)
	}
	t.Logf("node error: %s", nf.Error)
	if c := CheckNode(&Report{Kubeconfig: kf, Node: nf}); c.Verdict != Warn || !strings.HasPrefix(c.Message, "cannot read the Node: ") {
		t.Errorf("check %+v", c)
	}
}

// A kubeconfig named in the config file that is not there is a config
// mistake (the wrapper refuses every shutdown), not "not a node": the
// config and kubeconfig checks fail, naming the key (issue 19).
func TestGatherKubeNamedKubeconfigMissing(t *testing.T) {
	root := tree(t, map[string]string{"/etc/gnsh/config.yaml": "drainTimeout: 2m\nkubeconfig: /nonexistent/kubeconfig\n",
		"/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\n"})
	r := healthy()
	r.Access, r.Kubeconfig, r.Node = nil, KubeconfigFacts{}, NodeFacts{}
	gatherKube(testCtx(t), &Sources{Root: root, Getenv: envOf(nil)}, &r.Kubeconfig, &r.Node, &r.Drain, &r.Slots, nil)
	cfg := filepath.Join(root, "etc/gnsh/config.yaml")
	kf := r.Kubeconfig
	if kf.Found || kf.Named != "kubeconfig in "+cfg || kf.Error != "kubeconfig in "+cfg+": /nonexistent/kubeconfig does not exist" ||
		kf.ConfigError != "" || !kf.ConfigFound || len(kf.ConfigProblems) != 1 ||
		!strings.HasPrefix(kf.ConfigProblems[0], cfg+": line 2: kubeconfig: /nonexistent/kubeconfig does not exist; fix the kubeconfig key or remove it (gnsh then looks in $KUBECONFIG, /etc/kubernetes/kubelet.conf, /var/lib/rancher/k3s/agent/kubelet.kubeconfig, /var/lib/rancher/rke2/agent/kubelet.kubeconfig, /etc/gnsh/kubeconfig): until then every shutdown through gnsh is refused, but with --no-drain") {
		t.Fatalf("%+v", kf)
	}
	if c := CheckConfig(r); c.Verdict != Fail || !strings.Contains(c.Fix, "fix or remove the kubeconfig key in "+cfg) {
		t.Errorf("config check %+v", c)
	}
	if c := CheckKubeconfig(r); c.Verdict != Fail || !strings.Contains(c.Message, "every shutdown through gnsh is refused (but with --no-drain)") ||
		strings.Contains(c.Message, "not a Kubernetes node") {
		t.Errorf("kubeconfig check %+v", c)
	}
}

// A config file gnsh would refuse is reported, and its defaults used.
func TestGatherKubeBadConfig(t *testing.T) {
	root := tree(t, map[string]string{"/etc/gnsh/config.yaml": "nod: node1\n"})
	var kf KubeconfigFacts
	var nf NodeFacts
	gatherKube(testCtx(t), &Sources{Root: root, Getenv: envOf(nil)}, &kf, &nf, nil, &SlotsFacts{}, nil)
	if !strings.Contains(kf.ConfigError, `line 1: nod: unknown key; did you mean node?`) || kf.Found || nf.Error != "no kubeconfig" {
		t.Errorf("kubeconfig %+v node %+v", kf, nf)
	}
}

// With Access, gnsh's requests for the node are reviewed (the Events only
// when the config posts them), whatever the Node GET answered; without a
// kubeconfig nothing is asked.
func TestGatherKubeAccess(t *testing.T) {
	for _, tt := range []struct {
		config string
		n      int
	}{{"node: node1\n", 7}, {"node: node1\nevents: false\ndrainTimeout: 90s\n", 6}} {
		root := tree(t, map[string]string{"/etc/kubernetes/kubelet.conf": "apiVersion: v1\nkind: Config\n", "/etc/gnsh/config.yaml": tt.config})
		rv := &fakeReviewer{user: "u"}
		s := &Sources{Root: root, Getenv: envOf(nil), Kube: KubeOptions{Connect: connectTo(fake.NewClientset()), Reviewer: rv}}
		var kf KubeconfigFacts
		var nf NodeFacts
		var df DrainFacts
		var af AccessFacts
		gatherKube(testCtx(t), s, &kf, &nf, &df, &SlotsFacts{}, &af)
		// The drain's requests, then the gate's (their answers go to the
		// gate's own line).
		if !nf.NotFound || af.Error != "" || len(af.Denied) != tt.n || af.User != "u" || len(rv.seen) != tt.n+len(SlotRequests("gnsh", "reboot-slots", false, false))+len(ExcessRequests()) ||
			!slices.ContainsFunc(rv.seen, func(q APIRequest) bool { return q.String() == "patch nodes/node1" }) {
			t.Errorf("%q: node %+v access %+v", tt.config, nf, af)
		}
		if !df.Enabled || (tt.n == 6) != (df.Timeout == "1m30s") {
			t.Errorf("%q: drain %+v", tt.config, df)
		}
	}
	var af AccessFacts
	gatherKube(testCtx(t), &Sources{Root: t.TempDir(), Getenv: envOf(nil)}, &KubeconfigFacts{}, &NodeFacts{}, nil, &SlotsFacts{}, &af)
	if af.Error != "no kubeconfig" {
		t.Errorf("access without kubeconfig %+v", af)
	}
}

// The gate's requests are reviewed in full: the Lease (get, list and
// watch by name, update, create while there is none), the Nodes, the
// kubelets' heartbeat Leases, and the pods of kube-system (the etcd
// members) for every node. One refused makes the gate unavailable; one whose review failed
// leaves it unknown (a warning), never OK.
func TestGatherSlotsReviews(t *testing.T) {
	worker := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}
	control := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: map[string]string{slots.ControlPlaneLabel: ""}}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gnsh", Name: "reboot-slots"}}
	const etcd = "list pods (component=etcd) in kube-system"
	for _, tt := range []struct {
		name    string
		objs    []runtime.Object
		allow   func(APIRequest) bool
		errs    map[string]error
		reviews []string // some of the requests reviewed
		not     []string // requests not reviewed
		verdict Verdict
		msg     string
	}{
		{name: "worker, all allowed", objs: []runtime.Object{worker}, allow: func(APIRequest) bool { return true },
			reviews: []string{"list leases.coordination.k8s.io/reboot-slots (metadata.name=reboot-slots) in gnsh",
				"watch leases.coordination.k8s.io/reboot-slots (metadata.name=reboot-slots) in gnsh", "get nodes",
				"list leases.coordination.k8s.io in kube-node-lease", "watch leases.coordination.k8s.io in kube-node-lease", etcd},
			verdict: OK, msg: "gnsh/reboot-slots answers"},
		{name: "worker, etcd pods refused", objs: []runtime.Object{worker},
			allow:   func(q APIRequest) bool { return q.Resource != "pods" },
			reviews: []string{etcd}, verdict: Fail, msg: "every reboot waits for slots.wait and is refused (but with --force-quorum, --no-drain or -f): these credentials may use the Lease gnsh/reboot-slots but not " + etcd + ", so etcd's quorum cannot be judged"},
		{name: "control plane, etcd pods refused", objs: []runtime.Object{control},
			allow:   func(q APIRequest) bool { return q.Resource != "pods" },
			reviews: []string{etcd}, verdict: Fail, msg: "every reboot waits for slots.wait and is refused (but with --force-quorum, --no-drain or -f): these credentials may use the Lease gnsh/reboot-slots but not " + etcd + ", so etcd's quorum cannot be judged"},
		{name: "heartbeats refused", objs: []runtime.Object{worker},
			allow:   func(q APIRequest) bool { return q.Namespace != "kube-node-lease" },
			verdict: Warn, msg: "these credentials may not list leases.coordination.k8s.io in kube-node-lease, watch leases.coordination.k8s.io in kube-node-lease: a holder whose shutdown was given up is freed only by its node agent"},
		{name: "no Lease yet, create refused", objs: []runtime.Object{worker},
			allow:   func(q APIRequest) bool { return q.Verb != "create" },
			verdict: Warn, msg: "but not create leases.coordination.k8s.io in gnsh"},
		{name: "Lease there, create refused", objs: []runtime.Object{worker, lease},
			allow:   func(q APIRequest) bool { return q.Verb != "create" },
			verdict: OK, msg: "gnsh/reboot-slots answers"},
		{name: "a review failed", objs: []runtime.Object{worker}, allow: func(APIRequest) bool { return true },
			errs:    map[string]error{"watch leases.coordination.k8s.io in kube-node-lease": errors.New("etcdserver: request timed out")},
			verdict: Warn, msg: "not known whether these credentials may make every request of the gate (watch leases.coordination.k8s.io in kube-node-lease: etcdserver: request timed out)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rv := &fakeReviewer{user: "u", allowed: map[string]bool{}, errs: tt.errs}
			for _, cp := range []bool{false, true} {
				for _, exists := range []bool{false, true} {
					for _, q := range SlotRequests("gnsh", "reboot-slots", cp, exists) {
						rv.allowed[q.String()] = tt.allow(q)
					}
				}
			}
			for _, q := range GnshRequests("node1", true) {
				rv.allowed[q.String()] = true
			}
			root := tree(t, map[string]string{"/etc/kubernetes/kubelet.conf": "apiVersion: v1\nkind: Config\n", "/etc/gnsh/config.yaml": "node: node1\n"})
			s := &Sources{Root: root, Getenv: envOf(nil), Kube: KubeOptions{Connect: connectTo(fake.NewClientset(tt.objs...)), Reviewer: rv,
				HostID: &kube.HostID{}}}
			r := &Report{Access: &AccessFacts{}}
			gatherKube(testCtx(t), s, &r.Kubeconfig, &r.Node, &r.Drain, &r.Slots, r.Access)
			var seen []string
			for _, q := range rv.seen {
				seen = append(seen, q.String())
			}
			for _, q := range tt.reviews {
				if !slices.Contains(seen, q) {
					t.Errorf("%s not reviewed: %q", q, seen)
				}
			}
			for _, q := range tt.not {
				if slices.Contains(seen, q) {
					t.Errorf("%s reviewed", q)
				}
			}
			c := CheckSlots(r)
			if c.Verdict != tt.verdict || !strings.Contains(c.Message, tt.msg) {
				t.Errorf("got %+v\nwant %s …%s…", c, tt.verdict, tt.msg)
			}
		})
	}
}

// The gate line carries the real reason it is unavailable: no kubeconfig
// is not a node (ok); a kubeconfig gnsh cannot use, an API server that
// does not answer and a node name not found each say so, with their fix.
func TestGatherKubeGateCauses(t *testing.T) {
	stop := make(chan struct{})
	hung := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(stop)
	// No Node matches the host name "ghost".
	empty := fake.NewClientset()
	for _, tt := range []struct {
		name     string
		files    map[string]string
		opts     KubeOptions
		required bool
		cause    string
		verdict  Verdict
		msg, fix string
	}{
		{name: "no kubeconfig", files: map[string]string{}, required: true, cause: CauseNotANode, verdict: OK,
			msg: "not a node (no kubeconfig found): the gate does not apply"},
		{name: "--kubeconfig missing", files: map[string]string{}, opts: KubeOptions{Kubeconfig: "/nonexistent/kubeconfig"},
			cause: CauseKubeconfig, verdict: Warn, msg: "unavailable: reboots go on without a slot: kubeconfig unusable: --kubeconfig: /nonexistent/kubeconfig does not exist",
			fix: "see the kubeconfig and node checks"},
		{name: "kubeconfig invalid", files: map[string]string{"/etc/gnsh/kubeconfig": "clusters: [\n"}, required: true,
			// gnsh's own, there but not a kubeconfig: refused as a named
			// one is (issue 19).
			cause: CauseKubeconfig, verdict: Fail, msg: "every reboot is refused (but with --no-drain or -f): kubeconfig unusable: gnsh's own kubeconfig: ",
			fix: "see the kubeconfig and node checks"},
		{name: "a file the kubeconfig names unreadable", files: map[string]string{"/etc/gnsh/kubeconfig": kubeconfigFor(closedURL(t))},
			opts: KubeOptions{Connect: func(string, time.Duration) (kubernetes.Interface, *rest.Config, error) {
				return nil, nil, &kube.UnreadableError{Path: "/etc/gnsh/ca.crt", Err: os.ErrPermission}
			}},
			cause: CauseKubeconfig, verdict: Warn, msg: "kubeconfig unreadable: cannot read /etc/gnsh/ca.crt: permission denied", fix: "see the kubeconfig and node checks"},
		{name: "API server hung", files: map[string]string{"/etc/gnsh/kubeconfig": kubeconfigFor(hung.URL), "/etc/gnsh/config.yaml": "node: node1\napiTimeout: 300ms\nslots: {renew: 1s}\n"},
			cause: CauseAPIServer, verdict: Warn, msg: "unavailable: reboots go on without a slot: cannot reach the API server: ", fix: "check that the API server answers"},
		// Issue 19: without node set, an API server that refuses the
		// connection is that, not an unknown name.
		{name: "node name, API server down", files: map[string]string{"/etc/gnsh/kubeconfig": kubeconfigFor(closedURL(t))},
			opts:  KubeOptions{Hostname: func() (string, error) { return "vm", nil }},
			cause: CauseAPIServer, verdict: Warn, msg: "the lookup of this node's name at the API server failed: ", fix: "check that the API server answers"},
		{name: "node unknown", files: map[string]string{"/etc/gnsh/kubeconfig": kubeconfigFor(closedURL(t))},
			opts:  KubeOptions{Connect: connectTo(empty), Hostname: func() (string, error) { return "ghost", nil }},
			cause: CauseNode, verdict: Warn, msg: "this node's name is unknown: ", fix: "see the kubeconfig and node checks"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.required {
				tt.files["/etc/gnsh/config.yaml"] = "slots: {gate: required}\n"
			}
			s := &Sources{Root: tree(t, tt.files), Getenv: envOf(nil), Kube: tt.opts}
			r := &Report{Access: &AccessFacts{}}
			gatherKube(testCtx(t), s, &r.Kubeconfig, &r.Node, &r.Drain, &r.Slots, r.Access)
			c := CheckSlots(r)
			if r.Slots.Cause != tt.cause || c.Verdict != tt.verdict || !strings.Contains(c.Message, tt.msg) || !strings.HasPrefix(c.Fix, tt.fix) {
				t.Errorf("slots %+v\ncheck %+v\nwant %s …%s… fix %s…", r.Slots, c, tt.verdict, tt.msg, tt.fix)
			}
			if strings.Contains(c.Message, "not checked: no kubeconfig") {
				t.Errorf("the old catch-all reason: %s", c.Message)
			}
		})
	}
}
