package gnshcli

import (
	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/install"
)

// The options of gnsh install and uninstall. Functions: cli keeps state
// in a flag, which must not be shared between runs.
func rootFlag() cli.Flag {
	return &cli.StringFlag{Name: "root", Value: "/", Usage: "act on the system mounted at `DIR`, an image"}
}

func dryFlag() cli.Flag {
	return &cli.BoolFlag{Name: "dry-run", Usage: "print what would change; change nothing"}
}

func installCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "install",
		Usage: "switch shutdown, poweroff, reboot and halt to gnsh",
		Description: "Copies gnsh to " + install.DefaultBin + ", writes gnsh.service, " + install.ConfigPath +
			" (if absent) and the man pages, and switches the four commands to gnsh, keeping the " +
			"originals; every change printed, recorded and undone if one fails.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "mode", Usage: "the switch's `MODE`: divert (default on Debian, Ubuntu, RHEL), alternatives or symlink"},
			rootFlag(), dryFlag(),
			&cli.BoolFlag{Name: "packaged", Usage: "for the .deb and .rpm scripts: only switch the commands to " + install.PackagedBin},
			&cli.StringFlag{Name: "bin", Usage: "install gnsh as `PATH` (default " + install.DefaultBin + ")"},
		},
		Action: func(c *cli.Context) error {
			err := install.Install(c.Context, install.Options{
				Root: c.String("root"), Mode: c.String("mode"), Bin: c.String("bin"),
				Packaged: c.Bool("packaged"), DryRun: c.Bool("dry-run"), Out: env.Stdout,
			})
			*code = report(env.Stderr, err)
			return nil
		},
	}
}

func uninstallCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "uninstall",
		Usage: "put shutdown, poweroff, reboot and halt back as they were",
		Description: "Undoes what " + install.StatePath + " records: stops and disables gnsh.service, " +
			"puts back every original command exactly, removes the files gnsh install added (an edited " +
			"config stays).",
		Flags: []cli.Flag{rootFlag(), dryFlag(),
			&cli.BoolFlag{Name: "packaged", Usage: "for the .deb and .rpm scripts: put the commands back; remove no files"},
		},
		Action: func(c *cli.Context) error {
			err := install.Uninstall(c.Context, install.Options{
				Root: c.String("root"), Packaged: c.Bool("packaged"), DryRun: c.Bool("dry-run"), Out: env.Stdout,
			})
			*code = report(env.Stderr, err)
			return nil
		},
	}
}
