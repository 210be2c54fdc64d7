package drain

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
)

// podFaults makes the fake API server's pod list and watch fail with an
// error while one is set; setting one ends the watches open then, as a
// load balancer losing its backends would.
type podFaults struct {
	mu      sync.Mutex
	err     error
	failed  int // lists and watches failed
	watches []watch.Interface
}

func (f *podFaults) install(cl *cluster) {
	cl.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.err != nil {
			f.failed++
			return true, nil, f.err
		}
		return false, nil, nil
	})
	cl.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.err != nil {
			f.failed++
			return true, nil, f.err
		}
		w, err := cl.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(k8stesting.WatchActionImpl).ListOptions)
		if err == nil {
			f.watches = append(f.watches, w)
		}
		return true, w, err
	})
}

func (f *podFaults) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
	if err != nil {
		for _, w := range f.watches {
			w.Stop()
		}
		f.watches = nil
	}
}

func (f *podFaults) failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// whenEvicted calls fn once, from Progress, when every eviction is
// accepted.
func whenEvicted(fn func()) func(Status) {
	var once sync.Once
	return func(s Status) {
		if s.Total > 0 && s.Evicted == s.Total {
			once.Do(fn)
		}
	}
}

func unavailable() error {
	return apierrors.NewServiceUnavailable("no endpoints available for service \"kubernetes\"")
}

// Once the evictions are in, the pod list and watch answer 503 (or 500,
// or 429): after UnreachableAfter of that, *UnreachableError saying what
// it saw, long before the Timeout.
func TestDrainServerFailingMidDrain(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{unavailable(), "503 Service Unavailable: "},
		{apierrors.NewInternalError(errors.New("etcdserver: no leader")), "500 Internal Server Error: "},
		{apierrors.NewTooManyRequests("too many requests, please try again later", 1), "429 Too Many Requests: "},
		{apierrors.NewGenericServerResponse(http.StatusBadGateway, "get", schema.GroupResource{Resource: "pods"}, "", "", 0, true), "502 Bad Gateway: "},
	} {
		t.Run(tc.want[:3], func(t *testing.T) {
			cl := newCluster(pod("web-1"), pod("web-2"))
			cl.Stick("web-1", "web-2") // still terminating: the drain keeps watching
			var f podFaults
			f.install(cl)
			d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute,
				Progress: whenEvicted(func() { f.set(tc.err) })}, 100*time.Millisecond, nil)
			var ue *UnreachableError
			if !errors.As(d.err, &ue) || !IsAPIFailure(d.err) {
				t.Fatalf("err %v (%T), want *UnreachableError", d.err, d.err)
			}
			if ue.For < DefaultUnreachableAfter || d.took > DefaultUnreachableAfter+10*time.Second {
				t.Errorf("gave up after %v failing, %v in all (UnreachableAfter %v)", ue.For, d.took, DefaultUnreachableAfter)
			}
			if msg := ue.Error(); !strings.HasPrefix(msg, "API server failing for 1") || !strings.Contains(msg, tc.want) {
				t.Errorf("message %q, want %q", msg, tc.want)
			}
			if d.res == nil || d.res.Status.Evicted != 2 {
				t.Errorf("result %+v", d.res)
			}
			if f.failures() < 4 {
				t.Errorf("%d failed requests: the watcher gave up too soon", f.failures())
			}
		})
	}
}

// 503 for a moment, shorter than UnreachableAfter, then the pods go: the
// drain carries on and finishes.
func TestDrainServerFailsBriefly(t *testing.T) {
	cl := newCluster(pod("web-1"), pod("web-2"))
	cl.Stick("web-1", "web-2")
	var f podFaults
	f.install(cl)
	failingSince, clearedAt, deleted := time.Duration(-1), time.Duration(-1), false
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute,
		Progress: whenEvicted(func() { f.set(unavailable()) })}, 100*time.Millisecond,
		func(now time.Duration) {
			switch {
			case failingSince < 0 && f.failures() > 0:
				failingSince = now
			case failingSince >= 0 && clearedAt < 0 && now-failingSince > DefaultUnreachableAfter/2:
				f.set(nil) // answers again
				clearedAt = now
			case clearedAt >= 0 && now-clearedAt >= 3*time.Second && !deleted:
				// The kubelet finishes the pods, once the drain watches again.
				deleted = true
				for _, n := range []string{"web-1", "web-2"} {
					_ = cl.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "app", n)
				}
			}
		})
	if d.err != nil {
		t.Fatalf("Drain: %v", d.err)
	}
	if s := d.res.Status; s.Gone != 2 || f.failures() < 2 {
		t.Fatalf("status %+v after %d failures", s, f.failures())
	}
}

