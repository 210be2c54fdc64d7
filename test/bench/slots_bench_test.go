package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/slots"
	"github.com/gnsh/gnsh/test/internal/controlplane"
)

// slotsResults is where the slots benchmark writes, beside -results
// (RESULTS.md: RESULTS-slots.md); "" without -results.
func slotsResults() string {
	if *resultsFile == "" {
		return ""
	}
	return strings.TrimSuffix(*resultsFile, ".md") + "-slots.md"
}

const saUser = "system:serviceaccount:kube-system:gnsh"

var (
	crowdSizes  = flag.String("crowds", "100,1000", "the contended cases of BenchmarkSlots: how many nodes ask at once")
	crowdSpread = flag.Duration("spread", 10*time.Second, "BenchmarkSlots: the 1,000 nodes' arrivals spread over this")
	crowdBudget = flag.Duration("crowd-budget", 10*time.Minute, "BenchmarkSlots: each contended case ends after this (the nodes not admitted by then withdraw)")
)

// BenchmarkSlots measures the reboot-slot gate on a fresh control plane
// with gnsh's own identity (install/kubernetes/rbac.yaml, a ServiceAccount
// token), requests counted in the audit log by that user:
//
//   - free: what the gate adds to a shutdown when a slot is free, one node
//     at a time taking and freeing a slot, 50 times (its client already
//     connected, as after the wrapper's Node read);
//   - contended: 100, then 1,000 nodes asking at once against a limit of
//     5, each holding its slot 100 ms: admissions per second, requests and
//     conflicts per admission, the largest record seen.
func BenchmarkSlots(b *testing.B) {
	root := moduleRoot(b)
	cp := controlplane.StartWith(b, controlplane.Options{Audit: true})
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS = -1
	admin := kubernetes.NewForConfigOrDie(cfg)
	manifest, err := os.ReadFile(filepath.Join(root, "install", "kubernetes", "rbac.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	cp.Kubectl(b, manifest, "apply", "-f", "-")
	ctx := b.Context()
	var nodes []*corev1.Node
	for i := range 1000 {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%04d", i)}}
		n, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
		n.Status.NodeInfo.BootID = "boot-" + n.Name
		if n, err = admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	// Each node's gate has a token of gnsh bound to its own Node, as the
	// role hands out (the slots Lease policy refuses the writes of an
	// unbound one): the first through a kubeconfig as the role writes it,
	// the others the same config with their own token (a TokenRequest,
	// what kubectl create token --bound-object-kind Node sends).
	token := strings.TrimSpace(cp.Kubectl(b, nil, "-n", "kube-system", "create", "token", "gnsh",
		"--bound-object-kind=Node", "--bound-object-name="+nodes[0].Name, "--duration=1h"))
	base, err := (&kube.Locator{Timeout: 5 * time.Second}).RESTConfig(cp.TokenKubeconfig(b, token))
	if err != nil {
		b.Fatal(err)
	}
	client := func(n *corev1.Node) kubernetes.Interface {
		rc := rest.CopyConfig(base)
		if n != nodes[0] {
			secs := int64(3600)
			tr, err := admin.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "gnsh", &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs,
					BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}}},
				metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			rc.BearerToken, rc.BearerTokenFile = tr.Status.Token, ""
		}
		return kubernetes.NewForConfigOrDie(rc)
	}
	gate := func(c kubernetes.Interface, max int) *slots.Gate {
		return &slots.Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Limits: slots.Limits{Max: max, Settle: 30 * time.Second},
			Renew: 10 * time.Second, WarnAfter: time.Hour, APITimeout: 5 * time.Second}
	}
	ask := func(n *corev1.Node) slots.Request {
		return slots.Request{Ask: slots.Ask{Entry: slots.Entry{Node: n.Name, UID: n.UID, Boot: n.Status.NodeInfo.BootID,
			Action: "reboot", Who: "bench", Since: time.Now(), Renew: 10}}, Self: slots.StateOf(n), Wait: 10 * time.Minute}
	}
	mark := func() time.Time { time.Sleep(time.Second); return time.Now() }
	count := func(from, to time.Time) (total, conflicts int, kinds map[string]int) {
		a := readAudit(b, cp.AuditLog, saUser)
		kinds = map[string]int{}
		for id, k := range a.kinds {
			if at, ok := a.received[id]; ok && (at.Before(from) || at.After(to)) {
				continue
			}
			total++
			kinds[k]++
			if a.codes[id] == 409 {
				conflicts++
			}
		}
		return total, conflicts, kinds
	}

	// A free slot: the gate's added latency.
	var lat []time.Duration
	c := client(nodes[0])
	if _, err := c.CoreV1().Nodes().Get(ctx, nodes[0].Name, metav1.GetOptions{}); err != nil { // the connection, as after the Node read
		b.Fatal(err)
	}
	from := mark()
	for range 50 {
		start := time.Now()
		s, _, err := gate(c, 1).Acquire(ctx, ask(nodes[0]))
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if err := s.Release(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	to := mark()
	freeReq, _, freeKinds := count(from, to)
	slices.Sort(lat)
	med, p95 := lat[len(lat)/2], lat[len(lat)*95/100]
	b.Logf("free slot: median %v, p95 %v; %d requests for 50 acquire+release %v", med, p95, freeReq, freeKinds)

	// 100 and 1,000 contenders, limit 5.
	var crowds []crowd
	for _, n := range []int{100, 1000} {
		if !slices.Contains(strings.Split(*crowdSizes, ","), fmt.Sprint(n)) {
			continue
		}
		// 1,000 first reads at the same instant (each a list of 1,000
		// Nodes) keep an API server on two cores from answering some of
		// them within apiTimeout: the fleet's arrivals spread over 10 s.
		var spread time.Duration
		if n >= 1000 {
			spread = *crowdSpread
		}
		crowds = append(crowds, contend(b, admin, nodes, n, spread, client, gate, ask, mark, count))
	}
	b.ReportMetric(float64(med.Microseconds())/1000, "free-median-ms")
	for _, c := range crowds {
		b.ReportMetric(c.perAdmission(), fmt.Sprintf("requests/admission-%d", c.n))
	}
	if *keepDir != "" {
		keep(b, "slots", cp.AuditLog)
	}

	var rows, byKind strings.Builder
	for _, c := range crowds {
		at := "at once"
		if c.spread > 0 {
			at = fmt.Sprintf("arriving within %s", c.spread)
		}
		done := fmt.Sprintf("%d of %d admitted in %.1f s, %.1f admissions/s", c.admitted, c.n, c.wall.Seconds(), float64(c.admitted)/c.wall.Seconds())
		if c.admitted < c.n {
			done += fmt.Sprintf(" (the case ends after %s: the others withdrew)", *crowdBudget)
		}
		if c.unavailable > 0 {
			done += fmt.Sprintf("; %d told the gate was unavailable (no first answer within apiTimeout)", c.unavailable)
		}
		if c.releaseFailures > 0 {
			done += fmt.Sprintf("; %d releases failed and were made again", c.releaseFailures)
		}
		writes := c.kinds["update leases"] + c.kinds["create leases"]
		fmt.Fprintf(&rows, "| %d nodes %s, limit 5, each holding 100 ms | %s; %.1f requests per admission, %.1f of them writes "+
			"(%d answered 409 Conflict, %.1f per admission); the record at most %d bytes, %d waiters |\n",
			c.n, at, done, c.perAdmission(), float64(writes)/float64(max(c.admitted, 1)), c.conflicts,
			float64(c.conflicts)/float64(max(c.admitted, 1)), c.maxBytes, c.maxWaiters)
		fmt.Fprintf(&byKind, "- %d contenders: %s.\n", c.n, kindsString(c.kinds))
	}
	md := fmt.Sprintf(`# Reboot-slot gate benchmark

Run by `+"`make bench`"+` on %s at %s, on a fresh control plane (etcd, kube-apiserver with an audit log),
gnsh's own identity (install/kubernetes/rbac.yaml, a ServiceAccount token: requests counted in the audit log by
that user, a watch once), 1,000 Ready Nodes, each contender with its own client as the wrapper builds it.

| case | result |
|---|---|
| a free slot, 50 times one node (the gate's latency: read the Lease, list the Nodes and its own pods, one write) | median %.1f ms, p95 %.1f ms; %.1f requests per acquire and release |
%s
Requests of the contended cases by kind:

%s`, cpuModel(), revision(root),
		float64(med.Microseconds())/1000, float64(p95.Microseconds())/1000, float64(freeReq)/50,
		rows.String(), byKind.String())
	fmt.Print("\n" + md)
	if f := slotsResults(); f != "" {
		if err := os.WriteFile(f, []byte(md), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// crowd is one contended case's outcome.
type crowd struct {
	n        int
	admitted int // within the budget
	// releaseFailures are releases that failed and were tried again.
	releaseFailures int
	// unavailable are nodes told the gate cannot be used (no answer
	// within apiTimeout at first): slots.gate decides.
	unavailable int
	spread      time.Duration
	wall        time.Duration
	requests    int
	conflicts   int
	kinds       map[string]int
	maxBytes    int // the largest record seen (its annotation)
	maxWaiters  int
}

func (c crowd) perAdmission() float64 { return float64(c.requests) / float64(max(c.admitted, 1)) }

// contend has the first n nodes ask at once against a limit of 5, each
// holding its slot 100 ms, and counts the requests; an admin's watch of the
// Lease follows the record's size.
func contend(b *testing.B, admin kubernetes.Interface, nodes []*corev1.Node, n int, spread time.Duration,
	client func(*corev1.Node) kubernetes.Interface, gate func(kubernetes.Interface, int) *slots.Gate, ask func(*corev1.Node) slots.Request,
	mark func() time.Time, count func(from, to time.Time) (int, int, map[string]int)) crowd {
	ctx := b.Context()
	c := crowd{n: n, spread: spread}
	wctx, stop := context.WithCancel(ctx)
	sized := make(chan struct{})
	w, err := admin.CoordinationV1().Leases("gnsh").Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=reboot-slots"})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		defer close(sized)
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			c.maxBytes = max(c.maxBytes, len(l.Annotations[slots.Annotation]))
			if rec, err := slots.Decode(l); err == nil {
				c.maxWaiters = max(c.maxWaiters, len(rec.Waiters))
			}
		}
	}()
	// Each contender's client connected, as the wrapper's is after its
	// Node read (not counted).
	clients := make([]kubernetes.Interface, n)
	for i := range clients {
		clients[i] = client(nodes[i])
		if _, err := clients[i].CoreV1().Nodes().Get(ctx, nodes[i].Name, metav1.GetOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	from := mark()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	var admitted, releaseFailures, unavailable atomic.Int32
	actx, cancel := context.WithTimeout(ctx, *crowdBudget)
	defer cancel()
	for i, nd := range nodes[:n] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Arrivals spread evenly over spread (0: all at once).
			time.Sleep(spread * time.Duration(i) / time.Duration(n))
			s, _, err := gate(clients[i], 5).Acquire(actx, ask(nd))
			if errors.Is(err, context.DeadlineExceeded) && actx.Err() != nil {
				return // not admitted within the budget: withdrawn
			}
			var ue *slots.UnavailableError
			switch {
			case errors.As(err, &ue):
				// With slots.gate: optional this node would go on
				// without a slot; required refuses it.
				unavailable.Add(1)
				b.Logf("%s: %v", nd.Name, err)
				return
			case err != nil:
				errs <- fmt.Errorf("%s: %w", nd.Name, err)
				return
			}
			admitted.Add(1)
			time.Sleep(100 * time.Millisecond)
			// A release that fails (a request past its bound on a busy
			// API server) is tried again, as the node agent would free
			// the slot later; the case counts them.
			for err := s.Release(context.Background(), "bench"); err != nil; err = s.Release(context.Background(), "bench") {
				releaseFailures.Add(1)
				if ctx.Err() != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	c.wall = time.Since(start)
	c.releaseFailures = int(releaseFailures.Load())
	c.unavailable = int(unavailable.Load())
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	to := mark()
	stop()
	w.Stop()
	<-sized
	c.requests, c.conflicts, c.kinds = count(from, to)
	c.admitted = int(admitted.Load())
	b.Logf("%d contenders arriving within %s, limit 5: %d admitted in %.1f s, %.1f admissions/s, %d requests (%.1f per admission; %d conflicts) %v; record at most %d bytes, %d waiters; %d releases failed, %d told unavailable",
		n, spread, c.admitted, c.wall.Seconds(), float64(c.admitted)/c.wall.Seconds(), c.requests, c.perAdmission(), c.conflicts, c.kinds, c.maxBytes, c.maxWaiters, c.releaseFailures, c.unavailable)
	return c
}
