package gnshcli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/kube"
	"github.com/gnsh/gnsh/internal/nodefacts"
)

// adjustSources, if set, changes the fact sources before they are used
// (tests: a fake binary, a fake systemd).
var adjustSources func(*nodefacts.Sources)

// outputFlag is -o/--output of the commands that print text or JSON.
func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "output `FORMAT`, text or json"}
}

func kubeletConfigFlag() cli.Flag {
	return &cli.StringFlag{Name: "kubelet-config", Usage: "kubelet's config `FILE` (default: the running kubelet's --config, else " + nodefacts.DefaultKubeletConfig + ")"}
}

func factSources(c *cli.Context, env *dispatch.Env) *nodefacts.Sources {
	s := &nodefacts.Sources{
		Getenv:        func(k string) string { v, _ := env.LookupEnv(k); return v },
		KubeletConfig: c.String("kubelet-config"),
		Kube:          nodefacts.KubeOptions{Kubeconfig: c.String("kubeconfig"), Node: c.String("node")},
	}
	if env.Host != nil {
		s.Root = env.Host.Root
	}
	if adjustSources != nil {
		adjustSources(s)
	}
	return s
}

func checkOutput(c *cli.Context) error {
	if o := c.String("output"); o != "text" && o != "json" {
		return usagef(c, "invalid --output %q: text or json", o)
	}
	return nil
}

func statusCommand(env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show what logind, kubelet and the cluster know about this node",
		Description: "One fact a line: systemd, logind and its inhibitors, kubelet's grace period, what " +
			"the four commands run, the kubeconfig, the Node and its cordon, the drain, the node " +
			"agent, the reboot slots. A fact that cannot be read shows its error. Changes nothing.",
		Flags: []cli.Flag{outputFlag(), nodeFlag(), kubeFlag(), kubeletConfigFlag()},
		Action: func(c *cli.Context) error {
			if err := checkOutput(c); err != nil {
				return err
			}
			r := nodefacts.Gather(c.Context, factSources(c, env))
			if c.String("output") == "json" {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			WriteStatus(env.Stdout, r)
			return nil
		},
	}
}

