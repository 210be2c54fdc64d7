// Package config reads /etc/gnsh/config.yaml. Every key is optional and
// documented in gnsh-config(5); an unknown key is an error, so that a typo
// never silently changes what a reboot does. An invalid file is an *Error
// listing every problem, each with its key's path and line.
package config

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/window"
)

// Path is where gnsh looks for its configuration; $GNSH_CONFIG overrides it.
const Path = "/etc/gnsh/config.yaml"

// Config is gnsh's policy. The zero value is not the default: use Default.
type Config struct {
	// Node is this node's name in the cluster; empty = from the kubelet's
	// client certificate or the host name.
	Node string `json:"node"`
	// Kubeconfig the drain uses; empty = $KUBECONFIG, the kubelet's
	// /etc/kubernetes/kubelet.conf (kubeadm),
	// /var/lib/rancher/k3s/agent/kubelet.kubeconfig (k3s),
	// /var/lib/rancher/rke2/agent/kubelet.kubeconfig (rke2), then
	// /etc/gnsh/kubeconfig.
	Kubeconfig string `json:"kubeconfig"`
	// Drain before shutdown, reboot, poweroff and halt (--no-drain = false).
	Drain bool `json:"drain"`
	// DrainTimeout bounds the drain (--drain-timeout). Scheduled shutdowns
	// due within it are drained at once; later ones by the node agent.
	DrainTimeout Duration `json:"drainTimeout"`
	// ForceDrain hands off even when the drain did not finish in time
	// (--force-drain). Off: a blocked drain refuses the shutdown.
	ForceDrain bool `json:"forceDrain"`
	// StrictDrain refuses, as kubectl drain does without
	// --delete-emptydir-data and --force, pods with emptyDir volumes and
	// pods no controller recreates. Off (the default), they are evicted,
	// with a warning each: the node is going down, and they with it.
	// On, such a pod blocks the drain as a PodDisruptionBudget that never
	// allows: the shutdown is refused, naming them (--force-drain evicts
	// the rest and goes on without them).
	StrictDrain bool `json:"strictDrain"`
	// APITimeout bounds every API request; an API server that does not
	// answer in time is treated as down, and the shutdown proceeds.
	APITimeout Duration `json:"apiTimeout"`
	// UnreachableAfter is how long the API server may stop answering in the
	// middle of a drain before gnsh gives up the drain and hands off.
	UnreachableAfter Duration `json:"unreachableAfter"`
	// ForceCordonTimeout bounds the best-effort cordon of halt/poweroff/
	// reboot -f, which never drains.
	ForceCordonTimeout Duration `json:"forceCordonTimeout"`
	// PodGracePeriod, if set, overrides every pod's own grace period
	// (seconds; 0 kills at once). Unset: each pod's own.
	PodGracePeriod *int64 `json:"podGracePeriod"`
	// Events: post Kubernetes Events on the Node.
	Events bool `json:"events"`
	// NodeConditions: also write the Node lifecycle conditions
	// DrainInProgress and Drained (KEP-5683, Kubernetes 1.37 alpha, feature
	// gate NodeLifecycleConditions). Off by default.
	NodeConditions bool `json:"nodeConditions"`
	// Debug prints debug lines (such as "no kubeconfig: not a Kubernetes
	// node") on stderr.
	Debug bool `json:"debug"`
	// Slots is the cluster-level gate: how many nodes may be out at once.
	Slots Slots `json:"slots"`
}

// Gate modes of Slots.Gate.
const (
	GateOff      = "off"      // no gate: each node reboots when asked
	GateOptional = "optional" // the gate when it can be reached; else go on, with a warning
	GateRequired = "required" // no reboot without a slot (unless --no-drain or -f)
)

