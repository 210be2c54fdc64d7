package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// BenchmarkSlots measures the reboot-slot gate on a fresh control plane
// with gnsh's own identity (install/kubernetes/rbac.yaml, a ServiceAccount
// token), requests counted in the audit log by that user:
//
//   - free: what the gate adds to a shutdown when a slot is free, one node
//     at a time taking and freeing a slot, 50 times (its client already
//     connected, as after the wrapper's Node read);
//   - contended: 100 nodes asking at once against a limit of 5, each
//     holding its slot 100 ms: admissions per second, requests and
//     conflicts per admission.
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
	token := strings.TrimSpace(cp.Kubectl(b, nil, "-n", "kube-system", "create", "token", "gnsh", "--duration=1h"))
	kc := cp.TokenKubeconfig(b, token)
	ctx := b.Context()
	var nodes []*corev1.Node
	for i := range 100 {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%03d", i)}}
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
	client := func() kubernetes.Interface {
		rc, err := (&kube.Locator{Timeout: 5 * time.Second}).RESTConfig(kc)
		if err != nil {
			b.Fatal(err)
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
	c := client()
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

	// 100 contenders, limit 5.
	from = mark()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, _, err := gate(client(), 5).Acquire(ctx, ask(n))
			if err != nil {
				errs <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
			if err := s.Release(context.Background(), "bench"); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	to = mark()
	total, conflicts, kinds := count(from, to)
	perSec := float64(len(nodes)) / wall.Seconds()
	b.Logf("100 contenders, limit 5: %.1f s, %.1f admissions/s, %d requests (%.1f per admission; %d conflicts) %v",
		wall.Seconds(), perSec, total, float64(total)/float64(len(nodes)), conflicts, kinds)
	b.ReportMetric(float64(med.Microseconds())/1000, "free-median-ms")
	b.ReportMetric(perSec, "admissions/s")
	b.ReportMetric(float64(total)/float64(len(nodes)), "requests/admission")

	md := fmt.Sprintf(`# Reboot-slot gate benchmark

Run on %s by `+"`make bench`"+` on %s at %s, on a fresh control plane (etcd, kube-apiserver with an audit
log), gnsh's own identity (install/kubernetes/rbac.yaml, a ServiceAccount token: requests counted in the audit
log by that user, a watch once), 100 Ready Nodes, the client as the wrapper builds it.

| case | result |
|---|---|
| a free slot, 50 times one node (the gate's latency: read the Lease, list the Nodes, one write) | median %.1f ms, p95 %.1f ms; %.1f requests per acquire and release |
| 100 nodes at once, limit 5, each holding 100 ms | %.1f s in all, %.1f admissions/s; %.1f requests per admission (%d answered 409 Conflict) |

Requests of the contended case by kind: %s.
`, time.Now().UTC().Format("2006-01-02 15:04 MST"), cpuModel(), revision(root),
		float64(med.Microseconds())/1000, float64(p95.Microseconds())/1000, float64(freeReq)/50,
		wall.Seconds(), perSec, float64(total)/float64(len(nodes)), conflicts, kindsString(kinds))
	fmt.Print("\n" + md)
	if f := slotsResults(); f != "" {
		if err := os.WriteFile(f, []byte(md), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