// WriteStatus writes the report as aligned text, one fact a line.
func WriteStatus(w io.Writer, r *nodefacts.Report) {
	var rows [][2]string
	add := func(k, v string) { rows = append(rows, [2]string{k, v}) }

	sd := r.Systemd
	switch {
	case sd.Version != "":
		v := "systemd " + sd.Version
		if sd.NewShutdownEnv != "" {
			v += ", SYSTEMD_NEW_SHUTDOWN=" + sd.NewShutdownEnv
		}
		add("systemd", v)
	case !sd.Booted:
		add("systemd", "not running as PID 1 (no /run/systemd/system)"+errSuffix(sd.Error))
	default:
		add("systemd", "version unknown"+errSuffix(sd.Error))
	}

	l := r.Logind
	if !l.Reachable {
		add("logind", "not reachable"+errSuffix(l.Error))
	} else {
		add("logind", "reachable")
		add("inhibit delay max", valueOrError(l.InhibitDelayMax, l.InhibitDelayMaxError))
	}
	conf := r.LogindConf
	set := "logind's default"
	if conf.EffectiveFile != "" {
		set = conf.EffectiveFile
	}
	add("logind.conf", fmt.Sprintf("InhibitDelayMaxSec %s (set by %s%s)%s", conf.Effective, set, overridden(conf), errSuffix(conf.Error)))
	if l.Reachable {
		if l.InhibitorsError != "" {
			add("inhibitors", "error: "+l.InhibitorsError)
		} else {
			add("inhibitors", fmt.Sprintf("kubelet %s, gnsh %s; %d in all", yesNo(l.KubeletLock), yesNo(l.GnshLock), len(l.Inhibitors)))
			for _, in := range l.Inhibitors {
				add("", fmt.Sprintf("%s %s by %s (pid %d, uid %d): %s", in.Mode, in.What, in.Who, in.PID, in.UID, in.Why))
			}
		}
		switch {
		case l.ScheduledError != "":
			add("scheduled shutdown", "error: "+l.ScheduledError)
		case l.Scheduled == nil:
			add("scheduled shutdown", "none")
		case l.Scheduled.Time == "":
			add("scheduled shutdown", l.Scheduled.Type+" (now)")
		default:
			add("scheduled shutdown", l.Scheduled.Type+" at "+l.Scheduled.Time)
		}
	}

	k := r.Kubelet
	switch {
	case k.Error != "":
		add("kubelet", "error: "+k.Error+" (config from "+k.ConfigFrom+")")
	case k.ByPodPrioritySec > 0:
		add("kubelet", fmt.Sprintf("shutdownGracePeriodByPodPriority %ds in all (%s)", k.ByPodPrioritySec, k.ConfigPath))
	default:
		add("kubelet", fmt.Sprintf("shutdownGracePeriod %s, shutdownGracePeriodCriticalPods %s (%s)",
			unset(k.ShutdownGracePeriod), unset(k.ShutdownGracePeriodCriticalPods), k.ConfigPath))
	}

	cf := r.Commands
	rp := cf.RootPath
	if cf.RootPathFrom == "default" {
		rp += " (default)"
	}
	add("PATH (root)", rp)
	switch {
	case cf.SecurePath != "":
		add("secure_path (sudo)", cf.SecurePath+errSuffix(cf.SudoersErr))
	case cf.SudoersErr != "":
		add("secure_path (sudo)", "error: "+cf.SudoersErr)
	default:
		add("secure_path (sudo)", "none (sudo keeps the caller's PATH)")
	}
	for i, rr := range cf.Root {
		v := "root: " + describe(rr)
		if i < len(cf.Sudo) {
			v += "; sudo: " + describe(cf.Sudo[i])
		}
		add(rr.Name, v)
	}
	if cf.Ansible.Name != "" {
		add("ansible reboot", describe(cf.Ansible))
	}

	kc := r.Kubeconfig
	switch {
	case !kc.Found:
		add("kubeconfig", "none"+errSuffix(kc.Error))
	case kc.Error != "":
		add("kubeconfig", kc.Path+errSuffix(kc.Error))
	default:
		// The drain's, and the reboot-slot gate's when it is another file.
		v := fmt.Sprintf("%s (mode %s)", kc.Path, kc.Mode)
		if kc.Fallback {
			v += ", gnsh's own for want of a kubelet kubeconfig (" + kube.KubeletKubeconfigList() + "): set kubeconfig to the kubelet's"
		}
		if g := r.Slots.Kubeconfig; g != "" && g != kc.Path {
			v += fmt.Sprintf("; gate: %s (mode %s)", g, r.Slots.Mode)
		}
		if kc.GateError != "" {
			v += "; gate: error: " + kc.GateError
		}
		add("kubeconfig", v)
	}
	if kc.ConfigError != "" {
		add("gnsh config", "error: "+kc.ConfigError)
	}

	n := r.Node
	name := n.Name
	if n.NameFrom != "" {
		name += " (from " + n.NameFrom + ")"
	}
	switch {
	case n.Found:
		st := "schedulable"
		if n.Schedulable != nil && !*n.Schedulable {
			st = "unschedulable"
		}
		add("node", name+", "+st)
		switch {
		case n.Cordon != nil:
			o := n.Cordon
			v := fmt.Sprintf("by gnsh for %s, by %s", o.Action, o.User)
			if o.TTY != "" {
				v += " on " + o.TTY
			}
			v += " at " + o.Time.UTC().Format("2006-01-02T15:04:05Z07:00")
			if o.When != nil {
				v += ", scheduled for " + o.When.UTC().Format("2006-01-02T15:04:05Z07:00")
			}
			add("cordon", v)
		case n.Schedulable != nil && !*n.Schedulable:
			add("cordon", "not gnsh's")
		default:
			add("cordon", "none")
		}
		if n.SameMachine != nil {
			add("this machine", yesNo(*n.SameMachine)+": "+n.SameWhy)
		}
	case n.Name != "":
		add("node", name+errSuffix(n.Error))
	default:
		add("node", "unknown"+errSuffix(n.Error))
	}

	a := r.Agent
	v := a.ActiveState
	if a.LoadState != "" && a.LoadState != "loaded" {
		v += " (" + a.LoadState + ")"
	}
	add("agent", a.Unit+": "+v+errSuffix(a.Error))
	switch {
	case a.Queued != "":
		add("queued reboot", a.Queued)
	case a.QueuedError != "":
		add("queued reboot", "error: "+a.QueuedError)
	}
	path := a.LockPath
	if path == "" {
		path = nodefacts.AgentLockPath
	}
	lock := path + " " + a.Lock
	switch {
	case a.Lock == nodefacts.LockRootOnly:
		lock = "from systemd; " + path + " is root's"
	case a.LockError != "":
		lock = path + ": error: " + a.LockError
	}
	runs := "no (" + lock + ")"
	if a.Running {
		runs = "yes (" + lock + "), delay lock on shutdown " + yesNo(l.GnshLock)
		if !l.Reachable || l.InhibitorsError != "" {
			runs = "yes (" + lock + "), delay lock on shutdown unknown"
		}
	}
	add("agent runs", runs)
	add("reboot slots", slotsLine(r.Slots))
	if r.GateToken != nil {
		add("gate token", r.GateToken.Line())
	}

	width := 0
	for _, row := range rows {
		width = max(width, len(row[0]))
	}
	for _, row := range rows {
		fmt.Fprintf(w, "%-*s  %s\n", width, row[0], oneLine(row[1]))
	}
}

