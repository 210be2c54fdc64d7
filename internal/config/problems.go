package config

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
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
	// (slots.pools[1].name), and each list item's.
	lines map[string]int
	// leaves holds the value nodes of the keys below a list by their path
	// without indices (slots.pools.name: one per item), in file order:
	// encoding/json names a bad value there without its index.
	leaves map[string][]leaf
	budget int // nodes left to visit: aliases may repeat a node many times
}

type leaf struct {
	path string // with indices
	node *yaml3.Node
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
	t = &tree{lines: map[string]int{}, leaves: map[string][]leaf{}, budget: walkBudget}
	t.walk(&doc, reflect.TypeFor[Config](), "", "")
	return t, t.budget > 0
}

// walk goes through n, which decodes into ty at path (bare: the same
// path without list indices).
func (t *tree) walk(n *yaml3.Node, ty reflect.Type, path, bare string) {
	if t.budget--; t.budget <= 0 {
		return
	}
	switch n.Kind {
	case yaml3.DocumentNode:
		for _, c := range n.Content {
			t.walk(c, ty, path, bare)
		}
		return
	case yaml3.AliasNode:
		if n.Alias != nil {
			t.walk(n.Alias, ty, path, bare)
		}
		return
	}
	for ty.Kind() == reflect.Pointer {
		ty = ty.Elem()
	}
	switch {
	case ty.Kind() == reflect.Struct && n.Kind == yaml3.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml3.ScalarNode && k.Tag == "!!merge" && k.Value == "<<" {
				// "<<: *defaults" or "<<: [*a, {b: 1}]": the keys of the
				// map, or of each map of the list, as if written here.
				// (The decoder merges "<<" alone: "!!merge foo" is a key.)
				t.merge(v, ty, path, bare)
				continue
			}
			f, known := field(ty, k.Value)
			kp, kb := join(path, k.Value), join(bare, k.Value)
			if !known || k.Kind != yaml3.ScalarNode {
				t.unknown = append(t.unknown, Problem{Line: k.Line, Path: kp, Msg: unknownKeyMsg(ty, path, k.Value)})
				continue
			}
			if _, seen := t.lines[kp]; !seen {
				t.lines[kp] = k.Line
			}
			t.walk(v, f.Type, kp, kb)
		}
	case ty.Kind() == reflect.Slice && n.Kind == yaml3.SequenceNode:
		for i, c := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			t.lines[ip] = c.Line
			t.walk(c, ty.Elem(), ip, bare)
		}
	default:
		// A value: decoding judges it.
		t.leaves[bare] = append(t.leaves[bare], leaf{path: path, node: n})
	}
}

// merge walks the value of a merge key ("<<") in a map that decodes into
// ty: a map (or an alias of one), or a list of them, whose keys the
// decoder takes as the map's own. Anything else the decoder refuses.
func (t *tree) merge(v *yaml3.Node, ty reflect.Type, path, bare string) {
	if v.Kind != yaml3.SequenceNode {
		t.walk(v, ty, path, bare)
		return
	}
	for _, c := range v.Content {
		if t.budget--; t.budget <= 0 {
			return
		}
		t.walk(c, ty, path, bare)
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
	keys := keyNames(ty)
	best, bestD := "", 3
	for _, k := range keys {
		if d := distance(strings.ToLower(key), strings.ToLower(k)); d < bestD && d < len(k)/2 {
			best, bestD = k, d
		}
	}
	if best != "" {
		return "unknown key; did you mean " + best + "?"
	}
	where := "at the top of the file"
	if path != "" {
		where = "in " + stripIndices(path)
	}
	return "unknown key; the keys " + where + " are " + strings.Join(keys, ", ")
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
	for path != "" {
		if l, ok := t.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// locate finds the value that encoding/json named by bare (a path without
// list indices) with a value of the JSON type got ("string", "number",
// "bool", "array", "object"): the first in the file, as the decoder goes
// through a list in order. It returns the path with indices, the line and
// the value's node; or bare, 0 and nil when the tree does not tell.
func (t *tree) locate(bare, got string) (string, int, *yaml3.Node) {
	if t == nil {
		return bare, 0, nil
	}
	ls := t.leaves[bare]
	for _, l := range ls {
		if jsonType(l.node) == got {
			return l.path, l.node.Line, l.node
		}
	}
	if len(ls) == 1 {
		return ls[0].path, ls[0].node.Line, ls[0].node
	}
	return bare, 0, nil
}

// oldBools are the words YAML 1.1 (the decoder's) reads as true or false.
var oldBools = []string{"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE",
	"on", "On", "ON", "off", "Off", "OFF"}

// jsonType is the JSON type the decoder turns n into, by YAML 1.1's rules
// as far as they matter here.
func jsonType(n *yaml3.Node) string {
	for n.Kind == yaml3.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml3.SequenceNode:
		return "array"
	case yaml3.MappingNode:
		return "object"
	}
	if n.Style&(yaml3.SingleQuotedStyle|yaml3.DoubleQuotedStyle|yaml3.LiteralStyle|yaml3.FoldedStyle) != 0 {
		return "string"
	}
	switch n.Tag {
	case "!!int", "!!float":
		return "number"
	case "!!bool":
		return "bool"
	case "!!null":
		return "null"
	}
	if slices.Contains(oldBools, n.Value) {
		return "bool"
	}
	return "string"
}
