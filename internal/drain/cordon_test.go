package drain

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gnsh/gnsh/internal/drain/draintest"
)

var alice = Ownership{Action: "reboot", User: "alice", TTY: "pts/0", Time: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), BootID: "b1"}

// draintest names gnsh's field manager and annotation without importing
// drain; they must agree.
func TestDraintestAgrees(t *testing.T) {
	if draintest.GnshFieldManager != FieldManager || draintest.CordonAnnotation != CordonAnnotation {
		t.Fatalf("draintest: %q %q, drain: %q %q", draintest.GnshFieldManager, draintest.CordonAnnotation, FieldManager, CordonAnnotation)
	}
}

// cordoned is draintest's fake with node1 as the caller read it: Cordon
// takes the Node, not its name.
func cordoned(t *testing.T, n *corev1.Node) (*draintest.Cluster, *corev1.Node) {
	t.Helper()
	c := draintest.New(n)
	return c, getNode(t, c)
}

func TestCordonOwnership(t *testing.T) {
	ctx := context.Background()
	c, n := cordoned(t, node(false, nil))
	c.ClearActions()
	if ok, err := Cordon(ctx, c, n, alice, nil); !ok || err != nil {
		t.Fatalf("cordon: %v %v", ok, err)
	}
	// Cordon reads nothing: the caller's Node is what it goes by.
	if a := c.Actions(); len(a) != 1 || a[0].GetVerb() != "patch" {
		t.Errorf("Cordon sent %v, want one patch", a)
	}
	n = getNode(t, c)
	if !n.Spec.Unschedulable || Owner(n) == nil || Owner(n).User != "alice" || Owner(n).BootID != "b1" {
		t.Fatalf("node after cordon: %+v %+v %+v", n.Spec, n.Annotations, n.ManagedFields)
	}
	// A second gnsh run finds it cordoned: nothing changes.
	if ok, err := Cordon(ctx, c, n, Ownership{Action: "poweroff"}, nil); ok || err != nil {
		t.Fatalf("second cordon: %v %v", ok, err)
	}
	if o := Owner(getNode(t, c)); o == nil || o.Action != "reboot" {
		t.Fatalf("ownership after a second cordon: %+v", o)
	}
	if ok, err := Uncordon(ctx, c, "node1", Ours, nil); !ok || err != nil {
		t.Fatalf("uncordon ours: %v %v", ok, err)
	}
	n = getNode(t, c)
	if _, ok := n.Annotations[CordonAnnotation]; n.Spec.Unschedulable || ok {
		t.Fatalf("node after uncordon: %+v %+v", n.Spec, n.Annotations)
	}
	wroteAsGnsh(t, c)

	// An admin's cordon: gnsh records nothing and never removes it.
	c, n = cordoned(t, node(true, nil))
	if ok, err := Cordon(ctx, c, n, alice, nil); ok || err != nil {
		t.Fatalf("cordon of a cordoned node: %v %v", ok, err)
	}
	if Owner(getNode(t, c)) != nil {
		t.Fatal("annotation added to an admin's cordon")
	}
	if ok, _ := Uncordon(ctx, c, "node1", Ours, nil); ok || !getNode(t, c).Spec.Unschedulable {
		t.Fatal("an admin's cordon was removed")
	}
	// gnsh uncordon without --only-if-ours behaves like kubectl uncordon.
	if ok, _ := Uncordon(ctx, c, "node1", nil, nil); !ok || getNode(t, c).Spec.Unschedulable {
		t.Fatal("explicit uncordon failed")
	}
	wroteAsGnsh(t, c)
}

// wroteAsGnsh fails t unless every write to a Node passed FieldManager.
func wroteAsGnsh(t *testing.T, c *draintest.Cluster) {
	t.Helper()
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok && p.GetResource().Resource == "nodes" && p.PatchOptions.FieldManager != FieldManager {
			t.Errorf("patch of a Node as field manager %q: %s", p.PatchOptions.FieldManager, p.Patch)
		}
		if v := a.GetVerb(); a.GetResource().Resource == "nodes" && (v == "update" || v == "create") {
			t.Errorf("Node written with %s", v)
		}
	}
}

