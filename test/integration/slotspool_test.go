package integration

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/logind/logindtest"
	"github.com/gnsh/gnsh/test/internal/rig"
)

// TestSlotsPoolReboots: a pool limit of two lets two nodes of one pool and
// one of another through together. Four nodes run reboot at once (the real
// wrapper, gnsh's identity, a fake logind each): three of pool a (limit 2)
// and one of pool b, under a cluster limit of 4. Two of pool a and the one
// of pool b hand off; the third of pool a waits, naming the pool's limit,
// until one of its pool is back and its agent frees the slot.
func TestSlotsPoolReboots(t *testing.T) {
	k := startCluster(t)
	gateKC := k.gnshIdentity(t)
	history := k.leaseHistory(t)
	type contender struct {
		n   *node
		env []string
		p   *rig.Proc
		ld  *logindtest.Logind
	}
	pools := map[string]string{"pool-a1": "a", "pool-a2": "a", "pool-a3": "a", "pool-b1": "b"}
	const limits = "slots: {maxUnavailable: 4, wait: 3m, settle: 2s, renew: 2s, pools: [{name: a, selector: 'pool=a', maxUnavailable: 2}, {name: b, selector: 'pool=b', maxUnavailable: 2}]}"
	var cs []*contender
	for _, name := range []string{"pool-a1", "pool-a2", "pool-a3", "pool-b1"} {
		nd := k.newNode(t, name)
		o := nd.get()
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels["pool"] = pools[name]
		if _, err := k.admin.CoreV1().Nodes().Update(ctxFor(t, time.Minute), o, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		nd.replicaSet("web", 1, podOpts{})
		nd.waitRunning(1)
		env := k.nodeEnv(t, name, writeConfig(t, config("node: "+name, gated(limits, gateKC(name)))))
		cs = append(cs, &contender{n: nd, env: env})
	}
	for _, c := range cs {
		bus := logindtest.StartBus(t)
		c.ld = bus.StartLogind(t, logindtest.Options{Version: 252})
		c.p = startCmd(t, bus, c.env, "", "reboot")
	}
	// Three hand off; one of pool a waits.
	var done []*contender
	var waiting *contender
	for end := time.Now().Add(2 * time.Minute); len(done) < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("only %d handed off", len(done))
		}
		for _, c := range cs {
			select {
			case <-c.p.Done():
				seen := false
				for _, d := range done {
					seen = seen || d == c
				}
				if !seen {
					done = append(done, c)
				}
			default:
			}
		}
	}
	a := 0
	for _, c := range cs {
		in := false
		for _, d := range done {
			in = in || d == c
		}
		if !in {
			waiting = c
			continue
		}
		r := waitCmd(t, c.p, "reboot")
		if r.Code != 0 {
			t.Fatalf("%s: exit %d", c.n.name, r.Code)
		}
		wantHandOff(t, c.n.name, c.ld.Calls(), "RebootWithFlags")
		if pools[c.n.name] == "a" {
			a++
		}
	}
	if waiting == nil || pools[waiting.n.name] != "a" || a != 2 {
		t.Fatalf("handed off %d of pool a; waiting: %v", a, waiting)
	}
	// The one waiting joins the queue once its first write's conflict
	// pause is over (a node not yet in the record that conflicted with
	// the others pauses at least half a second): the record as it then
	// stands.
	rec := history()[len(history())-1]
	for end := time.Now().Add(10 * time.Second); len(rec.Waiters) == 0 && time.Now().Before(end); rec = history()[len(history())-1] {
		time.Sleep(50 * time.Millisecond)
	}
	if len(rec.Holders) != 3 || len(rec.Waiters) != 1 || rec.Waiters[0].Node != waiting.n.name {
		t.Fatalf("record: %+v", rec)
	}
	// Its line names the pool's limit, and it still waits.
	time.Sleep(2 * time.Second)
	select {
	case <-waiting.p.Done():
		t.Fatalf("%s went on while two of its pool held slots", waiting.n.name)
	default:
	}
	// One of pool a is back: its agent frees its slot once settled, and
	// the one waiting goes.
	var back *contender
	for _, d := range done {
		if pools[d.n.name] == "a" {
			back = d
			break
		}
	}
	boot := "00000000-0000-4000-8000-000000000001"
	nd := back.n.get()
	nd.Status.NodeInfo.BootID = boot
	if _, err := k.admin.CoreV1().Nodes().UpdateStatus(ctxFor(t, time.Minute), nd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stopAgent := slotAgent(t, back.env, "", boot)
	r := waitCmd(t, waiting.p, "reboot")
	stopAgent()
	if r.Code != 0 || !strings.Contains(r.Stderr, "pool a limit 2: ") || strings.Contains(r.Stderr, "cluster limit") {
		t.Fatalf("%s: exit %d, stderr:\n%s", waiting.n.name, r.Code, r.Stderr)
	}
	wantHandOff(t, waiting.n.name, waiting.ld.Calls(), "RebootWithFlags")
	// From the API server's side: never more than 2 of pool a, and once 2
	// of a and 1 of b together.
	together := false
	for i, v := range history() {
		inA, inB := 0, 0
		for _, h := range v.Holders {
			switch pools[h.Node] {
			case "a":
				inA++
			case "b":
				inB++
			}
		}
		if inA > 2 {
			t.Fatalf("version %d: %d of pool a, %d in all: %+v", i, inA, len(v.Holders), v.Holders)
		}
		together = together || inA == 2 && inB == 1
	}
	if !together {
		t.Error("never two of pool a and one of pool b at once")
	}
}
