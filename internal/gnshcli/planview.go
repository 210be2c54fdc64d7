package gnshcli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gnsh/gnsh/internal/handoff"
)

// writePlan writes the plan for a terminal: the action and when, gnsh's
// drain and reboot slot, the calls that act (the probes and reads are left
// to -o json), the fallback and the exit status, wrapped to width.
func writePlan(w io.Writer, p *handoff.Plan, width int) {
	rows := [][2]string{{"action", planAction(p)}}
	// The drain refuses after the command line was read, and so after the
	// reboot parameter was changed (systemd changes it while reading), and
	// the command then puts it back as it was.
	drainRefuses := p.ExitCode != 0 && strings.HasPrefix(p.Drain, "refuse:")
	if p.RebootParam != nil {
		var s string
		switch p.RebootParam.Op {
		case "write":
			s = fmt.Sprintf("%q written to /run/systemd/reboot-param", p.RebootParam.Value)
		case "unlink":
			s = "/run/systemd/reboot-param removed"
		}
		if s != "" && drainRefuses {
			s += " while the command line is read (as systemd does), then put back as it was: the command is refused"
		}
		if s != "" {
			rows = append(rows, [2]string{"parameter", s})
		}
	}
	if p.Drain != "" {
		rows = append(rows, [2]string{"drain", p.Drain})
	}
	calls := p.Calls
	if drainRefuses {
		// Said by the parameter row.
		calls = slices.DeleteFunc(slices.Clone(calls), func(c handoff.Call) bool { return c.Service == "file" })
	}
	if calls := planCalls(calls); calls != "" {
		rows = append(rows, [2]string{"calls", calls})
	}
	switch fb := planCalls(p.Fallback); {
	case fb != "":
		rows = append(rows, [2]string{"fallback", "if systemd-logind cannot be reached: " + fb})
	case p.Scheduled != nil && !p.DryRun && p.ExitCode == 0 && len(p.Calls) > 0:
		// A TIME is never made immediate: systemd 252 refuses it too.
		rows = append(rows, [2]string{"fallback", "none: if systemd-logind does not take the schedule, the command is refused (exit 1) and nothing is shut down"})
	}
	if out := strings.TrimSpace(p.Stdout); out != "" {
		first, _, more := strings.Cut(out, "\n")
		if more {
			first += " …"
		}
		rows = append(rows, [2]string{"prints", first})
	}
	// What the command says on stderr is a row: on plan's own stderr an
	// admin would read it as said by what plan did ("Reboot scheduled").
	for i, l := range strings.Split(strings.TrimRight(p.Stderr, "\n"), "\n") {
		label := ""
		if i == 0 {
			label = "says"
		}
		if l != "" {
			rows = append(rows, [2]string{label, l})
		}
	}
	rows = append(rows, [2]string{"exit", fmt.Sprintf("%d; nothing was done (-o json lists every call)", p.ExitCode)})
	writeRows(w, rows, width)
}

// planAction says in words what the command line does and when.
func planAction(p *handoff.Plan) string {
	var s string
	switch {
	case p.Help:
		return "print " + p.Command + "'s help; nothing else"
	case p.Action == "show":
		return "show the scheduled shutdown"
	case p.Action == "cancel":
		s = "cancel a scheduled shutdown"
	case p.DryRun:
		s = "no " + p.Action + " (-k): only the wall message"
	case p.Scheduled != nil && p.Scheduled.RFC3339 != "":
		s = p.Action + " at " + p.Scheduled.RFC3339
	case p.Scheduled != nil:
		s = p.Action + " " + p.Scheduled.Note
	case p.ExitCode != 0 && len(p.Calls) == 0:
		return "none: the command line is refused"
	default:
		s = p.Action + " now"
	}
	switch p.Force {
	case 1:
		s += ", forced (-f): systemd stops the services, without logind and its inhibitors"
	case 2:
		s += ", forced twice (-ff): at once through the kernel, no service stopped"
	}
	if p.Wall != nil && p.Action != "show" {
		switch {
		case !p.Wall.Enabled:
			s += ", no wall message"
		case p.Wall.Message != "":
			s += fmt.Sprintf(", wall message %q", p.Wall.Message)
		}
	}
	return termSafe(s)
}

// planCalls lists the calls that act, in order: a D-Bus method with its
// arguments, a kernel call, a file written. Introspection and property
// reads are left out.
func planCalls(calls []handoff.Call) string {
	var out []string
	for _, c := range calls {
		var s string
		switch {
		case c.Method == "Introspect" || c.Interface == "org.freedesktop.DBus.Properties":
			continue
		case c.Service == "org.freedesktop.login1":
			s = "logind " + c.Method + "(" + callArgs(c.Args, true) + ")"
		case c.Service == "org.freedesktop.systemd1":
			s = "systemd " + c.Method + "(" + callArgs(c.Args, true) + ")"
		case c.Service == "kernel":
			s = c.Method + "(" + callArgs(c.Args, false) + ")"
		default:
			s = c.Service + " " + c.Method + " " + callArgs(c.Args, true)
		}
		out = append(out, s)
	}
	return termSafe(strings.Join(out, ", "))
}

func callArgs(args []any, quote bool) string {
	var s []string
	for _, a := range args {
		if str, ok := a.(string); ok && quote {
			s = append(s, fmt.Sprintf("%q", str))
		} else {
			s = append(s, fmt.Sprint(a))
		}
	}
	return strings.Join(s, ", ")
}

// writeRows writes label-text rows: the labels in a column, each text
// wrapped to width with its continuation lines under the text column.
func writeRows(w io.Writer, rows [][2]string, width int) {
	col := 0
	for _, r := range rows {
		col = max(col, len(r[0]))
	}
	col += 2
	width = max(width, col+40)
	pad := strings.Repeat(" ", col)
	for _, r := range rows {
		// Escaped here too: the drain row quotes the config file.
		for _, l := range wrap(termSafe(r[1]), width, r[0]+pad[len(r[0]):], pad) {
			fmt.Fprintln(w, strings.TrimRight(l, " "))
		}
	}
}