// After gnsh's cordon, an admin's kubectl uncordon (which keeps the
// annotation) and a later kubectl cordon make the cordon the admin's: gnsh
// must not undo it, and says so.
func TestAdminRecordonIsNotOurs(t *testing.T) {
	ctx := context.Background()
	c, n := cordoned(t, node(false, nil))
	if ok, err := Cordon(ctx, c, n, alice, nil); !ok || err != nil {
		t.Fatalf("cordon: %v %v", ok, err)
	}
	// kubectl cordon of a cordoned node changes nothing: still gnsh's.
	if err := draintest.KubectlCordon(ctx, c, "node1", true); err != nil {
		t.Fatal(err)
	}
	if Owner(getNode(t, c)) == nil {
		t.Fatal("a no-op kubectl cordon took gnsh's cordon")
	}
	for _, u := range []bool{false, true} {
		if err := draintest.KubectlCordon(ctx, c, "node1", u); err != nil {
			t.Fatal(err)
		}
	}
	n = getNode(t, c)
	if _, ok := n.Annotations[CordonAnnotation]; !n.Spec.Unschedulable || !ok {
		t.Fatalf("after kubectl uncordon and cordon: %+v %v", n.Spec, n.Annotations)
	}
	if o := Owner(n); o != nil {
		t.Fatalf("Owner claims the admin's cordon: %+v (managedFields %+v)", o, n.ManagedFields)
	}
	if ok, err := Uncordon(ctx, c, "node1", Ours, nil); ok || err != nil || !getNode(t, c).Spec.Unschedulable {
		t.Fatalf("Uncordon(Ours) of the admin's cordon: %v %v", ok, err)
	}
	if ok, err := Uncordon(ctx, c, "node1", nil, nil); !ok || err != nil {
		t.Fatalf("Uncordon(nil): %v %v", ok, err)
	}
	n = getNode(t, c)
	if _, ok := n.Annotations[CordonAnnotation]; n.Spec.Unschedulable || ok {
		t.Fatalf("after Uncordon(nil): %+v %v", n.Spec, n.Annotations)
	}
}

func TestOwner(t *testing.T) {
	own, _ := json.Marshal(alice)
	gnsh := draintest.GnshCordonFields()
	kubectl := metav1.ManagedFieldsEntry{Manager: "kubectl-cordon", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:unschedulable":{}}}`)}}
	gnshAnnotationOnly := gnsh
	gnshAnnotationOnly.FieldsV1 = &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:gnsh.io/cordoned":{}}}}`)}
	gnshStatus := gnsh
	gnshStatus.Subresource = "status"
	mk := func(unschedulable bool, ann string, mf ...metav1.ManagedFieldsEntry) *corev1.Node {
		n := node(unschedulable, map[string]string{CordonAnnotation: ann})
		n.ManagedFields = mf
		return n
	}
	for _, tt := range []struct {
		name string
		n    *corev1.Node
		ours bool
	}{
		{"gnsh's cordon", mk(true, string(own), gnsh), true},
		{"and others' fields", mk(true, string(own), kubectl, gnsh), true},
		{"uncordoned", mk(false, string(own), gnsh), false},
		{"no annotation", func() *corev1.Node { n := mk(true, "", gnsh); n.Annotations = nil; return n }(), false},
		{"unreadable annotation", mk(true, "{not json", gnsh), false},
		{"no managedFields", mk(true, string(own)), false},
		{"kubectl's cordon", mk(true, string(own), kubectl, gnshAnnotationOnly), false},
		{"gnsh manages only status", mk(true, string(own), gnshStatus), false},
		{"nil", nil, false},
	} {
		if got := Owner(tt.n); (got != nil) != tt.ours {
			t.Errorf("%s: Owner = %+v, want ours=%v", tt.name, got, tt.ours)
		} else if got != nil && got.User != "alice" {
			t.Errorf("%s: Owner = %+v", tt.name, got)
		}
	}
}

func TestUncordonOnly(t *testing.T) {
	ctx := context.Background()
	when := time.Date(2026, 11, 21, 11, 0, 0, 0, time.UTC)
	scheduled := alice
	scheduled.When = &when
	forSchedules := Only(func(o *Ownership) bool { return o.When != nil })

	c, n := cordoned(t, node(false, nil))
	if _, err := Cordon(ctx, c, n, alice, nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := Uncordon(ctx, c, "node1", forSchedules, nil); ok || err != nil || Owner(getNode(t, c)) == nil {
		t.Fatalf("Uncordon(for schedules) of an immediate reboot's cordon: %v %v", ok, err)
	}
	c, n = cordoned(t, node(false, nil))
	if _, err := Cordon(ctx, c, n, scheduled, nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := Uncordon(ctx, c, "node1", forSchedules, nil); !ok || err != nil || getNode(t, c).Spec.Unschedulable {
		t.Fatalf("Uncordon(for schedules) of a schedule's cordon: %v %v", ok, err)
	}
}

// Someone uncordoned; gnsh's annotation is left over: whatever only says,
// it goes, and the node stays schedulable.
func TestUncordonStaleAnnotation(t *testing.T) {
	for _, only := range []Only{nil, Ours} {
		c, _ := cordoned(t, node(false, map[string]string{CordonAnnotation: `{"action":"reboot"}`}))
		if ok, err := Uncordon(context.Background(), c, "node1", only, nil); ok || err != nil {
			t.Fatalf("%v %v", ok, err)
		}
		n := getNode(t, c)
		if _, ok := n.Annotations[CordonAnnotation]; ok || n.Spec.Unschedulable {
			t.Fatalf("stale annotation not cleared: %+v %v", n.Spec, n.Annotations)
		}
		wroteAsGnsh(t, c)
	}
}

// A patch that meets a newer Node (409) is retried on a fresh read, and a
// cordon someone made in between is left alone.
func TestCordonConflict(t *testing.T) {
	ctx := context.Background()
	conflictOnce := func(c *draintest.Cluster, meanwhile func()) {
		done := false
		c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if done {
				return false, nil, nil
			}
			done = true
			if meanwhile != nil {
				meanwhile()
			}
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "node1", nil)
		})
	}
	c, n := cordoned(t, node(false, nil))
	conflictOnce(c, nil)
	if ok, err := Cordon(ctx, c, n, alice, nil); !ok || err != nil || Owner(getNode(t, c)) == nil {
		t.Fatalf("cordon after a conflict: %v %v", ok, err)
	}
	c, n = cordoned(t, node(false, nil))
	conflictOnce(c, func() {
		// An admin's cordon in between (from inside a reactor: through the
		// tracker, the clientset is locked).
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
		o, err := c.Tracker().Get(gvr, "", "node1")
		if err != nil {
			t.Error(err)
			return
		}
		n := o.(*corev1.Node).DeepCopy()
		n.Spec.Unschedulable = true
		if err := c.Tracker().Update(gvr, n, "", metav1.UpdateOptions{FieldManager: draintest.KubectlFieldManager}); err != nil {
			t.Error(err)
		}
	})
	if ok, err := Cordon(ctx, c, n, alice, nil); ok || err != nil || Owner(getNode(t, c)) != nil || !getNode(t, c).Spec.Unschedulable {
		t.Fatalf("cordon racing an admin's: %v %v", ok, err)
	}
	// Conflicts without end: an error after the retries.
	c, n = cordoned(t, node(false, nil))
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "node1", nil)
	})
	if ok, err := Cordon(ctx, c, n, alice, nil); ok || !apierrors.IsConflict(err) {
		t.Fatalf("endless conflicts: %v %v", ok, err)
	}
}

