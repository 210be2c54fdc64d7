package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/gnshcli"
	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/slots"
)

func pages(t *testing.T) map[string][]byte {
	t.Helper()
	srcs, err := filepath.Glob("../*.md")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no pages in install/man: %v", err)
	}
	m := map[string][]byte{}
	for _, src := range srcs {
		name, err := pageName(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		m[name] = b
	}
	for _, want := range []string{"gnsh.8", "gnsh-shutdown.8", "gnsh-config.5"} {
		if m[want] == nil {
			t.Errorf("page %s missing", want)
		}
	}
	return m
}

// TestRender renders every page and checks what man(1) needs: a .TH line
// naming the page and its section, and a NAME section of the form
// "name \- description". With man(1) installed it also formats each page
// with groff's warnings on and fails on any warning.
func TestRender(t *testing.T) {
	dir := t.TempDir()
	man, _ := exec.LookPath("man")
	for name, md := range pages(t) {
		roff := render(md, "1.2.3")
		title, section := strings.TrimSuffix(name, filepath.Ext(name)), filepath.Ext(name)[1:]
		th := regexp.MustCompile(`(?m)^\.TH ` + regexp.QuoteMeta(title) + ` ` + section + ` "[^"]*" "gnsh 1\.2\.3" "[^"]+"$`)
		if !th.Match(roff) {
			t.Errorf("%s: no .TH %s %s line with the version:\n%.300s", name, title, section, roff)
		}
		if !regexp.MustCompile(`(?m)^\.SH NAME\n` + regexp.QuoteMeta(title) + ` \\- \S`).Match(roff) {
			t.Errorf("%s: no NAME section %q", name, title+` \- …`)
		}
		if bytes.Contains(roff, []byte("@VERSION@")) {
			t.Errorf("%s: @VERSION@ left", name)
		}
		// Markdown that md2man took for a link or left as emphasis markers.
		if bytes.Contains(roff, []byte(`\[la]`)) || bytes.Contains(roff, []byte("**")) {
			t.Errorf("%s: a stray link or ** in the roff", name)
		}
		if man == "" {
			continue
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, roff, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(man, "--warnings", "-E", "UTF-8", "-l", path)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat", "LC_ALL=C.UTF-8")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil || errb.Len() > 0 {
			t.Errorf("man -l %s: %v\n%s", name, err, errb.String())
		}
		if !regexp.MustCompile(`NAME\n +` + regexp.QuoteMeta(title) + ` +- +\S`).MatchString(out.String()) {
			t.Errorf("man -l %s: no NAME section in the formatted page:\n%.400s", name, out.String())
		}
	}
	if man == "" {
		t.Log("man(1) not installed: pages not formatted (apt-get install man-db groff-base)")
	}
}

// theApp returns gnsh's real command tree, as `gnsh --help` sees it: the
// help printer is swapped for one that keeps the App it is given.
func theApp(t *testing.T) *cli.App {
	t.Helper()
	var app *cli.App
	saved := cli.HelpPrinter
	defer func() { cli.HelpPrinter = saved }()
	cli.HelpPrinter = func(_ io.Writer, _ string, data any) {
		if a, ok := data.(*cli.App); ok {
			app = a
		}
	}
	env := &dispatch.Env{Stdout: io.Discard, Stderr: io.Discard, LookupEnv: func(string) (string, bool) { return "", false }}
	if code := gnshcli.Run(context.Background(), []string{"gnsh", "--help"}, env); code != 0 || app == nil {
		t.Fatalf("gnsh --help: exit %d, app %v", code, app != nil)
	}
	return app
}

// sections splits a page at its "### " headings (.SS), by heading.
func sections(md string) map[string]string {
	m := map[string]string{}
	parts := strings.Split("\n"+md, "\n### ")
	for _, p := range parts[1:] {
		head, body, _ := strings.Cut(p, "\n")
		if i := strings.Index(body, "\n# "); i >= 0 {
			body = body[:i]
		}
		m[head] = head + "\n" + body
	}
	return m
}

