package slotsrig_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/gnshcli"
	"github.com/gnsh/gnsh/internal/slots"
	"github.com/gnsh/gnsh/internal/system"
)

func TestSlotsRig(t *testing.T) {
	r := startRig(t)
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *rig)
	}{
		{"twenty_contenders", testTwentyContenders},
		{"stranded", testStranded},
		{"clock_skew", testClockSkew},
		{"pools_and_cordons", testPoolsAndCordons},
		{"slots_command", testSlotsCommand},
		{"control_plane", testControlPlane},
		{"etcd_only", testEtcdOnly},
		{"etcd_unlabelled", testEtcdUnlabelled},
		{"slots_reset", testSlotsReset},
	} {
		r.reset(t)
		if !t.Run(c.name, func(t *testing.T) { c.fn(t, r) }) {
			return
		}
	}
}

// reset deletes the Lease and every Node, and forgets the history.
func (r *rig) reset(t *testing.T) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	r.proxy.Reset()
	if err := r.admin.CoordinationV1().Leases(leaseNS).Delete(ctx, leaseName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := r.admin.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := r.admin.CoreV1().Pods("kube-system").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: "component=etcd"}); err != nil {
		t.Fatal(err)
	}
	r.history.mu.Lock()
	r.history.versions = nil
	r.history.mu.Unlock()
	r.auditFrom = r.auditSize(t)
}

