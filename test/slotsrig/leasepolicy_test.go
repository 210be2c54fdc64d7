package slotsrig_test

// gnsh-slots-lease (install/kubernetes/rbac.yaml) lets only a node-bound
// token of gnsh write the slots Lease: an unbound one (an earlier
// release's year-long token, a plain `kubectl create token gnsh`) may no
// longer write a record that makes every node's gate refuse.

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/gatetoken"
	"github.com/gnsh/gnsh/internal/slots"
)

func TestSlotsLeaseOnlyNodeBoundTokens(t *testing.T) {
	r := startTokenRig(t)
	r.makeNode(t, "n1")
	n2 := r.makeNode(t, "n2")
	year := r.boundToken(t, "", 8760*time.Hour)
	if yc, err := gatetoken.ParseClaims(year); err != nil || yc.NodeName != "" {
		t.Fatalf("the unbound token: %+v %v", yc, err)
	}
	unbound := client(t, r.cp.TokenKubeconfig(t, year), 10*time.Second).CoordinationV1().Leases(leaseNS)
	n1 := client(t, r.cp.TokenKubeconfig(t, r.boundToken(t, "n1", time.Hour)), 10*time.Second).CoordinationV1().Leases(leaseNS)

	// n1's node-bound token creates the Lease (once RBAC and the policy
	// are in force).
	waitFor(t, "the Lease created by n1's node-bound token", func() (bool, error) {
		_, err := n1.Create(ctxFor(t, 30*time.Second), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName}}, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), err
	})
	// The unbound token's broken record is refused, naming the fix.
	const why = "gnsh: the gnsh ServiceAccount writes the slots Lease only with a token bound to a Node"
	var err error
	waitFor(t, "the unbound token's broken record refused", func() (bool, error) {
		l, gerr := unbound.Get(ctxFor(t, 30*time.Second), leaseName, metav1.GetOptions{})
		if gerr != nil {
			return false, gerr
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[slots.Annotation] = "{"
		_, err = unbound.Update(ctxFor(t, 30*time.Second), l, metav1.UpdateOptions{})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), why), err
	})
	if !strings.Contains(err.Error(), "gnsh token install") || !strings.Contains(err.Error(), "--bound-object-kind Node") {
		t.Errorf("the refusal does not name the fix: %v", err)
	}
	t.Logf("the unbound token's update: %v", err)
	// Nor may it create the Lease afresh (after an admin's reset).
	if err := r.admin.CoordinationV1().Leases(leaseNS).Delete(ctxFor(t, 30*time.Second), leaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = unbound.Create(ctxFor(t, 30*time.Second), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), why) {
		t.Fatalf("the unbound token's create: %v, want 403 saying %q", err, why)
	}

	// n2's gate, with n2's own node-bound token, creates the Lease and
	// takes a slot (n1, never Ready here, counts as one out).
	g := &slots.Gate{C: client(t, r.cp.TokenKubeconfig(t, r.boundToken(t, "n2", time.Hour)), 10*time.Second),
		Namespace: leaseNS, Name: leaseName, Limits: slots.Limits{Max: 2}, Renew: time.Second, WarnAfter: time.Hour,
		APITimeout: 5 * time.Second}
	s, _, err := g.Acquire(ctxFor(t, time.Minute), request(n2, 3*time.Second))
	if err != nil {
		t.Fatalf("n2's gate with its node-bound token: %v", err)
	}
	s.Halt()
}
