package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// Problem is one mistake in a configuration file.
type Problem struct {
	// Line is the problem's line in the file, from 1; 0 when not known.
	Line int
	// Path is the key's path from the top, such as slots.maxUnavailable
	// or slots.pools[0].selector; "" for the file as a whole.
	Path string
	// Msg says what is wrong and, after "; ", how to fix it: one line.
	Msg string
}

// String is "line N: PATH: MSG", leaving out what is not known.
func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error is an invalid configuration: every problem found, in the order of
// the file where it is known. Load and Parse return it for a file that can
// be read but not used.
type Error struct {
	File     string // the file; "" for Parse
	Problems []Problem
	// Kubeconfig is the kubeconfig the file names, read even though the
	// file is invalid ("" when it names none, or the key is among the
	// problems), and KubeconfigLine its key's line: a check of the file
	// checks it too, with the rest.
	Kubeconfig     string
	KubeconfigLine int
}

// Error is one line: the file, then each problem.
func (e *Error) Error() string {
	ps := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		ps[i] = p.String()
	}
	s := strings.Join(ps, "")
	if len(ps) > 1 {
		s = fmt.Sprintf("%d problems: %s", len(ps), strings.Join(ps, " | "))
	}
	if e.File != "" {
		s = e.File + ": " + s
	}
	return s
}

// Add adds p, a problem found outside the file (with the kubeconfig it
// names), after those on lines before p's or on its line.
func (e *Error) Add(p Problem) {
	i := len(e.Problems)
	if p.Line > 0 {
		i = slices.IndexFunc(e.Problems, func(q Problem) bool { return q.Line == 0 || q.Line > p.Line })
		if i < 0 {
			i = len(e.Problems)
		}
	}
	e.Problems = slices.Insert(e.Problems, i, p)
}

// Lines is one line per problem, each "FILE: line N: PATH: MSG".
func (e *Error) Lines() []string {
	ls := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		ls[i] = p.String()
		if e.File != "" {
			ls[i] = e.File + ": " + ls[i]
		}
	}
	return ls
}

// KeyLine is the line of the key at path (such as kubeconfig or
// slots.pools[0].name) in the file b; 0 if it is not there, or b is not
// YAML.
func KeyLine(b []byte, path string) int {
	t, ok := readTree(b)
	if !ok {
		return 0
	}
	return t.lines[path]
}

// tree is the file as YAML nodes, for what decoding does not say: every
// key unknown to Config (decoding stops at the first), and where each key
// is in the file.
type tree struct {
	unknown []Problem
	// lines holds each key's line by its path with indices
	// (slots.pools[1].name), and each list item's; seq its place in the
	// file, counting keys and items, for problems on one line.
	lines map[string]int
	seq   map[string]int
	// nodes holds the value node of each key or item by its path (with
	// indices): how a refused value was written.
	nodes map[string]*yaml3.Node
	// typos holds the paths of the keys that unknown keys are typos of.
	typos  map[string]bool
	budget int // nodes left to visit: aliases may repeat a node many times
}

// walkBudget bounds the nodes a walk visits: a few aliases can stand for
// millions (the decoder refuses such files itself).
const walkBudget = 100000

// readTree parses b as YAML and walks it against Config. ok is false when
// this parser does not take the file (the decoder's own error then says
// why, or it takes it after all: then it goes without lines).
func readTree(b []byte) (t *tree, ok bool) {
	var doc yaml3.Node
	if err := yaml3.Unmarshal(b, &doc); err != nil {
		return nil, false
	}
	t = &tree{lines: map[string]int{}, seq: map[string]int{}, nodes: map[string]*yaml3.Node{},
		typos: map[string]bool{}, budget: walkBudget}
	t.walk(&doc, reflect.TypeFor[Config](), "")
	return t, t.budget > 0
}

