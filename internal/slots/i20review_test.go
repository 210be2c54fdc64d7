package slots

// Review of issue 20's fixes (hostile review): scratch tests, each named
// TestReview*. Those that fail show a hole confirmed; those that pass
// refute a suspicion.

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gnsh/gnsh/internal/config"
)

// A node that hosts an etcd pod but carries no role label (its labels
// removed, or a layout gnsh does not know) asks for a slot while another
// etcd member's node holds one, maxUnavailable 2: it is admitted, and two
// of the three members are out. Hole 1 asks for such a node to be guarded
// "exactly as a control-plane node is, whoever asks": it is guarded only
// where a control-plane node (by its labels) asks, because the asking
// node's own guard is decided from its labels alone (needEtcd reads
// a.r.Self.ControlPlane, which StateOf takes from the labels).
func TestReviewUnlabelledEtcdHostAskingIsGuarded(t *testing.T) {
	c1, p, c3 := labelled("c1", kubeadmCP), readyNode("p", ""), labelled("c3", kubeadmCP)
	g, _ := etcdRig(t, 2, []Entry{held(c1, 0)}, c1, p, c3, etcdPod("c1", true), etcdPod("p", true), etcdPod("c3", true))
	v, err := acquire(t, g, p, 500*time.Millisecond)
	var we *WaitError
	if !errors.As(err, &we) {
		t.Fatalf("p (hosts etcd-p, no role label) asked while c1 (etcd-c1) holds a slot, maxUnavailable 2: admitted (%v, holders %v); "+
			"want a refusal by the control plane limit, as for a labelled etcd node", err, holderNames(v.Record))
	}
}

func holderNames(r Record) []string {
	var s []string
	for _, h := range r.Holders {
		s = append(s, h.Node)
	}
	return s
}

// Pods named etcd-* on nodes that are not Nodes (a member removed, its
// Node deleted, its mirror pod not collected yet; or a pod that is not a
// member) count as members, Ready: they inflate the total, and the
// majority kept is judged over phantoms. Three real members, e3's not
// Ready, two phantom pods Ready: e1 is admitted, which leaves e2 alone of
// three real members.
func TestReviewPhantomEtcdPodsInflateQuorum(t *testing.T) {
	w := world(node("e1", cp), node("e2", cp), node("e3", cp))
	w.setEtcd([]Member{
		{Pod: "etcd-e1", Node: "e1", Ready: true}, {Pod: "etcd-e2", Node: "e2", Ready: true}, {Pod: "etcd-e3", Node: "e3", Ready: false},
		{Pod: "etcd-old1", Node: "old1", Ready: true}, {Pod: "etcd-old2", Node: "old2", Ready: true},
	})
	v := Decide(Record{}, w, Limits{Max: 3}, still{}, ask("e1"))
	if v.Admitted {
		t.Fatalf("e1 admitted with etcd-e3 not Ready, beside pods etcd-old1 and etcd-old2 of nodes that are not Nodes: " +
			"1 of the 3 members on Nodes would be left")
	}
}

// Another boot at once (hole 5): the rule compares the Node's bootID with
// the waiter's. Right after a reboot the Node still shows the last boot's
// ID until its kubelet posts its status (a kubelet that does not start:
// the reason the admin reboots again). A live waiter of this boot is then
// dropped by every observer at once, and puts itself back (Ask.Ticket)
// at its next decision: each observer's decision and the waiter's own
// each write, without end (nothing changes in the cluster meanwhile).
func TestReviewStaleNodeBootDropsLiveWaiterForever(t *testing.T) {
	// w's Node shows its last boot ("boot-w"); w asks in its new one.
	w := world(node("h"), node("w"), node("o"))
	lim := Limits{Max: 1}
	aw := ask("w")
	aw.Entry.Boot = "boot-w-new"
	rec := Record{Next: 1, Holders: []Entry{holder("h", 0)}}
	v := Decide(rec, w, lim, still{}, aw) // w joins
	if v.Admitted || len(v.Record.Waiters) != 1 {
		t.Fatalf("w: %+v", v)
	}
	aw.Ticket, aw.HasTicket = v.Self.Ticket, true
	rec = v.Record
	writes := 0
	for i := range 6 {
		vo := Decide(rec, w, lim, still{}, ask("o")) // o, behind w
		if vo.Changed {
			writes++
			rec = vo.Record
			// o's own waiter stays; only w's entry is what flips.
		}
		vw := Decide(rec, w, lim, still{}, aw)
		if vw.Changed {
			writes++
			rec = vw.Record
		}
		_ = i
	}
	if _, ok := rec.Waiter("w"); !ok || writes > 2 {
		t.Fatalf("w, alive and waiting in its boot (the Node's bootID not posted yet): %d writes in 6 rounds with nothing changing in the cluster "+
			"(o drops it as 'on another boot', w puts itself back); want a fixpoint", writes)
	}
}

