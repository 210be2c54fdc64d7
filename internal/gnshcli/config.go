package gnshcli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
)

// configCommand is `gnsh config check|show [FILE]`.
func configCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "check gnsh's config file, or show the configuration in effect",
		Subcommands: []*cli.Command{
			{
				Name:      "check",
				Usage:     "validate a config file exactly as every shutdown reads it",
				ArgsUsage: "[FILE]",
				Description: "Reads FILE (default: $GNSH_CONFIG, else " + config.Path + ") as the wrapper does\n" +
					"before every shutdown, and checks that the kubeconfig it names is usable. It asks\n" +
					"the cluster nothing. Exit 0 when the file is valid (or absent: the defaults apply);\n" +
					"exit 1 with one line per problem on stderr, each naming its line and key:\n" +
					"  gnsh: FILE: line N: slots.maxUnavailable: must be 1 or more; …\n\n" +
					"EXAMPLES:\n" +
					"  gnsh config check\n" +
					"  gnsh config check /tmp/new-config.yaml\n" +
					"  validate: gnsh config check %s        (an Ansible template task)",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "skip-kubeconfig", Usage: "do not check the kubeconfig the file names (one that kubeadm join writes later)"},
				},
				Action: func(c *cli.Context) error {
					path, given, err := configArg(c, env)
					if err != nil {
						return err
					}
					*code = checkConfig(env, path, given, c.Bool("skip-kubeconfig"))
					return nil
				},
			},
			{
				Name:      "show",
				Usage:     "print the configuration in effect, defaults included, as YAML",
				ArgsUsage: "[FILE]",
				Description: "Reads FILE (default: $GNSH_CONFIG, else " + config.Path + ") and prints every key\n" +
					"with the value a shutdown uses: the file's, else the default. An invalid file\n" +
					"is refused as by 'gnsh config check'.\n\n" +
					"EXAMPLES:\n" +
					"  gnsh config show\n" +
					"  gnsh config show /tmp/new-config.yaml | grep -A3 '^slots:'",
				Action: func(c *cli.Context) error {
					path, given, err := configArg(c, env)
					if err != nil {
						return err
					}
					if given && !exists(path) {
						return fmt.Errorf("%s does not exist", path)
					}
					cfg, err := config.Load(path)
					if err != nil {
						*code = reportConfig(env, err)
						return nil
					}
					b, err := yaml.Marshal(cfg)
					if err != nil {
						return err
					}
					_, err = env.Stdout.Write(b)
					return err
				},
			},
		},
	}
}

// configArg is the FILE argument, else $GNSH_CONFIG, else config.Path;
// given says whether it was an argument.
func configArg(c *cli.Context, env *dispatch.Env) (path string, given bool, err error) {
	switch {
	case c.NArg() > 1:
		return "", false, fmt.Errorf("config %s takes one FILE at most (got %d arguments); see 'gnsh config %s --help'",
			c.Command.Name, c.NArg(), c.Command.Name)
	case c.NArg() == 1:
		return c.Args().First(), true, nil
	}
	if p, ok := env.LookupEnv("GNSH_CONFIG"); ok && p != "" {
		return p, false, nil
	}
	return config.Path, false, nil
}

// checkConfig is gnsh config check: the drainer's own check, the one
// every shutdown makes. It returns the exit status.
func checkConfig(env *dispatch.Env, path string, given, skipKubeconfig bool) int {
	if given && !exists(path) {
		// Named on the command line: a typo, not "no file".
		return dispatch.Report(env.Stderr, fmt.Errorf("gnsh: %s does not exist", path))
	}
	d := &drainer.Drainer{Stderr: env.Stderr, Getenv: func(k string) string { v, _ := env.LookupEnv(k); return v }, ConfigPath: path}
	if env.NewDrainer != nil {
		nd := env.NewDrainer()
		d.Getenv, d.KubeRoot = nd.Getenv, nd.KubeRoot
	}
	found, err := d.CheckConfig(skipKubeconfig)
	switch {
	case err != nil:
		return reportConfig(env, err)
	case !found:
		fmt.Fprintf(env.Stdout, "gnsh: no %s: the defaults apply\n", path)
	default:
		fmt.Fprintf(env.Stdout, "gnsh: %s is valid\n", path)
	}
	return 0
}

// reportConfig prints each problem of an invalid config (or the error
// reading it) on its own line, and returns exit status 1.
func reportConfig(env *dispatch.Env, err error) int {
	var ce *config.Error
	if !errors.As(err, &ce) {
		return dispatch.Report(env.Stderr, fmt.Errorf("gnsh: %w", err))
	}
	for _, l := range ce.Lines() {
		fmt.Fprintln(env.Stderr, "gnsh: "+l)
	}
	return 1
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
