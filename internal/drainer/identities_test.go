package drainer

import (
	"context"
	"testing"

	"k8s.io/client-go/kubernetes"
)

// Each identity does only its own work (issue 22): the drain's (the
// kubelet's) cordons, evicts and posts every Event, the gate's too; the
// gate's only reads Nodes and writes the slots Lease.
func TestDrainAndGateIdentities(t *testing.T) {
	drainC := newFakeNode(false, nil, "web-1")
	gateC := newFakeNode(false, nil)
	d := newDrainer(t, drainC, "")
	d.ConnectGate = func(context.Context) (kubernetes.Interface, error) { return gateC, nil }
	p, err := d.prepare(t, reboot())
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	if h, ok := slotRecord(t, gateC).Holder("node1"); !ok || h.Boot != "boot-1" {
		t.Fatalf("gate's record %+v", slotRecord(t, gateC))
	}
	for _, a := range drainC.Actions() {
		if a.GetResource().Resource == "leases" && a.GetNamespace() == "gnsh" {
			t.Errorf("the drain's identity used for the slots: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	var patched, evicted, events bool
	for _, a := range drainC.Actions() {
		switch {
		case a.GetVerb() == "patch" && a.GetResource().Resource == "nodes":
			patched = true
		case a.GetVerb() == "create" && a.GetSubresource() == "eviction":
			evicted = true
		case a.GetVerb() == "create" && a.GetResource().Resource == "events":
			events = true
		}
	}
	if !patched || !evicted || !events {
		t.Errorf("drain's identity: cordoned %v, evicted %v, events %v", patched, evicted, events)
	}
	for _, a := range gateC.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		if a.GetResource().Resource != "leases" || a.GetNamespace() != "gnsh" {
			t.Errorf("the gate's identity wrote %s %s/%s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
}
