package slotsrig_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/gnshcli"
	"github.com/gnsh/gnsh/internal/slots"
	"github.com/gnsh/gnsh/internal/system"
)

// A record broken by hand refuses every request; gnsh slots reset, with
// an admin's kubeconfig, starts a new one on the real API server (its
// compare-and-swap accepted), posts GnshSlotsReset on the Lease, and the
// next request is admitted. Run again on the readable record it refuses
// without --force.
func testSlotsReset(t *testing.T, r *rig) {
	ctx := ctxFor(t, time.Minute)
	lim := slots.Limits{Max: 1, Settle: time.Second}
	a, b := r.node(t, "held", nil), r.node(t, "next", nil)
	sa, _, err := r.gate(t, a.Name, lim).Acquire(ctx, request(a, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sa.Keep(ctx, slots.ShuttingDown)
	l, err := r.admin.CoordinationV1().Leases(leaseNS).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[slots.Annotation] = `{"version":1,"holders":[{"node":"held"` // an edit cut short
	if _, err := r.admin.CoordinationV1().Leases(leaseNS).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err = r.gate(t, b.Name, lim).Acquire(ctx, request(b, time.Second))
	var we *slots.WaitError
	if !errors.As(err, &we) || !slots.Broken(err) {
		t.Fatalf("on a broken record: %v", err)
	}

	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("slots:\n  maxUnavailable: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		env := &dispatch.Env{Stdout: &out, Stderr: &errb, Location: time.UTC,
			LookupEnv: func(k string) (string, bool) {
				switch k {
				case "GNSH_CONFIG":
					return cfg, true
				case "SUDO_USER":
					return "carol", true
				}
				return "", false
			},
			Host: &system.Host{Root: t.TempDir(), Getenv: func(string) string { return "" }}}
		code := gnshcli.Run(ctx, append([]string{"gnsh", "slots"}, args...), env)
		return out.String(), errb.String(), code
	}
	if _, errs, code := run("release", "--node", "held", "--kubeconfig", r.cp.AdminKubeconfig); code != 1 || !strings.Contains(errs, "'gnsh slots reset'") {
		t.Errorf("release on a broken record: %d %q", code, errs)
	}
	out, errs, code := run("reset", "--kubeconfig", r.cp.AdminKubeconfig)
	if code != 0 || !strings.Contains(out, "reset the slots record of gnsh/reboot-slots: every slot is free, nobody waits; thrown away: a record that could not be read (") {
		t.Fatalf("reset: %d %q %q", code, out, errs)
	}
	if rec := r.record(t); len(rec.Holders)+len(rec.Waiters) != 0 {
		t.Fatalf("after the reset: %+v", rec)
	}
	evs, err := r.admin.CoreV1().Events(leaseNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Lease,reason=" + slots.ReasonReset})
	if err != nil || len(evs.Items) != 1 || evs.Items[0].Type != corev1.EventTypeWarning || evs.Items[0].InvolvedObject.UID != l.UID ||
		!strings.Contains(evs.Items[0].Message, "reset by carol with 'gnsh slots reset'") {
		t.Errorf("events: %v %+v", err, evs)
	}
	if _, _, err := r.gate(t, b.Name, lim).Acquire(ctx, request(b, time.Second)); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	_, errs, code = run("reset", "--kubeconfig", r.cp.AdminKubeconfig)
	if code != 1 || !strings.Contains(errs, "reads (1 holding a slot, 0 waiting): nothing reset") {
		t.Errorf("reset of a readable record: %d %q", code, errs)
	}
	if _, ok := r.record(t).Holder("next"); !ok {
		t.Error("the readable record was reset without --force")
	}
}