// Slots configures the reboot slots: a node drains and goes down only
// with a slot, taken in one compare-and-swap write of a Lease that every
// node shares. Every node must carry the same limits (the Ansible role
// writes the same file everywhere).
type Slots struct {
	// Gate is off, optional (default) or required.
	Gate string `json:"gate"`
	// Kubeconfig is the gate's own kubeconfig; empty =
	// /etc/gnsh/kubeconfig if it is there, else the drain's.
	Kubeconfig string `json:"kubeconfig"`
	// MaxUnavailable is the cluster-wide limit: nodes out at once,
	// counting slot holders and every node that is NotReady, cordoned or
	// being deleted. Default 1.
	MaxUnavailable int `json:"maxUnavailable"`
	// Pools add a limit for the nodes their label selector matches; a
	// node in several pools obeys each. Control-plane nodes
	// (node-role.kubernetes.io/control-plane) are always a pool of limit
	// 1 with an etcd quorum guard.
	Pools []Pool `json:"pools"`
	// Namespace and Lease name the Lease holding the slots.
	Namespace string `json:"namespace"`
	Lease     string `json:"lease"`
	// Wait bounds how long a shutdown waits for a slot before it is
	// refused; unset = drainTimeout.
	Wait *Duration `json:"wait"`
	// Settle is how long a node must stay Ready (and schedulable) after
	// its reboot before its slot is freed.
	Settle Duration `json:"settle"`
	// WarnAfter: a slot held longer than this posts a Warning Event on
	// the holder's Node (it is never freed for it).
	WarnAfter Duration `json:"warnAfter"`
	// Renew is how often a holder or a waiter renews its entry; one that
	// stops for 3 periods is seen as gone. Whole seconds, at least
	// apiTimeout, at most MaxRenew; left out: 10s, or apiTimeout rounded
	// up to whole seconds when that is longer.
	Renew Duration `json:"renew"`
	// Queue says which reboots that get no slot at once are queued (the
	// node agent reboots the node when one comes) instead of waiting in
	// the command: auto (default: those asked without a person at a
	// terminal: unattended-upgrades, cron, Ansible), always, or never
	// (each waits up to slots.wait, then is refused).
	Queue string `json:"queue"`
	// QueueFor bounds how long a queued reboot waits for its slot (and
	// its window) before it is given up. Default 24h.
	QueueFor Duration `json:"queueFor"`
	// Window, if set, holds queued reboots to a maintenance window: they
	// are admitted only within it. A reboot asked by a person at a
	// terminal is not held by it.
	Window *Window `json:"window"`
}

// Queue modes of Slots.Queue.
const (
	QueueAuto   = "auto"   // queue what automation asks (no person at a terminal)
	QueueAlways = "always" // queue every reboot that gets no slot at once
	QueueNever  = "never"  // never queue: wait up to slots.wait, then refuse
)

// Window is slots.window as written: the days of the week, the hours
// and the time zone within which queued reboots are admitted
// (internal/window reads it: see window.Parse; Config.QueueWindow).
type Window struct {
	Days     string `json:"days"`     // "mon-fri", "sat,sun"; empty: every day
	Start    string `json:"start"`    // "02:00"
	End      string `json:"end"`      // "05:00"; before Start: the window ends the next day
	TimeZone string `json:"timeZone"` // "Europe/Berlin", "UTC"; empty: the node's local time
}

// Pool is a set of nodes with a limit of its own.
type Pool struct {
	Name           string `json:"name"`
	Selector       string `json:"selector"` // a label selector: "pool=gpu", "zone in (a,b)"
	MaxUnavailable int    `json:"maxUnavailable"`
}

// SlotWait is how long a shutdown waits for a slot: slots.wait, else
// drainTimeout.
func (c Config) SlotWait() time.Duration {
	if c.Slots.Wait != nil {
		return c.Slots.Wait.D()
	}
	return c.DrainTimeout.D()
}

// QueueWindow is slots.window, parsed: the maintenance window that holds
// queued reboots; nil when none is set. Its error (a *window.Error) is
// only for a Config that Parse did not read: Parse refuses such a window.
func (c Config) QueueWindow() (*window.Window, error) {
	w := c.Slots.Window
	if w == nil {
		return nil, nil
	}
	pw, err := window.Parse(w.Days, w.Start, w.End, w.TimeZone)
	if err != nil {
		return nil, err
	}
	return &pw, nil
}

