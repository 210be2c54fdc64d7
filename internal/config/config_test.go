package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func write(t *testing.T, s string) string {
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	c, err := Load(filepath.Join(t.TempDir(), "absent.yaml"))
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("absent file: %+v %v", c, err)
	}
	c, err = Load(write(t, "node: worker-3\ndrainTimeout: 90s\nforceDrain: true\napiTimeout: 2\npodGracePeriod: 0\nevents: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node != "worker-3" || c.DrainTimeout.D() != 90*time.Second || !c.ForceDrain || c.APITimeout.D() != 2*time.Second ||
		c.PodGracePeriod == nil || *c.PodGracePeriod != 0 || c.Events || !c.Drain || c.UnreachableAfter != Default().UnreachableAfter {
		t.Fatalf("%+v", c)
	}
}

func TestLoadSlots(t *testing.T) {
	c, err := Load(write(t, "drainTimeout: 7m\nslots:\n  gate: required\n  maxUnavailable: 3\n  settle: 45s\n  pools:\n  - name: gpu\n    selector: pool=gpu\n    maxUnavailable: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Slots
	if s.Gate != GateRequired || s.MaxUnavailable != 3 || s.Settle.D() != 45*time.Second || len(s.Pools) != 1 ||
		s.Pools[0] != (Pool{Name: "gpu", Selector: "pool=gpu", MaxUnavailable: 1}) || s.Lease != "reboot-slots" || s.Namespace != "gnsh" {
		t.Fatalf("%+v", s)
	}
	if c.SlotWait() != 7*time.Minute {
		t.Fatalf("slot wait %s, want drainTimeout", c.SlotWait())
	}
	for _, off := range []string{"off", `"off"`, "false"} {
		if c, err = Load(write(t, "slots:\n  gate: "+off+"\n")); err != nil || c.Slots.Gate != GateOff {
			t.Errorf("gate: %s: %q %v", off, c.Slots.Gate, err)
		}
	}
	c, err = Load(write(t, "slots:\n  wait: 2m\n"))
	if err != nil || c.SlotWait() != 2*time.Minute {
		t.Fatalf("%v %s", err, c.SlotWait())
	}
}

// slots.renew within its bounds; the names Kubernetes takes.
func TestLoadSlotsBounds(t *testing.T) {
	for _, y := range []string{
		"slots:\n  renew: 5s\n",                // = apiTimeout
		"apiTimeout: 2s\nslots:\n  renew: 2\n", // seconds
		"slots:\n  renew: 10m\n",               // MaxRenew
		"slots:\n  lease: reboot-slots.v2\n",   // a subdomain
		"slots:\n  namespace: " + strings.Repeat("a", 63) + "\n",
	} {
		if _, err := Parse([]byte(y)); err != nil {
			t.Errorf("%q: %v", y, err)
		}
	}
	// Left out, renew follows a longer apiTimeout (whole seconds up).
	// At most MaxRenew: a file valid before slots existed (apiTimeout:
	// 15m) stays valid.
	for api, want := range map[string]time.Duration{"2s": 10 * time.Second, "10s": 10 * time.Second, "30s": 30 * time.Second,
		"12500ms": 13 * time.Second, "15m": MaxRenew} {
		c, err := Parse([]byte("apiTimeout: " + api + "\n"))
		if err != nil || c.Slots.Renew.D() != want {
			t.Errorf("apiTimeout %s: renew %s, %v; want %s", api, c.Slots.Renew.D(), err, want)
		}
	}
}

// The annotated config file as shipped (packages install it as
// /etc/gnsh/config.yaml) stays valid when an admin raises apiTimeout
// alone: slots.renew is left out there, and follows.
func TestShippedConfigFollowsAPITimeout(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "install", "gnsh", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, api := range []string{"5s", "15s", "30s", "15m"} {
		y := regexp.MustCompile(`(?m)^apiTimeout: .*$`).ReplaceAllString(string(b), "apiTimeout: "+api)
		if _, err := Parse([]byte(y)); err != nil {
			t.Errorf("apiTimeout %s: %v", api, err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"drian: false\n", `line 1: drian: unknown key; did you mean drain?`},
		{"drainTimeout: soon\n", `line 1: drainTimeout: must be a positive duration such as 90s, 10m or 1h (or seconds), not "soon"`},
		{"drainTimeout: 0s\n", `drainTimeout: must be a positive duration such as 90s, 10m or 1h (or seconds), not "0s"`},
		{"slots:\n  wait: -1s\n", `line 2: slots.wait: must be a positive duration`},
		{"podGracePeriod: -1\n", "line 1: podGracePeriod: must be 0 or more seconds; leave it out for each pod's own"},
		{"drain: [\n", "line 1: did not find expected node content; the file is not valid YAML"},
		{"drainTimeout: 1m\ndrainTimeout: 2m\n", `: line 2: key "drainTimeout" already set in map; keep one of them`},
		{"slots:\n  gate: maybe\n", `line 2: slots.gate: "maybe" is not a gate mode; use off, optional or required`},
		{"slots:\n  maxUnavailable: 0\n", "line 2: slots.maxUnavailable: must be 1 or more; slots.gate: off turns the gate off"},
		{"slots:\n  lease: Reboot_Slots\n", `slots.lease: "Reboot_Slots" is not a Lease name; use at most 253 lower case letters`},
		{"slots:\n  lease: a..b\n", `slots.lease: "a..b" is not a Lease name`},
		{"slots:\n  lease: a.-b\n", `slots.lease: "a.-b" is not a Lease name`},
		{"slots:\n  namespace: gnsh.x\n", `slots.namespace: "gnsh.x" is not a namespace name; use at most 63`},
		{"slots:\n  namespace: " + strings.Repeat("a", 64) + "\n", "is not a namespace name"},
		{"slots:\n  renew: 1ms\n", "slots.renew: 1ms must be whole seconds (the slots record stores seconds); use 1s"},
		{"slots:\n  renew: 1500ms\n", "slots.renew: 1.5s must be whole seconds (the slots record stores seconds); use 1s or 2s"},
		{"slots:\n  renew: 4s\n", "line 2: slots.renew: 4s must be at least apiTimeout (5s); raise slots.renew or lower apiTimeout"},
		{"apiTimeout: 30s\nslots:\n  renew: 10s\n", "line 3: slots.renew: 10s must be at least apiTimeout (30s)"},
		{"slots:\n  renew: 11m\n", "slots.renew: 11m0s must be at most 10m0s"},
		{"slots:\n  maxUnavailable: \"2\"\n", "line 2: slots.maxUnavailable: must be a whole number, not a quoted string; leave out the quotes"},
		{"slots:\n  maxUnavailable: two\n", `line 2: slots.maxUnavailable: must be a whole number, not "two"`},
		{"slots:\n  maxUnavailable: 1.5\n", "slots.maxUnavailable: must be a whole number, not 1.5"},
		{"slots:\n  maxUnavailable: 99999999999999999999\n", "slots.maxUnavailable: 100000000000000000000 is out of range"},
		{"slots:\n  pools: {gpu: 1}\n", "line 2: slots.pools: must be a list, not a map"},
		{"slots:\n  pools:\n  - {name: a, selector: p=1, maxUnavailable: one}\n", `line 3: slots.pools[0].maxUnavailable: must be a whole number, not "one"`},
		// encoding/json names the key without the list's index: the tree
		// finds which item it was.
		{"slots:\n  pools:\n  - {name: a, selector: p=1, maxUnavailable: 1}\n  - {name: b, selector: p=2,\n     maxUnavailable: '2'}\n",
			"line 5: slots.pools[1].maxUnavailable: must be a whole number, not a quoted string"},
		{"slots: on\n", "line 1: slots: must be a map of keys, not true or false"},
		{"events: \"no\"\n", "events: must be true or false, not a quoted string; leave out the quotes"},
		{"podGracePeriod: 1.5\n", "podGracePeriod: must be a whole number, not 1.5"},
		{"node: [a]\n", "line 1: node: must be a string, not a list"},
		{"- drain\n", "line 1: the file must be a map of keys (key: value lines), not a list"},
		{"slots:\n  pools:\n  - name: a\n    selector: 'pool in (x'\n    maxUnavailable: 1\n", `line 4: slots.pools[0].selector: "pool in (x" is not a label selector`},
		{"slots:\n  pools:\n  - name: a\n    selector: ''\n    maxUnavailable: 1\n", `slots.pools[0].selector: "" is not a label selector`},
		{"slots:\n  pools:\n  - name: a\n    selector: p=1\n    maxUnavailable: 0\n", "line 5: slots.pools[0].maxUnavailable: must be 1 or more"},
		{"slots:\n  pools:\n  - {name: a, selector: p=1, maxUnavailable: 1}\n  - {name: a, selector: p=2, maxUnavailable: 1}\n",
			`line 4: slots.pools[1].name: "a" is the name of an earlier pool; give each pool a name of its own`},
		{"slots:\n  pools:\n  - selector: p=1\n    maxUnavailable: 1\n", "line 3: slots.pools[0].name: each pool needs a name; add one"},
		{"slots:\n  gaet: off\n", `line 2: slots.gaet: unknown key; did you mean gate?`},
		// Issue 19: the nested key's path, not only its name.
		{"slots: {maxUnavalable: 2}\n", `line 1: slots.maxUnavalable: unknown key; did you mean maxUnavailable?`},
		{"slots:\n  pools:\n  - name: a\n    selektor: p=1\n", `line 4: slots.pools[0].selektor: unknown key; did you mean selector?`},
		{"nodes: [a]\n", "line 1: nodes: unknown key; did you mean node?"},
		{"colour: blue\n", "line 1: colour: unknown key; the keys at the top of the file are node, kubeconfig, drain,"},
		{"slots:\n  colour: blue\n", "line 2: slots.colour: unknown key; the keys in slots are gate, kubeconfig, maxUnavailable,"},
		{"\"a\\nb\": 1\n", `line 1: "a\nb": unknown key`},
		// Merge keys are read as the decoder reads them.
		{"base: &b {gate: required}\nslots:\n  <<: *b\n", "line 1: base: unknown key"},
	} {
		p := write(t, c.yaml)
		got, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), p+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want …%s…", c.yaml, err, c.want)
		}
		var ce *Error
		if !errors.As(err, &ce) || ce.File != p || len(ce.Lines()) != len(ce.Problems) {
			t.Errorf("%q: %#v, want an *Error naming %s", c.yaml, err, p)
		}
		// Bad input changes nothing: the defaults, whole.
		if !reflect.DeepEqual(got, Default()) {
			t.Errorf("%q: %+v, want the defaults", c.yaml, got)
		}
	}
}

// Every problem of a file, each with its path and line, in the order of
// the file: not only the first unknown key (issue 19).
func TestLoadEveryProblem(t *testing.T) {
	p := write(t, "drian: false\nslots:\n  maxUnavalable: 2\n  gate: maybe\n  pools:\n  - name: gpu\n    selektor: pool=gpu\n")
	_, err := Load(p)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("%v", err)
	}
	want := []string{
		p + ": line 1: drian: unknown key; did you mean drain?",
		p + ": line 3: slots.maxUnavalable: unknown key; did you mean maxUnavailable?",
		// The values with the keys, in one run; the selector the typo
		// meant is not said to be missing.
		p + `: line 4: slots.gate: "maybe" is not a gate mode; use off, optional or required`,
		p + ": line 6: slots.pools[0].maxUnavailable: must be 1 or more",
		p + ": line 7: slots.pools[0].selektor: unknown key; did you mean selector?",
	}
	if !reflect.DeepEqual(ce.Lines(), want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(ce.Lines(), "\n"), strings.Join(want, "\n"))
	}
	// The values are judged with the keys: each problem found.
	_, err = Load(write(t, "slots:\n  gate: maybe\n  maxUnavailable: 0\n  pools:\n  - {name: a, selector: '', maxUnavailable: 0}\n"))
	if !errors.As(err, &ce) || len(ce.Problems) != 4 || ce.Problems[0].Line != 2 || ce.Problems[3].Path != "slots.pools[0].maxUnavailable" {
		t.Errorf("%v", err)
	}
	if !strings.Contains(err.Error(), ": 4 problems: line 2: slots.gate: ") {
		t.Errorf("%v", err)
	}
}

