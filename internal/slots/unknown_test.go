package slots

// Fields this gnsh does not know (issue 20, hole 6): a record written by a
// newer gnsh of the same schema keeps them through every rewrite by this
// one.

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// newerRecord is schema 1 as a newer gnsh writes it: a member of its own
// at the top level and in every entry.
const newerRecord = `{"version":1,"next":4,"epoch":{"by":"gnsh 9","n":7},
"holders":[
 {"node":"a","uid":"uid-a","boot":"boot-a","ticket":0,"phase":"draining","since":"2026-01-01T10:00:00Z","beat":3,"renewSeconds":10,"zone":"z-a","prio":[1,2]},
 {"node":"b","uid":"uid-b","boot":"boot-b","ticket":1,"phase":"shutting-down","since":"2026-01-01T10:00:01Z","beat":0,"renewSeconds":10,"zone":"z-b","prio":[3]}],
"waiters":[
 {"node":"c","uid":"uid-c","boot":"boot-c","ticket":2,"since":"2026-01-01T10:00:02Z","beat":1,"renewSeconds":30,"zone":"z-c","prio":null},
 {"node":"d","uid":"uid-d","boot":"boot-d","ticket":3,"since":"2026-01-01T10:00:03Z","beat":1,"renewSeconds":30,"zone":"z-d","prio":{"x":1}}]}`

// unknownOf reads the members of an encoded record that this gnsh does not
// know: the top level's under "", each entry's under its node.
func unknownOf(t *testing.T, s string) map[string]map[string]string {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &top); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	compact := func(m map[string]json.RawMessage, keys ...string) map[string]string {
		out := map[string]string{}
		for _, k := range keys {
			if v, ok := m[k]; ok {
				var b bytes.Buffer
				if err := json.Compact(&b, v); err != nil {
					t.Fatal(err)
				}
				out[k] = b.String()
			}
		}
		return out
	}
	got := map[string]map[string]string{"": compact(top, "epoch")}
	for _, list := range []string{"holders", "waiters"} {
		var es []map[string]json.RawMessage
		if err := json.Unmarshal(top[list], &es); err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			var n string
			_ = json.Unmarshal(e["node"], &n)
			got[n] = compact(e, "zone", "prio")
		}
	}
	return got
}

// sameUnknown checks that every entry of want (but those in except) is in
// got with the same unknown members.
func sameUnknown(t *testing.T, what string, got, want map[string]map[string]string, except ...string) {
	t.Helper()
	skip := map[string]bool{}
	for _, e := range except {
		skip[e] = true
	}
	for who, members := range want {
		if skip[who] {
			continue
		}
		g, ok := got[who]
		if !ok {
			t.Errorf("%s: entry %q gone", what, who)
			continue
		}
		for k, v := range members {
			if g[k] != v {
				t.Errorf("%s: entry %q member %s = %q, want %q", what, who, k, g[k], v)
			}
		}
	}
}

func newerLease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh",
		Annotations: map[string]string{Annotation: newerRecord}}}
}

