package drainer

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// Review finding 6 (issue 20): the bypass write lands, its answer is
// lost, and the record cannot be read back in time: the agent says the
// reboot may not be recorded (not that it is not), and a cancelled
// shutdown's Undo frees the holder it may have written (its Run).
func TestBypassUnconfirmedFreedByUndo(t *testing.T) {
	f := newFakeNode(false, nil)
	otherHolder(t, f)
	var updates atomic.Int32
	var down atomic.Bool
	f.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	f.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if updates.Add(1) != 1 {
			return false, nil, nil
		}
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if err := f.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"), l, l.Namespace); err != nil {
			return true, nil, err
		}
		down.Store(true)
		return true, nil, apierrors.NewTimeoutError("request timed out", 1)
	})
	d := newDrainer(t, f, "")
	d.Agent = true
	sd, err := d.DrainForShutdown(context.Background(), "reboot", 10*time.Second)
	if err != nil || !sd.Cordoned() {
		t.Fatalf("%v\n%s", err, d.stderr)
	}
	said := d.stderr.String()
	if !strings.Contains(said, "gnsh: warning: this reboot (it bypassed gnsh) may not be recorded in the reboot slots of gnsh/reboot-slots (the answer to its write was lost") ||
		strings.Contains(said, "is not recorded") {
		t.Fatalf("said %q", said)
	}
	down.Store(false)
	if h, ok := slotRecord(t, f).Holder("node1"); !ok || !h.Bypass {
		t.Fatalf("the write did not land: %+v", slotRecord(t, f))
	}
	sd.Undo("the shutdown was cancelled")
	if rec := slotRecord(t, f); len(rec.Holders) != 1 || rec.Holders[0].Node != "node2" {
		t.Fatalf("after the cancel's Undo: %+v", rec)
	}
}
