package slotsrig_test

// The gate's short-lived, node-bound token (issue 22, item 3) on the real
// API server: install/kubernetes/rbac.yaml (its gnsh:token Role and the
// gnsh-token ValidatingAdmissionPolicy) applied, a token bound to a Node
// renewed by the node agent's own code (internal/gatetoken), the policy's
// refusals, and a deleted Node's token refused.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gnsh/gnsh/internal/gatetoken"
	"github.com/gnsh/gnsh/internal/slots"
	"github.com/gnsh/gnsh/test/internal/controlplane"
)

type tokenRig struct {
	cp    *controlplane.ControlPlane
	admin kubernetes.Interface
}

func startTokenRig(t *testing.T) *tokenRig {
	t.Helper()
	controlplane.Need(t)
	cp := controlplane.Start(t)
	r := &tokenRig{cp: cp, admin: client(t, cp.AdminKubeconfig, 30*time.Second)}
	// ValidatingAdmissionPolicy is served (admissionregistration.k8s.io/v1).
	if out := cp.Kubectl(t, nil, "api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name"); !strings.Contains(out, "validatingadmissionpolicies") {
		t.Fatalf("the API server serves no ValidatingAdmissionPolicy: %s", out)
	}
	manifest, err := os.ReadFile(filepath.Join("..", "..", "install", "kubernetes", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cp.Kubectl(t, manifest, "apply", "-f", "-")
	return r
}

func (r *tokenRig) makeNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := r.admin.CoreV1().Nodes().Create(ctxFor(t, time.Minute), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// boundToken is an admin's `kubectl create token gnsh` bound to node (none
// if ""), for d.
func (r *tokenRig) boundToken(t *testing.T, node string, d time.Duration) string {
	t.Helper()
	args := []string{"-n", "kube-system", "create", "token", "gnsh", "--duration=" + d.String()}
	if node != "" {
		args = append(args, "--bound-object-kind=Node", "--bound-object-name="+node)
	}
	return strings.TrimSpace(r.cp.Kubectl(t, nil, args...))
}

// credential is the credential ID the API server sees for c's token
// (SelfSubjectReview: JTI=...).
func credential(t *testing.T, c kubernetes.Interface) (user string, jti string, err error) {
	t.Helper()
	ssr, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctxFor(t, 30*time.Second), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", "", err
	}
	u := ssr.Status.UserInfo
	return u.Username, strings.Join(u.Extra["authentication.kubernetes.io/credential-id"], ","), nil
}

// waitFor retries f until it says done, for at most a minute (RBAC and
// admission policies take effect a moment after kubectl apply returns).
func waitFor(t *testing.T, what string, f func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		done, err := f()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestTokenRenewedByAgentCode(t *testing.T) {
	r := startTokenRig(t)
	n1 := r.makeNode(t, "n1")
	token := r.boundToken(t, "n1", 10*time.Minute)
	kc := r.cp.TokenKubeconfig(t, token)
	old, err := gatetoken.ParseClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	if old.NodeName != "n1" || old.NodeUID != string(n1.UID) || old.Life() != 10*time.Minute {
		t.Fatalf("the admin's token: %+v (Node UID %s)", old, n1.UID)
	}
	// A long-lived client built before the renewal, as the agent's slot
	// keeper is.
	before := client(t, kc, 10*time.Second)
	_, jti0, err := credential(t, before)
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	var st gatetoken.State
	rn := &gatetoken.Renewer{Path: kc, Every: time.Second, Say: func(l string) { said = append(said, l) }, Record: func(s gatetoken.State) { st = s }}
	// The policy takes effect a moment after kubectl apply: renew until
	// the first renewal is through (each try is the agent's first look).
	time.Sleep(1100 * time.Millisecond) // the new token's iat must differ
	waitFor(t, "the agent's renewal", func() (bool, error) {
		rn.Once(context.Background())
		return st.Error == "" && !st.Renewed.IsZero(), errString(st.Error)
	})
	k, err := gatetoken.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := gatetoken.ParseClaims(k.Token())
	if err != nil {
		t.Fatal(err)
	}
	if k.Token() == token || nc.NodeName != "n1" || nc.NodeUID != string(n1.UID) || nc.Life() != 10*time.Minute || !nc.Expiry.After(old.Expiry) {
		t.Fatalf("renewed token %+v, old %+v", nc, old)
	}
	if fi, err := os.Stat(kc); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig after renewal: %v %v", fi.Mode(), err)
	}
	// The client built before the renewal now sends the new token.
	user, jti1, err := credential(t, before)
	if err != nil {
		t.Fatal(err)
	}
	if user != gatetoken.Username || jti1 == jti0 || jti1 == "" {
		t.Fatalf("after renewal the old client is %s with %q (before %q)", user, jti1, jti0)
	}
	// The new token works for the gate's work.
	if _, err := before.CoreV1().Nodes().List(ctxFor(t, 30*time.Second), metav1.ListOptions{}); err != nil {
		t.Fatalf("list Nodes with the renewed token: %v", err)
	}
	if len(said) != 0 {
		// Failures while the policy came into force are said; the last
		// state is what counts.
		t.Logf("said while the policy settled: %q", said)
	}
}

func errString(s string) error {
	if s == "" {
		return nil
	}
	return &strErr{s}
}

type strErr struct{ s string }

func (e *strErr) Error() string { return e.s }

func TestTokenPolicyRefusals(t *testing.T) {
	r := startTokenRig(t)
	n1 := r.makeNode(t, "n1")
	r.makeNode(t, "n2")
	c := client(t, r.cp.TokenKubeconfig(t, r.boundToken(t, "n1", time.Hour)), 10*time.Second)
	ask := func(spec authenticationv1.TokenRequestSpec, sa string) error {
		_, err := c.CoreV1().ServiceAccounts("kube-system").CreateToken(ctxFor(t, 30*time.Second), sa,
			&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		return err
	}
	secs := func(d time.Duration) *int64 { s := int64(d / time.Second); return &s }
	node := func(name string) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: name}
	}
	// The agent's own renewal is allowed (once RBAC and the policy are in
	// force).
	own := authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(time.Hour), BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: "n1", UID: n1.UID}}
	waitFor(t, "the agent's renewal allowed", func() (bool, error) { err := ask(own, "gnsh"); return err == nil, err })
	// Until the policy binding is in force the refusals below would pass:
	// wait for the first of them to be refused by it.
	unbound := authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(8760 * time.Hour)}
	waitFor(t, "the policy in force", func() (bool, error) {
		err := ask(unbound, "gnsh")
		return err != nil && strings.Contains(err.Error(), "gnsh-token"), err
	})
	for _, c := range []struct {
		name string
		spec authenticationv1.TokenRequestSpec
		sa   string
		want string
	}{
		{"unbound, a year", unbound, "gnsh", "bound to the Node of the token asking (n1)"},
		{"unbound, an hour", authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(time.Hour)}, "gnsh", "bound to the Node of the token asking (n1)"},
		{"another Node", authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(time.Hour), BoundObjectRef: node("n2")}, "gnsh", "bound to the Node of the token asking (n1)"},
		{"own Node, 49h", authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(49 * time.Hour), BoundObjectRef: node("n1")}, "gnsh", "at most 48 hours"},
		{"own Node, a wrong UID", authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(time.Hour), BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: "n1", UID: "other"}}, "gnsh", "bound to the Node of the token asking"},
		{"another ServiceAccount", own, "default", "cannot create resource \"serviceaccounts/token\""},
	} {
		err := ask(c.spec, c.sa)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want 403 saying %q", c.name, err, c.want)
		} else {
			t.Logf("%s: refused: %v", c.name, err)
		}
	}
	// A token of gnsh that is not node-bound (the role's year-long token
	// of old) may not ask at all, not even for a bound one.
	old := client(t, r.cp.TokenKubeconfig(t, r.boundToken(t, "", time.Hour)), 10*time.Second)
	_, err := old.CoreV1().ServiceAccounts("kube-system").CreateToken(ctxFor(t, 30*time.Second), "gnsh",
		&authenticationv1.TokenRequest{Spec: own}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only with a token bound to a Node") {
		t.Errorf("an unbound token asked for a bound one: %v, want 403", err)
	}
}

