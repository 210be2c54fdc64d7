// Package gnshcli is the `gnsh` command and its subcommands. The legacy
// grammars are never parsed by urfave/cli: its -h means help, while
// shutdown's -h means power off.
package gnshcli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/version"
)

// Run runs `gnsh ARGS…` and returns the exit status.
func Run(ctx context.Context, argv []string, env *dispatch.Env) int {
	code := 0
	app := &cli.App{
		Name:  "gnsh",
		Usage: "Graceful Node Shutdown Helper: drain, then shut down through systemd-logind",
		Description: "Installed as shutdown, poweroff, reboot and halt, gnsh parses exactly what systemd parses\n" +
			"and hands the request to systemd-logind over D-Bus, so every inhibitor (such as\n" +
			"kubelet's graceful node shutdown lock) is honoured, even on systemd older than 251.\n\n" +
			"On a Kubernetes node (a kubeconfig in $KUBECONFIG, /etc/gnsh/kubeconfig or\n" +
			"/etc/kubernetes/kubelet.conf) it first drains the node: cordon, evict through the\n" +
			"Eviction API (PodDisruptionBudgets honoured), wait. A drain that does not finish\n" +
			"within the drain timeout refuses the shutdown; an unreachable API server does not.\n" +
			"Before the cordon it takes a reboot slot ('gnsh slots'): at most slots.maxUnavailable\n" +
			"nodes out at once, per pool too, one control-plane node with etcd's quorum kept.\n" +
			"The legacy commands also take, spelled out in full: --no-drain,\n" +
			"--drain-timeout=DURATION, --force-drain, --force-quorum. Policy: /etc/gnsh/config.yaml.",
		Writer:         env.Stdout,
		ErrWriter:      env.Stderr,
		ExitErrHandler: func(*cli.Context, error) {},
		CommandNotFound: func(c *cli.Context, name string) {
			code = dispatch.Report(env.Stderr, fmt.Errorf("gnsh: unknown command %q; see 'gnsh --help'", name))
		},
		Commands: []*cli.Command{
			legacyCommand("shutdown", "[OPTIONS...] [TIME] [WALL...]", &code, env),
			legacyCommand("poweroff", "[OPTIONS...]", &code, env),
			legacyCommand("reboot", "[OPTIONS...] [ARG]", &code, env),
			legacyCommand("halt", "[OPTIONS...]", &code, env),
			planCommand(&code, env),
			configCommand(&code, env),
			drainCommand(&code, env),
			uncordonCommand(&code, env),
			statusCommand(env),
			slotsCommand(&code, env),
			doctorCommand(&code, env),
			agentCommand(&code, env),
			installCommand(&code, env),
			uninstallCommand(&code, env),
			{
				Name:  "version",
				Usage: "print gnsh's version",
				Action: func(c *cli.Context) error {
					fmt.Fprintf(env.Stdout, "gnsh %s\n", version.Version)
					return nil
				},
			},
		},
	}
	if err := app.RunContext(ctx, argv); err != nil {
		return dispatch.Report(env.Stderr, fmt.Errorf("gnsh: %w", err))
	}
	return code
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
		Usage:     "print, as JSON, what a legacy command line would do, doing nothing",
		ArgsUsage: "shutdown|poweroff|reboot|halt [ARGS...]",
		Description: "Parses the command line exactly as the command would and lists the action, the\n" +
			"scheduled time, the wall message, the reboot parameter and the ordered D-Bus and\n" +
			"kernel calls (\"calls\": with an idle systemd 252 logind answering; \"fallback\": when\n" +
			"logind cannot be reached), and (\"drain\") what gnsh's drain does first, decided\n" +
			"from the options, /etc/gnsh/config.yaml and the kubeconfig found, without asking\n" +
			"the cluster. Exits with the status, and prints on stderr the messages, that the\n" +
			"command itself would give when the drain lets it go on. Nothing is changed.",
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			if first := c.Args().First(); first == "--help" || first == "-h" {
				return cli.ShowCommandHelp(c.Lineage()[1], "plan")
			}
			if c.NArg() == 0 || !dispatch.IsLegacy(c.Args().First()) {
				return fmt.Errorf("plan needs a command: shutdown, poweroff, reboot or halt (e.g. gnsh plan shutdown -r +5)")
			}
			name := c.Args().First()
			argv := c.Args().Slice()
			p := makePlan(c.Context, name, argv, env)
			enc := json.NewEncoder(env.Stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(p); err != nil {
				return err
			}
			fmt.Fprint(env.Stderr, p.Stderr)
			*code = p.ExitCode
			return nil
		},
	}
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