// Every eviction answered 500 (not the budgets' 500) while the pod list and
// watch work: the evictions' own run of failures ends the drain.
func TestDrainEvictionsFailing(t *testing.T) {
	cl := newCluster(pod("web-1"), pod("web-2"))
	cl.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	})
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute}, 100*time.Millisecond, nil)
	var ue *UnreachableError
	if !errors.As(d.err, &ue) || !strings.Contains(ue.Error(), "500 Internal Server Error") {
		t.Fatalf("err %v (%T), want *UnreachableError", d.err, d.err)
	}
	if d.took > DefaultUnreachableAfter+2*DefaultMaxRetryDelay {
		t.Errorf("gave up after %v", d.took)
	}
}

// A pod under two PodDisruptionBudgets: its eviction gets a 500 saying so.
// That is a refusal (blocked, retried), not a failing server.
func TestDrainMultiplePDBs(t *testing.T) {
	cl := newCluster(pod("web-1"), pod("db-0"))
	cl.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name != "db-0" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewInternalError(errors.New("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
	})
	n := 0
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 30 * time.Second, UnreachableAfter: 2 * time.Second,
		Progress: func(s Status) { n = max(n, s.Blocked) }}, 100*time.Millisecond, nil)
	var be *BlockedError
	if !errors.As(d.err, &be) || IsAPIFailure(d.err) {
		t.Fatalf("err %v (%T), want *BlockedError", d.err, d.err)
	}
	if len(be.Blocked) != 1 || be.Blocked[0].Pod != "app/db-0" || !strings.Contains(be.Blocked[0].Reason, "more than one PodDisruptionBudget") {
		t.Fatalf("blocked %+v", be.Blocked)
	}
	if d.took < 30*time.Second || n != 1 {
		t.Errorf("ended after %v; blocked %d", d.took, n)
	}
}

// An eviction answered 401, or 403 (not a terminating namespace), ends the
// drain at once with an error for which IsAPIFailure is true.
func TestDrainEvictionDenied(t *testing.T) {
	for _, err := range []error{
		apierrors.NewUnauthorized("Unauthorized"),
		apierrors.NewForbidden(schema.GroupResource{Resource: "pods/eviction"}, "web-1", errors.New(`User "system:node:node1" cannot create resource "pods/eviction"`)),
	} {
		t.Run(fmt.Sprint(statusCode(err)), func(t *testing.T) {
			cl := newCluster(pod("web-1"), pod("web-2"))
			cl.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
			d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute}, 100*time.Millisecond, nil)
			var be *BlockedError
			var ue *UnreachableError
			if d.err == nil || errors.As(d.err, &be) || errors.As(d.err, &ue) || !IsAPIFailure(d.err) || statusCode(d.err) != statusCode(err) {
				t.Fatalf("err %v (%T), want the %d", d.err, d.err, statusCode(err))
			}
			if d.took > time.Second {
				t.Errorf("ended after %v", d.took)
			}
		})
	}
	// A terminating namespace's 403 is retried, as kubectl does.
	cl := newCluster(pod("web-1"))
	var tries int
	cl.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if tries++; tries > 2 {
			return false, nil, nil
		}
		err := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web-1", errors.New("namespace app is being terminated"))
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
		return true, nil, err
	})
	if d := fakeDrain(t, cl, Options{Node: "node1", Timeout: time.Minute}, 100*time.Millisecond, nil); d.err != nil || tries != 3 {
		t.Fatalf("namespace terminating: %v after %d tries", d.err, tries)
	}
}

func TestIsAPIFailure(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&url.Error{Op: "Get", URL: "x", Err: syscall.ECONNREFUSED}, true},
		{&UnreachableError{For: time.Minute, Err: unavailable()}, true},
		{fmt.Errorf("cordon node1: %w", apierrors.NewUnauthorized("Unauthorized")), true},
		{fmt.Errorf("cordon node1: %w", apierrors.NewForbidden(gr, "node1", errors.New("no"))), true},
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewInternalError(errors.New("boom")), true},
		{unavailable(), true},
		{apierrors.NewGenericServerResponse(599, "get", gr, "node1", "", 0, true), true},
		{apierrors.NewNotFound(gr, "node1"), false},
		{apierrors.NewConflict(gr, "node1", errors.New("changed")), false},
		{apierrors.NewBadRequest("bad"), false},
		{&BlockedError{Node: "node1"}, false},
		{&NodeNotReadyError{Node: "node1"}, false},
		{context.Canceled, false},
		{errors.New("something"), false},
		{nil, false},
	} {
		if got := IsAPIFailure(c.err); got != c.want {
			t.Errorf("IsAPIFailure(%v) = %v", c.err, got)
		}
	}
}

