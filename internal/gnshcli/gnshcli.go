// Package gnshcli is the `gnsh` command and its subcommands. The legacy
// grammars are never parsed by urfave/cli: its -h means help, while
// shutdown's -h means power off.
package gnshcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/version"
)

// Run runs `gnsh ARGS…` and returns the exit status.
func Run(ctx context.Context, argv []string, env *dispatch.Env) int {
	code := 0
	app := newApp(env, &code)
	if err := app.RunContext(ctx, argv); err != nil {
		return report(env.Stderr, err)
	}
	return code
}

// newApp is gnsh's command tree; a command's exit status goes to *code.
// finish gives every command the same help and the same one-line errors.
func newApp(env *dispatch.Env, code *int) *cli.App {
	app := &cli.App{
		Name:  "gnsh",
		Usage: "Graceful Node Shutdown Helper: drain, then shut down through logind",
		Description: "Installed over shutdown, poweroff, reboot and halt: drains this node " +
			"(cordon, evict, wait), then hands off to systemd-logind, which honours every inhibitor.",
		Writer:          env.Stdout,
		ErrWriter:       env.Stderr,
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		HideVersion:     true,
		OnUsageError:    onUsageError("gnsh"),
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "version", Usage: "print gnsh's version"},
			&cli.BoolFlag{Name: "help", Aliases: []string{"h"}, Usage: "show this help"},
		},
		Action: func(c *cli.Context) error {
			switch {
			case c.NArg() > 0:
				return usageErr("gnsh", "unknown command %q", c.Args().First())
			case c.Bool("version"):
				return writeVersion(env.Stdout, "text")
			}
			return cli.ShowAppHelp(c)
		},
		Commands: []*cli.Command{
			legacyCommand("shutdown", "[OPTIONS...] [TIME] [WALL...]", code, env),
			legacyCommand("poweroff", "[OPTIONS...]", code, env),
			legacyCommand("reboot", "[OPTIONS...] [ARG]", code, env),
			legacyCommand("halt", "[OPTIONS...]", code, env),
			planCommand(code, env),
			configCommand(code, env),
			drainCommand(code, env),
			uncordonCommand(code, env),
			statusCommand(env),
			doctorCommand(code, env),
			slotsCommand(code, env),
			agentCommand(code, env),
			tokenCommand(code, env),
			installCommand(code, env),
			uninstallCommand(code, env),
			versionCommand(env),
			helpCommand(code, env),
		},
	}
	finish("gnsh", app.Commands)
	app.CustomAppHelpTemplate = literal(renderAppHelp(app))
	return app
}

func versionCommand(env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:        "version",
		Usage:       "print gnsh's version",
		Description: "The version, the commit and its date, the Go version and the platform: the same line as gnsh --version.",
		Flags:       []cli.Flag{outputFlag()},
		Action: func(c *cli.Context) error {
			if err := checkOutput(c); err != nil {
				return err
			}
			return writeVersion(env.Stdout, c.String("output"))
		},
	}
}

// writeVersion prints version.Get(): one line, or JSON.
func writeVersion(w io.Writer, output string) error {
	v := version.Get()
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	_, err := fmt.Fprintln(w, v.String())
	return err
}

// helpCommand is `gnsh help [COMMAND...]`: the same as `gnsh COMMAND...
// --help`. Hidden: --help is the way every command's usage names.
//
// It takes command names only, and a legacy command's alone: `gnsh help
// shutdown -- now` run as `gnsh shutdown -- now --help` would power the
// machine off ("--help" a wall message after "--"), and so would `gnsh
// help shutdown now` with $POSIXLY_CORRECT set (getopt stops at "now").
func helpCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:            "help",
		Usage:           "show the help of gnsh or of a command",
		ArgsUsage:       "[COMMAND...]",
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
				args = nil // gnsh help --help, gnsh help help: gnsh's own
			}
			for _, a := range args {
				if strings.HasPrefix(a, "-") {
					return usageErr("gnsh", "help takes command names only (got %q)", a)
				}
			}
			if len(args) > 1 && dispatch.IsLegacy(args[0]) {
				return usageErr(args[0], "help %s takes nothing after %s (got %q)", args[0], args[0], args[1])
			}
			*code = Run(c.Context, append(append([]string{"gnsh"}, args...), "--help"), env)
			return nil
		},
	}
}

