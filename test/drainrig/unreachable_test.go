package drainrig_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/drain"
	"github.com/gnsh/gnsh/internal/kube"
)

// f. The API server is lost after the evictions were accepted, while the
// evicted pods still run out their 60 s grace period: the drain ends with
// *drain.UnreachableError soon after UnreachableAfter, long before its
// Timeout, so that the node still reboots. First the apiserver hangs
// (SIGSTOP: connections are accepted, nothing is answered), then, on
// another node, it dies (SIGKILL: connections are refused). Its own control
// plane, since it stops it.
func TestAPIServerLostMidDrain(t *testing.T) {
	t.Parallel()
	r := startRig(t, "hang", "die")
	pid := r.cp.PIDs()["kube-apiserver"]
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if pid == 0 || err != nil || !strings.Contains(string(cmdline), "kube-apiserver") || !strings.Contains(string(cmdline), r.cp.Dir) {
		t.Fatalf("kube-apiserver pid %d: %q %v", pid, cmdline, err)
	}
	t.Run("Hangs", func(t *testing.T) {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		// Each failure is only seen when a request times out (5 s): the
		// watch stream is cut by the client timeout, the re-list times out
		// (unreachable since then), one more watch and list round later it
		// has been more than UnreachableAfter: about 21 s in all. Before
		// internal/drain turned off client-go's watch retries it took 45 s.
		lostMidDrain(t, r, "hang", func() error { return syscall.Kill(pid, syscall.SIGSTOP) }, 35*time.Second)
	})
	if t.Failed() {
		return
	}
	// The apiserver answers again after SIGCONT.
	if _, err := r.admin.CoreV1().Nodes().Get(ctxFor(t, time.Minute), "hang", metav1.GetOptions{}); err != nil {
		t.Fatalf("after SIGCONT: %v", err)
	}
	t.Run("Dies", func(t *testing.T) {
		lostMidDrain(t, r, "die", func() error { return syscall.Kill(pid, syscall.SIGKILL) }, 15*time.Second)
	})
}

func lostMidDrain(t *testing.T, r *rig, node string, lose func() error, within time.Duration) {
	ns := node
	r.fakeNode(t, node)
	r.namespace(t, ns)
	rs := r.replicaSet(t, ns, "web", 4)
	for i := range 4 {
		p := newPod(ns, fmt.Sprintf("web-%d", i), node, rs, "ReplicaSet")
		grace := int64(60)
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Annotations["pod-delete.stage.kwok.x-k8s.io/delay"] = "60s" // kwok: the whole grace period
		r.createPod(t, r.admin, p)
	}
	r.waitPods(t, node, 4, nil)

	_, c := r.nodeClient(t, node, nil)
	ctx := ctxFor(t, 2*time.Minute)
	if ok, err := cordon(ctx, t, c, node, owner(t)); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	evicted := make(chan struct{})
	var once sync.Once
	type result struct {
		res *drain.Result
		err error
	}
	done := make(chan result, 1)
	const timeout, unreachableAfter = 90 * time.Second, 2 * time.Second
	go func() {
		res, err := drain.Drain(ctx, c, drain.Options{Node: node, Timeout: timeout, UnreachableAfter: unreachableAfter,
			Progress: func(s drain.Status) {
				if s.Total > 0 && s.Evicted == s.Total {
					once.Do(func() { close(evicted) })
				}
			}})
		done <- result{res, err}
	}()
	select {
	case <-evicted:
	case res := <-done:
		t.Fatalf("drain ended before the evictions were accepted: %v", res.err)
	case <-time.After(time.Minute):
		t.Fatal("evictions not accepted within a minute")
	}
	for _, p := range r.waitPods(t, node, 4, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil }) {
		if p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 60 {
			t.Fatalf("%s: deletion grace %v, want 60", p.Name, p.DeletionGracePeriodSeconds)
		}
	}

	lost := time.Now()
	if err := lose(); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(timeout):
		t.Fatal("drain still running a full Timeout after the API server was lost")
	}
	took := time.Since(lost)
	t.Logf("drain ended %v after the API server was lost: %v", took.Round(time.Millisecond), res.err)
	var ue *drain.UnreachableError
	if !errors.As(res.err, &ue) || !drain.IsUnreachable(res.err) {
		t.Fatalf("Drain: %v (%T), want *drain.UnreachableError", res.err, res.err)
	}
	if ue.For < unreachableAfter {
		t.Errorf("gave up after %v unreachable, UnreachableAfter %v", ue.For, unreachableAfter)
	}
	if took > within {
		t.Errorf("gave up %v after the API server was lost (UnreachableAfter %v, Timeout %v)", took, unreachableAfter, timeout)
	}
	if res.res == nil || res.res.Status.Evicted != 4 || res.res.Status.Gone != 0 {
		t.Errorf("result %+v", res.res)
	}
}

// f. The API server is down when gnsh starts: a closed port answers at
// once, a server that accepts but never answers within the request timeout
// (kube.DefaultConnectTimeout). Both are "unreachable", so gnsh hands the
// shutdown off instead of refusing it. No control plane needed.
func TestAPIServerDownAtStart(t *testing.T) {
	t.Parallel()
	refused := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	silent := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var conns []net.Conn
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c) // held open, never answered
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			l.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
		return l.Addr().String()
	}
	for _, tc := range []struct {
		name   string
		server func(*testing.T) string
		min    time.Duration // the request timeout must be what ended it
	}{
		{"Refused", refused, 0},
		{"Silent", silent, kube.DefaultConnectTimeout},
	} {
		for _, op := range []struct {
			name string
			fn   func(context.Context, *testing.T, string) error
		}{
			{"Cordon", func(ctx context.Context, t *testing.T, kc string) error {
				_, c := client(t, kc, nil)
				// gnsh reads the Node, then cordons it.
				_, err := cordon(ctx, t, c, "node1", drain.Ownership{Action: "reboot"})
				return err
			}},
			{"ListNodePods", func(ctx context.Context, t *testing.T, kc string) error {
				_, c := client(t, kc, nil)
				_, _, err := drain.ListNodePods(ctx, c, "node1")
				return err
			}},
			{"Drain", func(ctx context.Context, t *testing.T, kc string) error {
				_, c := client(t, kc, nil)
				_, err := drain.Drain(ctx, c, drain.Options{Node: "node1", Timeout: time.Minute})
				var ue *drain.UnreachableError
				if err != nil && !errors.As(err, &ue) {
					t.Errorf("Drain: %v (%T), want *drain.UnreachableError", err, err)
				}
				return err
			}},
		} {
			t.Run(tc.name+"/"+op.name, func(t *testing.T) {
				t.Parallel()
				kc := writeKubeconfig(t, "https://"+tc.server(t))
				start := time.Now()
				err := op.fn(ctxFor(t, time.Minute), t, kc)
				took := time.Since(start)
				t.Logf("after %v: %v", took.Round(time.Millisecond), err)
				if !drain.IsUnreachable(err) {
					t.Fatalf("%s: %v, want an unreachable error", op.name, err)
				}
				if took < tc.min || took > kube.DefaultConnectTimeout+3*time.Second {
					t.Errorf("%s gave up after %v (request timeout %v)", op.name, took, kube.DefaultConnectTimeout)
				}
			})
		}
	}
}

// writeKubeconfig writes a token kubeconfig for server (no TLS verification:
// these servers never get as far as a certificate).
func writeKubeconfig(t *testing.T, server string) string {
	f := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: not-a-real-token
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, server)
	if err := os.WriteFile(f, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