func TestDeletedNodeRevokesToken(t *testing.T) {
	r := startTokenRig(t)
	n3 := r.makeNode(t, "n3")
	kc := r.cp.TokenKubeconfig(t, r.boundToken(t, "n3", time.Hour))
	c := client(t, kc, 10*time.Second)
	if _, _, err := credential(t, c); err != nil {
		t.Fatalf("the bound token before the Node is deleted: %v", err)
	}
	gate := &slots.Gate{C: c, Namespace: leaseNS, Name: leaseName, Limits: slots.Limits{Max: 1},
		Renew: time.Second, WarnAfter: time.Hour, APITimeout: 5 * time.Second}
	// The gate works with it (RBAC in force a moment after apply).
	waitFor(t, "a slot with the bound token", func() (bool, error) {
		s, _, err := gate.Acquire(ctxFor(t, time.Minute), request(n3, 5*time.Second))
		if err == nil {
			s.Halt()
		}
		return err == nil, err
	})
	if err := r.admin.CoreV1().Nodes().Delete(ctxFor(t, 30*time.Second), "n3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted Node's token refused", func() (bool, error) {
		_, _, err := credential(t, c)
		return apierrors.IsUnauthorized(err), err
	})
	// The gate is then unavailable (what slots.gate decides on), saying
	// why and how to renew the token.
	_, _, err := gate.Acquire(ctxFor(t, time.Minute), request(n3, 5*time.Second))
	var ue *slots.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "401 Unauthorized") || !strings.Contains(err.Error(), "gnsh token install") {
		t.Fatalf("the gate with the deleted Node's token: %v, want unavailable naming the token", err)
	}
	t.Logf("gate: %v", err)
	// The agent cannot renew it, and says so once, with the fix.
	var said []string
	var st gatetoken.State
	rn := &gatetoken.Renewer{Path: kc, Retry: time.Millisecond, Say: func(l string) { said = append(said, l) }, Record: func(s gatetoken.State) { st = s }}
	for range 3 {
		rn.Once(context.Background())
		time.Sleep(10 * time.Millisecond)
	}
	if len(said) != 1 || !strings.Contains(said[0], "(node n3) expires in 1h and cannot be renewed (the API server refuses the token: 401 Unauthorized") ||
		!strings.HasSuffix(said[0], "re-run the playbook or `gnsh token install`") {
		t.Fatalf("said %q", said)
	}
	if st.Error == "" || st.Node != "n3" {
		t.Fatalf("state %+v", st)
	}
	t.Logf("%s", said[0])
}
