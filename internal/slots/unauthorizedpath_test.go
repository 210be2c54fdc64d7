package slots

// The gate's 401 and 403 lines name the gate's own kubeconfig: a node
// whose gate reads slots.kubeconfig (/etc/gnsh/gate.kubeconfig here) is
// told to look at (and renew) that file, not /etc/gnsh/kubeconfig, which
// the gate does not use. Issue 22.

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestUnavailableNamesGateKubeconfig(t *testing.T) {
	lr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	g := &Gate{Namespace: "gnsh", Name: "reboot-slots", Kubeconfig: "/etc/gnsh/gate.kubeconfig"}
	for _, err := range []error{
		apierrors.NewUnauthorized("Unauthorized"),
		apierrors.NewForbidden(lr, "reboot-slots", nil),
	} {
		msg := g.Unavailable(err).Error()
		if !strings.Contains(msg, "/etc/gnsh/gate.kubeconfig") || strings.Contains(msg, "/etc/gnsh/kubeconfig") {
			t.Errorf("%q: want /etc/gnsh/gate.kubeconfig named, not /etc/gnsh/kubeconfig", msg)
		}
		// Not told which: both places gnsh looks.
		if msg := (&UnavailableError{Where: g.Where(), Err: err}).Error(); !strings.Contains(msg, "/etc/gnsh/kubeconfig (or slots.kubeconfig)") {
			t.Errorf("unnamed: %q", msg)
		}
	}
}
