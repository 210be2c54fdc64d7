package drainer

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// strictNode is node1 with web-1 (a ReplicaSet's) and cache, a
// ReplicaSet's pod with an emptyDir volume, which kubectl drain refuses
// without --delete-emptydir-data.
func strictNode(t *testing.T) *fakeNode {
	f := newFakeNode(false, nil, "web-1")
	yes := true
	cache := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "app", UID: types.UID("uid-cache"),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "node1",
			Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if err := f.Tracker().Add(cache); err != nil {
		t.Fatal(err)
	}
	return f
}

// strictDrain: true refuses a reboot while a pod kubectl drain refuses is
// on the node, at once and evicting nothing, naming it and the ways round;
// gnsh's cordon is undone (issue 19). Without the key that pod is evicted
// with a warning, as before.
func TestStrictDrainRefuses(t *testing.T) {
	f := strictNode(t)
	d := newDrainer(t, f, "strictDrain: true\ndrainTimeout: 1h\n")
	_, err := d.prepare(t, reboot())
	refusal(t, err, "gnsh: strictDrain: node1 holds pods that kubectl drain refuses to evict (without --delete-emptydir-data or --force): app/cache (uses emptyDir)\n"+
		"gnsh: reboot refused (strictDrain: true in "+d.ConfigPath+"); nothing was evicted. To reboot anyway, run the command again with --force-drain "+
		"(evict the other pods, leave these, then go on) or --no-drain; or set strictDrain: false.")
	if f.Evictions() != 0 || f.node(t).Spec.Unschedulable {
		t.Fatalf("%d evictions, cordoned %v", f.Evictions(), f.node(t).Spec.Unschedulable)
	}

	lax := strictNode(t)
	d = newDrainer(t, lax, "")
	if err := d.handOff(t, reboot(), nil); err != nil || lax.Evicted("cache") != 1 ||
		!strings.Contains(d.stderr.String(), "gnsh: evicting app/cache uses emptyDir: its data is lost") {
		t.Fatalf("default: %v, stderr %q", err, d.stderr)
	}
}

// --force-drain evicts the other pods and goes on without the refused
// ones, naming them; so does the node agent's drain for a shutdown already
// under way, which nothing can refuse.
func TestStrictDrainForced(t *testing.T) {
	f := strictNode(t)
	d := newDrainer(t, f, "strictDrain: true\n")
	req := reboot()
	req.Drain.Force = true
	p, err := d.prepare(t, req)
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	p.Finish(context.Background(), nil)
	if f.Evicted("web-1") != 1 || f.Evicted("cache") != 0 ||
		!strings.Contains(d.stderr.String(), "app/cache (uses emptyDir); --force-drain: rebooting anyway") {
		t.Fatalf("web-1 %d, cache %d; stderr %q", f.Evicted("web-1"), f.Evicted("cache"), d.stderr)
	}

	f = strictNode(t)
	a := newDrainer(t, f, "strictDrain: true\n")
	a.Agent = true
	_, err = a.DrainForShutdown(context.Background(), "reboot", 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "app/cache (uses emptyDir)") || f.Evicted("web-1") != 1 || f.Evicted("cache") != 0 {
		t.Fatalf("agent: %v; web-1 %d, cache %d", err, f.Evicted("web-1"), f.Evicted("cache"))
	}
}

// gnsh drain refuses as kubectl drain does; --dry-run shows each pod's
// fate.
func TestStrictDrainCommand(t *testing.T) {
	f := strictNode(t)
	d := newDrainer(t, f, "strictDrain: true\n")
	var out bytes.Buffer
	if err := d.DrainCommand(context.Background(), 0, true, &out); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"app/web-1  evict", "app/cache  refuse (strictDrain)  as kubectl drain: uses emptyDir",
		"1 of 2 pods are refused (strictDrain: true in " + d.ConfigPath + "): a drain would stop before any eviction"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("dry run lacks %q:\n%s", w, out.String())
		}
	}
	err := d.DrainCommand(context.Background(), 0, false, &out)
	refusal(t, err, "app/cache (uses emptyDir); nothing was evicted: move them yourself, or set strictDrain: false in "+d.ConfigPath,
		"node1 stays cordoned; 'gnsh uncordon' makes it schedulable again")
	if f.Evictions() != 0 {
		t.Fatalf("%d evictions", f.Evictions())
	}
}

// forceDrain in the config file is a shutdown's, which goes on without the
// refused pods: gnsh drain shuts nothing down, and with strictDrain still
// refuses before any eviction, as it says it does. Its dry run says what a
// shutdown would do with forceDrain.
func TestStrictDrainCommandForceDrainConfig(t *testing.T) {
	f := strictNode(t)
	d := newDrainer(t, f, "strictDrain: true\nforceDrain: true\n")
	var out bytes.Buffer
	if err := d.DrainCommand(context.Background(), 0, true, &out); err != nil {
		t.Fatal(err)
	}
	if want := "a drain would stop before any eviction, and a shutdown evict the other pods and go on without these (forceDrain: true)"; !strings.Contains(out.String(), want) {
		t.Errorf("dry run lacks %q:\n%s", want, out.String())
	}
	err := d.DrainCommand(context.Background(), 0, false, &out)
	refusal(t, err, "app/cache (uses emptyDir); nothing was evicted: move them yourself")
	if f.Evictions() != 0 {
		t.Fatalf("%d evictions, after saying nothing was evicted", f.Evictions())
	}
}