// TestGnshPageCoversCLI fails when gnsh has a command or an option that
// gnsh.8 does not describe in that command's own subsection
// ("### gnsh NAME …"), so the page cannot silently go stale.
func TestGnshPageCoversCLI(t *testing.T) {
	md := string(pages(t)["gnsh.8"])
	secs := sections(md)
	app := theApp(t)
	n := 0
	for _, c := range app.VisibleCommands() {
		if c.Name == "help" {
			if !strings.Contains(md, "### gnsh help") {
				t.Errorf("gnsh.8: no subsection for gnsh help")
			}
			continue
		}
		var sec string
		for head, body := range secs {
			words := strings.FieldsFunc(strings.TrimPrefix(head, "gnsh "), func(r rune) bool { return r == ' ' || r == '|' })
			if strings.HasPrefix(head, "gnsh ") && len(words) > 0 && (words[0] == c.Name || (len(words) > 3 && words[0] == "shutdown" && contains(words[:4], c.Name))) {
				sec = body
			}
		}
		if sec == "" {
			t.Errorf("gnsh.8: no subsection \"### gnsh %s …\" for the command %s", c.Name, c.Name)
			continue
		}
		n++
		for _, f := range c.VisibleFlags() {
			for _, name := range f.Names() {
				if name == "help" || name == "h" {
					continue
				}
				opt := "--" + name
				if len(name) == 1 {
					opt = "-" + name
				}
				if !regexp.MustCompile(`(^|[^-\w])` + regexp.QuoteMeta(opt) + `\b`).MatchString(sec) {
					t.Errorf("gnsh.8: gnsh %s has %s, not described in its subsection", c.Name, opt)
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d commands checked: the help printer hook did not see the real app?", n)
	}
	for _, want := range []string{"gnsh install", "gnsh uninstall"} {
		if !strings.Contains(md, "### "+want) {
			t.Errorf("gnsh.8: no subsection for %s", want)
		}
	}
}

// TestShutdownPageCoversDrainOptions: gnsh-shutdown.8 describes every
// option gnsh adds to the four legacy grammars.
func TestShutdownPageCoversDrainOptions(t *testing.T) {
	md := string(pages(t)["gnsh-shutdown.8"])
	for _, o := range legacy.DrainLongOptions {
		if !strings.Contains(md, "**--"+o.Name) {
			t.Errorf("gnsh-shutdown.8: --%s not described", o.Name)
		}
	}
	for _, want := range []string{"shutdown**(8)", "halt**(8)", "-f", "API server is down", "drainTimeout", "gnsh agent"} {
		if !strings.Contains(md, want) {
			t.Errorf("gnsh-shutdown.8: %q not mentioned", want)
		}
	}
}

// TestConfigPageCoversKeys: gnsh-config.5 describes every key
// internal/config accepts, the slots.* keys included, each with the
// default of config.Default(); install/gnsh/config.yaml names each too,
// at its place (slots.* indented under slots:).
func TestConfigPageCoversKeys(t *testing.T) {
	md := string(pages(t)["gnsh-config.5"])
	example, err := os.ReadFile("../../gnsh/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := config.Default()
	check := func(typ reflect.Type, val reflect.Value, prefix, indent string) {
		for i := 0; i < typ.NumField(); i++ {
			key, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if key == "" || key == "-" {
				continue
			}
			// The key's paragraph: from its bold name to the next key's,
			// or to the end of the section.
			para := ""
			if i := regexp.MustCompile(`\*\*` + key + `(:\*\*|\*\*, \*\*\w+:\*\*)`).FindStringIndex(md); i != nil {
				para = md[i[0]:]
				if j := regexp.MustCompile(`\n\n( {4})?\*\*\w+(:\*\*|\*\*, )|\n# `).FindStringIndex(para); j != nil {
					para = para[:j[0]]
				}
			}
			// namespace and lease share one paragraph (**namespace**, **lease:**).
			if key == "lease" {
				para = md[strings.Index(md, "**namespace**, **lease:**"):]
				para = para[:strings.Index(para, "\n\n")]
			}
			if para == "" {
				t.Errorf("gnsh-config.5: key %s%s not described", prefix, key)
			} else if want := defaultText(val.Field(i)); want != "" && !strings.Contains(para, want) {
				t.Errorf("gnsh-config.5: %s%s: its default %s not given:\n%s", prefix, key, want, para)
			}
			if !regexp.MustCompile(`(?m)^` + indent + `#? ?` + key + `:`).Match(example) {
				t.Errorf("install/gnsh/config.yaml: key %s%s missing", prefix, key)
			}
		}
	}
	check(reflect.TypeOf(def), reflect.ValueOf(def), "", "")
	check(reflect.TypeOf(def.Slots), reflect.ValueOf(def.Slots), "slots.", "  ")
}

// TestEventsDocumented: the events key of gnsh-config.5 and of the
// annotated config.yaml names every Event reason gnsh posts.
func TestEventsDocumented(t *testing.T) {
	md := string(pages(t)["gnsh-config.5"])
	example, err := os.ReadFile("../../gnsh/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	para := md[strings.Index(md, "**events:**"):]
	para = para[:strings.Index(para, "\n\n")]
	i := strings.Index(string(example), "\nevents:")
	comment := string(example)[strings.LastIndex(string(example)[:i], "\n\n"):i]
	for _, r := range []string{drainer.ReasonDrainStarted, drainer.ReasonDrainFinished, drainer.ReasonDrainFailed, drainer.ReasonHandOff,
		drainer.ReasonUncordoned, drainer.ReasonScheduleCancelled, drainer.ReasonScheduleUncancelled, drainer.ReasonSlotNotChecked,
		slots.ReasonWaiting, slots.ReasonTaken, slots.ReasonReleased, slots.ReasonReclaimed, slots.ReasonHeldLong,
		slots.ReasonQuorumRefused, slots.ReasonQuorumOverride, slots.ReasonReset,
		drainer.ReasonRebootQueued, drainer.ReasonRebootDeferred, drainer.ReasonRebootGivenUp, drainer.ReasonRebootWithdrawn} {
		if !strings.Contains(para, "*"+r+"*") {
			t.Errorf("gnsh-config.5: events does not name %s", r)
		}
		if !strings.Contains(comment, r) {
			t.Errorf("install/gnsh/config.yaml: the events comment does not name %s:%s", r, comment)
		}
	}
}

// defaultText is how gnsh-config.5 writes a default, in bold: **5m**,
// **true**, **gnsh**; "" for a default said in words (unset, derived, a
// map or a list).
func defaultText(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case config.Duration:
		s := x.D().String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return "**" + s + "**"
	case bool:
		return fmt.Sprintf("**%v**", x)
	case int:
		return fmt.Sprintf("**%d**", x)
	case string:
		if x == "" {
			return ""
		}
		return "**" + x + "**"
	case *config.Duration: // slots.wait: drainTimeout's
		if x == nil {
			return "**drainTimeout**"
		}
	}
	return ""
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
