package gnshcli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
)

// helpWidth is the width --help is written for.
const helpWidth = 80

// seeAlso ends every command's --help: the depth is in the man page.
const seeAlso = "See gnsh(8) for the details."

// An example is one line of a command's EXAMPLES: the command line and,
// if set, what it does.
type example struct{ line, what string }

// examples holds every command's EXAMPLES, by the command's full name.
// TestEveryCommandHelpIsShort fails for a command without any.
var examples = map[string][]example{
	"gnsh": {
		{"gnsh plan reboot", "what 'reboot' would do on this node, doing nothing"},
		{"gnsh doctor", "check that shutdowns on this node drain first"},
		{"reboot --no-drain", "reboot without draining (see gnsh-shutdown(8))"},
	},
	"gnsh plan": {
		{"gnsh plan reboot", "the drain, the calls, the fallback"},
		{"gnsh plan shutdown -r +30 kernel update", "a reboot in 30 minutes"},
		{"gnsh plan -o json reboot -f", "the same as JSON, every call"},
	},
	"gnsh config": {
		{"gnsh config check", "is /etc/gnsh/config.yaml valid?"},
		{"gnsh config show", "every key in effect, defaults included"},
	},
	"gnsh config check": {
		{"gnsh config check", "/etc/gnsh/config.yaml"},
		{"gnsh config check /tmp/new.yaml", "a file before it is put in place"},
		{"validate: gnsh config check %s", "in an Ansible template task"},
	},
	"gnsh config show": {
		{"gnsh config show", ""},
		{"gnsh config show /tmp/new.yaml", "what that file would change"},
	},
	"gnsh drain": {
		{"gnsh drain --dry-run", "what would be evicted, and why the rest stays"},
		{"gnsh drain --timeout 10m", "drain for maintenance"},
		{"gnsh uncordon", "end the maintenance"},
	},
	"gnsh uncordon": {
		{"gnsh uncordon", "after 'gnsh drain'"},
		{"gnsh uncordon --only-if-ours", "leave an admin's cordon alone"},
	},
	"gnsh status": {
		{"gnsh status", ""},
		{"gnsh status -o json | jq .logind.inhibitors", "one fact, as JSON"},
	},
	"gnsh doctor": {
		{"gnsh doctor", ""},
		{`gnsh doctor -o json | jq '.[] | select(.verdict != "ok")'`, ""},
	},
	"gnsh slots": {
		{"gnsh slots", "with $KUBECONFIG or ~/.kube/config"},
		{"gnsh slots --kubeconfig admin.conf -o json", ""},
		{"gnsh slots release --node worker-3", "free a slot by hand"},
	},
	"gnsh slots release": {
		{"gnsh slots release --node worker-3", "worker-3 will not come back"},
		{"gnsh slots", "who holds a slot now"},
	},
	"gnsh slots reset": {
		{"gnsh slots reset", "a record that cannot be read: start anew"},
		{"gnsh slots reset --force", "free every slot of a readable record too"},
	},
	"gnsh agent": {
		{"systemctl status gnsh.service", "the agent as systemd runs it"},
		{"journalctl -u gnsh.service", "what it did, one line an event"},
	},
	"gnsh token": {
		{"kubectl -n kube-system create token gnsh --bound-object-kind Node \\\n    --bound-object-name n1 --duration 24h | ssh n1 gnsh token install", ""},
		{"gnsh status", "the token's node, expiry and last renewal"},
	},
	"gnsh token install": {
		{"kubectl -n kube-system create token gnsh --bound-object-kind Node \\\n    --bound-object-name n1 --duration 24h | ssh n1 gnsh token install", ""},
		{"... | gnsh token install --server https://10.0.0.1:6443 \\\n    --certificate-authority ca.crt", ""},
	},
	"gnsh install": {
		{"gnsh install --dry-run", "what it would change"},
		{"gnsh install", "on Debian, Ubuntu and RHEL: divert"},
		{"gnsh install --root /mnt/image", "into a mounted image"},
	},
	"gnsh uninstall": {
		{"gnsh uninstall --dry-run", "what it would put back"},
		{"gnsh uninstall", ""},
	},
	"gnsh version": {
		{"gnsh version", ""},
		{"gnsh --version", "the same"},
		{"gnsh version -o json", "version, commit, date, Go, platform"},
	},
}

