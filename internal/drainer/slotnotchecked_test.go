package drainer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

// notCheckedEvents returns the GnshSlotNotChecked Events created on the
// fake cluster.
func notCheckedEvents(f *fakeNode) []*corev1.Event {
	var evs []*corev1.Event
	for _, a := range f.Actions() {
		if a.GetVerb() != "create" || a.GetResource().Resource != "events" {
			continue
		}
		if ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ev.Reason == ReasonSlotNotChecked {
			evs = append(evs, ev)
		}
	}
	return evs
}

// checkNotChecked asserts one GnshSlotNotChecked Warning Event on node1
// whose message carries want.
func checkNotChecked(t *testing.T, f *fakeNode, name, want string) {
	t.Helper()
	evs := notCheckedEvents(f)
	if len(evs) != 1 {
		t.Errorf("%s: %d %s Events, want 1 (events: %v)", name, len(evs), ReasonSlotNotChecked, f.reasons())
		return
	}
	ev := evs[0]
	if ev.Type != "Warning" || ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "node1" {
		t.Errorf("%s: event %s %s/%s", name, ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name)
	}
	if !strings.Contains(ev.Message, want) || !strings.Contains(ev.Message, "going on without a slot (slots.gate: optional)") {
		t.Errorf("%s: message %q lacks %q", name, ev.Message, want)
	}
}

// Issue 20, hole 2: an optional gate gone past (unavailable before the
// slot, or a slot not confirmed under the drain lock) is said on the Node
// too, as a Warning Event with the warning's text: an admin watching the
// cluster learns that a node rebooted ungated. It used to be a warning on
// the terminal only. Not for the kubelet's own credentials (the normal
// case of a node without gnsh's identity), nor with events: false.
func TestSlotNotCheckedEvent(t *testing.T) {
	// Unavailable before the slot: these credentials may not use it.
	f := newFakeNode(false, nil, "web-1")
	forbidLeases(f, "someone")
	d := newDrainer(t, f, "")
	p, err := d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatalf("%v %v\n%s", p, err, d.stderr)
	}
	p.Finish(context.Background(), nil)
	checkNotChecked(t, f, "forbidden", "reboot slots not checked: these credentials may not use the Lease gnsh/reboot-slots")

	// A slot not confirmed under the drain lock.
	f = newFakeNode(false, nil, "web-1")
	failLeaseReadsAfterAdmission(f)
	d = newDrainer(t, f, "apiTimeout: 1s\n")
	p, err = d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatalf("%v %v\n%s", p, err, d.stderr)
	}
	p.Finish(context.Background(), nil)
	checkNotChecked(t, f, "unconfirmed", "reboot slots not checked: the Lease gnsh/reboot-slots: etcd has no leader")

	// The agent's drain ahead of a schedule, which goes past it the same way.
	f = newFakeNode(false, nil, "web-1")
	forbidLeases(f, "someone")
	d = newDrainer(t, f, "")
	d.Agent = true
	if _, err := d.DrainForSchedule(context.Background(), "reboot", time.Now().Add(30*time.Minute), 10*time.Second); err != nil {
		t.Fatalf("the agent's drain ahead: %v\n%s", err, d.stderr)
	}
	checkNotChecked(t, f, "the agent's drain ahead", "reboot slots not checked: these credentials may not use the Lease gnsh/reboot-slots")

	// None for the kubelet's credentials, none with events: false.
	for _, c := range []struct{ user, config string }{{"system:node:node1", ""}, {"someone", "events: false\n"}} {
		f := newFakeNode(false, nil, "web-1")
		forbidLeases(f, c.user)
		d := newDrainer(t, f, c.config)
		p, err := d.prepare(t, reboot())
		if err != nil || p == nil {
			t.Fatalf("%s %q: %v %v\n%s", c.user, c.config, p, err, d.stderr)
		}
		p.Finish(context.Background(), nil)
		if evs := notCheckedEvents(f); len(evs) != 0 {
			t.Errorf("%s %q: %s posted: %q", c.user, c.config, ReasonSlotNotChecked, evs[0].Message)
		}
	}
}

// The Event is posted with the credentials that just failed: a post that
// fails too is a debug line, and the reboot goes on as the warning says.
func TestSlotNotCheckedEventFails(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	forbidLeases(f, "someone")
	f.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", errors.New(`User "someone" cannot create resource "events"`))
	})
	d := newDrainer(t, f, "debug: true\n")
	p, err := d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatalf("%v %v\n%s", p, err, d.stderr)
	}
	p.Finish(context.Background(), nil)
	got := d.stderr.String()
	if !strings.Contains(got, "gnsh: debug: event "+ReasonSlotNotChecked+" not posted: ") {
		t.Errorf("stderr lacks the debug line:\n%s", got)
	}
	if strings.Count(got, "warning: reboot slots not checked") != 1 {
		t.Errorf("stderr:\n%s", got)
	}
}
