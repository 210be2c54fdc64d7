package nodefacts

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/gnsh/gnsh/internal/kube"
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

// A config file gnsh would refuse is reported, and its defaults used.
func TestGatherKubeBadConfig(t *testing.T) {
	root := tree(t, map[string]string{"/etc/gnsh/config.yaml": "nod: node1\n"})
	var kf KubeconfigFacts
	var nf NodeFacts
	gatherKube(testCtx(t), &Sources{Root: root, Getenv: envOf(nil)}, &kf, &nf, nil, &SlotsFacts{}, nil)
	if !strings.Contains(kf.ConfigError, `unknown key "nod"`) || kf.Found || nf.Error != "no kubeconfig" {
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
		if !nf.NotFound || af.Error != "" || len(af.Denied) != tt.n || af.User != "u" || len(rv.seen) != tt.n+len(SlotRequests("gnsh", "reboot-slots")) ||
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
