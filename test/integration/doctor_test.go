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
	"syscall"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/internal/logind"
	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/test/internal/controlplane"
	"github.com/gnsh/gnsh/test/internal/kwok"
	"github.com/gnsh/gnsh/test/internal/rig"
)

// doctorLine runs gnsh doctor with env and returns its API access line
// (and the whole output, a check a line: unwrapChecks).
func doctorLine(t *testing.T, env []string) (string, rig.Result) {
	t.Helper()
	r := gnshRun(t, nil, append(env, "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/bus"), "gnsh", "doctor")
	// Other checks fail on this host (no systemd, no gnsh over reboot):
	// doctor exits 1, with the checks on stdout.
	if r.Code != 1 || !strings.HasPrefix(r.Stderr, "gnsh: doctor: ") {
		t.Fatalf("doctor exit %d, stderr %q", r.Code, r.Stderr)
	}
	lines := unwrapChecks(r.Stdout)
	r.Stdout = strings.Join(lines, "\n") + "\n"
	if len(lines) != 16 {
		t.Fatalf("%d lines, want one per check (16)", len(lines))
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
		nkc := cp.NodeKubeconfig(t, "doc1")
		line, r := doctorLine(t, []string{"KUBECONFIG=" + nkc, "GNSH_CONFIG=" + cfg})
		want := "ok    API access            drain: system:node:doc1 from " + nkc +
			" (confined to this node): every request the drain makes is allowed (7 checked by SelfSubjectAccessReview)"
		if line != want {
			t.Errorf("got  %s\nwant %s", line, want)
		}
		// The reboot-slot gate cannot be used with the kubelet's identity.
		want = "warn  reboot slots          gate optional, unavailable: reboots go on without a slot: these credentials may not use the Lease gnsh/reboot-slots"
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("doctor lacks %q:\n%s", want, r.Stdout)
		}
		// Where the gate's own token goes, not the kubelet's kubeconfig
		// the gate fell back to ("a token bound to this node's Node in
		// kubelet.conf …, not the kubelet's" contradicted itself).
		if want := "a token bound to this node's Node in /etc/gnsh/kubeconfig (or slots.kubeconfig)"; !strings.Contains(r.Stdout, want) ||
			strings.Contains(r.Stdout, "Node in "+nkc) {
			t.Errorf("doctor's gate line does not name where the gate's token goes (%q):\n%s", want, r.Stdout)
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
			"fail  API access            drain: stranger from " + stranger + ": the API server refuses get nodes/doc1, patch nodes/doc1, " +
				"list pods (spec.nodeName=doc1), watch pods (spec.nodeName=doc1), create pods/eviction, create events in default: " +
				"gnsh cannot drain this node; and get leases.coordination.k8s.io/doc1 in kube-node-lease (gnsh does without it); " +
				"fix: drain with this node's kubelet kubeconfig, which may drain this node and no other",
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
		token := strings.TrimSpace(cp.Kubectl(t, nil, "-n", "kube-system", "create", "token", "gnsh",
			"--bound-object-kind=Node", "--bound-object-name=doc1", "--duration=10m"))
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
		// The two identities (issue 22): the drain the kubelet's, the gate
		// the ServiceAccount's (slots.kubeconfig), each named.
		nkc := cp.NodeKubeconfig(t, "doc1")
		env := []string{"KUBECONFIG=" + nkc, "GNSH_CONFIG=" + writeConfig(t, config("node: doc1", "slots: {kubeconfig: "+path+"}"))}
		want := "ok    API access            drain: system:node:doc1 from " + nkc +
			" (confined to this node): every request the drain makes is allowed (7 checked by SelfSubjectAccessReview)"
		// The RBAC authorizer sees new bindings a moment after kubectl
		// apply returns.
		slotsOK := "ok    reboot slots          gate optional: gnsh/reboot-slots answers as system:serviceaccount:kube-system:gnsh from " + path +
			"; limit 1; 0 held, 0 waiting; this node: none"
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			line, r := doctorLine(t, env)
			if line == want && strings.Contains(r.Stdout, slotsOK) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("got  %s\nwant %s\nand %s in:\n%s", line, want, slotsOK, r.Stdout)
			}
		}
		// The ServiceAccount as the drain's identity: rbac.yaml no longer
		// lets it drain.
		line, _ := doctorLine(t, []string{"KUBECONFIG=" + path, "GNSH_CONFIG=" + cfg})
		if want := "fail  API access            drain: system:serviceaccount:kube-system:gnsh from " + path +
			": the API server refuses patch nodes/doc1, list pods (spec.nodeName=doc1), watch pods (spec.nodeName=doc1), create pods/eviction, create events in default: gnsh cannot drain this node"; !strings.HasPrefix(line, want) {
			t.Errorf("got  %s\nwant %s…", line, want)
		}
	})
}