func TestUnknownFieldsSurviveDecide(t *testing.T) {
	want := unknownOf(t, newerRecord)
	rec, err := Decode(newerLease(t))
	if err != nil {
		t.Fatal(err)
	}
	w := world(node("a"), node("b"), node("c"), node("d"), node("e"), node("f"))
	encode := func(r Record) string {
		l := newerLease(t)
		r.Encode(l)
		return l.Annotations[Annotation]
	}
	// A waiter's join (e waits: two hold, the limit is 2).
	v := Decide(rec, w, Limits{Max: 2}, still{}, ask("e"))
	if v.Admitted || !v.Changed {
		t.Fatalf("e: %+v", v)
	}
	sameUnknown(t, "a waiter's join", unknownOf(t, encode(v.Record)), want)
	// An admission, with a larger limit: c, first in the queue, goes.
	v = Decide(rec, w, Limits{Max: 3}, still{}, ask("c"))
	if !v.Admitted {
		t.Fatalf("c: %s", names(v.Blocks))
	}
	sameUnknown(t, "an admission", unknownOf(t, encode(v.Record)), want, "c")
	// A node holding a slot asking again (another request): its entry is
	// the newer gnsh's, renewed.
	v = Decide(rec, w, Limits{Max: 2}, still{}, ask("a"))
	if !v.Already || !v.Changed {
		t.Fatalf("a again: %+v", v)
	}
	sameUnknown(t, "asked again", unknownOf(t, encode(v.Record)), want)
	// A holder freed by the rules (its Node is gone), the rest rewritten.
	v = Decide(rec, world(node("a"), node("c"), node("d"), node("e")), Limits{Max: 2}, still{}, ask("e"))
	if len(v.Reclaimed) != 1 {
		t.Fatalf("b not freed: %+v", v)
	}
	sameUnknown(t, "a reclaim", unknownOf(t, encode(v.Record)), want, "b")
	// Decoded and encoded again as is: the same record.
	if got := encode(rec); !rec.Equal(mustDecode(t, got)) {
		t.Fatalf("not stable: %s", got)
	}
}

func mustDecode(t *testing.T, s string) Record {
	t.Helper()
	l := newerLease(t)
	l.Annotations[Annotation] = s
	r, err := Decode(l)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestUnknownFieldsSurviveGateWrites(t *testing.T) {
	want := unknownOf(t, newerRecord)
	c := fake.NewClientset()
	casLeases(c)
	if _, err := c.CoordinationV1().Leases("gnsh").Create(context.Background(), newerLease(t), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &Gate{C: c, Namespace: "gnsh", Name: "reboot-slots", Renew: time.Hour, APITimeout: time.Second}
	ann := func() string {
		l, err := c.CoordinationV1().Leases("gnsh").Get(context.Background(), "reboot-slots", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Annotations[Annotation]
	}
	ctx := context.Background()
	// A renewal of a's slot (as its renewals and Keep write it).
	a := Entry{Node: "a", UID: "uid-a", Boot: "boot-a", Ticket: 0}
	if _, found, _, err := g.changeHolder(ctx, a, func(e *Entry) bool { e.Beat++; return true }); err != nil || !found {
		t.Fatalf("renewal: %v %v", found, err)
	}
	sameUnknown(t, "a renewal", unknownOf(t, ann()), want)
	s := g.hold(a, false)
	s.SetPhase(ShuttingDown)
	if err := s.Keep(ctx, ShuttingDown); err != nil {
		t.Fatal(err)
	}
	sameUnknown(t, "Keep", unknownOf(t, ann()), want)
	// A release of b.
	if freed, err := g.Free(ctx, func(e Entry) bool { return e.Node == "b" }); err != nil || len(freed) != 1 {
		t.Fatalf("release: %v %v", freed, err)
	}
	sameUnknown(t, "a release", unknownOf(t, ann()), want, "b")
}

// A record with no unknown member is encoded in one pass (plainRecord):
// the same JSON as entry by entry; and its decoding refuses what
// json.Unmarshal refuses.
func TestPlainRecordSameJSON(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 8, 0, 0, time.UTC)
	rec := Record{Version: Schema, Next: 3, Holders: []Entry{{Node: "a", UID: "uid-a", Boot: "boot-a", Phase: Draining, When: &at, Run: "r", Warned: true}},
		Waiters: []Entry{{Node: "b", UID: "uid-b", Ticket: 2, Renew: 30}}}
	fast := rec.encode()
	slow, err := json.Marshal(recordJSON(rec))
	if err != nil {
		t.Fatal(err)
	}
	if string(fast) != string(slow) {
		t.Fatalf("one pass:\n%s\nentry by entry:\n%s", fast, slow)
	}
	for _, bad := range []string{`{"version":1} x`, `{"version":1,"holders":[{"node":"a"}]`, `{"version":1,"holders":{}}`} {
		if _, err := Decode(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{Annotation: bad}}}); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}
