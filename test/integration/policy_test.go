package integration

// The drain policy's hard cases with the real binary, a real API server and
// the fake logind: an API server that answers but cannot be used, a Node
// that is another machine, a user who is not root, and a refused reboot's
// parameter. Each scenario has its own Node.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/test/internal/kwok"
	"github.com/gnsh/gnsh/test/internal/rig"
)

var policyNodes = []string{"unauth", "forbid", "other", "nonroot", "param", "deadkubelet"}

func TestDrainPolicy(t *testing.T) {
	t.Parallel()
	k := startCluster(t, policyNodes...)
	// A user no RBAC rule mentions, made before the parallel scenarios
	// (controlplane.sh's CA serial file is not safe for concurrent use).
	stranger := k.cp.UserKubeconfig(t, "stranger")
	for _, sc := range []struct {
		name string
		f    func(*testing.T, *cluster)
	}{
		{"401: credentials rejected", testUnauthorized},
		{"403: identity may not", func(t *testing.T, k *cluster) { testForbidden(t, k, stranger) }},
		{"the Node is another machine", testOtherMachine},
		{"not root", testNotRoot},
		{"a refused reboot leaves no parameter", testParamRestored},
		{"the kubelet is dead", testDeadKubelet},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.f(t, k)
		})
	}
}

// handedOffWithOneWarning checks a run that warned once (the line matching
// want, "…" for anything) and handed off, leaving the pods alone.
func handedOffWithOneWarning(t *testing.T, n *node, r rig.Result, b busLogind, want string) {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0", r.Code)
	}
	wantHandOff(t, "", b.ld.Calls(), "RebootWithFlags")
	if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); len(lines) != 1 {
		t.Errorf("want one line, got %q", r.Stderr)
	}
	wantLines(t, r.Stderr, want)
	n.wantCordon("")
	if got := len(n.pods()); got != 2 {
		t.Errorf("%d pods left, want 2", got)
	}
}

// testUnauthorized: credentials the API server rejects (an expired kubelet
// client certificate) never stop a reboot.
func testUnauthorized(t *testing.T, k *cluster) {
	n := k.newNode(t, "unauth")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	cfg, err := clientcmd.LoadFromFile(k.cp.NodeKubeconfig(t, n.name))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.ClientCertificate, a.ClientKey, a.Token = "", "", "not-a-valid-token"
	}
	kc := filepath.Join(t.TempDir(), "expired.conf")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	b := newLogind(t)
	env := []string{"KUBECONFIG=" + kc, "GNSH_CONFIG=" + writeConfig(t, config("node: unauth")), "LOGNAME=alice"}
	r := gnshRun(t, b.bus, env, "reboot")
	handedOffWithOneWarning(t, n, r, b,
		"gnsh: warning: the API server does not accept the credentials in "+kc+" (401 Unauthorized): renew them (an expired kubelet client certificate?); rebooting without draining")
}

// testForbidden: an identity that may not read the Node (no binding).
func testForbidden(t *testing.T, k *cluster, kubeconfig string) {
	n := k.newNode(t, "forbid")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	b := newLogind(t)
	env := []string{"KUBECONFIG=" + kubeconfig, "GNSH_CONFIG=" + writeConfig(t, config("node: forbid")), "LOGNAME=alice"}
	r := gnshRun(t, b.bus, env, "reboot")
	handedOffWithOneWarning(t, n, r, b,
		"gnsh: warning: the identity in "+kubeconfig+" may not drain this node (403 Forbidden: …): use this node's kubelet kubeconfig, which may drain this node and no other "+
			"(gnsh's rbac.yaml grants only the reboot-slot gate's requests; 'gnsh doctor' says which kubeconfig each uses); rebooting without draining")
}

// testOtherMachine: root's kubeconfig reaches a cluster in which a Node has
// this host's name but another machine ID: not drained.
func testOtherMachine(t *testing.T, k *cluster) {
	mid, err := os.ReadFile("/etc/machine-id")
	if err != nil || len(strings.TrimSpace(string(mid))) == 0 {
		t.Skipf("this host has no /etc/machine-id: %v", err)
	}
	n := k.newNode(t, "other")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	ctx := ctxFor(t, time.Minute)
	obj := n.get()
	obj.Status.NodeInfo.MachineID = "0123456789abcdef0123456789abcdef"
	if _, err := n.admin.CoreV1().Nodes().UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := newLogind(t)
	r := gnshRun(t, b.bus, n.env(fastConfig), "reboot")
	handedOffWithOneWarning(t, n, r, b, "gnsh: warning: the Node other in the cluster is not this machine (…); rebooting without draining")
	if got := n.get().Status.NodeInfo.MachineID; got != "0123456789abcdef0123456789abcdef" {
		t.Errorf("the machine ID was reset to %q during the test", got)
	}
}

