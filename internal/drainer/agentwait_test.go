package drainer

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// agentDrainer is the node agent's drainer beside d: the same lock
// directory, node and cluster, with Agent set.
func agentDrainer(t *testing.T, f *fakeNode, d testDrainer) testDrainer {
	t.Helper()
	a := newDrainer(t, f, "")
	a.LockDir, a.Agent, a.Who = d.LockDir, true, Requester{User: "root"}
	return a
}

// A reboot typed while the node agent holds the drain lock for
// bookkeeping (the uncordon after boot, the look for an orphaned cordon)
// waits for it, saying for whom, and then drains and hands off: it used to
// be refused as "another gnsh is draining this node".
func TestWrapperWaitsForAgentBookkeeping(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	w := &syncBuffer{}
	d.Stderr = w // read while the wrapper writes
	a := agentDrainer(t, f, d)
	l, err := a.AcquireLock("uncordon after boot", "node1", time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	go func() { // the agent is done once the wrapper waits for it
		for !strings.Contains(w.String(), "waiting for the node agent") {
			time.Sleep(time.Millisecond)
		}
		l.Release()
	}()
	if err := d.handOff(t, reboot(), nil); err != nil {
		t.Fatalf("reboot while the agent uncordons: %v\n%s", err, w)
	}
	out := w.String()
	for _, want := range []string{"gnsh: waiting for the node agent (gnsh.service, pid ", ") to finish: uncordon after boot; at most until ",
		"gnsh: the node agent is done (", "gnsh: drained node1 in "} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if f.Evicted("web-1") != 1 || !f.node(t).Spec.Unschedulable {
		t.Errorf("web-1 evicted %d times, cordoned %v", f.Evicted("web-1"), f.node(t).Spec.Unschedulable)
	}
}

// The node agent drains for a schedule (or a shutdown under way) when the
// admin types reboot: the wrapper waits for that drain and uses its
// outcome, one eviction per pod in all, and hands off.
func TestWrapperUsesAgentsDrain(t *testing.T) {
	f := newFakeNode(false, nil, "web-1", "web-2")
	f.Stick("web-1", "web-2")
	d := newDrainer(t, f, "")
	out := &syncBuffer{}
	d.Stderr = out // read while the wrapper writes
	a := agentDrainer(t, f, d)
	at := time.Now().Add(2 * time.Minute).UTC()
	agentDone := make(chan error, 1)
	go func() {
		_, err := a.DrainForSchedule(context.Background(), "reboot", at, 30*time.Second)
		agentDone <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for f.Evicted("web-1") == 0 || f.Evicted("web-2") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the agent's drain did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	wrapper := make(chan error, 1)
	go func() { wrapper <- d.handOff(t, reboot(), nil) }()
	for !strings.Contains(out.String(), "waiting for the node agent") {
		if time.Now().After(deadline) {
			t.Fatalf("the wrapper does not wait:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.gone(t, "web-1") // the kubelet ends them
	f.gone(t, "web-2")
	if err := <-agentDone; err != nil {
		t.Fatalf("agent's drain: %v\n%s", err, a.stderr)
	}
	if err := <-wrapper; err != nil {
		t.Fatalf("reboot: %v\n%s", err, out)
	}
	for _, want := range []string{"to finish its drain of node1 (reboot); its outcome counts for this reboot",
		"; not draining again"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	for _, p := range []string{"web-1", "web-2"} {
		if n := f.Evicted(p); n != 1 {
			t.Errorf("%s evicted %d times, want once", p, n)
		}
	}
	if m, err := d.ReadMarker(); err != nil || m.Action != "reboot" {
		t.Errorf("marker %+v, %v: the guard would drain again", m, err)
	}
}

// The wait is bounded by the agent's own bound: a lock still held well
// past it refuses the command, naming the holder.
func TestWrapperWaitForAgentIsBounded(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	fastClock(t, d)
	a := agentDrainer(t, f, d)
	l, err := a.AcquireLock("undo the cordon for a cancelled schedule", "node1", d.Clock.Now().Add(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	err = d.handOff(t, reboot(), nil)
	refusal(t, err, "another gnsh is draining this node (the node agent, pid ")
	if f.node(t).Spec.Unschedulable {
		t.Error("cordoned by a refused reboot")
	}
}

// Another wrapper's drain is refused at once, as before.
func TestWrapperDoesNotWaitForAnotherWrapper(t *testing.T) {
	f := newFakeNode(false, nil, "web-1")
	d := newDrainer(t, f, "")
	other := newDrainer(t, f, "")
	other.LockDir = d.LockDir
	l, err := other.lock("reboot", "node1", true, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	start := time.Now()
	refusal(t, d.handOff(t, reboot(), nil), "another gnsh is draining this node (pid ")
	if time.Since(start) > 2*time.Second || strings.Contains(d.stderr.String(), "waiting") {
		t.Errorf("waited for another wrapper:\n%s", d.stderr)
	}
}

// gone deletes pod name, as the kubelet does once it has ended.
func (f *fakeNode) gone(t *testing.T, name string) {
	t.Helper()
	if err := f.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "app", name); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe to read while another goroutine writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
