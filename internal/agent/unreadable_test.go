package agent

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/slots"
)

// A schedule refused because the slots record cannot be read is
// cancelled, and the line names the reset, not 'gnsh slots release'
// (which fails on such a record too).
func TestFollowerCancelNamesTheResetForABrokenRecord(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh",
		Annotations: map[string]string{slots.Annotation: "{"}}}
	_, broken := slots.Decode(l)
	if broken == nil {
		t.Fatal("a broken record read")
	}
	refusal := &drainer.SlotRefusal{Err: &slots.WaitError{Err: broken}}
	f := startFollower(t, func(f *followerFixture) {
		f.drainErr = &drainer.HeldError{Holder: &drainer.Holder{PID: 42, Action: "reboot"}}
		f.slotErr = refusal
	})
	at := s0.Add(3 * time.Minute)
	f.set(t, LogindSchedule{Type: "reboot", USec: usecOf(at)})
	f.to(t, s0.Add(time.Second))
	f.to(t, at.Add(-2*time.Second)) // within the margin: too near
	eventually(t, f.out, "the cancel", func() bool { return strings.Contains(f.out.String(), "cancelled the scheduled reboot for ") })
	out := f.out.String()
	if !strings.Contains(out, "; schedule it again once 'gnsh slots reset' (admin credentials) has started a new record\n") ||
		strings.Contains(out, "gnsh slots release") {
		t.Errorf("log:\n%s", out)
	}
}
