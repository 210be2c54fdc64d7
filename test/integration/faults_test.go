package integration

// The real binary behind a fault-injecting proxy in front of the real API
// server (test/internal/faultproxy): an API server that answers but
// cannot be used never stops a reboot, and -f's cordon has one budget.

import (
	"net/http"
	"testing"
	"time"

	"github.com/gnsh/gnsh/test/internal/faultproxy"
)

var faultNodes = []string{"fail503", "mid503", "forcebudget"}

func TestDrainFaults(t *testing.T) {
	t.Parallel()
	k := startCluster(t, faultNodes...)
	px := faultproxy.ForControlPlane(t, k.cp)
	for _, sc := range []struct {
		name string
		f    func(*testing.T, *cluster, *faultproxy.Proxy)
	}{
		{"503 on the Node at the start", test503AtStart},
		{"503 mid-drain for unreachableAfter", test503MidDrain},
		{"-f: cordon and Event within one budget", testForceBudget},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.f(t, k, px)
		})
	}
}

// proxied is the node's env with its kubeconfig pointing at the proxy.
func (n *node) proxied(px *faultproxy.Proxy, config string) []string {
	n.t.Helper()
	return []string{"KUBECONFIG=" + px.Kubeconfig(n.t, n.cp.NodeKubeconfig(n.t, n.name)), "GNSH_CONFIG=" + writeConfig(n.t, config),
		"LOGNAME=alice"}
}

// test503AtStart: a load balancer without backends answers 503: one
// warning naming the status, then the hand-off (it used to refuse).
func test503AtStart(t *testing.T, k *cluster, px *faultproxy.Proxy) {
	n := k.newNode(t, "fail503")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	rule := px.Fail(http.MethodGet, "^/api/v1/nodes/fail503$", http.StatusServiceUnavailable)
	defer rule.Remove()
	b := newLogind(t)
	r := gnshRun(t, b.bus, n.proxied(px, fastConfig), "reboot")
	handedOffWithOneWarning(t, n, r, b, "gnsh: warning: the API server is failing (503 Service Unavailable: …); rebooting without draining")
	if rule.Hits() == 0 {
		t.Error("the proxy never failed the Node GET")
	}
}

// test503MidDrain: once the evictions are accepted the pod list and watch
// answer 503; after unreachableAfter (3 s) gnsh gives the drain up with a
// warning and hands off, long before drainTimeout (it used to run the
// whole drainTimeout, each 503 resetting the clock, then refuse).
func test503MidDrain(t *testing.T, k *cluster, px *faultproxy.Proxy) {
	n := k.newNode(t, "mid503")
	n.replicaSet("slow", 2, podOpts{hold: true})
	n.waitRunning(2)
	b := newLogind(t)
	start := time.Now()
	p := startCmd(t, b.bus, n.proxied(px, config("drainTimeout: 2m")), "", "reboot")
	n.waitTerminating(2)
	rule := px.Fail(http.MethodGet, "^/api/v1/pods$", http.StatusServiceUnavailable)
	defer rule.Remove()
	px.Interrupt() // the open watch ends, as when a load balancer restarts
	r := waitCmd(t, p, "reboot")
	took := time.Since(start)
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0", r.Code)
	}
	wantHandOff(t, "", b.ld.Calls(), "RebootWithFlags")
	wantLines(t, r.Stderr, "gnsh: warning: API server failing for …503…; rebooting without finishing the drain of mid503")
	if took > time.Minute {
		t.Errorf("took %s, want well under drainTimeout (2m)", took.Round(time.Second))
	}
	n.wantCordon("reboot")
	n.forceDelete()
}

// testForceBudget: reboot -f against an API server that hangs on the Node
// and on Events: connecting, the cordon and the Event share one
// forceCordonTimeout (3 s), so reboot(2) comes after about 3 s; it used to
// come after 6 s (3 s for the cordon, 3 s more for the Event).
func testForceBudget(t *testing.T, k *cluster, px *faultproxy.Proxy) {
	n := k.newNode(t, "forcebudget")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	node := px.Hang(http.MethodGet, "^/api/v1/nodes/forcebudget$")
	defer node.Remove()
	events := px.Hang(http.MethodPost, "^/api/v1/namespaces/default/events$")
	defer events.Remove()
	b := newLogind(t)
	start := time.Now()
	r := gnshRun(t, b.bus, n.proxied(px, config("apiTimeout: 5s", "forceCordonTimeout: 3s")), "reboot", "-f")
	took := time.Since(start)
	if r.Kernel != "restart" {
		t.Fatalf("exit %d, want reboot(2)", r.Code)
	}
	noLogind(t, b.ld)
	n.wantCordon("")
	if took > 5*time.Second {
		t.Errorf("reboot -f took %s, want about forceCordonTimeout (3s)", took.Round(100*time.Millisecond))
	}
	wantLines(t, r.Stderr, "gnsh: warning: … reboot -f goes on without a cordon", "Rebooting.")
}