// One run finds every problem of the file: unknown keys, every value of
// the wrong type (not only the first), and the checks of the values that
// could be read; never the range check of a value already refused for
// its type (issue 19: drainTimeout: -5s hid slots.gate and
// slots.maxUnavailable).
func TestLoadEveryProblemAtOnce(t *testing.T) {
	for _, tt := range []struct {
		file string
		want []string
	}{
		{"drainTimeout: -5s\nslots: {gate: maybe, maxUnavailable: 0}\n", []string{
			`line 1: drainTimeout: must be a positive duration such as 90s, 10m or 1h (or seconds), not "-5s"`,
			`line 2: slots.gate: "maybe" is not a gate mode; use off, optional or required`,
			"line 2: slots.maxUnavailable: must be 1 or more; slots.gate: off turns the gate off",
		}},
		{"drian: false\napiTimeout: soon\nslots:\n  maxUnavailable: \"2\"\n  gate: maybe\n  renew: 2s\n  pools:\n" +
			"  - {name: a, selector: '', maxUnavailable: x}\n  - {name: a, selector: p=1, maxUnavailable: 1}\n  - 7\npodGracePeriod: -1\nevents: 'no'\n",
			[]string{
				"line 1: drian: unknown key; did you mean drain?",
				`line 2: apiTimeout: must be a positive duration such as 90s, 10m or 1h (or seconds), not "soon"`,
				"line 4: slots.maxUnavailable: must be a whole number, not a quoted string; leave out the quotes",
				`line 5: slots.gate: "maybe" is not a gate mode; use off, optional or required`,
				// Not held to apiTimeout, whose value was refused.
				// In the order of the file on one line too.
				`line 8: slots.pools[0].selector: "" is not a label selector; write one such as "pool=gpu" or "zone in (a,b)"`,
				`line 8: slots.pools[0].maxUnavailable: must be a whole number, not "x"`,
				`line 9: slots.pools[1].name: "a" is the name of an earlier pool; give each pool a name of its own`,
				"line 10: slots.pools[2]: must be a map of keys, not 7",
				"line 11: podGracePeriod: must be 0 or more seconds; leave it out for each pod's own",
				"line 12: events: must be true or false, not a quoted string; leave out the quotes",
			}},
		{"slots: on\ndrainTimeout: 0\n", []string{
			"line 1: slots: must be a map of keys, not true or false",
			`line 2: drainTimeout: must be a positive duration such as 90s, 10m or 1h (or seconds), not "0"`,
		}},
	} {
		_, err := Parse([]byte(tt.file))
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: %v", tt.file, err)
			continue
		}
		if got := ce.Lines(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q:\ngot\n%s\nwant\n%s", tt.file, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
}

// An invalid file still says which kubeconfig it names: gnsh config check
// checks it with the rest (issue 19).
func TestErrorNamesKubeconfig(t *testing.T) {
	_, err := Parse([]byte("drainTimeout: soon\nkubeconfig: /etc/gnsh/kc\n"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Kubeconfig != "/etc/gnsh/kc" || ce.KubeconfigLine != 2 {
		t.Fatalf("%#v", err)
	}
	// Not when the key itself is the problem.
	for _, f := range []string{"kubeconfig: [a]\ndrain: 1\n", "kubeconfig: rel\ndrain: 1\n"} {
		if _, err := Parse([]byte(f)); !errors.As(err, &ce) || ce.Kubeconfig != "" {
			t.Errorf("%q: %#v", f, err)
		}
	}
}

// A file that cannot be read is not an *Error: the drainer tells "not
// root" from "invalid" by fs.ErrPermission.
func TestLoadUnreadable(t *testing.T) {
	_, err := Load(t.TempDir())
	var ce *Error
	if err == nil || errors.As(err, &ce) {
		t.Fatalf("a directory: %v", err)
	}
}

// The shipped example documents every key with its default value.
func TestExampleIsTheDefault(t *testing.T) {
	c, err := Load("../../install/gnsh/config.yaml")
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("%+v %v", c, err)
	}
	example, _ := os.ReadFile("../../install/gnsh/config.yaml")
	man, _ := os.ReadFile("../../install/man/gnsh-config.5.md")
	ty := reflect.TypeOf(Config{})
	for i := 0; i < ty.NumField(); i++ {
		key, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
		if !strings.Contains(string(example), "\n"+key+":") && !strings.Contains(string(example), "\n#"+key+":") {
			t.Errorf("install/gnsh/config.yaml lacks %s", key)
		}
		if !strings.Contains(string(man), "\n**"+key+":**") {
			t.Errorf("install/man/gnsh-config.5.md does not document %s", key)
		}
	}
	for _, key := range keyNames(reflect.TypeOf(Slots{})) {
		if !strings.Contains(string(man), "**"+key+":**") && !strings.Contains(string(man), "**"+key+"**") {
			t.Errorf("install/man/gnsh-config.5.md does not document slots.%s", key)
		}
	}
}

// The Ansible role writes only the keys it lists (gnsh_config_keys): the
// list, while the role keeps one, holds every key of Config.
func TestRoleKnowsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../install/ansible/roles/gnsh/vars/main.yml")
	if err != nil || !strings.Contains(string(b), "gnsh_config_keys:") {
		t.Skipf("the role keeps no list of keys (%v)", err)
	}
	for _, key := range keyNames(reflect.TypeOf(Config{})) {
		if !strings.Contains(string(b), "\n  - "+key+"\n") {
			t.Errorf("install/ansible/roles/gnsh/vars/main.yml: gnsh_config_keys lacks %s", key)
		}
	}
}

// FuzzParse: any input is either a configuration whose durations are
// positive and whose grace period is not negative, or one line of error
// with the defaults; never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "drain: false\n", "drainTimeout: 90s\nforceDrain: true\n", "podGracePeriod: 0\n",
		"node: [\n", "drian: 1\n", "apiTimeout: 5\nevents: no\n", "a: &x [*x]\n", "drainTimeout: -1s\n",
		"slots: {maxUnavalable: 2}\n", "slots:\n  pools:\n  - {name: a, selektor: p=1, maxUnavailable: '1'}\n",
		"b: &b {gate: off}\nslots:\n  <<: *b\n", "slots:\n  pools: [*x]\n", "drain: true\nDRAIN: false\n",
		"slots:\n  window: {days: mo-fr, start: 0200, timeZone: Europe/Berln}\n", "slots:\n  window: {days: fri-mon, start: '22:00', end: '24:00'}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			var ce *Error
			if !reflect.DeepEqual(c, Default()) || strings.Contains(err.Error(), "\n") || !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error %q with %+v", err, c)
			}
			for _, l := range ce.Lines() {
				if strings.Contains(l, "\n") || l == "" {
					t.Fatalf("problem %q", l)
				}
			}
			return
		}
		for _, d := range []Duration{c.DrainTimeout, c.APITimeout, c.UnreachableAfter, c.ForceCordonTimeout} {
			if d <= 0 {
				t.Fatalf("non-positive duration in %+v", c)
			}
		}
		if c.PodGracePeriod != nil && *c.PodGracePeriod < 0 {
			t.Fatalf("negative grace in %+v", c)
		}
		r := c.Slots.Renew.D()
		if c.Slots.MaxUnavailable < 1 || r < time.Second || r%time.Second != 0 || r < c.APITimeout.D() || r > MaxRenew || c.SlotWait() <= 0 {
			t.Fatalf("slots out of range in %+v", c.Slots)
		}
	})
}

