package integration

// The real binary behind a fault-injecting proxy in front of the real API
// server (test/internal/faultproxy): an API server that answers but
// cannot be used never stops a reboot, and -f's cordon has one budget.

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/test/internal/faultproxy"
)

var faultNodes = []string{"fail503", "mid503", "cutoff", "forcebudget", "shed429"}

func TestDrainFaults(t *testing.T) {
	t.Parallel()
	k := startCluster(t, faultNodes...)
	for _, sc := range []struct {
		name string
		f    func(*testing.T, *cluster, *faultproxy.Proxy)
	}{
		{"503 on the Node at the start", test503AtStart},
		{"503 mid-drain for unreachableAfter", test503MidDrain},
		{"eviction answers cut off: retried", testEvictionCutOff},
		{"-f: cordon and Event within one budget", testForceBudget},
		{"429 shedding every eviction for unreachableAfter", testEvictionsShed},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			// A proxy each: a rule matches paths only (the Event POSTs
			// of every node share one), and must not reach the others.
			sc.f(t, k, faultproxy.ForControlPlane(t, k.cp))
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

// testEvictionCutOff: the evictions reach the API server, which carries
// them out, but their answers break off half way (HTTP/2 stream reset, as
// when a load balancer restarts while relaying them). gnsh retries them
// like any request that got no answer, and the drain finishes. It used to
// give the drain up at the first one ("cannot drain (evict …: stream
// error when reading response body …)"): CI saw that when test503MidDrain's
// Interrupt caught an eviction's answer in flight.
func testEvictionCutOff(t *testing.T, k *cluster, px *faultproxy.Proxy) {
	n := k.newNode(t, "cutoff")
	n.replicaSet("slow", 2, podOpts{hold: true})
	n.waitRunning(2)
	const evictions = "^/api/v1/namespaces/ns-cutoff/pods/[^/]+/eviction$"
	rule := px.Cut(http.MethodPost, evictions)
	defer rule.Remove()
	b := newLogind(t)
	p := startCmd(t, b.bus, n.proxied(px, config("unreachableAfter: 20s")), "", "reboot")
	// Until both evictions are cut off, then until both are retried and
	// answered (or until reboot ends, as it did when it gave up at once).
	until := func(cond func() bool) {
		for !cond() {
			select {
			case <-p.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	until(func() bool { return rule.Hits() >= 2 })
	rule.Remove()
	// The cut evictions were carried out: the pods are being deleted. gnsh
	// retries each eviction whose answer it lost, unless its watch shows
	// that pod's deletion first (then the eviction took effect: counted,
	// not sent again). Either way, once both are settled the pods may go.
	re := regexp.MustCompile(evictions)
	until(func() bool {
		answered, deleting := 0, 0
		for _, r := range px.Log() {
			if r.Method == http.MethodPost && r.Rule == nil && re.MatchString(r.Path) && r.Code < 300 {
				answered++
			}
		}
		for _, pod := range n.pods() {
			if pod.DeletionTimestamp != nil {
				deleting++
			}
		}
		return answered >= 2 || deleting >= 2
	})
	n.forceDelete()
	r := waitCmd(t, p, "reboot")
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0", r.Code)
	}
	wantHandOff(t, "", b.ld.Calls(), "RebootWithFlags")
	wantLines(t, r.Stderr, "gnsh: drained cutoff in …")
	if strings.Contains(r.Stderr, "warning") {
		t.Errorf("a warning: the cut answers were not retried")
	}
	n.wantCordon("reboot")
	n.wantEvents(evStarted, evFinished, evShutdown)
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

// testEvictionsShed: the API server sheds load (API Priority and Fairness)
// and answers every eviction 429 without the DisruptionBudget cause: that
// is a failing server, not a PodDisruptionBudget's refusal. After
// unreachableAfter (3 s) gnsh gives the drain up with a warning and hands
// off; it used to take the 429s for a budget, drain for the whole
// drainTimeout and refuse the reboot.
func testEvictionsShed(t *testing.T, k *cluster, px *faultproxy.Proxy) {
	n := k.newNode(t, "shed429")
	n.replicaSet("web", 2, podOpts{})
	n.waitRunning(2)
	rule := px.Fail(http.MethodPost, "^/api/v1/namespaces/[^/]+/pods/[^/]+/eviction$", http.StatusTooManyRequests)
	defer rule.Remove()
	b := newLogind(t)
	start := time.Now()
	r := gnshRun(t, b.bus, n.proxied(px, config("drainTimeout: 2m")), "reboot")
	took := time.Since(start)
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", r.Code, r.Stderr)
	}
	wantHandOff(t, "", b.ld.Calls(), "RebootWithFlags")
	wantLines(t, r.Stderr, "gnsh: warning: API server failing for …429 Too Many Requests…; rebooting without finishing the drain of shed429")
	if took > time.Minute {
		t.Errorf("took %s, want well under drainTimeout (2m)", took.Round(time.Second))
	}
	if rule.Hits() < 2 {
		t.Errorf("%d evictions answered 429, want them retried", rule.Hits())
	}
	n.wantCordon("reboot")
}