// slotsLine is the gate in one line: its mode and limits, whether it
// answers, the holders, the queue and this node's place.
func slotsLine(sf nodefacts.SlotsFacts) string {
	if sf.Gate == "off" {
		return "gate off"
	}
	v := fmt.Sprintf("gate %s, %s, limit %d", sf.Gate, sf.Lease, sf.MaxUnavailable)
	if len(sf.Pools) > 0 {
		v += ", pools " + strings.Join(sf.Pools, ", ")
	}
	switch sf.Cause {
	case nodefacts.CauseNotANode:
		return v + "; " + sf.Error
	case nodefacts.CauseRecord, nodefacts.CauseNewer:
		// Not "unavailable", which an optional gate goes past.
		return v + "; every reboot is refused: " + sf.Error
	}
	if !sf.Reachable {
		return v + "; unavailable: " + sf.Error
	}
	holders := "none"
	if len(sf.Holders) > 0 {
		holders = strings.Join(sf.Holders, ", ")
	}
	return fmt.Sprintf("%s; held by %s, %d waiting; this node: %s", v, holders, sf.Waiting, sf.This)
}

// overridden lists the earlier files whose InhibitDelayMaxSec the
// effective one overrides.
func overridden(conf nodefacts.LogindConfFacts) string {
	var o []string
	for _, f := range conf.Files {
		if f.Path == conf.EffectiveFile {
			break
		}
		if f.InhibitDelayMaxSec != "" && !f.Masked && f.Error == "" {
			o = append(o, f.Path+" "+f.InhibitDelayMaxSec)
		}
	}
	if len(o) == 0 {
		return ""
	}
	return ", overriding " + strings.Join(o, ", ")
}

func describe(r nodefacts.Resolution) string {
	switch {
	case r.Is == "missing":
		return "not found" + errSuffix(r.Error)
	case r.Target != r.Path:
		return fmt.Sprintf("%s → %s (%s)", r.Path, r.Target, r.Is)
	}
	return fmt.Sprintf("%s (%s)", r.Path, r.Is)
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " (error: " + e + ")"
}

func valueOrError(v, e string) string {
	if e != "" {
		return "error: " + e
	}
	return v
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func unset(s string) string {
	if s == "" {
		return "unset"
	}
	return s
}

// oneLine keeps a fact on its line whatever an error text holds, and
// escapes what must not reach a terminal raw (termSafe).
func oneLine(s string) string { return termSafe(strings.ReplaceAll(s, "\n", " ")) }