// Default returns the configuration used when the file or a key is absent.
func Default() Config {
	return Config{
		Drain:              true,
		DrainTimeout:       Duration(5 * time.Minute),
		APITimeout:         Duration(5 * time.Second),
		UnreachableAfter:   Duration(10 * time.Second),
		ForceCordonTimeout: Duration(3 * time.Second),
		Events:             true,
		Slots: Slots{
			Gate:           GateOptional,
			MaxUnavailable: 1,
			Namespace:      "gnsh",
			Lease:          "reboot-slots",
			Settle:         Duration(30 * time.Second),
			WarnAfter:      Duration(30 * time.Minute),
			Renew:          Duration(10 * time.Second),
			Queue:          QueueAuto,
			QueueFor:       Duration(24 * time.Hour),
		},
	}
}

// Duration is a positive duration written as "90s", "5m", "1h30m" or a
// number of seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) truncSeconds() Duration { return Duration(d.D().Truncate(time.Second)) }

// UnmarshalJSON accepts a string or a number of seconds. Its error is an
// *json.UnmarshalTypeError, which encoding/json completes with the key's
// path (tidy words it).
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := legacy.ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: strconv.Quote(s), Type: durationType}
	}
	*d = Duration(v)
	return nil
}

var durationType = reflect.TypeFor[Duration]()

// MarshalJSON writes the Go form ("5m0s").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Load reads the file at path on top of the defaults. A missing file is
// not an error; a symbolic link to a missing file is (an *Error): someone
// meant a file there. One that cannot be read is, naming the file
// (wrapping the error: fs.ErrPermission for a file this user may not
// read); an invalid one is an *Error with every problem, naming the file.
// Either way it returns the defaults.
func Load(path string) (Config, error) {
	c := Default()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			return c, &Error{File: path, Problems: []Problem{{Msg: fmt.Sprintf("a symbolic link to %s, which does not exist; "+
				"point it at the config file, or remove it for the defaults", target)}}}
		}
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	c, err = Parse(b)
	if ce := (*Error)(nil); errors.As(err, &ce) {
		ce.File = path
	}
	return c, err
}