// finish makes every command of the tree behave alike, whoever wrote it:
// its --help is renderHelp's (no "help" subcommand listed); an error of
// the command line (an unknown option, an option without its value, a
// stray argument, a required option left out) is one line naming the
// command's --help, exit 1, with no help dump. A command takes arguments
// only if ArgsUsage says which; one with subcommands refuses any other
// word. cli's own check of required options (which prints the help) is
// replaced by the same one-line error.
func finish(path string, cmds []*cli.Command) {
	for _, c := range cmds {
		full := path + " " + c.Name
		c.HideHelpCommand = true
		c.OnUsageError = onUsageError(full)
		// Before guard: the usage line names the required options.
		c.CustomHelpTemplate = literal(renderHelp(full, c))
		if !c.SkipFlagParsing {
			guard(full, c)
		}
		finish(full, c.Subcommands)
	}
}

// guard wraps c's action with the checks of its operands and required
// options.
func guard(full string, c *cli.Command) {
	var required []*cli.StringFlag
	for _, f := range c.Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Required {
			sf.Required = false
			required = append(required, sf)
		}
	}
	action := c.Action
	if action == nil {
		action = cli.ShowSubcommandHelp
	}
	c.Action = func(ctx *cli.Context) error {
		if c.ArgsUsage == "" && ctx.NArg() > 0 {
			if len(c.Subcommands) > 0 {
				return usageErr(full, "unknown command %q", ctx.Args().First())
			}
			return usageErr(full, "%s takes no arguments (got %q)", strings.TrimPrefix(full, "gnsh "), ctx.Args().First())
		}
		if c.ArgsUsage != "" && ctx.NArg() > 0 {
			ops, help, err := interspersed(ctx, full)
			switch {
			case err != nil:
				return err
			case help:
				return cli.ShowSubcommandHelp(ctx)
			}
			ctx.Context = context.WithValue(ctx.Context, operandsKey{}, ops)
		}
		for _, f := range required {
			if !ctx.IsSet(f.Name) {
				return usageErr(full, "%s needs --%s %s", strings.TrimPrefix(full, "gnsh "), f.Name, placeholder(f.Usage))
			}
		}
		return action(ctx)
	}
}

type operandsKey struct{}

// operands are the command's arguments that are not options: those
// interspersed sets aside, else cli's.
func operands(ctx *cli.Context) []string {
	if ops, ok := ctx.Context.Value(operandsKey{}).([]string); ok {
		return ops
	}
	return ctx.Args().Slice()
}

// interspersed reads the options among a command's arguments, which cli
// leaves there (it stops at the first argument that is not an option:
// "gnsh config check FILE --skip-kubeconfig"), as cli would have read them
// before: it sets them on ctx and returns the other arguments, and whether
// --help was among them. After "--" every argument is an operand.
func interspersed(ctx *cli.Context, full string) (ops []string, help bool, err error) {
	args := ctx.Args().Slice()
	if a := args[0]; strings.HasPrefix(a, "-") && a != "-" {
		// cli reads every option before the first operand: one left
		// there came after "--".
		return args, false, nil
	}
	fs := flag.NewFlagSet(full, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range ctx.Command.Flags {
		if err := f.Apply(fs); err != nil {
			return nil, false, err
		}
	}
	for len(args) > 0 {
		if args[0] == "--" {
			ops = append(ops, args[1:]...)
			break
		}
		if !strings.HasPrefix(args[0], "-") || args[0] == "-" {
			ops, args = append(ops, args[0]), args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			return nil, false, onUsageError(full)(ctx, err, true)
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			ops = append(ops, rest...)
			break
		}
		args = rest
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "help" || f.Name == "h" {
			help = true
			return
		}
		if err == nil {
			err = ctx.Set(f.Name, f.Value.String())
		}
	})
	return ops, help, err
}

// usageError is a mistake in a command line: one line, "gnsh: " and the
// problem, then where the command's usage is; exit status 1.
type usageError struct{ cmd, msg string }

func (e *usageError) Error() string { return "gnsh: " + e.msg + "; see '" + e.cmd + " --help'" }

func usageErr(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// usagef is usageErr for the command c runs.
func usagef(c *cli.Context, format string, args ...any) error {
	return usageErr(c.Command.HelpName, format, args...)
}

var (
	flagUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	flagNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.+)$`)
	flagBadValue  = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-+([^:]+): (.*)$`)
)

