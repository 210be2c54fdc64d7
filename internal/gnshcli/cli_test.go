package gnshcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/version"
)

// walked is one command of the tree as an admin types it.
type walked struct {
	path []string // "slots", "release"
	cmd  *cli.Command
}

func (w walked) String() string { return strings.Join(append([]string{"gnsh"}, w.path...), " ") }

// commandTree walks gnsh's real command tree: every command and
// subcommand, legacy ones (whose grammar is systemd's) left out.
func commandTree(t *testing.T) []walked {
	t.Helper()
	env, _, _ := testEnv(t)
	var code int
	app := newApp(env, &code)
	var out []walked
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if dispatch.IsLegacy(c.Name) || c.Hidden {
				continue
			}
			p := append(append([]string{}, prefix...), c.Name)
			out = append(out, walked{p, c})
			walk(p, c.Subcommands)
		}
	}
	walk(nil, app.Commands)
	if len(out) < 11 {
		t.Fatalf("only %d commands found", len(out))
	}
	return out
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	env, out, errb := testEnv(t)
	code = Run(context.Background(), append([]string{"gnsh"}, args...), env)
	return code, out.String(), errb.String()
}

// Every command's --help fits a screen: what it does, usage, the options
// and EXAMPLES, pointing at the man page for the depth; no "help, h"
// command listed.
func TestEveryCommandHelpIsShort(t *testing.T) {
	for _, w := range append([]walked{{}}, commandTree(t)...) {
		args := append(append([]string{}, w.path...), "--help")
		code, out, errb := run(t, args...)
		name := w.String()
		if code != 0 || errb != "" {
			t.Errorf("%s --help: exit %d, stderr %q", name, code, errb)
			continue
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		limit := 25
		if w.cmd == nil {
			limit = 34 // gnsh --help lists every command
		}
		if len(lines) > limit {
			t.Errorf("%s --help: %d lines, more than %d:\n%s", name, len(lines), limit, out)
		}
		for _, l := range lines {
			if n := len([]rune(l)); n > helpWidth {
				t.Errorf("%s --help: a line of %d columns: %q", name, n, l)
			}
		}
		for _, want := range []string{"\nEXAMPLES:\n", "\nSee gnsh(8)"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help lacks %q:\n%s", name, want, out)
			}
		}
		for _, bad := range []string{"help, h", "Incorrect Usage", "[command options]"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s --help has %q:\n%s", name, bad, out)
			}
		}
		// A command with subcommands shows how to run them (issue 19:
		// "gnsh config" alone), and the command alone if it runs alone.
		if w.cmd != nil && len(w.cmd.Subcommands) > 0 {
			_, usage, _ := strings.Cut(out, "\nUSAGE:\n")
			usage, _, _ = strings.Cut(usage, "\n\n")
			want := "  " + name + " COMMAND [OPTIONS] [ARGS...]"
			if name == "gnsh slots" { // lists the slots alone
				want = "  " + name + " [OPTIONS]\n" + want
			}
			if usage != want {
				t.Errorf("%s --help: usage\n%s\nwant\n%s", name, usage, want)
			}
		}
		// gnsh help COMMAND… is the same text.
		if w.cmd != nil {
			if code, hout, _ := run(t, append([]string{"help"}, w.path...)...); code != 0 || hout != out {
				t.Errorf("gnsh help %s: exit %d, not the --help text:\n%s", strings.Join(w.path, " "), code, hout)
			}
		}
	}
}

// oneUsageLine checks an error of the command line: exit 1, nothing on
// stdout, one line on stderr starting "gnsh: " and pointing at the
// command's --help.
func oneUsageLine(t *testing.T, cmd string, args []string, want string) {
	t.Helper()
	code, out, errb := run(t, args...)
	see := "; see '" + cmd + " --help'\n"
	if code != 1 || out != "" || strings.Count(errb, "\n") != 1 || !strings.HasPrefix(errb, "gnsh: ") ||
		!strings.HasSuffix(errb, see) || !strings.Contains(errb, want) {
		t.Errorf("gnsh %s: exit %d, stdout %q, stderr %q; want exit 1, one line with %q ending %q",
			strings.Join(args, " "), code, out, errb, want, see)
	}
}

// Every command refuses an unknown option, an option without its value
// and a stray argument in one line, exit 1, with no help dump.
func TestEveryCommandUsageErrorIsOneLine(t *testing.T) {
	oneUsageLine(t, "gnsh", []string{"--bogus"}, "unknown option --bogus")
	oneUsageLine(t, "gnsh", []string{"frobnicate"}, `unknown command "frobnicate"`)
	for _, w := range commandTree(t) {
		name := w.String()
		oneUsageLine(t, name, append(append([]string{}, w.path...), "--bogus"), "unknown option --bogus")
		for _, f := range w.cmd.Flags {
			df, ok := f.(cli.DocGenerationFlag)
			if !ok || !df.TakesValue() {
				continue
			}
			n := f.Names()[0]
			oneUsageLine(t, name, append(append([]string{}, w.path...), "--"+n), "--"+n+" needs a value")
		}
		want, stray := "takes no arguments", []string{"extra"}
		switch {
		case len(w.cmd.Subcommands) > 0:
			want = `unknown command "extra"`
		case w.cmd.Name == "plan":
			want = `plan needs a command`
		case w.cmd.ArgsUsage == "[FILE]":
			want, stray = "takes one FILE at most", []string{"a.yaml", "extra"}
		}
		oneUsageLine(t, name, append(append([]string{}, w.path...), stray...), want)
	}
	// A required option left out: one line, no help, no other error.
	oneUsageLine(t, "gnsh slots release", []string{"slots", "release"}, "slots release needs --node NAME")
	oneUsageLine(t, "gnsh slots release", []string{"slots", "release", "extra"}, `takes no arguments (got "extra")`)
}