// walk goes through n, which decodes into ty at path.
func (t *tree) walk(n *yaml3.Node, ty reflect.Type, path string) {
	if t.budget--; t.budget <= 0 {
		return
	}
	switch n.Kind {
	case yaml3.DocumentNode:
		for _, c := range n.Content {
			t.walk(c, ty, path)
		}
		return
	case yaml3.AliasNode:
		if n.Alias != nil {
			t.walk(n.Alias, ty, path)
		}
		return
	}
	for ty.Kind() == reflect.Pointer {
		ty = ty.Elem()
	}
	switch {
	case ty.Kind() == reflect.Struct && n.Kind == yaml3.MappingNode:
		// Keys are matched ignoring case: two of this map that differ only
		// in case set one key twice, and the decoder keeps one value
		// without a word. (A key of a merged map is not this map's: one
		// here overrides it, as YAML says.)
		seen := map[string]*yaml3.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml3.ScalarNode && k.Tag == "!!merge" && k.Value == "<<" {
				// "<<: *defaults" or "<<: [*a, {b: 1}]": the keys of the
				// map, or of each map of the list, as if written here.
				// (The decoder merges "<<" alone: "!!merge foo" is a key.)
				t.merge(v, ty, path)
				continue
			}
			f, known := field(ty, k.Value)
			kp := join(path, k.Value)
			if !known || k.Kind != yaml3.ScalarNode {
				t.unknown = append(t.unknown, Problem{Line: k.Line, Path: kp, Msg: unknownKeyMsg(ty, path, k.Value)})
				if m := meant(ty, k.Value); m != "" && k.Kind == yaml3.ScalarNode {
					// The typo says why the key it meant has no value:
					// the checks of that value would say it again.
					t.typos[join(path, m)] = true
				}
				continue
			}
			if first, twice := seen[jsonName(f)]; twice && first.Value != k.Value {
				t.unknown = append(t.unknown, Problem{Line: k.Line, Path: kp, Msg: fmt.Sprintf(
					"the same key as %s on line %d (keys are matched ignoring case); keep one of them", join(path, first.Value), first.Line)})
				continue
			}
			seen[jsonName(f)] = k
			if _, seen := t.lines[kp]; !seen {
				t.lines[kp], t.seq[kp] = k.Line, len(t.seq)+1
			}
			t.walk(v, f.Type, kp)
		}
	case ty.Kind() == reflect.Slice && n.Kind == yaml3.SequenceNode:
		for i, c := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			if _, seen := t.lines[ip]; !seen {
				t.lines[ip], t.seq[ip] = c.Line, len(t.seq)+1
			}
			t.walk(c, ty.Elem(), ip)
		}
	default:
		// A value: decoding judges it.
		if _, seen := t.nodes[path]; !seen {
			t.nodes[path] = n
		}
	}
}

// merge walks the value of a merge key ("<<") in a map that decodes into
// ty: a map (or an alias of one), or a list of them, whose keys the
// decoder takes as the map's own. Anything else the decoder refuses.
func (t *tree) merge(v *yaml3.Node, ty reflect.Type, path string) {
	if v.Kind != yaml3.SequenceNode {
		t.walk(v, ty, path)
		return
	}
	for _, c := range v.Content {
		if t.budget--; t.budget <= 0 {
			return
		}
		t.walk(c, ty, path)
	}
}