// onUsageError says what the flag package found wrong, in gnsh's words:
// options are written as typed (--node, -o), not as the flag package
// writes them (-node).
func onUsageError(cmd string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		msg := err.Error()
		switch {
		case flagUndefined.MatchString(msg):
			msg = "unknown option " + dashes(flagUndefined.FindStringSubmatch(msg)[1])
		case flagNoValue.MatchString(msg):
			msg = dashes(flagNoValue.FindStringSubmatch(msg)[1]) + " needs a value"
		case flagBadValue.MatchString(msg):
			m := flagBadValue.FindStringSubmatch(msg)
			msg = "invalid " + dashes(m[2]) + " " + m[1] + ": " + m[3]
		}
		return usageErr(cmd, "%s", msg)
	}
}

// dashes writes an option as an admin types it: -o, --node.
func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// report prints err for an admin, every line starting "gnsh:", and
// returns the exit status for it (dispatch.ExitStatus).
func report(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	return dispatch.Report(w, prefixed{err})
}

// prefixed is err with "gnsh: " before each line that lacks it.
type prefixed struct{ err error }

func (p prefixed) Error() string {
	msg := p.err.Error()
	if msg == "" {
		return ""
	}
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "gnsh:") {
			lines[i] = "gnsh: " + l
		}
	}
	return strings.Join(lines, "\n")
}

func (p prefixed) Unwrap() error { return p.err }

// literal is a cli help template that prints text as it is.
func literal(text string) string { return "{{" + strconv.Quote(text) + "}}" }

// renderHelp writes a command's --help: the name and what it does, the
// usage, the description (one to three lines), the subcommands, the
// options, the examples and the man page. Each line fits helpWidth.
func renderHelp(full string, c *cli.Command) string {
	var b strings.Builder
	writeWrapped(&b, full+" - "+c.Usage, "", "  ")
	if c.Description != "" {
		b.WriteString("\n")
		writeWrapped(&b, c.Description, "", "")
	}
	b.WriteString("\nUSAGE:\n")
	usage := c.UsageText
	switch {
	case usage != "":
	case len(c.Subcommands) > 0 && c.Action == nil:
		usage = full + " COMMAND [OPTIONS] [ARGS...]"
	case len(c.Subcommands) > 0:
		// It runs alone too.
		usage = full + usageFlags(c.Flags) + " " + c.ArgsUsage + "\n" + full + " COMMAND [OPTIONS] [ARGS...]"
	default:
		usage = full + usageFlags(c.Flags) + " " + c.ArgsUsage
	}
	for _, l := range strings.Split(usage, "\n") {
		writeWrapped(&b, strings.TrimSpace(l), "  ", "      ")
	}
	if len(c.Subcommands) > 0 {
		b.WriteString("\nCOMMANDS:\n")
		writeCommands(&b, c.Subcommands)
	}
	if opts := renderFlags(c.Flags); opts != "" {
		b.WriteString("\nOPTIONS:\n" + opts)
	}
	b.WriteString("\nEXAMPLES:\n" + renderExamples(examples[full]))
	b.WriteString("\n" + seeAlso + "\n")
	return b.String()
}

// renderAppHelp writes gnsh --help.
func renderAppHelp(a *cli.App) string {
	var b strings.Builder
	writeWrapped(&b, a.Name+" - "+a.Usage, "", "  ")
	b.WriteString("\n")
	writeWrapped(&b, a.Description, "", "")
	b.WriteString("\nUSAGE:\n  gnsh COMMAND [OPTIONS] [ARGS...]\n" +
		"  shutdown|poweroff|reboot|halt [OPTIONS...], installed over systemd's\n")
	b.WriteString("\nCOMMANDS:\n")
	var own, legacy []*cli.Command
	for _, c := range a.Commands {
		switch {
		case c.Hidden:
		case dispatch.IsLegacy(c.Name):
			legacy = append(legacy, c)
		default:
			own = append(own, c)
		}
	}
	writeCommands(&b, own)
	var names []string
	for _, c := range legacy {
		names = append(names, c.Name)
	}
	writeWrapped(&b, "gnsh "+strings.Join(names, "|")+" ARGS... is that command ('reboot --help')", "  ", "    ")
	b.WriteString("\nOPTIONS:\n" + renderFlags(a.Flags))
	b.WriteString("\nEXAMPLES:\n" + renderExamples(examples["gnsh"]))
	b.WriteString("\nSee gnsh(8), gnsh-shutdown(8) and gnsh-config(5); 'gnsh COMMAND --help'.\n")
	return b.String()
}