// The agent check with the real binary: systemd cannot say (the fake PID 1
// has no GetUnit), so the agent's lock in /run decides whether it runs,
// and logind's inhibitors whether it guards shutdowns.
func TestDoctorAgent(t *testing.T) {
	need(t)
	b := newLogind(t)
	b.bus.StartSystemd(t, logindtest.SystemdOptions{})
	runDir := t.TempDir()
	env := []string{"DBUS_SYSTEM_BUS_ADDRESS=" + b.bus.Address(), "GNSH_CONFIG=" + writeConfig(t, "")}
	agentLine := func() string {
		t.Helper()
		r := rig.Run(t, rig.Spec{Env: env, RunDir: runDir, Hide: []string{"/etc/kubernetes", "/etc/gnsh"},
			// A kubeconfig (a node), of an API server that is not there.
			Argv: []string{filepath.Join(binDir, "gnsh"), "doctor", "--kubeconfig", writeConfig(t, "apiVersion: v1\nkind: Config\n"+
				"clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: t}}]\n"+
				"contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")}})
		lines := unwrapChecks(r.Stdout)
		if len(lines) != 16 || !strings.Contains(lines[13], "  agent  ") {
			t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		}
		t.Logf("%s", lines[13])
		return lines[13]
	}
	const unknown = "gnsh.service: state unknown (Unknown method GetUnit or interface org.freedesktop.systemd1.Manager.)"

	// No lock file in /run: no agent has run since boot.
	if got, want := agentLine(), "fail  agent                 "+unknown+", no agent holds /run/gnsh/agent.flock: nothing uncordons"; !strings.HasPrefix(got, want) {
		t.Errorf("got  %s\nwant %s…", got, want)
	}
	// An agent holds its lock (as the agent will: an exclusive flock for
	// its lifetime), but no delay lock on shutdown yet.
	if err := os.MkdirAll(filepath.Join(runDir, "gnsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(runDir, "gnsh", "agent.flock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if got, want := agentLine(), "warn  agent                 the agent runs ("+unknown+") but holds no delay lock on shutdown (who gnsh)"; !strings.HasPrefix(got, want) {
		t.Errorf("got  %s\nwant %s…", got, want)
	}
	// Its delay lock, as the agent takes it.
	c, err := logind.Dial(ctxFor(t, time.Minute), b.bus.Address(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lock, err := c.Logind().Inhibit(ctxFor(t, time.Minute), "shutdown", "gnsh", "drain the node before shutdown", "delay")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if got, want := agentLine(), "ok    agent                 the agent runs ("+unknown+") and holds its delay lock on shutdown (who gnsh)"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// The probe left the agent's lock alone.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("agent lock: %v", err)
	}
}

// unwrapChecks undoes gnsh doctor's wrapping of its text: one line per
// check, its message's lines joined and its fix after "; fix: ".
func unwrapChecks(text string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch rest := strings.TrimLeft(l, " "); {
		case rest == l || len(lines) == 0:
			lines = append(lines, l)
		case strings.HasPrefix(rest, "fix: ") && !strings.Contains(lines[len(lines)-1], "; fix: "):
			lines[len(lines)-1] += "; " + rest
		default:
			lines[len(lines)-1] += " " + rest
		}
	}
	return lines
}