// encoding/json matches member names case-insensitively; splitUnknown
// counts a member as known the same way. A member written in another case
// (an editor's, or a newer gnsh's) is read into our field and written back
// once, under our name: never twice, never kept as unknown beside ours.
func TestReviewCaseVariantMembersWrittenOnce(t *testing.T) {
	in := `{"version":1,"next":2,"holders":[{"node":"a","NODE":"b","uid":"u","boot":"x","ticket":0,"phase":"draining","since":"2026-01-01T00:00:00Z","beat":0,"renewSeconds":10,"future":{"k":1}}],"waiters":[],"Waiters":null,"Extra":1}`
	var r Record
	if err := r.UnmarshalJSON([]byte(in)); err != nil {
		t.Fatal(err)
	}
	out := string(r.encode())
	var back map[string]any
	if err := json.Unmarshal([]byte(out), &back); err != nil {
		t.Fatalf("re-encoded record is not JSON: %v: %s", err, out)
	}
	if strings.Count(strings.ToLower(out), `"node"`) != 1 || strings.Count(strings.ToLower(out), `"waiters"`) != 1 ||
		!strings.Contains(out, `"future":{"k":1}`) || !strings.Contains(out, `"Extra":1`) {
		t.Fatalf("re-encoded: %s", out)
	}
	if h := r.Holders[0]; h.Node != "b" {
		t.Fatalf("node %q: encoding/json takes the last of the case-variant members", h.Node)
	}
}

// A record whose annotation is the JSON literal null (or an entry that is
// null) reads as an empty record: every slot free, though whose slots it
// held is unknown. (As in 482d0a3: not opened by issue 20's change, but
// neither is it "broken" for gnsh slots reset or the refusals.)
func TestReviewNullRecordIsNotEmpty(t *testing.T) {
	for _, s := range []string{`null`, `{"version":1,"next":3,"holders":[null],"waiters":null}`} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh", Annotations: map[string]string{Annotation: s}}}
		rec, err := Decode(l)
		if err == nil && len(rec.Holders) == 0 {
			t.Errorf("annotation %s: read as a record with no holder (every slot free), no error", s)
		}
		if err == nil && len(rec.Holders) == 1 && rec.Holders[0].Node == "" {
			t.Errorf("annotation %s: read as a holder with no node name (%+v), no error", s, rec.Holders[0])
		}
	}
}

// Bypass replaces this node's holder of another UID or boot; it never
// touches another node's holder or waiter, and one of this boot stands.
func TestReviewBypassTouchesOnlyItsNode(t *testing.T) {
	g, _ := keeperRig(t, Entry{Node: "x", UID: "u-x", Boot: "bx", Phase: Draining, Renew: 1, Run: "r1"})
	if _, err := g.Update(t.Context(), func(r *Record) bool {
		r.Waiters = append(r.Waiters, Entry{Node: "y", UID: "u-y", Boot: "by", Ticket: 5, Renew: 3})
		r.Next = 6
		return true
	}); err != nil {
		t.Fatal(err)
	}
	s, err := g.Bypass(t.Context(), Entry{Node: "z", UID: "u-z", Boot: "bz", Renew: 1})
	if err != nil || s == nil {
		t.Fatalf("%v %v", s, err)
	}
	s.Halt()
	r := current(t, g)
	if _, ok := r.Holder("x"); !ok {
		t.Fatal("x's slot gone")
	}
	if _, ok := r.Waiter("y"); !ok {
		t.Fatal("y's place gone")
	}
	s2, err := g.Bypass(t.Context(), Entry{Node: "x", UID: "u-x", Boot: "bx", Renew: 1})
	if err != nil || s2 != nil {
		t.Fatalf("a holder of x's boot must stand: %v %v", s2, err)
	}
	if h, _ := current(t, g).Holder("x"); h.Run != "r1" || h.Bypass {
		t.Fatalf("x's holder replaced: %+v", h)
	}
}

var _ = types.UID("")

