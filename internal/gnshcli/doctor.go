package gnshcli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/nodefacts"
)

func doctorCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check that shutdowns on this node drain first; changes nothing",
		Description: "One line per check (ok, warn or fail), with the fix when not ok: systemd, logind, " +
			"kubelet, the bypass path (systemctl reboot), InhibitDelayMaxSec, the four commands, sudo, Ansible's reboot, the config, " +
			"the kubeconfigs, the Node, API access, the agent, the reboot slots, the gate's token. Exit 1 on a failure.",
		Flags: []cli.Flag{outputFlag(), nodeFlag(), kubeFlag(), kubeletConfigFlag()},
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
				WriteChecks(env.Stdout, checks, outputWidth(env))
			}
			var err error
			if n := nodefacts.Failed(checks); n > 0 {
				err = fmt.Errorf("gnsh: doctor: %d of %d checks failed", n, len(checks))
			}
			*code = report(env.Stderr, err)
			return nil
		},
	}
}

// WriteChecks writes one check a line: verdict, name and message, then
// the fix, if there is one, on a line of its own. A line longer than width
// goes on under the message's column.
func WriteChecks(w io.Writer, checks []nodefacts.Check, width int) {
	nameWidth := 0
	for _, c := range checks {
		nameWidth = max(nameWidth, len(c.Name))
	}
	col := 4 + 2 + nameWidth + 2
	width = max(width, col+40)
	pad := strings.Repeat(" ", col)
	for _, c := range checks {
		lead := fmt.Sprintf("%-4s  %-*s  ", c.Verdict, nameWidth, c.Name)
		for _, l := range wrap(oneLine(c.Message), width, lead, pad) {
			fmt.Fprintln(w, strings.TrimRight(l, " "))
		}
		if c.Fix != "" {
			for _, l := range wrap(oneLine("fix: "+c.Fix), width, pad, pad+"     ") {
				fmt.Fprintln(w, strings.TrimRight(l, " "))
			}
		}
	}
}