// The tree finds unknown keys for the decoder, which then reads without
// its own check: a key the tree does not see in a merge list ("<<: [...]")
// would be ignored, a typo silently dropped. Each such file is refused,
// with the key's path.
func TestMergeListUnknownKey(t *testing.T) {
	for _, tt := range []struct{ file, want string }{
		{"<<: [{drian: false}]\n", "line 1: drian: unknown key; did you mean drain?"},
		{"slots:\n  <<: [{maxUnavalable: 2}]\n", "line 2: slots.maxUnavalable: unknown key; did you mean maxUnavailable?"},
		{"slots:\n  pools:\n  - <<: [{name: a, selektor: x=1, maxUnavailable: 1}]\n", "line 3: slots.pools[0].selektor: unknown key; did you mean selector?"},
		{"<<: [&a {node: w1}, {drian: false}]\n", "line 1: drian: unknown key; did you mean drain?"},
		{"!!merge foo: {drain: false}\n", "line 1: foo: unknown key; the keys at the top of the file are " + strings.Join(keyNames(reflect.TypeFor[Config]()), ", ")},
	} {
		_, err := Parse([]byte(tt.file))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: %v, want %s", tt.file, err, tt.want)
		}
	}
	c, err := Parse([]byte("<<: [{drain: false}, {node: w1}]\n"))
	if err != nil || c.Drain || c.Node != "w1" {
		t.Errorf("merge list of known keys: %+v %v", c, err)
	}
}

