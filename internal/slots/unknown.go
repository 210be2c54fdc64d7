package slots

import (
	"bytes"
	"encoding/json"
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

// MarshalJSON writes the record, the members it was read with that this
// gnsh does not know included.
func (r Record) MarshalJSON() ([]byte, error) {
	p := recordJSON(r)
	p.unknown = nil
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return withUnknown(b, r.unknown), nil
}

// UnmarshalJSON reads a record over r (what r holds stays where b says
// nothing), and keeps the members this gnsh does not know.
func (r *Record) UnmarshalJSON(b []byte) error {
	p := recordJSON(*r)
	u, err := splitUnknown(b, &p)
	if err != nil {
		return err
	}
	p.unknown = u
	*r = Record(p)
	return nil
}
