// Command gnsh is the Graceful Node Shutdown Helper. Installed as shutdown,
// poweroff, reboot and halt it behaves as those commands do in systemd ≥ 251,
// always through systemd-logind; as gnsh it offers its own subcommands.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gnsh/gnsh/internal/caller"
	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/gnshcli"
	"github.com/gnsh/gnsh/internal/journal"
	"github.com/gnsh/gnsh/internal/signals"
	"github.com/gnsh/gnsh/internal/system"
)

func main() {
	buses := &dispatch.Buses{Getenv: os.Getenv}
	env := &dispatch.Env{
		Stdout: os.Stdout, Stderr: os.Stderr, LookupEnv: os.LookupEnv, Now: time.Now, Location: time.Local,
		Host: &system.Host{}, Kernel: system.Kernel{}, DialLogind: buses.Logind, DialSystemd: buses.Systemd,
	}
	// The one signal handler: it installs nothing until a drain asks for
	// it, so on a machine that is not a Kubernetes node every signal keeps
	// its default action, as with systemd's own commands.
	sig := signals.New(func(line string) { fmt.Fprintf(os.Stderr, "gnsh: %s\n", line) })
	// Who runs the command: a person at a terminal gets the live status
	// line; automation (no terminal, or Ansible's ssh -tt) plain lines.
	who := caller.Ask()
	newDrainer := func() *drainer.Drainer {
		w := who
		// Relies: shutdown -c asks logind and systemd whether a shutdown
		// is under way before it lifts gnsh's cordon and frees the slot.
		return &drainer.Drainer{Stderr: os.Stderr, TTY: w.Live, Caller: &w, Getenv: os.Getenv, Signal: sig,
			Relies:    gnshcli.ShutdownRelies(os.Getenv, time.Now),
			Automated: func() (bool, string) { return !w.Person, w.Reason }, Journal: journal.Send}
	}
	env.Preparer, env.NewDrainer = newDrainer(), newDrainer
	ctx := context.Background()
	var code int
	if name := dispatch.Personality(os.Args[0]); name != "gnsh" {
		code = dispatch.RunLegacy(ctx, name, os.Args, env)
	} else {
		code = gnshcli.Run(ctx, os.Args, env)
	}
	buses.Close()
	os.Exit(code)
}
