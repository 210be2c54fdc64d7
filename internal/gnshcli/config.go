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
				Description: "Reads FILE (default: $GNSH_CONFIG, else " + config.Path + ") as every shutdown does, and " +
					"checks that a kubeconfig it names is usable; asks the cluster nothing. Exit 0 when valid (or absent: " +
					"the defaults apply), 1 with one line per problem: its line, its key and the fix.",
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
				Description: "Prints every key with the value a shutdown uses: FILE's (default: $GNSH_CONFIG, else " +
					config.Path + "), else the default. An invalid file is refused with gnsh config check's lines; the kubeconfig it names is not checked here.",
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
	switch ops := operands(c); {
	case len(ops) > 1:
		return "", false, usagef(c, "config %s takes one FILE at most (got %d arguments)", c.Command.Name, len(ops))
	case len(ops) == 1:
		return ops[0], true, nil
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
	found, unchecked, err := d.CheckConfigFile(skipKubeconfig)
	switch {
	case err != nil || unchecked != nil:
		var ce *config.Error
		if unchecked != nil && !errors.As(err, &ce) {
			ce = &config.Error{File: path}
			err = ce
		}
		if unchecked != nil {
			ce.Add(*unchecked)
		}
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
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe) && errors.Is(err, fs.ErrPermission):
		// Not root, most likely: a 0600 file.
		return dispatch.Report(env.Stderr, fmt.Errorf("gnsh: this user may not read %s (%v); run the command as root", pe.Path, pe.Err))
	case !errors.As(err, &ce):
		return dispatch.Report(env.Stderr, fmt.Errorf("gnsh: %w", err))
	}
	for _, l := range ce.Lines() {
		// A value quoted back (a kubeconfig's path) may hold what must not
		// reach a terminal raw.
		fmt.Fprintln(env.Stderr, "gnsh: "+termSafe(l))
	}
	return 1
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
