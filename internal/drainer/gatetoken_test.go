package drainer

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// The gate's token refused by the API server (401: expired, revoked, its
// Node deleted) makes the gate unavailable, as any gate that cannot be
// used: with slots.gate optional the reboot goes on with a warning naming
// the token and its fix; with required it is refused, saying the same.
func TestGateTokenRefusedIsUnavailable(t *testing.T) {
	for _, required := range []bool{false, true} {
		f := newFakeNode(false, nil, "web-1")
		f.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewUnauthorized("Unauthorized")
		})
		conf := ""
		if required {
			conf = "slots:\n  gate: required\n"
		}
		d := newDrainer(t, f, conf)
		p, err := d.prepare(t, reboot())
		const token = "the gate's token in /etc/gnsh/kubeconfig (or slots.kubeconfig) expired or was revoked"
		if required {
			var ref *Refusal
			if !errors.As(err, &ref) || !strings.Contains(ref.Msg, "reboot refused (slots.gate: required in ") || f.node(t).Spec.Unschedulable {
				t.Fatalf("required: %v", err)
			}
			if got := d.stderr.String() + ref.Msg; !strings.Contains(got, token) {
				t.Errorf("required: the refusal does not name the token: %q", got)
			}
			continue
		}
		if err != nil || p == nil {
			t.Fatalf("optional: %v", err)
		}
		p.Finish(context.Background(), nil)
		got := d.stderr.String()
		if !strings.Contains(got, "gnsh: warning: reboot slots not checked: the API server refuses these credentials (401 Unauthorized)") ||
			!strings.Contains(got, token) || !strings.Contains(got, "going on without a slot") {
			t.Errorf("optional: stderr %q", got)
		}
	}
}