// The absolute bounds on a waiter (hole 5) against what a valid
// configuration lets one write take: slots.renew 10m and apiTimeout 2m
// are accepted (renew ≥ apiTimeout). That node's waiter renews every
// WaiterPeriod (30 s), and one renewal may take 2×apiTimeout (Slot.renew's
// bound; Acquire's write is bounded by apiTimeout, and a conflict reads
// and writes again). It is dropped after 90 s of silence, and counted
// stalled after 10 s of fitting (stallAfter takes its "holder period" as
// the waiter period over 3, which the 30 s cap made 10 s, not 10 m): a
// live waiter whose API server answers slowly, within apiTimeout, is
// dropped from the queue and passed by those behind it. The comments on
// MaxWaiterRenew and stalled rely on "renew ≥ apiTimeout", which the cap
// no longer gives.
func TestReviewWaiterBoundsVsAPITimeout(t *testing.T) {
	cfg, err := config.Parse([]byte("apiTimeout: 2m\nslots:\n  gate: required\n  renew: 10m\n"))
	if err != nil {
		t.Fatalf("config refused: %v", err)
	}
	api := cfg.APITimeout.D()
	e := Entry{Renew: int64(WaiterPeriod(cfg.Slots.Renew.D()) / time.Second)}
	if got, need := waiterSilence(e), WaiterPeriod(cfg.Slots.Renew.D())+2*api; got < need {
		t.Errorf("a waiter of this node is dropped after %s of silence; a renewal due after %s may land %s later (2×apiTimeout): a live waiter is dropped", got, WaiterPeriod(cfg.Slots.Renew.D()), 2*api)
	}
	if got := stallAfter(e); got < api {
		t.Errorf("a waiter of this node that fits is stalled after %s; its admission's write alone may take apiTimeout (%s)", got, api)
	}
}

// The record's bound (issue 20): joins stop at 200 KiB, "holders and
// admissions are always written: the 56 KiB left are room for about 200
// entries more". Nothing bounds those admissions but maxUnavailable: a
// full queue of waiters held back by their pool's limit (gpu: 1), and
// nodes outside that pool arriving after it filled, each admitted
// unrecorded where the cluster's limit (here 400 of a large fleet) lets
// it: the record passes the 256 KiB a Lease's annotations may hold, and
// from then on every write of it (an admission, a renewal whose Beat
// gains a digit, a release) is refused by the API server.
func TestReviewAdmissionsPastRecordBound(t *testing.T) {
	rec, w, k := fullQueue(t, 1000)
	gpu := map[string]string{"pool": "gpu"}
	for name, s := range w.Nodes {
		if name == "h" || strings.HasPrefix(name, "worker-0") && name < fleetName(k) {
			s.Labels = gpu
			w.Nodes[name] = s
		}
	}
	sel, _ := labels.Parse("pool=gpu")
	lim := Limits{Max: 400, Pools: []Pool{{Name: "gpu", Selector: sel, Max: 1}}}
	admitted := 0
	for i := k; i < 1000 && admitted < 390; i++ {
		v := Decide(rec, w, lim, still{}, fleetAsk(i))
		if !v.Admitted {
			continue
		}
		admitted++
		rec = v.Record
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh"}}
	rec.Encode(l)
	if sz := len(l.Annotations[Annotation]); sz > 256<<10 {
		t.Fatalf("%d waiters recorded, %d nodes admitted after the queue filled (maxUnavailable %d): the record is %d bytes, over the 262144 a Lease's annotations hold",
			len(rec.Waiters), admitted, lim.Max, sz)
	}
}

// Another boot at once, with an empty boot ID on either side (a Node whose
// kubelet reports none, an entry without one): never dropped for it.
func TestReviewAnotherBootEmptyIDsKeepWaiter(t *testing.T) {
	for _, c := range []struct{ node, entry string }{{"", "boot-w"}, {"boot-w", ""}, {"", ""}} {
		n := node("w")
		n.Boot = c.node
		e := Entry{Node: "w", UID: "uid-w", Boot: c.entry, Ticket: 1, Renew: 30}
		rec := Record{Next: 2, Holders: []Entry{holder("h", 0)}, Waiters: []Entry{e}}
		v := Decide(rec, world(node("h"), n, node("o")), one, still{}, ask("o"))
		if len(v.Dropped) != 0 {
			t.Errorf("Node boot %q, entry boot %q: dropped %+v", c.node, c.entry, v.Dropped)
		}
	}
}
