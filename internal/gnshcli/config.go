package gnshcli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"

	"github.com/urfave/cli/v2"
	yaml3 "go.yaml.in/yaml/v3"

	"github.com/gnsh/gnsh/internal/config"
	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/kube"
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
					"checks that a kubeconfig it names (else gnsh's own " + kube.GnshKubeconfig + ", if that is the one used) is usable; asks the cluster nothing. Exit 0 when valid (or absent: " +
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
					b, err := showConfig(cfg)
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

// exists reports whether path is there, if only as a symbolic link (to
// nothing: config.Load says so).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// showConfig writes cfg as YAML, its keys in the order of gnsh-config(5),
// with the value a shutdown uses for each, and what a key left unset means
// where its value does not say it: never a bare null.
func showConfig(cfg config.Config) ([]byte, error) {
	j, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var doc yaml3.Node
	if err := yaml3.Unmarshal(j, &doc); err != nil {
		return nil, err
	}
	top := doc.Content[0]
	plain(top)
	unset := func(m *yaml3.Node, key, comment string, resolved *yaml3.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value != key {
				continue
			}
			if resolved != nil {
				m.Content[i+1] = resolved
			}
			m.Content[i+1].LineComment = "unset: " + comment
		}
	}
	if cfg.Node == "" {
		unset(top, "node", "the kubelet's client certificate's node name, else the host name", nil)
	}
	if cfg.Kubeconfig == "" {
		unset(top, "kubeconfig", "$KUBECONFIG, "+kube.KubeletKubeconfigList()+", then "+kube.GnshKubeconfig, nil)
	}
	if cfg.PodGracePeriod == nil {
		unset(top, "podGracePeriod", "each pod's own grace period", nil)
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "slots" {
			continue
		}
		slots := top.Content[i+1]
		if cfg.Slots.Wait == nil {
			unset(slots, "wait", "drainTimeout", &yaml3.Node{Kind: yaml3.ScalarNode, Tag: "!!str", Value: cfg.SlotWait().String()})
		}
		if cfg.Slots.Window == nil {
			unset(slots, "window", "no window: queued reboots are admitted at any hour", nil)
		}
		if cfg.Slots.Kubeconfig == "" {
			unset(slots, "kubeconfig", kube.GnshKubeconfig+" if it is there, else the drain's", nil)
		}
		for k := 0; k+1 < len(slots.Content); k += 2 {
			if v := slots.Content[k+1]; slots.Content[k].Value == "pools" && v.Tag == "!!null" {
				slots.Content[k+1] = &yaml3.Node{Kind: yaml3.SequenceNode, Tag: "!!seq", Style: yaml3.FlowStyle}
			}
		}
	}
	var b bytes.Buffer
	enc := yaml3.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// plain writes n and what it holds in block style, strings unquoted only
// where gnsh's reader (YAML 1.1, where on and no are booleans) reads them
// back as the same strings.
func plain(n *yaml3.Node) {
	n.Style = 0
	if n.Kind == yaml3.ScalarNode && n.Tag == "!!str" &&
		(!plainString.MatchString(n.Value) || yaml11Word.MatchString(n.Value) || yaml11Number.MatchString(n.Value)) {
		n.Style = yaml3.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		plain(c)
	}
}

var (
	plainString  = regexp.MustCompile(`^[A-Za-z0-9/][A-Za-z0-9._/=-]*$`)
	yaml11Word   = regexp.MustCompile(`^(?i:y|yes|n|no|on|off|true|false|null)$`)
	yaml11Number = regexp.MustCompile(`^(0[xXbBoO][0-9a-fA-F_]+|[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?)$`)
)