// 20 nodes against a limit of 2, each holding its slot briefly; a third of
// the Lease updates are answered 409 by the proxy, the rest delayed. At no
// version of the Lease are more than 2 admitted, and all 20 are admitted
// in the order they arrived (their tickets).
func testTwentyContenders(t *testing.T, r *rig) {
	const n, limit = 20, 2
	var nodes []*corev1.Node
	for i := range n {
		nodes = append(nodes, r.node(t, fmt.Sprintf("c%02d", i), nil))
	}
	conflict := r.proxy.Fail("PUT", leasePath, 409).Every(3).Delay(20 * time.Millisecond)
	ctx := ctxFor(t, 5*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	var mu sync.Mutex
	var held, most int
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 30 * time.Millisecond)
			g := r.gate(t, nd.Name, slots.Limits{Max: limit, Settle: 30 * time.Second})
			s, _, err := g.Acquire(ctx, request(nd, 4*time.Minute))
			if err != nil {
				errs <- fmt.Errorf("%s: %w", nd.Name, err)
				return
			}
			mu.Lock()
			held++
			most = max(most, held)
			mu.Unlock()
			time.Sleep(150 * time.Millisecond)
			mu.Lock()
			held--
			mu.Unlock()
			if err := s.Release(ctx, "test"); err != nil {
				errs <- fmt.Errorf("%s: release: %w", nd.Name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if conflict.Hits() == 0 || conflict.Delayed() == 0 {
		t.Errorf("the proxy answered %d updates 409 and delayed %d", conflict.Hits(), conflict.Delayed())
	}
	for what, versions := range map[string][]slots.Record{"watch": r.history.all(), "audit log": r.auditedVersions(t)} {
		order, most := admissions(versions)
		if most > limit {
			t.Errorf("%s: a version of the Lease has %d holders", what, most)
		}
		if len(order) != n {
			t.Errorf("%s: %d admitted, want %d", what, len(order), n)
		}
		if bad := passedOver(versions, limit); bad != "" {
			t.Errorf("%s: %s", what, bad)
			for i, v := range versions {
				t.Logf("version %d: %s", i, summary(v))
			}
		}
		t.Logf("%s: %d versions, at most %d holders", what, len(versions), most)
	}
	_, conflicts := r.audited(t, r.auditFrom)
	t.Logf("updates the API server refused with 409: %d; the proxy: %d", conflicts, conflict.Hits())
	if most > limit {
		t.Errorf("%d held at once by the contenders' own count", most)
	}
}

// Every way a slot could be stranded frees it, and none too early.
func testStranded(t *testing.T, r *rig) {
	ctx := ctxFor(t, 3*time.Minute)
	lim := slots.Limits{Max: 1, Settle: 2 * time.Second}
	next := r.node(t, "next", nil)
	take := func(name string) (*corev1.Node, *slots.Slot) {
		nd := r.node(t, name, nil)
		s, _, err := r.gate(t, nd.Name, lim).Acquire(ctx, request(nd, time.Second))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return nd, s
	}
	waitFor := func(why string, within time.Duration) {
		t.Helper()
		start := time.Now()
		s, _, err := r.gate(t, next.Name, lim).Acquire(ctx, request(next, within))
		if err != nil {
			t.Fatalf("%s: next not admitted: %v", why, err)
		}
		t.Logf("%s: next admitted after %s", why, time.Since(start).Round(100*time.Millisecond))
		if err := s.Release(ctx, "test"); err != nil {
			t.Fatal(err)
		}
	}
	mustWait := func(why string, d time.Duration) {
		t.Helper()
		_, v, err := r.gate(t, next.Name, lim).Acquire(ctx, request(next, d))
		var we *slots.WaitError
		if !errors.As(err, &we) {
			t.Fatalf("%s: want a wait that runs out, got %v (%+v)", why, err, v)
		}
	}

	// The holder's Node is deleted.
	a, sa := take("deleted")
	sa.Keep(ctx, slots.ShuttingDown)
	mustWait("deleted, before", 500*time.Millisecond)
	if err := r.admin.CoreV1().Nodes().Delete(ctx, a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Node deleted", 10*time.Second)

	// Back on a new boot, no agent: freed once Ready and schedulable for
	// the settle time, not while cordoned.
	b, sb := take("noagent")
	sb.Keep(ctx, slots.ShuttingDown)
	r.setStatus(t, b.Name, false, "boot-1")
	mustWait("down", 2*time.Second)
	r.cordon(t, b.Name, true)
	r.setStatus(t, b.Name, true, "boot-2")
	mustWait("back but cordoned", 4*time.Second)
	r.cordon(t, b.Name, false)
	waitFor("back and settled", 20*time.Second)
	r.deleteNode(t, b.Name)

	// Going down: the holder's renewals stop (its agent stopped by the
	// shutdown) and so does its kubelet's heartbeat, while its Node is
	// still Ready (the node controller marks it NotReady only 40-50 s
	// later): not freed, however long it stays so.
	e, se := take("goingdown")
	stopBeat := r.heartbeat(t, e.Name)
	mustWait("going down, renewing", 3*time.Second)
	stopBeat()
	se.Keep(ctx, slots.ShuttingDown)
	mustWait("going down, silent, Ready, no heartbeat", 8*time.Second)
	r.deleteNode(t, e.Name)
	waitFor("going down, then its Node deleted", 10*time.Second)

	// A shutdown given up: the wrapper died after taking the slot (no
	// more renewals), the node Ready on the same boot and its kubelet
	// heartbeating.
	c, sc := take("gaveup")
	defer r.heartbeat(t, c.Name)()
	mustWait("renewing", 4*time.Second)
	sc.Keep(ctx, slots.Draining) // stops renewing, as a killed wrapper
	waitFor("given up", 20*time.Second)
	r.deleteNode(t, c.Name)

	// Down for longer than warnAfter: never freed; a Warning Event on it.
	d, sd := take("down")
	sd.Keep(ctx, slots.ShuttingDown)
	r.setStatus(t, d.Name, false, "boot-1")
	g := r.gate(t, next.Name, lim)
	g.WarnAfter = 2 * time.Second
	var events []string
	var mu sync.Mutex
	g.Event = func(_ context.Context, node, typ, reason, msg string) {
		mu.Lock()
		events = append(events, node+" "+typ+" "+reason)
		mu.Unlock()
	}
	_, _, err := g.Acquire(ctx, request(next, 8*time.Second))
	var we *slots.WaitError
	if !errors.As(err, &we) || !strings.Contains(we.Error(), "down (holds a slot") {
		t.Fatalf("want a wait naming the holder that is down, got %v", err)
	}
	mu.Lock()
	if !slices.Contains(events, "down Warning "+slots.ReasonHeldLong) {
		t.Errorf("events: %q", events)
	}
	mu.Unlock()
	rec := r.record(t)
	if _, ok := rec.Holder("down"); !ok || len(rec.Waiters) != 0 {
		t.Fatalf("record after the wait: %+v", rec)
	}
}

func (r *rig) deleteNode(t *testing.T, name string) {
	t.Helper()
	if err := r.admin.CoreV1().Nodes().Delete(ctxFor(t, time.Minute), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) record(t *testing.T) slots.Record {
	t.Helper()
	rec, _, err := (&slots.Gate{C: r.admin, Namespace: leaseNS, Name: leaseName, APITimeout: 5 * time.Second}).Read(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// skewed is a clock an hour off: its wall clock is wrong, its durations
// right.
type skewed struct {
	clock.RealClock
	off time.Duration
}

func (s skewed) Now() time.Time                  { return time.Now().Add(s.off) }
func (s skewed) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// Nodes whose clocks are an hour ahead or behind free nothing early: the
// holder renews with its clock an hour behind, the waiter's is an hour
// ahead, and the waiter is admitted only once the holder releases.
func testClockSkew(t *testing.T, r *rig) {
	ctx := ctxFor(t, 2*time.Minute)
	lim := slots.Limits{Max: 1, Settle: time.Second}
	a, b := r.node(t, "behind", nil), r.node(t, "ahead", nil)
	ga, gb := r.gate(t, a.Name, lim), r.gate(t, b.Name, lim)
	ga.Clock, gb.Clock = skewed{off: -time.Hour}, skewed{off: time.Hour}
	reqA, reqB := request(a, time.Second), request(b, time.Minute)
	reqA.Entry.Since, reqB.Entry.Since = ga.Clock.Now(), gb.Clock.Now()
	sa, _, err := ga.Acquire(ctx, reqA)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(6 * time.Second) // 6 renewals; 3 missed would be 3 s
		released <- time.Now()
		sa.Release(ctx, "test")
	}()
	sb, _, err := gb.Acquire(ctx, reqB)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if rel := <-released; at.Before(rel) {
		t.Fatalf("admitted %s before the holder released", rel.Sub(at))
	}
	sb.Release(ctx, "test")
}

// A pool limit of 2 lets two of its nodes and one of another pool through
// together; an admin's cordon on a node of the pool holds one back, named.
func testPoolsAndCordons(t *testing.T, r *rig) {
	ctx := ctxFor(t, 2*time.Minute)
	sel, _ := labels.Parse("pool=a")
	lim := slots.Limits{Max: 3, Pools: []slots.Pool{{Name: "a", Selector: sel, Max: 2}}, Settle: time.Second}
	a := map[string]string{"pool": "a"}
	a1, a2, a3, b1 := r.node(t, "a1", a), r.node(t, "a2", a), r.node(t, "a3", a), r.node(t, "b1", map[string]string{"pool": "b"})
	var held []*slots.Slot
	for _, nd := range []*corev1.Node{a1, a2, b1} {
		s, _, err := r.gate(t, nd.Name, lim).Acquire(ctx, request(nd, time.Second))
		if err != nil {
			t.Fatalf("%s: %v", nd.Name, err)
		}
		held = append(held, s)
	}
	_, _, err := r.gate(t, a3.Name, lim).Acquire(ctx, request(a3, time.Second))
	var we *slots.WaitError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "pool a limit 2: a1 (holds a slot") {
		t.Fatalf("a3: %v", err)
	}
	for _, s := range held {
		s.Release(ctx, "test")
	}
	r.cordon(t, "a1", true)
	lim1 := slots.Limits{Max: 1, Settle: time.Second}
	_, _, err = r.gate(t, a3.Name, lim1).Acquire(ctx, request(a3, time.Second))
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "cluster limit 1: a1 (cordoned)") {
		t.Fatalf("a3 with a1 cordoned by an admin: %v", err)
	}
	// The cordon lifted, a3 goes at once.
	r.cordon(t, "a1", false)
	s, _, err := r.gate(t, a3.Name, lim1).Acquire(ctx, request(a3, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s.Release(ctx, "test")
	_ = context.Background
}

// passedOver checks arrival order in a history: a node admitted while
// nodes that came before it (smaller tickets) still wait must leave room for
// all of them under the limit; else it took a slot one of them needed.
func passedOver(versions []slots.Record, limit int) string {
	seen := map[string]bool{}
	for i, v := range versions {
		for _, h := range v.Holders {
			k := fmt.Sprintf("%s#%d", h.Node, h.Ticket)
			if seen[k] {
				continue
			}
			seen[k] = true
			earlier := 0
			for _, w := range v.Waiters {
				if w.Ticket < h.Ticket {
					earlier++
				}
			}
			if earlier > 0 && len(v.Holders)+earlier > limit {
				return fmt.Sprintf("version %d admitted %s ahead of %d earlier waiter(s) with no room left for them: %s", i, k, earlier, summary(v))
			}
		}
	}
	return ""
}

// summary is one line per version: holders, then waiters, with tickets.
func summary(rec slots.Record) string {
	var h, w []string
	for _, e := range rec.Holders {
		h = append(h, fmt.Sprintf("%s#%d", e.Node, e.Ticket))
	}
	for _, e := range rec.Waiters {
		w = append(w, fmt.Sprintf("%s#%d", e.Node, e.Ticket))
	}
	return fmt.Sprintf("next %d holders [%s] waiters [%s]", rec.Next, strings.Join(h, " "), strings.Join(w, " "))
}

// gnsh slots lists the holders, waiters and nodes out as the API server
// has them (text and JSON); gnsh slots release frees a slot with an admin's
// kubeconfig and posts GnshSlotReleased on the Node.
func testSlotsCommand(t *testing.T, r *rig) {
	ctx := ctxFor(t, time.Minute)
	lim := slots.Limits{Max: 2, Settle: time.Second}
	a, b := r.node(t, "held", nil), r.node(t, "queued", nil)
	r.node(t, "down", nil)
	r.setStatus(t, "down", false, "boot-1")
	sa, _, err := r.gate(t, a.Name, lim).Acquire(ctx, request(a, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sa.Keep(ctx, slots.ShuttingDown)
	waiting := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	go func() { _, _, err := r.gate(t, b.Name, lim).Acquire(wctx, request(b, time.Minute)); waiting <- err }()
	eventually(t, "queued waits", func() bool { _, ok := r.record(t).Waiter("queued"); return ok })

	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("slots:\n  maxUnavailable: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		env := &dispatch.Env{Stdout: &out, Stderr: &errb, Location: time.UTC,
			LookupEnv: func(k string) (string, bool) {
				switch k {
				case "GNSH_CONFIG":
					return cfg, true
				case "SUDO_USER":
					return "carol", true
				}
				return "", false
			},
			Host: &system.Host{Root: t.TempDir(), Getenv: func(string) string { return "" }}}
		code := gnshcli.Run(ctx, append([]string{"gnsh", "slots"}, args...), env)
		return out.String(), errb.String(), code
	}
	out, errs, code := run("--kubeconfig", r.cp.AdminKubeconfig)
	for _, want := range []string{"reboot slots gnsh/reboot-slots (gate optional): limit 2\n", "holder   held    shutting-down  asked ",
		"waiting  queued  place 1", "out      down    NotReady"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("gnsh slots: %d %q\n%s\nwant …%s…", code, errs, out, want)
		}
	}
	out, _, code = run("--kubeconfig", r.cp.AdminKubeconfig, "-o", "json")
	var v struct {
		Holders []slots.Entry `json:"holders"`
		Waiters []slots.Entry `json:"waiters"`
		Out     []slots.Out   `json:"out"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || len(v.Holders) != 1 || v.Holders[0].Node != "held" ||
		len(v.Waiters) != 1 || len(v.Out) != 1 || v.Out[0].Node != "down" {
		t.Errorf("gnsh slots -o json: %v %d\n%s", err, code, out)
	}
	out, errs, code = run("release", "--node", "held", "--kubeconfig", r.cp.AdminKubeconfig)
	if code != 0 || !strings.Contains(out, "freed the reboot slot of held (shutting-down, reboot by root)") {
		t.Fatalf("release: %d %q %q", code, out, errs)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("queued after the release: %v", err)
	}
	stop()
	evs, err := r.admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=held,reason=" + slots.ReasonReleased})
	if err != nil || len(evs.Items) != 1 || !strings.Contains(evs.Items[0].Message, "freed by carol with 'gnsh slots release'") {
		t.Errorf("events: %v %+v", err, evs)
	}
	_, errs, code = run("release", "--node", "nobody", "--kubeconfig", r.cp.AdminKubeconfig)
	if code != 1 || !strings.Contains(errs, `gnsh: "nobody" holds no reboot slot of gnsh/reboot-slots and is not waiting for one`) {
		t.Errorf("release of no slot: %d %q", code, errs)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 10s: %s", what)
		}
	}
}

// etcdPod creates the static etcd pod of a control-plane node (as kubeadm
// names and labels it) with its Ready condition.
func (r *rig) etcdPod(t *testing.T, node string, ready bool) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	name := "etcd-" + node
	p, err := r.admin.CoreV1().Pods("kube-system").Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		p, err = r.admin.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{"component": "etcd", "tier": "control-plane"}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "etcd", Image: "registry.k8s.io/etcd:3.6"}}},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if _, err := r.admin.CoreV1().Pods("kube-system").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Three control-plane nodes with static etcd pods: an etcd member not
// Ready refuses another control-plane reboot (--force-quorum overrides);
// two at once admit one; the second waits until the first is back, its
// etcd pod Ready, for the settle time (freed by its keeper).
func testControlPlane(t *testing.T, r *rig) {
	ctx := ctxFor(t, 3*time.Minute)
	lim := slots.Limits{Max: 3, Settle: 2 * time.Second}
	cpl := map[string]string{slots.ControlPlaneLabel: ""}
	var cps []*corev1.Node
	for _, n := range []string{"cp1", "cp2", "cp3"} {
		cps = append(cps, r.node(t, n, cpl))
		r.etcdPod(t, n, true)
	}
	r.etcdPod(t, "cp2", false)
	_, _, err := r.gate(t, cps[0].Name, lim).Acquire(ctx, request(cps[0], time.Second))
	var we *slots.WaitError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "etcd would lose its quorum: etcd-cp2 (not Ready)") {
		t.Fatalf("cp1 with etcd-cp2 not Ready: %v", err)
	}
	forced := request(cps[0], time.Second)
	forced.ForceQuorum = true
	s, _, err := r.gate(t, cps[0].Name, lim).Acquire(ctx, forced)
	if err != nil {
		t.Fatalf("--force-quorum: %v", err)
	}
	s.Release(ctx, "test")
	r.etcdPod(t, "cp2", true)

	// cp1 and cp3 at once: one goes, the other waits.
	type result struct {
		node string
		s    *slots.Slot
		err  error
		at   time.Time
	}
	res := make(chan result, 2)
	for _, nd := range []*corev1.Node{cps[0], cps[2]} {
		go func() {
			s, _, err := r.gate(t, nd.Name, lim).Acquire(ctx, request(nd, 2*time.Minute))
			res <- result{nd.Name, s, err, time.Now()}
		}()
	}
	first := <-res
	if first.err != nil {
		t.Fatal(first.err)
	}
	select {
	case second := <-res:
		t.Fatalf("%s and %s admitted together (%v)", first.node, second.node, second.err)
	case <-time.After(2 * time.Second):
	}
	// The first goes down (its etcd member too) and comes back on a new
	// boot; its keeper frees the slot only once its etcd pod is Ready
	// again, for the settle time.
	first.s.Keep(ctx, slots.ShuttingDown)
	r.setStatus(t, first.node, false, "boot-1")
	r.etcdPod(t, first.node, false)
	time.Sleep(time.Second)
	r.setStatus(t, first.node, true, "boot-2")
	g := r.gate(t, first.node, lim)
	nd := r.getNode(t, first.node)
	k := &slots.Keeper{Gate: g, Node: first.node, Boot: "boot-2", Settle: lim.Settle,
		State: func(ctx context.Context) (slots.NodeState, []slots.Member, bool, error) {
			n, err := r.admin.CoreV1().Nodes().Get(ctx, nd.Name, metav1.GetOptions{})
			if err != nil {
				return slots.NodeState{}, nil, false, err
			}
			ms, err := g.EtcdMembers(ctx)
			return slots.StateOf(n), ms, err == nil, nil
		},
		Needed: func(context.Context, slots.Entry, func() error) (bool, string, error) { return true, "", nil }}
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	go k.Run(kctx)
	select {
	case second := <-res:
		t.Fatalf("%s admitted while %s's etcd pod is not Ready (%v)", second.node, first.node, second.err)
	case <-time.After(4 * time.Second):
	}
	ready := time.Now()
	r.etcdPod(t, first.node, true)
	second := <-res
	if second.err != nil {
		t.Fatal(second.err)
	}
	if d := second.at.Sub(ready); d < lim.Settle {
		t.Errorf("%s admitted %s after %s's etcd pod was Ready, before the settle time", second.node, d, first.node)
	}
	second.s.Release(ctx, "test")
}

func (r *rig) getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := r.admin.CoreV1().Nodes().Get(ctxFor(t, time.Minute), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
