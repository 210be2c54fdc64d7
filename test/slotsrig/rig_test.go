// Package slotsrig_test drives internal/slots against a real kube-apiserver
// (test/internal/controlplane, audit log on) with gnsh's dedicated identity
// (install/kubernetes/rbac.yaml, a ServiceAccount token), through the fault
// proxy of test/internal/faultproxy. What the gate admitted is checked from
// the API server's side: every version of the slots Lease, from an admin's
// watch and from the audit log, never from gnsh's own lines.
//
// The tests skip when the control plane cannot be started here and fail
// instead under GNSH_REQUIRE_RIGS=1.
package slotsrig_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/slots"
	"github.com/gnsh/gnsh/test/internal/controlplane"
	"github.com/gnsh/gnsh/test/internal/faultproxy"
)

const (
	leaseNS   = "gnsh"
	leaseName = "reboot-slots"
	leasePath = "^/apis/coordination.k8s.io/v1/namespaces/gnsh/leases/reboot-slots$"
)

// rig is a control plane with rbac.yaml applied, the gnsh ServiceAccount's
// kubeconfig, and a fault proxy in front.
type rig struct {
	cp    *controlplane.ControlPlane
	admin kubernetes.Interface
	proxy *faultproxy.Proxy
	// kcs is each node's kubeconfig of the ServiceAccount, through the
	// proxy: a token bound to that node's Node, as the role hands out
	// (the slots Lease policy refuses the writes of any other).
	kcMu    sync.Mutex
	kcs     map[string]string
	history *history
	// auditFrom is where the audit log stood when the test began.
	auditFrom int64
}

func startRig(t *testing.T) *rig {
	t.Helper()
	controlplane.Need(t)
	cp := controlplane.StartWith(t, controlplane.Options{Audit: true})
	r := &rig{cp: cp, admin: client(t, cp.AdminKubeconfig, 30*time.Second)}
	manifest, err := os.ReadFile(filepath.Join("..", "..", "install", "kubernetes", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cp.Kubectl(t, manifest, "apply", "-f", "-")
	r.proxy = faultproxy.ForControlPlane(t, cp)
	r.kcs = map[string]string{}
	r.history = watchHistory(t, r.admin)
	return r
}

func client(t *testing.T, kubeconfig string, timeout time.Duration) kubernetes.Interface {
	t.Helper()
	cfg, err := (&kube.Locator{Timeout: timeout}).RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// node creates a Ready Node with labels and a boot ID.
func (r *rig) node(t *testing.T, name string, labels map[string]string) *corev1.Node {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	n, err := r.admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.nodeToken(t, n)
	return r.setStatus(t, name, true, "boot-1")
}

// nodeToken gives node n its gate kubeconfig: a token of the
// ServiceAccount bound to n's Node for an hour (what `kubectl -n
// kube-system create token gnsh --bound-object-kind Node
// --bound-object-name NAME` asks for), through the proxy. It waits until
// RBAC lets the token read the Lease (the authorizer sees the bindings a
// moment after kubectl apply returns).
func (r *rig) nodeToken(t *testing.T, n *corev1.Node) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	secs := int64(3600)
	tr, err := r.admin.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "gnsh", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token bound to Node %s: %v", n.Name, err)
	}
	kc := r.cp.TokenKubeconfig(t, tr.Status.Token)
	probe := client(t, kc, 5*time.Second)
	for {
		_, err := probe.CoordinationV1().Leases(leaseNS).Get(ctx, leaseName, metav1.GetOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			break
		}
		if !apierrors.IsForbidden(err) || ctx.Err() != nil {
			t.Fatalf("GET the Lease with %s's ServiceAccount token: %v", n.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.kcMu.Lock()
	r.kcs[n.Name] = r.proxy.Kubeconfig(t, kc)
	r.kcMu.Unlock()
}

// setStatus sets the Node's Ready condition and boot ID, as its kubelet
// would.
func (r *rig) setStatus(t *testing.T, name string, ready bool, boot string) *corev1.Node {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	n, err := r.admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "Test",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	n.Status.NodeInfo.BootID = boot
	n, err = r.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *rig) cordon(t *testing.T, name string, on bool) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	n, err := r.admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Unschedulable = on
	if _, err := r.admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// gate is node's gate with gnsh's identity (its node-bound token) through
// the proxy.
func (r *rig) gate(t *testing.T, node string, lim slots.Limits) *slots.Gate {
	t.Helper()
	r.kcMu.Lock()
	kc, ok := r.kcs[node]
	r.kcMu.Unlock()
	if !ok {
		t.Fatalf("no gate token for node %s (made by r.node)", node)
	}
	return &slots.Gate{C: client(t, kc, 5*time.Second), Namespace: leaseNS, Name: leaseName, Limits: lim,
		Renew: time.Second, WarnAfter: time.Hour, APITimeout: 5 * time.Second}
}

// request is n's request for a slot.
func request(n *corev1.Node, wait time.Duration) slots.Request {
	s := slots.StateOf(n)
	return slots.Request{Ask: slots.Ask{Entry: slots.Entry{Node: n.Name, UID: n.UID, Boot: s.Boot, Action: "reboot",
		Who: "root", Since: time.Now(), Renew: 1}}, Self: s, Wait: wait}
}

// history is every version of the Lease an admin's watch delivered.
type history struct {
	mu       sync.Mutex
	versions []slots.Record
}

func watchHistory(t *testing.T, admin kubernetes.Interface) *history {
	h := &history{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := admin.CoordinationV1().Leases(leaseNS).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", leaseName).String()})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if rec, err := slots.Decode(l); err == nil {
				h.mu.Lock()
				h.versions = append(h.versions, rec)
				h.mu.Unlock()
			}
		}
	}()
	return h
}

func (h *history) all() []slots.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slots.Record(nil), h.versions...)
}

