package gnshcli

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/legacy"
)

var (
	nodeFlag = &cli.StringFlag{Name: "node", Usage: "the Node's `NAME` (default: node in the config, else the kubelet certificate's CN, else the host name)"}
	kubeFlag = &cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig `FILE` (default: kubeconfig in the config, $KUBECONFIG, /etc/gnsh/kubeconfig, /etc/kubernetes/kubelet.conf)"}
)

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
		Usage: "cordon this node and evict its pods, as before a shutdown, without shutting down",
		Description: "Cordons the node (recording in the annotation gnsh.io/cordoned that gnsh did it),\n" +
			"evicts every pod except DaemonSet and mirror pods through the Eviction API, so\n" +
			"PodDisruptionBudgets are honoured, and waits until they are gone. Progress goes to\n" +
			"stderr: a live line on a terminal, plain lines otherwise. Exit status 0 when\n" +
			"drained; 1 when it did not finish in time (the node stays cordoned: 'gnsh\n" +
			"uncordon' undoes it); 130/143 on SIGINT/SIGTERM (gnsh's cordon undone). SIGHUP is\n" +
			"ignored, so a dropped ssh session does not stop it. Pods with emptyDir volumes or no\n" +
			"controller are evicted, a warning each, where kubectl drain refuses them: strictDrain:\n" +
			"true in the config refuses them as kubectl does (--dry-run shows each pod's fate).",
		Flags: []cli.Flag{nodeFlag, kubeFlag,
			&cli.StringFlag{Name: "timeout", Usage: "give up after `DURATION` (e.g. 90s, 10m; default: drainTimeout in the config, 5m)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "list what would be evicted and why other pods are skipped; change nothing"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("drain takes no arguments (got %q); use --node NAME", c.Args().First())
			}
			var timeout time.Duration
			if s := c.String("timeout"); s != "" {
				d, err := legacy.ParseDuration(s)
				if err != nil {
					return fmt.Errorf("invalid --timeout %q: %v", s, err)
				}
				timeout = d
			}
			err := newDrainer(c, env).DrainCommand(c.Context, timeout, c.Bool("dry-run"), env.Stdout)
			*code = dispatch.Report(env.Stderr, err)
			return nil
		},
	}
}

func uncordonCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "uncordon",
		Usage: "make this node schedulable again",
		Description: "Like kubectl uncordon, and clears gnsh's gnsh.io/cordoned annotation. With\n" +
			"--only-if-ours it leaves a cordon that gnsh did not make.",
		Flags: []cli.Flag{nodeFlag, kubeFlag,
			&cli.BoolFlag{Name: "only-if-ours", Usage: "uncordon only if gnsh cordoned the node"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("uncordon takes no arguments (got %q); use --node NAME", c.Args().First())
			}
			err := newDrainer(c, env).UncordonCommand(c.Context, c.Bool("only-if-ours"), env.Stdout)
			*code = dispatch.Report(env.Stderr, err)
			return nil
		},
	}
}