// field finds the field that key decodes into, as encoding/json does: by
// its json name, exactly or else ignoring case.
func field(ty reflect.Type, key string) (reflect.StructField, bool) {
	var folded *reflect.StructField
	for i := range ty.NumField() {
		f := ty.Field(i)
		name := jsonName(f)
		if name == key {
			return f, true
		}
		if folded == nil && strings.EqualFold(name, key) {
			folded = &f
		}
	}
	if folded != nil {
		return *folded, true
	}
	return reflect.StructField{}, false
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// keyNames lists ty's keys, in the order of the struct.
func keyNames(ty reflect.Type) []string {
	var ks []string
	for i := range ty.NumField() {
		ks = append(ks, jsonName(ty.Field(i)))
	}
	return ks
}

// unknownKeyMsg says that key is not one of ty's, and which it may have
// meant.
func unknownKeyMsg(ty reflect.Type, path, key string) string {
	if best := meant(ty, key); best != "" {
		return "unknown key; did you mean " + best + "?"
	}
	where := "at the top of the file"
	if path != "" {
		where = "in " + stripIndices(path)
	}
	return "unknown key; the keys " + where + " are " + strings.Join(keyNames(ty), ", ")
}

// meant is the key of ty that key is a typo of; "" if none is close.
func meant(ty reflect.Type, key string) string {
	best, bestD := "", 3
	for _, k := range keyNames(ty) {
		if d := distance(strings.ToLower(key), strings.ToLower(k)); d < bestD && d < len(k)/2 {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the edit distance between a and b (insert, delete, change
// one byte, or swap two neighbours), capped at 3.
func distance(a, b string) int {
	if d := len(a) - len(b); d > 3 || d < -3 {
		return 3
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], 3)
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// join adds key to path; a key that is not plain letters and digits is
// quoted, so that a path is always one line.
func join(path, key string) string {
	if !plainKey.MatchString(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

var indices = regexp.MustCompile(`\[\d+\]`)

func stripIndices(path string) string { return indices.ReplaceAllString(path, "") }

// line is the line of path's key, else of the nearest key above it that
// the file has; 0 without a tree.
func (t *tree) line(path string) int {
	if t == nil {
		return 0
	}
	return t.lines[t.nearest(path)]
}

// order is path's place in the file (as line), for problems on one line.
func (t *tree) order(path string) int {
	if t == nil {
		return 0
	}
	return t.seq[t.nearest(path)]
}

// nearest is path, or the nearest key above it, that the file has; "" if
// none.
func (t *tree) nearest(path string) string {
	for path != "" {
		if _, ok := t.lines[path]; ok {
			return path
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return ""
}

// node is the value node at path; nil when the tree does not tell.
func (t *tree) node(path string) *yaml3.Node {
	if t == nil {
		return nil
	}
	return t.nodes[path]
}

// values judges each value of j, the file as the decoder turns it into
// JSON, on its own and as the decoder reads it into Config: encoding/json
// reports only the first that does not fit. It returns j without the
// values refused (their keys left out, list items null), a problem for
// each (and, without a tree, for each unknown key), and the paths
// refused.
func (t *tree) values(j []byte) (any, []Problem, map[string]bool) {
	var v any
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, nil, nil // the decoder's own error says it
	}
	w := &valueWalk{t: t, refused: map[string]bool{}, budget: walkBudget}
	v, _ = w.walk(v, reflect.TypeFor[Config](), "")
	return v, w.ps, w.refused
}

type valueWalk struct {
	t       *tree
	ps      []Problem
	refused map[string]bool
	budget  int // values left to judge one by one; the decoder judges the rest
}

// walk judges v, which decodes into ty at path. It returns v without what
// was refused, and false if v itself was.
func (w *valueWalk) walk(v any, ty reflect.Type, path string) (any, bool) {
	if w.budget--; w.budget <= 0 {
		return v, true
	}
	et := ty
	for et.Kind() == reflect.Pointer {
		et = et.Elem()
	}
	switch x := v.(type) {
	case map[string]any:
		if et.Kind() != reflect.Struct {
			break
		}
		// In the order of the file, so that problems on one line are.
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			return cmp.Or(cmp.Compare(w.t.order(join(path, a)), w.t.order(join(path, b))), strings.Compare(a, b))
		})
		for _, k := range keys {
			kp := join(path, k)
			f, known := field(et, k)
			if !known {
				if w.t == nil {
					w.ps = append(w.ps, Problem{Path: kp, Msg: unknownKeyMsg(et, path, k)})
				}
				delete(x, k)
				continue
			}
			if nv, ok := w.walk(x[k], f.Type, kp); ok {
				x[k] = nv
			} else {
				delete(x, k)
			}
		}
		return x, true
	case []any:
		if et.Kind() != reflect.Slice {
			break
		}
		for i := range x {
			if nv, ok := w.walk(x[i], et.Elem(), fmt.Sprintf("%s[%d]", path, i)); ok {
				x[i] = nv
			} else {
				x[i] = nil // its zero value; the checks of what it holds are left out
			}
		}
		return x, true
	}
	var te *json.UnmarshalTypeError
	if err := decodeOne(v, ty); !errors.As(err, &te) {
		return v, true // fits (or the decoder will say what it is)
	}
	n := w.t.node(path)
	line := w.t.line(path)
	if n != nil {
		line = n.Line
	}
	p := typeProblem(te, path, n)
	if p.Line == 0 {
		p.Line = line
	}
	w.ps = append(w.ps, p)
	w.refused[path] = true
	return nil, false
}

// decodeOne decodes v (a JSON value) into a field of type ty, as the
// decoder decodes the file: YAML (JSON is YAML) into JSON for that type
// (which turns a number into a string for a string field), then
// encoding/json.
func decodeOne(v any, ty reflect.Type) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"x": v}); err != nil {
		return err
	}
	holder := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "X", Type: ty, Tag: `json:"x"`}}))
	return yaml.Unmarshal(b.Bytes(), holder.Interface())
}