func (r *rig) auditSize(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(r.cp.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func (r *rig) auditedVersions(t *testing.T) []slots.Record {
	v, _ := r.audited(t, r.auditFrom)
	return v
}

// audited is every version of the Lease written with success, from the
// audit log from offset on (the answer to each create and update), and
// how many updates the API server refused with 409.
func (r *rig) audited(t *testing.T, from int64) (versions []slots.Record, conflicts int) {
	t.Helper()
	f, err := os.Open(r.cp.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(from, 0); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Stage     string `json:"stage"`
			Verb      string `json:"verb"`
			ObjectRef struct {
				Resource, Namespace, Name string
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			ResponseObject *coordinationv1.Lease `json:"responseObject"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Stage != "ResponseComplete" || ev.ObjectRef.Resource != "leases" || ev.ObjectRef.Namespace != leaseNS ||
			ev.Verb != "update" && ev.Verb != "create" {
			continue
		}
		switch ev.ResponseStatus.Code {
		case 200, 201:
			rec, err := slots.Decode(ev.ResponseObject)
			if err != nil {
				t.Fatal(err)
			}
			versions = append(versions, rec)
		case 409:
			conflicts++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return versions, conflicts
}

// admissions lists the holders in the order they first appear in
// versions, and the largest number of holders of any version.
func admissions(versions []slots.Record) (order []slots.Entry, most int) {
	seen := map[string]bool{}
	for _, v := range versions {
		most = max(most, len(v.Holders))
		for _, h := range v.Holders {
			k := h.Node + "/" + h.Boot
			if !seen[k] {
				seen[k] = true
				order = append(order, h)
			}
		}
	}
	return order, most
}

// heartbeat renews name's kubelet Lease in kube-node-lease every 200 ms,
// as its kubelet would (every 10 s), until the returned stop is called.
func (r *rig) heartbeat(t *testing.T, name string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dur := int32(40)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: slots.NodeLeaseNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &dur}}
	l, err := r.admin.CoordinationV1().Leases(slots.NodeLeaseNamespace).Create(ctxFor(t, time.Minute), l, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			now := metav1.NewMicroTime(time.Now())
			l.Spec.RenewTime = &now
			if nl, err := r.admin.CoordinationV1().Leases(slots.NodeLeaseNamespace).Update(ctx, l, metav1.UpdateOptions{}); err == nil {
				l = nl
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}
