package gnshcli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/nodefacts"
)

func doctorCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check that shutdowns on this node drain first and honour kubelet's inhibitor; changes nothing",
		Description: "One line per check: ok, warn or fail, what was found and, when not ok, the fix.\n" +
			"Checks: systemd (do its legacy commands bypass logind: before 251, and RHEL 8 without\n" +
			"SYSTEMD_NEW_SHUTDOWN=1), logind reachable, kubelet's grace period > 0, kubelet's delay\n" +
			"inhibitor held, InhibitDelayMaxSec ≥ kubelet's period (fail) and long enough for the\n" +
			"agent to drain a shutdown that bypasses the wrapper within drainTimeout (warn; it gets\n" +
			"InhibitDelayMaxSec less max(10%, 2s), and both locks share one window: logind waits for\n" +
			"the longer), naming the logind.conf file that sets it, the four commands run gnsh for\n" +
			"root's PATH and for sudo's secure_path, the shutdown that ansible.builtin.reboot finds\n" +
			"runs gnsh (a warning only), the kubeconfig (found, mode 0600), the Node (found, this\n" +
			"machine), API access (a SelfSubjectAccessReview, with that kubeconfig, for each request\n" +
			"gnsh makes: get and patch of the Node, list and watch of its pods by spec.nodeName, pod\n" +
			"evictions, Events in default, the node's Lease), and the node agent (gnsh.service active\n" +
			"or /run/gnsh/agent.flock held, else fail, or warn when an admin disabled or masked it;\n" +
			"its delay lock on shutdown listed by logind, else warn).\n" +
			"Exit status 1 if any check fails, else 0. --output json prints\n" +
			"[{name, verdict, message, fix}].",
		Flags: []cli.Flag{outputFlag, nodeFlag, kubeFlag, kubeletConfigFlag},
		Action: func(c *cli.Context) error {
			if err := checkOutput(c); err != nil {
				return err
			}
			s := factSources(c, env)
			s.Access = true
			checks := nodefacts.Doctor(nodefacts.Gather(c.Context, s))
			if c.String("output") == "json" {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(checks); err != nil {
					return err
				}
			} else {
				WriteChecks(env.Stdout, checks)
			}
			var err error
			if n := nodefacts.Failed(checks); n > 0 {
				err = fmt.Errorf("gnsh doctor: %d of %d checks failed", n, len(checks))
			}
			*code = dispatch.Report(env.Stderr, err)
			return nil
		},
	}
}

// WriteChecks writes one line per check: verdict, name, message and, when
// there is one, the fix.
func WriteChecks(w io.Writer, checks []nodefacts.Check) {
	width := 0
	for _, c := range checks {
		width = max(width, len(c.Name))
	}
	for _, c := range checks {
		line := fmt.Sprintf("%-4s  %-*s  %s", c.Verdict, width, c.Name, c.Message)
		if c.Fix != "" {
			line += "; fix: " + c.Fix
		}
		fmt.Fprintln(w, oneLine(line))
	}
}