// FuzzParseStrict: Parse never accepts a file that the decoder alone, told
// to refuse unknown keys, refuses: no key is dropped silently.
func FuzzParseStrict(f *testing.F) {
	for _, s := range []string{"drain: false\n", "<<: [{drian: false}]\n", "slots:\n  <<: [{maxUnavalable: 2}]\n",
		"x: &a {drian: false}\n<<: [*a]\n", "slots:\n  pools:\n  - &p {name: a, selector: p=1, maxUnavailable: 1}\n  - <<: *p\n    name: b\n",
		"DRAIN: false\n", "---\ndrain: true\n---\ndrian: false\n", "!!merge foo: {drain: false}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := Parse(b); err != nil {
			return
		}
		c := Default()
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			t.Fatalf("Parse accepts %q, the strict decoder refuses it: %v", b, err)
		}
	})
}

// A relative kubeconfig names a file relative to the directory gnsh runs
// in: gnsh config check (run by Ansible in its own directory) could pass
// where every reboot from another directory, and the node agent (in /),
// refuses. It is a problem of the file, wherever gnsh runs.
func TestKubeconfigRelative(t *testing.T) {
	for _, kc := range []string{"kubelet.conf", "./kubeconfig", "~/.kube/config"} {
		_, err := Parse([]byte("kubeconfig: " + kc + "\n"))
		want := "line 1: kubeconfig: " + strconv.Quote(kc) + " is not an absolute path"
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %s…", kc, err, want)
		}
	}
	if c, err := Parse([]byte("kubeconfig: /etc/gnsh/kubeconfig\n")); err != nil || c.Kubeconfig != "/etc/gnsh/kubeconfig" {
		t.Errorf("absolute: %+v %v", c, err)
	}
}

