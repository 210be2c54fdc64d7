package slots

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// A token the API server refuses (401: the gate's short-lived token
// expired, revoked, its Node deleted) makes the gate unavailable at its
// first ask, as refused credentials do, and the message names the token
// and how to renew it.
func TestUnauthorizedIsUnavailable(t *testing.T) {
	g, c, r := gateRig(t)
	var asks int
	c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		asks++
		return true, nil, apierrors.NewUnauthorized("Unauthorized")
	})
	_, _, err := g.Acquire(context.Background(), r)
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v, want an UnavailableError", err)
	}
	if asks != 1 {
		t.Errorf("%d requests with refused credentials, want 1", asks)
	}
	for _, want := range []string{"401 Unauthorized", "the gate's token", "/etc/gnsh/kubeconfig", "gnsh token install"} {
		if !strings.Contains(ue.Error(), want) {
			t.Errorf("message %q lacks %q", ue.Error(), want)
		}
	}
}
