package slotsrig_test

// The gnsh-token policy against more requesters than token_test.go's: a gnsh token bound to a Pod (on n1) or to a
// Secret, asking for n1's node-bound token, and n1's token asking with
// boundObjectRef's apiVersion left out or its kind in another case.
// Each must be refused, or (apiVersion left out) be the agent's own.

import (
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTokenPolicyOtherRequesters(t *testing.T) {
	r := startTokenRig(t)
	n1 := r.makeNode(t, "n1")
	ctx := ctxFor(t, time.Minute)
	no := false
	if _, err := r.admin.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "kube-system"},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "gnsh", AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/x:1"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "kube-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mint := func(kind, name string) string {
		return strings.TrimSpace(r.cp.Kubectl(t, nil, "-n", "kube-system", "create", "token", "gnsh", "--duration=1h",
			"--bound-object-kind="+kind, "--bound-object-name="+name))
	}
	secs := int64(3600)
	ask := func(tok string, ref *authenticationv1.BoundObjectReference) error {
		c := client(t, r.cp.TokenKubeconfig(t, tok), 10*time.Second)
		_, err := c.CoreV1().ServiceAccounts("kube-system").CreateToken(ctxFor(t, 30*time.Second), "gnsh",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs, BoundObjectRef: ref}}, metav1.CreateOptions{})
		return err
	}
	own := mint("Node", "n1")
	waitFor(t, "the policy in force", func() (bool, error) {
		err := ask(own, nil)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "gnsh-token"), err
	})
	n1ref := &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: "n1"}
	for _, c := range []struct {
		name string
		tok  string
		ref  *authenticationv1.BoundObjectReference
		ok   bool
	}{
		{"a Pod-bound gnsh token (pod on n1)", mint("Pod", "p"), n1ref, false},
		{"a Secret-bound gnsh token", mint("Secret", "s"), n1ref, false},
		{"n1's token, apiVersion left out", own, &authenticationv1.BoundObjectReference{Kind: "Node", Name: "n1"}, true},
		{"n1's token, kind 'node'", own, &authenticationv1.BoundObjectReference{Kind: "node", APIVersion: "v1", Name: "n1"}, false},
		{"n1's token, its own UID", own, &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: "n1", UID: n1.UID}, true},
	} {
		err := ask(c.tok, c.ref)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want allowed %v", c.name, err, c.ok)
		} else {
			t.Logf("%s: %v (allowed %v)", c.name, err, err == nil)
		}
	}
}
