package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
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
	if err != nil || c != Default() {
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

func TestLoadErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"drian: false\n", `unknown key "drian"`},
		{"drainTimeout: soon\n", `"soon": use a duration such as 90s, 10m or 1h`},
		{"drainTimeout: 0s\n", "must be positive"},
		{"podGracePeriod: -1\n", "podGracePeriod must be 0 or more"},
		{"drain: [\n", "yaml"},
		{"drainTimeout: 1m\ndrainTimeout: 2m\n", `: yaml: unmarshal errors: line 2: key "drainTimeout" already set in map`},
	} {
		p := write(t, c.yaml)
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), p+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want …%s…", c.yaml, err, c.want)
		}
	}
}

// The shipped example documents every key with its default value.
func TestExampleIsTheDefault(t *testing.T) {
	c, err := Load("../../install/gnsh/config.yaml")
	if err != nil || c != Default() {
		t.Fatalf("%+v %v", c, err)
	}
	example, _ := os.ReadFile("../../install/gnsh/config.yaml")
	readme, _ := os.ReadFile("../../README.md")
	ty := reflect.TypeOf(Config{})
	for i := 0; i < ty.NumField(); i++ {
		key := ty.Field(i).Tag.Get("json")
		if !strings.Contains(string(example), "\n"+key+":") && !strings.Contains(string(example), "\n#"+key+":") {
			t.Errorf("install/gnsh/config.yaml lacks %s", key)
		}
		if !strings.Contains(string(readme), "| `"+key+"` |") {
			t.Errorf("README.md does not document %s", key)
		}
	}
}

// FuzzParse: any input is either a configuration whose durations are
// positive and whose grace period is not negative, or one line of error
// with the defaults; never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "drain: false\n", "drainTimeout: 90s\nforceDrain: true\n", "podGracePeriod: 0\n",
		"node: [\n", "drian: 1\n", "apiTimeout: 5\nevents: no\n", "a: &x [*x]\n", "drainTimeout: -1s\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			if c != Default() || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q with %+v", err, c)
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
	})
}
