// Command gnsh is the Graceful Node Shutdown Helper. Installed as shutdown,
// poweroff, reboot and halt it behaves as those commands do in systemd ≥ 251,
// always through systemd-logind; as gnsh it offers its own subcommands.
package main

import (
	"context"
	"os"
	"time"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/gnshcli"
	"github.com/gnsh/gnsh/internal/system"
)

func main() {
	buses := &dispatch.Buses{Getenv: os.Getenv}
	env := &dispatch.Env{
		Stdout: os.Stdout, Stderr: os.Stderr, LookupEnv: os.LookupEnv, Now: time.Now, Location: time.Local,
		Host: &system.Host{}, Kernel: system.Kernel{}, DialLogind: buses.Logind, DialSystemd: buses.Systemd,
	}
	newDrainer := func() *drainer.Drainer {
		return &drainer.Drainer{Stderr: os.Stderr, TTY: drainer.IsTerminal(2), Getenv: os.Getenv}
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
