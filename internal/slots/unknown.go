package slots

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Members of the record this gnsh does not know (a newer gnsh's, of the
// same schema) are kept as they were read and written back with every
// rewrite, at the top level and in each entry: a renewal or an admission
// by an older gnsh during a rolling upgrade strips nothing. See Schema for
// when a new member may stay in schema 1.

// unknown holds the members of a JSON object that its Go struct does not
// name, raw.
type unknown map[string]json.RawMessage

// splitUnknown decodes b into v (a pointer to a struct of plain fields)
// and returns the members of b that v's fields do not name. A member
// matches a field as encoding/json matches them: its tag's name, in any
// case.
func splitUnknown(b []byte, v any) (unknown, error) {
	// Most records have no member this gnsh does not know: one pass.
	if onlyKnown(b, v) {
		return nil, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	known := jsonNames(reflect.TypeOf(v).Elem()) // a few dozen: cheap
	for k := range all {
		if slices.ContainsFunc(known, func(n string) bool { return strings.EqualFold(n, k) }) {
			delete(all, k)
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	return all, nil
}

// onlyKnown decodes b into v if b is one JSON value whose every member v's
// fields name; false else (v then holds anything: decode b again).
func onlyKnown(b []byte, v any) bool {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v) == nil && len(bytes.TrimSpace(b[d.InputOffset():])) == 0
}

// withUnknown appends the members of u (by name) to b, the encoding of a
// JSON object.
func withUnknown(b []byte, u unknown) []byte {
	if len(u) == 0 {
		return b
	}
	keys := make([]string, 0, len(u))
	for k := range u {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := bytes.TrimRight(b, " \n")
	out = out[:len(out)-1] // the closing brace
	empty := bytes.Equal(bytes.TrimSpace(out), []byte("{"))
	for _, k := range keys {
		if !empty {
			out = append(out, ',')
		}
		empty = false
		name, _ := json.Marshal(k)
		out = append(out, name...)
		out = append(out, ':')
		out = append(out, u[k]...)
	}
	return append(out, '}')
}

// jsonNames are the member names of struct t's exported fields.
func jsonNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

// entryJSON is Entry without its methods (the encoding of its fields).
type entryJSON Entry

// MarshalJSON writes the entry, the members it was read with that this
// gnsh does not know included.
func (e Entry) MarshalJSON() ([]byte, error) {
	p := entryJSON(e)
	p.unknown = nil
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return withUnknown(b, e.unknown), nil
}

// UnmarshalJSON reads an entry, and keeps the members this gnsh does not
// know.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var p entryJSON
	u, err := splitUnknown(b, &p)
	if err != nil {
		return err
	}
	p.unknown = u
	*e = Entry(p)
	return nil
}

// recordJSON is Record without its methods.
type recordJSON Record

// plainRecord is a record whose entries are encoded as plain structs, in
// one pass (a record of a thousand entries is encoded and decoded with
// every decision): its Holders and Waiters stand for Record's.
type plainRecord struct {
	recordJSON
	Holders []entryJSON `json:"holders"`
	Waiters []entryJSON `json:"waiters"`
}

func plainEntries(es []Entry) []entryJSON {
	if es == nil {
		return nil
	}
	p := make([]entryJSON, len(es))
	for i, e := range es {
		p[i] = entryJSON(e)
	}
	return p
}

func entriesOf(ps []entryJSON) []Entry {
	if ps == nil {
		return nil
	}
	es := make([]Entry, len(ps))
	for i, p := range ps {
		es[i] = Entry(p)
	}
	return es
}

// MarshalJSON writes the record, the members it was read with that this
// gnsh does not know included.
func (r Record) MarshalJSON() ([]byte, error) {
	var b []byte
	var err error
	if r.entriesKnown() {
		b, err = json.Marshal(plainRecord{recordJSON: recordJSON(r), Holders: plainEntries(r.Holders), Waiters: plainEntries(r.Waiters)})
	} else {
		b, err = json.Marshal(recordJSON(r)) // each entry through Entry.MarshalJSON
	}
	if err != nil {
		return nil, err
	}
	return withUnknown(b, r.unknown), nil
}

// encode is r's JSON (MarshalJSON, without the check json.Marshal makes of
// what it returns: a second pass over a record that may be 200 KiB).
func (r Record) encode() []byte {
	b, err := r.MarshalJSON()
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	return b
}

// entriesKnown reports whether no entry has members this gnsh does not
// know.
func (r Record) entriesKnown() bool {
	for _, es := range [][]Entry{r.Holders, r.Waiters} {
		for _, e := range es {
			if len(e.unknown) > 0 {
				return false
			}
		}
	}
	return true
}

// UnmarshalJSON reads a record over r (what r holds stays where b says
// nothing), and keeps the members this gnsh does not know.
//
// A record that is not a JSON object (null included, which encoding/json
// reads into a struct as nothing), or an entry without a node name (null,
// {}), is an error: read as nothing, it would free every slot it holds.
func (r *Record) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("%.20s is not a JSON object", t)
	}
	// Most records have no member this gnsh does not know: one pass.
	fast := plainRecord{recordJSON: recordJSON(*r)}
	if onlyKnown(b, &fast) {
		p := fast.recordJSON
		p.Holders, p.Waiters, p.unknown = entriesOf(fast.Holders), entriesOf(fast.Waiters), nil
		*r = Record(p)
		return r.named()
	}
	p := recordJSON(*r)
	u, err := splitUnknown(b, &p)
	if err != nil {
		return err
	}
	p.unknown = u
	*r = Record(p)
	return r.named()
}

// named checks that every entry names its node (a null entry reads as one
// that does not).
func (r Record) named() error {
	for _, l := range []struct {
		name string
		es   []Entry
	}{{"holders", r.Holders}, {"waiters", r.Waiters}} {
		for i, e := range l.es {
			if e.Node == "" {
				return fmt.Errorf("%s[%d] names no node (null, or no \"node\")", l.name, i)
			}
		}
	}
	return nil
}