func legacyCommand(name, args string, code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:            name,
		Usage:           "act exactly as the legacy " + name + " command (see '" + name + " --help')",
		ArgsUsage:       args,
		SkipFlagParsing: true,
		HideHelp:        true,
		Action: func(c *cli.Context) error {
			*code = dispatch.RunLegacy(c.Context, name, append([]string{name}, c.Args().Slice()...), env)
			return nil
		},
	}
}

func planCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "show what a shutdown, poweroff, reboot or halt would do",
		UsageText: "gnsh plan [-o text|json] shutdown|poweroff|reboot|halt [ARGS...]",
		ArgsUsage: "shutdown|poweroff|reboot|halt [ARGS...]",
		Description: "Parses the command line as the command would and shows the action and when, what " +
			"gnsh does first (reboot slot, drain), the calls to systemd-logind and the fallback. " +
			"Exits with the command's status; shows what it would say (-o json: prints it on stderr). Changes nothing.",
		// Parsed by hand, before the command name only: what follows is
		// the legacy command line, passed on untouched. Listed for --help.
		Flags:           []cli.Flag{outputFlag()},
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			output, argv, help, err := planArgs(c)
			switch {
			case err != nil:
				return err
			case help:
				return cli.ShowSubcommandHelp(c)
			}
			p := makePlan(c.Context, argv[0], argv, env)
			if output == "json" {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(p); err != nil {
					return err
				}
				// As the command prints it (the oracle tests compare it).
				fmt.Fprint(env.Stderr, p.Stderr)
			} else {
				writePlan(env.Stdout, p, outputWidth(env))
			}
			*code = p.ExitCode
			return nil
		},
	}
}

// planArgs reads gnsh plan's own options, which come before the command
// name (-o FORMAT, --output=FORMAT, --help), and returns the legacy
// command line that follows them.
func planArgs(c *cli.Context) (output string, argv []string, help bool, err error) {
	args, output := c.Args().Slice(), "text"
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		a := args[0]
		args = args[1:]
		if a == "--" {
			break
		}
		var val string
		switch {
		case a == "-h" || a == "--help":
			return "", nil, true, nil
		case a == "-o" || a == "--output":
			if len(args) == 0 {
				return "", nil, false, usagef(c, "%s needs a value", a)
			}
			val, args = args[0], args[1:]
		case strings.HasPrefix(a, "--output="):
			val = strings.TrimPrefix(a, "--output=")
		case strings.HasPrefix(a, "-o"):
			val = strings.TrimPrefix(strings.TrimPrefix(a, "-o"), "=")
		default:
			return "", nil, false, usagef(c, "unknown option %s", a)
		}
		if val != "text" && val != "json" {
			return "", nil, false, usagef(c, "invalid --output %q: text or json", val)
		}
		output = val
	}
	if len(args) == 0 || !dispatch.IsLegacy(args[0]) {
		got := ""
		if len(args) > 0 {
			got = fmt.Sprintf(" (got %q)", args[0])
		}
		return "", nil, false, usagef(c, "plan needs a command: shutdown, poweroff, reboot or halt%s", got)
	}
	return output, args, false, nil
}

func makePlan(ctx context.Context, name string, argv []string, env *dispatch.Env) *handoff.Plan {
	req, err := dispatch.Parse(name, argv, env.ParseEnv(name))
	if err != nil {
		return &handoff.Plan{Command: name, Args: argv[1:], Calls: []handoff.Call{}, ExitCode: dispatch.ExitStatus(err),
			Stderr: err.Error() + "\n"}
	}
	if env.NewDrainer == nil {
		return handoff.MakePlan(ctx, req, env.Host, env.Location, dispatch.ExitStatus, nil)
	}
	// The drain's refusals that need no cluster (an invalid config file, a
	// kubeconfig named that cannot be used) are the plan's: its exit status
	// is the command's.
	d := env.NewDrainer()
	p := handoff.MakePlan(ctx, req, env.Host, env.Location, dispatch.ExitStatus, d.PlanPreparer())
	p.Drain = d.Describe(req)
	return p
}
