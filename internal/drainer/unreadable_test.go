package drainer

import (
	"context"
	"errors"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/slots"
)

// A record that cannot be read refuses, and the refusal's second line
// names what can work: for a broken record the reset, for a newer gnsh's
// an upgrade; never 'gnsh slots release', which fails on it too.
func TestNoSlotUnreadableRecordNamesTheFix(t *testing.T) {
	for _, tc := range []struct{ name, raw, want, first string }{
		{"broken", `{"version":1,"holders":[`, "gnsh: reboot refused whatever slots.gate says: without the record no limit can be kept. " +
			"Once 'gnsh slots reset' (admin credentials) has started a new record, run it again; or go without the gate (and without a drain) with --no-drain or -f.",
			"gnsh: no reboot slot: the slots record in Lease gnsh/reboot-slots (annotation gnsh.io/slots) is not a valid record ("},
		{"newer", `{"version":2}`, "gnsh: reboot refused whatever slots.gate says: this gnsh cannot read a newer gnsh's record. " +
			"Upgrade gnsh on this node, then run it again; or go without the gate (and without a drain) with --no-drain or -f.",
			"gnsh: no reboot slot: the slots record is version 2, written by a newer gnsh (this one writes 1): upgrade gnsh on this node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNode(false, nil, "web-1")
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh",
				Annotations: map[string]string{slots.Annotation: tc.raw}}}
			if _, err := f.CoordinationV1().Leases("gnsh").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			d := newDrainer(t, f, "slots:\n  wait: 2s\n")
			p, err := d.prepare(t, reboot())
			var ref *Refusal
			if !errors.As(err, &ref) || p != nil {
				t.Fatalf("%v %v", p, err)
			}
			lines := strings.Split(ref.Msg, "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], tc.first) || lines[1] != tc.want {
				t.Errorf("refusal:\n%s\nwant:\n%s…\n%s", ref.Msg, tc.first, tc.want)
			}
			if strings.Contains(ref.Msg, "slots release") {
				t.Errorf("names 'gnsh slots release': %s", ref.Msg)
			}
			if f.node(t).Spec.Unschedulable {
				t.Error("cordoned")
			}
		})
	}
}

// The node agent's line after cancelling a schedule no slot came for
// names the same fix.
func TestNoSlotFix(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh",
		Annotations: map[string]string{slots.Annotation: "{"}}}
	_, broken := slots.Decode(l)
	l.Annotations[slots.Annotation] = `{"version":9}`
	_, newer := slots.Decode(l)
	for err, want := range map[error]string{
		&SlotRefusal{Err: &slots.WaitError{}}:            "schedule it again later, or free a slot with 'gnsh slots release --node NODE'",
		&SlotRefusal{Err: &slots.WaitError{Err: broken}}: "schedule it again once 'gnsh slots reset' (admin credentials) has started a new record",
		&SlotRefusal{Err: &slots.WaitError{Err: newer}}:  "upgrade gnsh on this node, then schedule it again",
	} {
		if got := NoSlotFix(err); got != want {
			t.Errorf("%v: %q, want %q", err, got, want)
		}
	}
}