// testNotRoot: a user who cannot read the kubelet's 0600 kubeconfig is
// refused with one line (root or --no-drain), and nothing is handed off;
// --no-drain goes on.
func testNotRoot(t *testing.T, k *cluster) {
	n := k.newNode(t, "nonroot")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	// As kubeadm leaves it: a world-traversable directory, a 0600 file.
	// (t.TempDir and its parent are 0700: open them to other users.)
	top := t.TempDir()
	for _, d := range []string{top, filepath.Dir(top)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(top, "etc-kubernetes")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(k.cp.NodeKubeconfigData(t, n.name))
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "kubelet.conf")
	if err := os.WriteFile(kc, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml") // as /etc/gnsh/config.yaml: 0644
	if err := os.WriteFile(cfg, []byte(fastConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newLogind(t)
	// The test bus lets any user in; its directory must too.
	sock := strings.TrimPrefix(strings.Split(b.bus.Address(), ",")[0], "unix:path=")
	if err := os.Chmod(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"DBUS_SYSTEM_BUS_ADDRESS=" + b.bus.Address(), "KUBECONFIG=" + kc, "GNSH_CONFIG=" + cfg, "LOGNAME=alice"}
	// /run as on a host: root's, 0755 (the rig's own tmpfs is 1777).
	run := t.TempDir()
	if err := os.Chmod(run, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(args ...string) rig.Result {
		argv := append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", filepath.Join(binDir, "reboot")}, args...)
		r := rig.Run(t, rig.Spec{Env: env, Argv: argv, RunDir: run})
		logRun(t, "reboot (uid 65534)", args, r, 0)
		return r
	}
	r := asNobody()
	if r.Code != 1 {
		t.Errorf("exit %d, want 1", r.Code)
	}
	if !strings.HasPrefix(r.Stderr, "gnsh: cannot drain this Kubernetes node as alice (cannot read "+kc+": permission denied") ||
		!strings.HasSuffix(r.Stderr, "); run the command as root, or again with --no-drain\n") || strings.Count(r.Stderr, "\n") != 1 {
		t.Errorf("stderr %q", r.Stderr)
	}
	noLogind(t, b.ld)
	n.wantCordon("")

	// A kubeconfig it can read, but /run/gnsh it cannot create: the same.
	if err := os.Chmod(kc, 0o644); err != nil {
		t.Fatal(err)
	}
	r = asNobody()
	if r.Code != 1 || !strings.HasPrefix(r.Stderr, "gnsh: cannot drain this Kubernetes node as alice (cannot take the drain lock: ") ||
		!strings.HasSuffix(r.Stderr, "); run the command as root, or again with --no-drain\n") || strings.Count(r.Stderr, "\n") != 1 {
		t.Errorf("lock: exit %d, stderr %q", r.Code, r.Stderr)
	}
	noLogind(t, b.ld)
	n.wantCordon("")

	r = asNobody("--no-drain")
	if r.Code != 0 || r.Stderr != "" {
		t.Errorf("--no-drain: exit %d, stderr %q", r.Code, r.Stderr)
	}
	wantHandOff(t, "--no-drain", b.ld.Calls(), "RebootWithFlags")
}

// testParamRestored: reboot ARG writes /run/systemd/reboot-param before the
// drain (systemd's order); when the drain refuses, the parameter is put
// back as it was, so that the next reboot does not use it.
func testParamRestored(t *testing.T, k *cluster) {
	n := k.newNode(t, "param")
	n.replicaSet("db", 2, podOpts{})
	n.waitRunning(2)
	n.pdb("db", 2)
	b := newLogind(t)
	env := n.env(config("drainTimeout: 3s"))
	for _, before := range []string{"", "recovery"} {
		r := rig.Run(t, rig.Spec{Env: append([]string{"DBUS_SYSTEM_BUS_ADDRESS=" + b.bus.Address()}, env...),
			Argv: []string{filepath.Join(binDir, "reboot"), "firmware"}, Param: before})
		logRun(t, "reboot firmware", nil, r, 0)
		want := before
		if want == "" {
			want = "<none>"
		}
		if r.Code != 1 || r.Param != want {
			t.Errorf("before %q: exit %d, parameter after %q, want %q", before, r.Code, r.Param, want)
		}
	}
	noLogind(t, b.ld)
	n.wantCordon("")
}

// testDeadKubelet: a node whose kubelet is dead (its Lease last renewed
// ten minutes ago, no kubelet to finish evicted pods): gnsh evicts, does
// not wait for pods that cannot go, says so and reboots, long before the
// drain timeout. Rebooting is how a wedged kubelet gets fixed.
func testDeadKubelet(t *testing.T, k *cluster) {
	ctx := ctxFor(t, time.Minute)
	name := "deadkubelet"
	obj := kwok.Node(name, 100)
	delete(obj.Annotations, "kwok.x-k8s.io/node") // kwok is not its kubelet
	if _, err := k.admin.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := &node{cluster: k, t: t, name: name, ns: "ns-" + name}
	if _, err := k.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed := metav1.NewMicroTime(time.Now().Add(-10 * time.Minute))
	holder, secs := name, int32(40)
	if _, err := k.admin.CoordinationV1().Leases("kube-node-lease").Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-node-lease"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &renewed},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := n.replicaSet("web", 3, podOpts{})
	b := newLogind(t)
	start := time.Now()
	r := gnshRun(t, b.bus, n.env(config("drainTimeout: 2m")), "reboot")
	took := time.Since(start)
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0", r.Code)
	}
	wantHandOff(t, "", b.ld.Calls(), "RebootWithFlags")
	wantLines(t, r.Stderr, "gnsh: warning: … "+name+" …; rebooting without waiting for them")
	if took > time.Minute {
		t.Errorf("took %s: waited for pods that cannot go", took.Round(time.Second))
	}
	// Evicted (Terminating), not gone: nothing finishes them.
	if got := len(n.pods()); got != len(pods) {
		t.Errorf("%d pods left, want %d terminating", got, len(pods))
	}
	n.wantCordon("reboot")
}