// Parse reads a configuration on top of the defaults. On error (an
// *Error, listing every problem of the file) it returns the defaults.
func Parse(b []byte) (Config, error) {
	// The decoder (YAML 1.1 turned into JSON, then encoding/json) is what
	// reads the values; a YAML tree of the file beside it finds every
	// unknown key, and where each key is. A file the decoder refuses as
	// YAML is one problem: its own words.
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return Default(), &Error{Problems: yamlProblems(err)}
	}
	t, ok := readTree(b)
	if !ok {
		t = nil
	}
	c := Default()
	c.Slots.Renew = 0 // unset: see below
	// encoding/json stops at the first value that does not fit: each
	// value is judged on its own first, so that one run finds them all.
	// Those refused are left out of what is decoded, and so are the range
	// checks of what they hold.
	v, ps, refused := t.values(j)
	if len(ps) == 0 {
		if t != nil {
			// Unknown keys are the tree's to find, all of them.
			err = yaml.Unmarshal(b, &c)
		} else {
			err = yaml.UnmarshalStrict(b, &c)
		}
	} else {
		// What is left of the file, without what was refused.
		rest, merr := json.Marshal(v)
		if merr != nil {
			return Default(), &Error{Problems: append(ps, Problem{Msg: merr.Error()})}
		}
		err = yaml.Unmarshal(rest, &c)
	}
	if t != nil {
		ps = append(t.unknown, ps...)
	}
	if err != nil {
		// Not found value by value (it should have been): the decoder's
		// own words, and nothing judged after it.
		ps = append(ps, decodeProblem(err, t))
		return Default(), t.problems(ps, nil)
	}
	renewSet := c.Slots.Renew != 0
	if !renewSet {
		// Left out: the default, or apiTimeout (in whole seconds) when that
		// is longer, at most MaxRenew, so that a file raising apiTimeout
		// alone stays valid: a file valid before slots existed must not
		// refuse every reboot after an upgrade.
		c.Slots.Renew = min(Duration(MaxRenew), max(Default().Slots.Renew, Duration(c.APITimeout.D()+time.Second-1).truncSeconds()))
	}
	var checks []Problem
	if c.Kubeconfig != "" && !filepath.IsAbs(c.Kubeconfig) {
		// Relative to the directory gnsh runs in: the file a reboot
		// uses, and whether it exists, would depend on the shell's
		// directory (the node agent's is /).
		checks = append(checks, Problem{Path: "kubeconfig", Msg: fmt.Sprintf("%q is not an absolute path (what it names depends on the directory gnsh runs in); "+
			"write the full path, such as /etc/gnsh/kubeconfig", c.Kubeconfig)})
	}
	if c.Slots.Kubeconfig != "" && !filepath.IsAbs(c.Slots.Kubeconfig) {
		checks = append(checks, Problem{Path: "slots.kubeconfig", Msg: fmt.Sprintf("%q is not an absolute path (what it names depends on the directory gnsh runs in); "+
			"write the full path, such as /etc/gnsh/kubeconfig", c.Slots.Kubeconfig)})
	}
	if c.PodGracePeriod != nil && *c.PodGracePeriod < 0 {
		checks = append(checks, Problem{Path: "podGracePeriod", Msg: "must be 0 or more seconds; leave it out for each pod's own"})
	}
	// A slots.renew is held to apiTimeout only when apiTimeout could be
	// read: not to the default that stands in for a refused one.
	checks = append(checks, c.Slots.check(c.APITimeout.D(), renewSet && !refused["apiTimeout"], c.DrainTimeout.D())...)
	// A time written as a number (start: 0200) reaches the check as YAML
	// 1.1 reads it ("128"): say what the file says.
	for i, p := range checks {
		if n := t.node(p.Path); n != nil && (p.Path == "slots.window.start" || p.Path == "slots.window.end") &&
			(n.Tag == "!!int" || n.Tag == "!!float") {
			checks[i].Msg = fmt.Sprintf("%s is a number in YAML, not a time of day; write HH:MM in quotes, such as \"02:00\"", n.Value)
		}
	}
	if t != nil {
		for p := range t.typos {
			refused[p] = true
		}
	}
	for _, p := range checks {
		if !under(p.Path, refused) {
			ps = append(ps, p)
		}
	}
	if len(ps) > 0 {
		return Default(), t.problems(ps, &c)
	}
	return c, nil
}

// problems is the *Error of ps: each with its line, in the order of the
// file (those without a line last), and the kubeconfig c names, if it
// could be read (nil: nothing could).
func (t *tree) problems(ps []Problem, c *Config) *Error {
	e := &Error{Problems: ps}
	for i := range ps {
		if ps[i].Line == 0 {
			ps[i].Line = t.line(ps[i].Path)
		}
	}
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(lineOrder(a), lineOrder(b)), cmp.Compare(t.order(a.Path), t.order(b.Path)))
	})
	if c != nil && c.Kubeconfig != "" && filepath.IsAbs(c.Kubeconfig) {
		e.Kubeconfig, e.KubeconfigLine = c.Kubeconfig, t.line("kubeconfig")
	}
	return e
}