// fake.NewClientset records managedFields for a strategic-merge patch with
// a field manager, as the API server does; draintest relies on it.
func TestFakeRecordsManagedFields(t *testing.T) {
	c := fake.NewClientset(node(false, nil))
	n := getNode(t, c)
	if _, err := Cordon(context.Background(), c, n, alice, nil); err != nil {
		t.Fatal(err)
	}
	if n := getNode(t, c); !managesUnschedulable(n.ManagedFields, FieldManager) {
		t.Fatalf("managedFields %+v", n.ManagedFields)
	}
}

// A Check that refuses the Node (another machine's) stops every write
// before its patch, with the check's error as it is.
func TestCheckRefusesEveryWrite(t *testing.T) {
	ctx := context.Background()
	refuse := errors.New("the Node node1 in the cluster is not this machine")
	no := func(*corev1.Node) error { return refuse }
	c, n := cordoned(t, node(false, nil))
	if ok, err := Cordon(ctx, c, n, alice, no); ok || !errors.Is(err, refuse) {
		t.Errorf("Cordon: %v %v", ok, err)
	}
	if _, err := Cordon(ctx, c, n, alice, nil); err != nil {
		t.Fatal(err)
	}
	n = getNode(t, c)
	if ok, err := Adopt(ctx, c, n, Ownership{Action: "drain", BootID: "b2"}, no); ok || !errors.Is(err, refuse) {
		t.Errorf("Adopt: %v %v", ok, err)
	}
	if ok, err := GiveBack(ctx, c, "node1", Ours, "{}", no); ok || !errors.Is(err, refuse) {
		t.Errorf("GiveBack: %v %v", ok, err)
	}
	if ok, err := Uncordon(ctx, c, "node1", Ours, no); ok || !errors.Is(err, refuse) {
		t.Errorf("Uncordon: %v %v", ok, err)
	}
	if ok, err := Uncordon(ctx, c, "node1", nil, no); ok || !errors.Is(err, refuse) {
		t.Errorf("Uncordon (any): %v %v", ok, err)
	}
	if p := c.Requests("patch", "nodes"); p != 1 {
		t.Errorf("%d patches, want only the unchecked cordon's", p)
	}
}