func TestVersion(t *testing.T) {
	want := version.Get().String() + "\n"
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if code, out, errb := run(t, args...); code != 0 || out != want || errb != "" {
			t.Errorf("gnsh %s: exit %d, %q, stderr %q; want %q", args[0], code, out, errb, want)
		}
	}
	code, out, _ := run(t, "version", "-o", "json")
	var got version.Info
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got != version.Get() {
		t.Errorf("gnsh version -o json: exit %d, %v: %q", code, err, out)
	}
	if !strings.Contains(out, `"version": `) || !strings.Contains(out, `"go": `) {
		t.Errorf("gnsh version -o json: %s", out)
	}
}

// The legacy commands' --help through gnsh is systemd's text plus the one
// line naming gnsh's own options.
func TestLegacyHelpThroughGnsh(t *testing.T) {
	code, out, errb := run(t, "reboot", "--help")
	if code != 0 || errb != "" || !strings.HasPrefix(out, "reboot [OPTIONS...] [ARG]\n\nReboot the system.\n") ||
		!strings.Contains(out, "--no-drain") || !strings.Contains(out, "gnsh-shutdown(8)") {
		t.Errorf("gnsh reboot --help: exit %d, stderr %q:\n%s", code, errb, out)
	}
}

// Every line gnsh writes on stderr for an error starts "gnsh:", whatever
// wrote the message.
func TestReportPrefixesEveryLine(t *testing.T) {
	var b bytes.Buffer
	if code := report(&b, errString("first\ngnsh: second")); code != 1 || b.String() != "gnsh: first\ngnsh: second\n" {
		t.Errorf("exit %d, %q", code, b.String())
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// recKernel records the kernel calls a test run makes (none is made).
type recKernel struct{ calls []string }

func (k *recKernel) Sync() { k.calls = append(k.calls, "sync") }
func (k *recKernel) Reboot(handoff.RebootCmd, string) error {
	k.calls = append(k.calls, "reboot")
	return errors.New("test: reboot(2) recorded")
}

// gnsh help never runs a command: it took `gnsh help shutdown -- now` to
// `gnsh shutdown -- now --help` (a wall message "--help": power off now),
// and with $POSIXLY_CORRECT getopt stops at the first word too. It takes
// command names only, a legacy command's alone; `gnsh help reboot` still
// prints reboot's help.
func TestHelpNeverShutsDown(t *testing.T) {
	for _, tt := range []struct {
		args  []string
		posix bool
		want  string
	}{
		{[]string{"help", "shutdown", "--", "now"}, false, `gnsh: help takes command names only (got "--"); see 'gnsh --help'` + "\n"},
		{[]string{"help", "reboot", "--"}, false, `gnsh: help takes command names only (got "--"); see 'gnsh --help'` + "\n"},
		{[]string{"help", "shutdown", "now"}, true, `gnsh: help shutdown takes nothing after shutdown (got "now"); see 'shutdown --help'` + "\n"},
		{[]string{"help", "poweroff", "-f"}, false, `gnsh: help takes command names only (got "-f"); see 'gnsh --help'` + "\n"},
	} {
		env, out, errb := testEnv(t)
		k := &recKernel{}
		env.Kernel = k
		dialled := 0
		env.DialLogind = func(context.Context) (handoff.Logind, error) { dialled++; return nil, errors.New("test: no bus") }
		env.DialSystemd = func(context.Context) (handoff.Systemd, error) { dialled++; return nil, errors.New("test: no bus") }
		env.LookupEnv = func(k string) (string, bool) { return "", tt.posix && k == "POSIXLY_CORRECT" }
		code := Run(context.Background(), append([]string{"gnsh"}, tt.args...), env)
		if code != 1 || dialled != 0 || len(k.calls) != 0 || out.Len() != 0 || errb.String() != tt.want {
			t.Errorf("%v: exit %d, %d dials, kernel %v, stdout %q, stderr %q; want %q", tt.args, code, dialled, k.calls, out, errb, tt.want)
		}
	}
	code, out, _ := run(t, "help", "reboot")
	if code != 0 || !strings.HasSuffix(out, legacy.HelpLine) {
		t.Errorf("gnsh help reboot: exit %d:\n%s", code, out)
	}
	_, app, _ := run(t, "--help")
	for _, args := range [][]string{{"help"}, {"help", "help"}, {"help", "--help"}} {
		if code, out, errb := run(t, args...); code != 0 || out != app {
			t.Errorf("gnsh %v: exit %d, stderr %q:\n%s", args, code, errb, out)
		}
	}
}