// under reports whether path is one of refused, or below one.
func under(path string, refused map[string]bool) bool {
	for path != "" {
		if refused[path] {
			return true
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return false
}

func lineOrder(p Problem) int {
	if p.Line == 0 {
		return math.MaxInt
	}
	return p.Line
}

// MaxRenew bounds slots.renew: a holder whose shutdown was given up keeps
// its slot until its renewals have stopped for 3 periods, so a longer
// period would keep a node's slot from the others for more than half an
// hour (3 × 10m), past slots.warnAfter's default.
const MaxRenew = 10 * time.Minute

// check validates the slots section: one problem per mistake, each naming
// its key and the fix. apiTimeout is the configuration's, which bounds a
// renewal; renewSet says whether the file set slots.renew (a derived one
// is not held to it).
func (s *Slots) check(apiTimeout time.Duration, renewSet bool, drainTimeout time.Duration) []Problem {
	var ps []Problem
	bad := func(path, format string, args ...any) {
		ps = append(ps, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Gate == "false" {
		// YAML 1.1 reads an unquoted off as false.
		s.Gate = GateOff
	}
	switch s.Gate {
	case GateOff, GateOptional, GateRequired:
	default:
		bad("slots.gate", "%q is not a gate mode; use off, optional or required", s.Gate)
	}
	switch s.Queue {
	case QueueAuto, QueueAlways, QueueNever:
	default:
		bad("slots.queue", "%q is not a queue mode; use auto, always or never", s.Queue)
	}
	if s.QueueFor.D() < time.Minute {
		bad("slots.queueFor", "%s is too short for a queued reboot to be admitted; use 1m or more (default 24h)", s.QueueFor.D())
	}
	if s.MaxUnavailable < 1 {
		bad("slots.maxUnavailable", "must be 1 or more; slots.gate: off turns the gate off")
	}
	if len(validation.IsDNS1123Label(s.Namespace)) > 0 {
		bad("slots.namespace", "%q is not a namespace name; use at most 63 lower case letters, digits and '-', "+
			"starting and ending with a letter or digit", s.Namespace)
	}
	if len(validation.IsDNS1123Subdomain(s.Lease)) > 0 {
		bad("slots.lease", "%q is not a Lease name; use at most 253 lower case letters, digits, '-' and '.', "+
			"each part between dots starting and ending with a letter or digit", s.Lease)
	}
	// The record stores each entry's period in whole seconds: 1500ms
	// would be read back as 1s by the other nodes, which would free the
	// slot after 3s of silence.
	r := s.Renew.D()
	switch {
	case r%time.Second != 0:
		use := (r.Truncate(time.Second) + time.Second).String()
		if d := r.Truncate(time.Second); d > 0 {
			use = d.String() + " or " + use
		}
		bad("slots.renew", "%s must be whole seconds (the slots record stores seconds); use %s", r, use)
	case renewSet && r < apiTimeout:
		// A renewal is one write bounded by 2 × apiTimeout; others free
		// a holder silent for 3 periods: a period shorter than one
		// request would free slots whose renewals are only slow.
		bad("slots.renew", "%s must be at least apiTimeout (%s); raise slots.renew or lower apiTimeout", r, apiTimeout)
	case r > MaxRenew:
		bad("slots.renew", "%s must be at most %s (a given-up shutdown keeps its slot for 3 periods); lower slots.renew", r, MaxRenew)
	}
	if s.Window != nil {
		w := s.Window
		if pw, err := window.Parse(w.Days, w.Start, w.End, w.TimeZone); err == nil {
			// The node agent admits a queued reboot only drainTimeout
			// before the window closes (its node is down by then): a
			// window never open longer admits none.
			longest := time.Duration(0)
			t := time.Date(2026, 1, 5, 0, 0, 0, 0, pw.Location()) // a Monday: a week of openings
			for range 8 {
				open, close := pw.Next(t)
				if open.IsZero() {
					break
				}
				longest, t = max(longest, close.Sub(open)), close
			}
			if longest <= drainTimeout {
				bad("slots.window", "it is open at most %s at a time, no longer than drainTimeout (%s): the node agent admits a queued reboot only "+
					"drainTimeout before the window closes, so none ever would be; widen the window or lower drainTimeout", longest, drainTimeout)
			}
		} else {
			var we *window.Error
			if !errors.As(err, &we) {
				we = &window.Error{Fields: []window.FieldError{{Msg: err.Error()}}}
			}
			for _, f := range we.Fields {
				path := "slots.window"
				if f.Field != "" {
					path += "." + f.Field
				}
				bad(path, "%s", f.Msg)
			}
		}
	}
	seen := map[string]bool{}
	for i, p := range s.Pools {
		at := fmt.Sprintf("slots.pools[%d].", i)
		switch {
		case p.Name == "":
			bad(at+"name", "each pool needs a name; add one")
		case seen[p.Name]:
			bad(at+"name", "%q is the name of an earlier pool; give each pool a name of its own", p.Name)
		}
		seen[p.Name] = true
		if p.MaxUnavailable < 1 {
			bad(at+"maxUnavailable", "must be 1 or more")
		}
		if _, err := labels.Parse(p.Selector); err != nil || strings.TrimSpace(p.Selector) == "" {
			bad(at+"selector", "%q is not a label selector; write one such as \"pool=gpu\" or \"zone in (a,b)\"", p.Selector)
		}
	}
	return ps
}

// yamlLine is how the decoder's YAML parser places a message:
// "line 3: key "a" already set in map".
var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// yamlProblems turns the YAML parser's error into problems, one for each
// of its lines ("yaml: unmarshal errors:" lists several).
func yamlProblems(err error) []Problem {
	s := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	s = strings.TrimPrefix(s, "yaml: ")
	s = strings.TrimPrefix(s, "unmarshal errors:")
	var ps []Problem
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		p := Problem{Msg: l}
		if m := yamlLine.FindStringSubmatch(l); m != nil {
			p.Line, _ = strconv.Atoi(m[1])
			p.Msg = m[2]
		}
		if strings.Contains(p.Msg, "already set in map") {
			p.Msg += "; keep one of them"
		} else {
			p.Msg += "; the file is not valid YAML: fix the YAML there"
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		ps = []Problem{{Msg: "not valid YAML"}}
	}
	return ps
}

// decodeProblem words the decoder's error: the key's path and what it
// wants, in place of Go's "json: cannot unmarshal string into Go struct
// field Slots.slots.maxUnavailable of type int".
func decodeProblem(err error, t *tree) Problem {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// encoding/json's path has no list indices: a value in a list is
		// placed at the list.
		p := typeProblem(te, te.Field, t.node(te.Field))
		if p.Line == 0 {
			p.Line = t.line(te.Field)
		}
		return p
	}
	s := err.Error()
	s = strings.TrimPrefix(s, "error unmarshaling JSON: while decoding JSON: ")
	s = strings.TrimPrefix(s, "error converting YAML to JSON: ")
	if k, ok := strings.CutPrefix(s, "json: unknown field "); ok {
		// Only without a tree (see Parse): no path, no line.
		k, _ = strconv.Unquote(k)
		return Problem{Path: join("", k), Msg: "unknown key; see gnsh-config(5) for the keys"}
	}
	return Problem{Msg: strings.ReplaceAll(s, "\n", " ")}
}

// typeProblem names the key at path ("" for the file as a whole), whose
// value n (nil if not known) does not fit, and the type it wants.
func typeProblem(te *json.UnmarshalTypeError, path string, n *yaml3.Node) Problem {
	got, v, _ := strings.Cut(te.Value, " ") // "number 2.5"
	p := Problem{Path: path}
	if n != nil {
		p.Line = n.Line
	}
	if te.Type == durationType {
		// Duration words its own Value.
		p.Msg = fmt.Sprintf("must be a positive duration such as 90s, 10m or 1h (or seconds), not %s", te.Value)
		return p
	}
	want := "a value of type " + te.Type.String()
	switch te.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "a whole number"
	case reflect.Bool:
		want = "true or false"
	case reflect.String:
		want = "a string"
	case reflect.Slice, reflect.Array:
		want = "a list"
	case reflect.Struct, reflect.Map:
		want = "a map of keys"
	}
	fix := ""
	switch got {
	case "string":
		got = "a string"
		switch {
		case n != nil && n.Style&(yaml3.SingleQuotedStyle|yaml3.DoubleQuotedStyle) != 0:
			got, fix = "a quoted string", "; leave out the quotes"
		case n != nil:
			got = strconv.Quote(n.Value)
		}
	case "number":
		got = "a number"
		if v == "" && n != nil {
			v = n.Value // encoding/json does not say it for a map or a list
		}
		if v != "" {
			got = v
			if want == "a whole number" && !strings.ContainsAny(v, ".eE") {
				p.Msg = v + " is out of range"
				return p
			}
		}
	case "array":
		got = "a list"
	case "object":
		got = "a map"
	case "bool":
		got = "true or false"
	}
	if path == "" {
		p.Line = 1
		p.Msg = "the file must be " + want + " (key: value lines), not " + got
		return p
	}
	p.Msg = fmt.Sprintf("must be %s, not %s%s", want, got, fix)
	return p
}
