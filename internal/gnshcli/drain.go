package gnshcli

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/legacy"
)

// kubeconfigOrder is where the node's own commands look for a kubeconfig
// when --kubeconfig is not given, in order (kube.Locator), short for
// --help; gnsh(8) and the messages name the kubelet's in full
// (kube.KubeletKubeconfigs).
var kubeconfigOrder = "kubeconfig in the config file, $KUBECONFIG, the kubelet's (kubeadm, k3s, rke2), then " + kube.GnshKubeconfig

// The options of the commands that act on this node. Functions: cli
// keeps state in a flag, which must not be shared between runs.
func nodeFlag() cli.Flag {
	return &cli.StringFlag{Name: "node", Usage: "the Node's `NAME` (default: node in the config file, the kubelet certificate's CN, the host name)"}
}

func kubeFlag() cli.Flag {
	return &cli.StringFlag{Name: "kubeconfig", Usage: "the kubeconfig `FILE` (default: " + kubeconfigOrder + ")"}
}

func newDrainer(c *cli.Context, env *dispatch.Env) *drainer.Drainer {
	var d *drainer.Drainer
	if env.NewDrainer != nil {
		d = env.NewDrainer()
	} else {
		d = &drainer.Drainer{Stderr: env.Stderr, Getenv: func(k string) string { v, _ := env.LookupEnv(k); return v }}
	}
	d.Node, d.Kubeconfig = c.String("node"), c.String("kubeconfig")
	return d
}

func drainCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "drain",
		Usage: "cordon this node and evict its pods, as before a shutdown",
		Description: "Cordons, evicts through the Eviction API (PDBs honoured; DaemonSet and mirror pods stay; " +
			"emptyDir and bare pods too, a warning each: strictDrain refuses them, as kubectl drain), " +
			"waits. Does not shut down; the node stays cordoned; exit 1 if not drained in time.",
		Flags: []cli.Flag{nodeFlag(), kubeFlag(),
			&cli.StringFlag{Name: "timeout", Usage: "give up after `DURATION` (default: drainTimeout, 5m)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "list what would be evicted and why; change nothing"},
		},
		Action: func(c *cli.Context) error {
			var timeout time.Duration
			if s := c.String("timeout"); s != "" {
				d, err := legacy.ParseDuration(s)
				if err != nil {
					return usagef(c, "invalid --timeout %q: %v", s, err)
				}
				timeout = d
			}
			err := newDrainer(c, env).DrainCommand(c.Context, timeout, c.Bool("dry-run"), env.Stdout)
			*code = report(env.Stderr, err)
			return nil
		},
	}
}

func uncordonCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:        "uncordon",
		Usage:       "make this node schedulable again",
		Description: "Like kubectl uncordon, and clears gnsh's annotation gnsh.io/cordoned.",
		Flags: []cli.Flag{nodeFlag(), kubeFlag(),
			&cli.BoolFlag{Name: "only-if-ours", Usage: "uncordon only if gnsh cordoned the node, not an admin"},
		},
		Action: func(c *cli.Context) error {
			err := newDrainer(c, env).UncordonCommand(c.Context, c.Bool("only-if-ours"), env.Stdout)
			*code = report(env.Stderr, err)
			return nil
		},
	}
}