func writeCommands(b *strings.Builder, cmds []*cli.Command) {
	width := 0
	for _, c := range cmds {
		width = max(width, len(c.Name))
	}
	pad := strings.Repeat(" ", width+4)
	for _, c := range cmds {
		writeWrapped(b, c.Usage, "  "+c.Name+strings.Repeat(" ", width+2-len(c.Name)), pad)
	}
}

// usageFlags is " --node NAME" for each required option, and " [OPTIONS]"
// if there are others.
func usageFlags(flags []cli.Flag) string {
	s, others := "", false
	for _, f := range flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Required {
			s += " --" + sf.Name + " " + placeholder(sf.Usage)
		} else {
			others = true
		}
	}
	if others {
		s += " [OPTIONS]"
	}
	return s
}

var placeholderRE = regexp.MustCompile("`([^`]+)`")

// placeholder is the option's value as its usage names it in backquotes
// (`NAME`), else VALUE.
func placeholder(usage string) string {
	if m := placeholderRE.FindStringSubmatch(usage); m != nil {
		return m[1]
	}
	return "VALUE"
}

// renderFlags lists the options, one-letter aliases first, each with its
// value's placeholder and its default when it has one.
func renderFlags(flags []cli.Flag) string {
	type row struct{ spec, usage string }
	var rows []row
	width := 0
	for _, f := range flags {
		df, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		var short, long []string
		for _, n := range f.Names() {
			if len(n) == 1 {
				short = append(short, "-"+n)
			} else {
				long = append(long, "--"+n)
			}
		}
		spec := strings.Join(append(short, long...), ", ")
		usage := df.GetUsage()
		if df.TakesValue() {
			spec += " " + placeholder(usage)
			if v := df.GetValue(); v != "" && v != `""` {
				usage += " (default " + strings.Trim(v, `"`) + ")"
			}
		}
		usage = strings.ReplaceAll(usage, "`", "")
		rows = append(rows, row{spec, usage})
		width = max(width, len(spec))
	}
	width = min(width, 24)
	var b strings.Builder
	for _, r := range rows {
		first := "  " + r.spec + "  "
		if len(r.spec) > width {
			b.WriteString("  " + r.spec + "\n")
			first = strings.Repeat(" ", width+4)
		} else {
			first += strings.Repeat(" ", width-len(r.spec))
		}
		writeWrapped(&b, r.usage, first, strings.Repeat(" ", width+4))
	}
	return b.String()
}

// renderExamples writes each example on a line, with what it does after
// it in a column when that fits, else as a comment above it.
func renderExamples(ex []example) string {
	width := 0
	for _, e := range ex {
		if e.what != "" && 2+len(e.line)+5+len(e.what) <= helpWidth {
			width = max(width, len(e.line))
		}
	}
	var b strings.Builder
	for _, e := range ex {
		switch {
		case e.what == "":
			b.WriteString("  " + e.line + "\n")
		case 2+width+5+len(e.what) <= helpWidth:
			b.WriteString("  " + e.line + strings.Repeat(" ", width-len(e.line)) + "   # " + e.what + "\n")
		default:
			b.WriteString("  # " + e.what + "\n  " + e.line + "\n")
		}
	}
	return b.String()
}

// writeWrapped writes text in lines of at most helpWidth columns, the
// first after first, the others after indent.
func writeWrapped(b *strings.Builder, text, first, indent string) {
	for _, l := range wrap(text, helpWidth, first, indent) {
		b.WriteString(strings.TrimRight(l, " ") + "\n")
	}
}

// wrap breaks text at spaces into lines of at most width columns (a word
// longer than that stays whole), the first line starting with first,
// the others with indent.
func wrap(text string, width int, first, indent string) []string {
	words := strings.Fields(text)
	lead := strings.TrimLeft(text, " ")
	// Keep text's own leading spaces (an indented line of a description).
	first += text[:len(text)-len(lead)]
	var lines []string
	line := first
	n := len([]rune(line))
	fresh := true
	for _, w := range words {
		wn := len([]rune(w))
		if !fresh && n+1+wn > width {
			lines = append(lines, line)
			line, n, fresh = indent, len([]rune(indent)), true
		}
		if !fresh {
			line += " "
			n++
		}
		line += w
		n += wn
		fresh = false
	}
	return append(lines, line)
}