// A config path that is a symbolic link to nothing is not "no file, the
// defaults apply" (a gate: required would quietly become optional): it is
// an invalid configuration naming the link and its target (issue 19).
func TestLoadDanglingLink(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	if err := os.Symlink(filepath.Join(dir, "gone.yaml"), p); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	var ce *Error
	want := p + ": a symbolic link to " + filepath.Join(dir, "gone.yaml") + ", which does not exist; point it at the config file, or remove it for the defaults"
	if !errors.As(err, &ce) || err.Error() != want || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("%v, want %s", err, want)
	}
}

// Keys are matched ignoring case, as encoding/json does ("DRAIN: false"
// is drain), so two keys of one map that differ only in case set one key
// twice: the decoder keeps one value and drops the other without a word
// ("drain: true" and "DRAIN: false" kept the drain on; "gate: required"
// and "Gate: off" kept the gate required). Each is refused, as a key set
// twice is.
func TestKeyTwiceInAnotherCase(t *testing.T) {
	for _, tt := range []struct{ file, want string }{
		{"drain: true\nDRAIN: false\n", `line 2: DRAIN: the same key as drain on line 1 (keys are matched ignoring case); keep one of them`},
		{"slots: {gate: required, Gate: off}\n", `line 1: slots.Gate: the same key as slots.gate on line 1 (keys are matched ignoring case); keep one of them`},
		{"slots:\n  pools:\n  - name: a\n    Name: b\n    selector: p=1\n    maxUnavailable: 1\n",
			`line 4: slots.pools[0].Name: the same key as slots.pools[0].name on line 3 (keys are matched ignoring case); keep one of them`},
	} {
		_, err := Parse([]byte(tt.file))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: %v, want %s", tt.file, err, tt.want)
		}
	}
	// One key in another case alone is that key.
	if c, err := Parse([]byte("Drain: false\n")); err != nil || c.Drain {
		t.Errorf("Drain: false: %+v %v", c, err)
	}
}
