package integration

// gnsh doctor's API access check against a real kube-apiserver (Node
// authorizer, RBAC, NodeRestriction): the real binary, with the kubeconfig
// it would drain with, asks a SelfSubjectAccessReview for every request
// gnsh makes and prints one line. Doctor only reads; it still runs in the
// rig, and its system bus is a socket that does not exist.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/test/internal/controlplane"
	"github.com/gnsh/gnsh/test/internal/kwok"
	"github.com/gnsh/gnsh/test/internal/rig"
)

// doctorLine runs gnsh doctor with env and returns its API access line
// (and the whole output for the log).
func doctorLine(t *testing.T, env []string) (string, rig.Result) {
	t.Helper()
	r := gnshRun(t, nil, append(env, "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/bus"), "gnsh", "doctor")
	// Other checks fail on this host (no systemd, no gnsh over reboot):
	// doctor exits 1, with one line per check on stdout.
	if r.Code != 1 || !strings.HasPrefix(r.Stderr, "gnsh doctor: ") {
		t.Fatalf("doctor exit %d, stderr %q", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if len(lines) != 12 {
		t.Fatalf("%d lines, want one per check (12)", len(lines))
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 2 && f[1] == "API" && f[2] == "access" {
			return l, r
		}
	}
	t.Fatalf("no API access line")
	return "", r
}

func TestDoctorAPIAccess(t *testing.T) {
	need(t)
	controlplane.Need(t)
	cp := controlplane.StartWith(t, controlplane.Options{Nodes: []string{"doc1"}})
	stranger := cp.UserKubeconfig(t, "stranger")
	acfg, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	acfg.Timeout = 30 * time.Second
	admin := kubernetes.NewForConfigOrDie(acfg)
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := admin.CoreV1().Nodes().Create(ctx, kwok.Node("doc1", 10), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, config("node: doc1"))

	t.Run("the kubelet's credentials", func(t *testing.T) {
		// system:node:doc1 under the Node authorizer: every request is
		// allowed when the review names the Node, the Lease and the
		// field selector, as gnsh's requests do.
		line, _ := doctorLine(t, []string{"KUBECONFIG=" + cp.NodeKubeconfig(t, "doc1"), "GNSH_CONFIG=" + cfg})
		want := "ok    API access            every request gnsh makes is allowed as system:node:doc1 (7 checked by SelfSubjectAccessReview)"
		if line != want {
			t.Errorf("got  %s\nwant %s", line, want)
		}
	})

	t.Run("what the Node authorizer answers", func(t *testing.T) {
		// Why the reviews name the Node and carry the field selector: the
		// Node authorizer decides per object, and has "no opinion" (not
		// "denied") on what it does not allow; RBAC has no rule for
		// system:node:doc1 either, so such a review is simply not allowed.
		ncfg, err := clientcmd.BuildConfigFromFlags("", cp.NodeKubeconfig(t, "doc1"))
		if err != nil {
			t.Fatal(err)
		}
		ncfg.Timeout = 30 * time.Second
		node := kubernetes.NewForConfigOrDie(ncfg)
		for _, tt := range []struct {
			attrs   authzv1.ResourceAttributes
			allowed bool
			reason  string
		}{
			{authzv1.ResourceAttributes{Verb: "list", Resource: "pods",
				FieldSelector: &authzv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=doc1"}}, true, ""},
			{authzv1.ResourceAttributes{Verb: "list", Resource: "pods"}, false, "can only list/watch pods with spec.nodeName field selector"},
			{authzv1.ResourceAttributes{Verb: "watch", Resource: "pods",
				FieldSelector: &authzv1.FieldSelectorAttributes{RawSelector: "spec.nodeName=doc2"}}, false, "can only list/watch pods with spec.nodeName field selector"},
			{authzv1.ResourceAttributes{Verb: "get", Resource: "nodes"}, false, "node 'doc1' cannot read all nodes, only its own Node object"},
			{authzv1.ResourceAttributes{Verb: "get", Resource: "nodes", Name: "doc2"}, false, "node 'doc1' cannot read 'doc2', only its own Node object"},
			{authzv1.ResourceAttributes{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"}, false,
				"can only access node lease with the same name as the requesting node"},
		} {
			ssar := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &tt.attrs}}
			res, err := node.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, ssar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			st := res.Status
			t.Logf("%s %s %s/%s %v: allowed %v, denied %v, reason %q", tt.attrs.Verb, tt.attrs.Resource, tt.attrs.Namespace, tt.attrs.Name,
				tt.attrs.FieldSelector, st.Allowed, st.Denied, st.Reason)
			if st.Allowed != tt.allowed || st.Denied || !strings.Contains(st.Reason, tt.reason) {
				t.Errorf("%+v: got %+v", tt.attrs, st)
			}
		}
	})

	t.Run("a user without bindings", func(t *testing.T) {
		line, _ := doctorLine(t, []string{"KUBECONFIG=" + stranger, "GNSH_CONFIG=" + cfg})
		for _, want := range []string{
			"fail  API access            as stranger the API server refuses get nodes/doc1, patch nodes/doc1, " +
				"list pods (spec.nodeName=doc1), watch pods (spec.nodeName=doc1), create pods/eviction, create events in default: " +
				"gnsh cannot drain this node; and get leases.coordination.k8s.io/doc1 in kube-node-lease (gnsh does without it); " +
				"fix: kubectl apply -f install/kubernetes/rbac.yaml",
			"kubectl create clusterrolebinding gnsh:drain:stranger --clusterrole=gnsh:drain --user=stranger",
		} {
			if !strings.Contains(line, want) {
				t.Errorf("line lacks %q:\n%s", want, line)
			}
		}
	})

	t.Run("the ServiceAccount of install/kubernetes/rbac.yaml", func(t *testing.T) {
		manifest, err := os.ReadFile(filepath.Join("..", "..", "install", "kubernetes", "rbac.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cp.Kubectl(t, manifest, "apply", "-f", "-")
		token := strings.TrimSpace(cp.Kubectl(t, nil, "-n", "kube-system", "create", "token", "gnsh", "--duration=10m"))
		kc, err := clientcmd.LoadFromFile(cp.AdminKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range kc.AuthInfos {
			a.ClientCertificate, a.ClientKey, a.ClientCertificateData, a.ClientKeyData, a.Token = "", "", nil, nil, token
		}
		path := filepath.Join(t.TempDir(), "gnsh.kubeconfig")
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			t.Fatal(err)
		}
		env := []string{"KUBECONFIG=" + path, "GNSH_CONFIG=" + cfg}
		want := "ok    API access            every request gnsh makes is allowed as system:serviceaccount:kube-system:gnsh (7 checked by SelfSubjectAccessReview)"
		// The RBAC authorizer sees new bindings a moment after kubectl
		// apply returns.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			line, _ := doctorLine(t, env)
			if line == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("got  %s\nwant %s", line, want)
			}
		}
	})
}
