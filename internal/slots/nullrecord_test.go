package slots

// A null record, or a null entry (review of issue 20, finding 9):
// encoding/json reads null into a struct as nothing, so such a record read
// as one with every slot free, or a holder of no node. It is a broken
// record: every reboot is refused and gnsh slots reset applies.

import (
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNullRecordOrEntryIsBroken(t *testing.T) {
	lease := func(s string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slots", Namespace: "gnsh", Annotations: map[string]string{Annotation: s}}}
	}
	for _, s := range []string{
		`null`, ` null `, `[]`, `"x"`,
		`{"version":1,"next":3,"holders":[null],"waiters":[]}`,
		`{"version":1,"next":3,"holders":[],"waiters":[null]}`,
		`{"version":1,"next":3,"holders":[{}],"waiters":[]}`,
		`{"version":1,"next":3,"holders":[{"uid":"u","ticket":1}]}`,
		// A member this gnsh does not know takes the other path.
		`{"version":1,"next":3,"holders":[null],"waiters":[],"epoch":1}`,
		`{"version":1,"next":3,"holders":[{"node":"a","zone":"z"},{"zone":"z"}]}`,
	} {
		rec, err := Decode(lease(s))
		if err == nil {
			t.Errorf("%s: read as %+v, no error", s, rec)
			continue
		}
		if !Broken(err) || !strings.Contains(err.Error(), ResetCommand) {
			t.Errorf("%s: %v; want a broken record naming %q", s, err, ResetCommand)
		}
	}
	// What a gnsh writes, and members set to null inside an entry, read
	// as ever.
	for _, s := range []string{
		`{"version":1,"next":0,"holders":null,"waiters":null}`,
		`{"version":1,"next":2,"holders":[{"node":"a","when":null}],"waiters":[{"node":"b","zone":null}]}`,
	} {
		if _, err := Decode(lease(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	var r Record
	r.Holders = []Entry{holder("a", 0)}
	l := lease("")
	r.Encode(l)
	if back, err := Decode(l); err != nil || len(back.Holders) != 1 {
		t.Errorf("a record as encoded: %+v %v", back, err)
	}
}
