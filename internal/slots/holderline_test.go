package slots

import (
	"strings"
	"testing"
	"time"
)

// A waiting node's line names each holder with the time its request was
// made (Entry.Since, kept from its waiter entry when it was admitted): it
// is labelled as that, never as when it was admitted ("admitted since"
// showed when it began waiting).
func TestHolderLineSaysWhenItAsked(t *testing.T) {
	asked := time.Date(2026, 11, 27, 11, 13, 32, 0, time.UTC)
	a := ask("a")
	a.Entry.Since = asked
	// a waits behind b, then b's slot is freed and a is admitted.
	w := world(node("a"), node("b"), node("c"))
	v := Decide(Record{Next: 1, Holders: []Entry{holder("b", 0)}}, w, one, still{}, a)
	if v.Admitted {
		t.Fatalf("a admitted beside b: %+v", v)
	}
	rec := v.Record
	rec.Holders = nil
	v = Decide(rec, w, one, still{}, a)
	if !v.Admitted || !v.Self.Since.Equal(asked) {
		t.Fatalf("a not admitted with the time it asked: %+v", v)
	}
	// c asks: its line names a.
	v = Decide(v.Record, w, one, still{}, ask("c"))
	got := names(v.Blocks)
	want := "a (holds a slot: admitted; reboot by root, asked at " + asked.Local().Format("15:04:05") + ")"
	if !strings.Contains(got, want) || strings.Contains(got, "since") {
		t.Fatalf("c's line:\n  %s\nwant it to contain:\n  %s", got, want)
	}
}