func TestUnreachableErrorMessage(t *testing.T) {
	for _, c := range []struct {
		err  *UnreachableError
		want string
	}{
		{&UnreachableError{For: 10 * time.Second, Err: &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api/v1/pods", Err: syscall.ECONNREFUSED}},
			`API server unreachable for 10s: Get "https://10.0.0.1:6443/api/v1/pods": connection refused`},
		{&UnreachableError{For: 10400 * time.Millisecond, Err: fmt.Errorf("list pods on node1: %w", unavailable())},
			`API server failing for 10s: 503 Service Unavailable: list pods on node1: no endpoints available for service "kubernetes"`},
		{&UnreachableError{Err: syscall.ECONNREFUSED}, "API server unreachable: connection refused"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}

// An API server shedding load answers every eviction 429 without the
// DisruptionBudget cause (API Priority and Fairness, a rate-limiting
// proxy): that is a failing server, counted toward UnreachableAfter, not a
// PodDisruptionBudget's refusal that would hold the reboot for the whole
// Timeout and then refuse it.
func TestDrainEvictionsShedFor429(t *testing.T) {
	cl := newCluster(pod("web-1"), pod("web-2"))
	shed := apierrors.NewTooManyRequests("too many requests, please try again later", 1)
	cl.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "eviction", nil, shed
	})
	d := fakeDrain(t, cl, Options{Node: "node1", Timeout: 5 * time.Minute, RetryDelay: 100 * time.Millisecond,
		MaxRetryDelay: time.Second}, 100*time.Millisecond, nil)
	var ue *UnreachableError
	if !errors.As(d.err, &ue) || !IsAPIFailure(d.err) {
		t.Fatalf("err %v (%T), want *UnreachableError", d.err, d.err)
	}
	if errors.As(d.err, new(*BlockedError)) {
		t.Fatalf("err %v: a 429 without the DisruptionBudget cause taken for a budget", d.err)
	}
	if ue.For < DefaultUnreachableAfter || d.took > DefaultUnreachableAfter+10*time.Second {
		t.Errorf("gave up after %v failing, %v in all (UnreachableAfter %v)", ue.For, d.took, DefaultUnreachableAfter)
	}
	if msg := ue.Error(); !strings.Contains(msg, "429 Too Many Requests") {
		t.Errorf("message %q, want the 429", msg)
	}
}

// The eviction subresource also refuses with 403 and the DisruptionBudget
// cause while a budget's status is off (disruptionsAllowed negative, too
// many evictions the disruption controller has not confirmed): that is the
// budget's refusal, retried, never an identity that may not evict.
func TestClassifyEvictionBudgetCause(t *testing.T) {
	p := &Pod{Pod: *pod("db-0")}
	budget := func(err *apierrors.StatusError, msg string) error {
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: msg})
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want evictResult
		pdb  string
	}{
		{"429 budget", budget(apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0),
			"The disruption budget db-pdb needs 3 healthy pods and has 3 currently"), evictRefused, "db-pdb"},
		{"429 budget in processing", budget(apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10),
			"The disruption budget db-pdb is still being processed by the server."), evictRefused, "db-pdb"},
		{"403 budget negative", budget(apierrors.NewForbidden(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudget"}, "db-pdb",
			errors.New("pdb disruptions allowed is negative")),
			"The disruption budget db-pdb does not allow evicting pods currently: pdb disruptions allowed is negative"), evictRefused, "db-pdb"},
		{"429 shedding", apierrors.NewTooManyRequests("too many requests, please try again later", 1), evictServerFailing, ""},
		{"403 identity", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "db-0", errors.New("no")), evictFailed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := classifyEviction(context.Background(), p, tc.err)
			if o.result != tc.want {
				t.Fatalf("result %d, want %d (%v)", o.result, tc.want, tc.err)
			}
			if tc.pdb != "" && (o.blocked == nil || o.blocked.PDB != tc.pdb) {
				t.Fatalf("blocked %+v, want PodDisruptionBudget %s", o.blocked, tc.pdb)
			}
		})
	}
}

// The 403s the eviction subresource answers while a budget's status is
// off name the poddisruptionbudget, with the DisruptionBudget cause (1.37),
// another cause, or none (older API servers): each is the budget's refusal,
// retried, not an identity that may not evict.
func TestClassifyBudget403sOfEveryVersion(t *testing.T) {
	p := &Pod{Pod: *pod("db-0")}
	gr := schema.GroupResource{Group: "policy", Resource: "poddisruptionbudget"}
	none := apierrors.NewForbidden(gr, "db-pdb", errors.New("pdb disruptions allowed is negative"))
	other := apierrors.NewForbidden(gr, "db-pdb", errors.New("pdb disruptions allowed is negative"))
	other.ErrStatus.Details.Causes = append(other.ErrStatus.Details.Causes, metav1.StatusCause{Type: "DisruptionBudgetNegativeAllowedDisruptions"})
	for name, err := range map[string]error{"no cause": none, "another cause": other} {
		if o := classifyEviction(context.Background(), p, err); o.result != evictRefused || o.blocked == nil || o.blocked.PDB != "db-pdb" {
			t.Errorf("%s: result %d, blocked %+v", name, o.result, o.blocked)
		}
	}
}
