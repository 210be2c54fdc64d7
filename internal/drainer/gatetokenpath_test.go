package drainer

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// The gate's token named by slots.kubeconfig, refused by the API server
// (401): the warning names that file, not /etc/gnsh/kubeconfig (gnsh
// token install writes the file slots.kubeconfig names).
func TestGateTokenRefusedNamesSlotsKubeconfig(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	f.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("Unauthorized")
	})
	d := newDrainer(t, f, "slots:\n  kubeconfig: /etc/gnsh/gate.kubeconfig\n")
	p, err := d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatalf("optional: %v", err)
	}
	p.Finish(context.Background(), nil)
	var lines []string
	for _, l := range strings.Split(d.stderr.String(), "\n") {
		if strings.Contains(l, "401") {
			lines = append(lines, l)
		}
	}
	want := "gnsh: warning: reboot slots not checked: the API server refuses these credentials (401 Unauthorized) for the Lease gnsh/reboot-slots: " +
		"the gate's token in /etc/gnsh/gate.kubeconfig expired or was revoked (its Node deleted?); the node agent renews it, and gnsh status says why it could not: " +
		"re-run the playbook or `gnsh token install`; going on without a slot (slots.gate: optional)"
	if len(lines) != 1 || lines[0] != want {
		t.Errorf("got %q\nwant %q", lines, want)
	}
}
