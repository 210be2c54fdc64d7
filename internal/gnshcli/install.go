package gnshcli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/install"
)

var (
	rootFlag = &cli.StringFlag{Name: "root", Value: "/", Usage: "act on the system mounted at `DIR` (an image; tools get --root or run chrooted, the unit is enabled by links only)"}
	dryFlag  = &cli.BoolFlag{Name: "dry-run", Usage: "print what would change, change nothing"}
	pkgFlag  = &cli.BoolFlag{Name: "packaged", Usage: "for the .deb/.rpm maintainer scripts: the package ships " + install.PackagedBin + ", the unit, the config and the man pages; only switch the four commands to it (the package's scripts enable gnsh.service on a first install)"}
)

func installCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "install",
		Usage: "switch shutdown, poweroff, reboot and halt to gnsh; install the binary, gnsh.service and the config",
		Description: "Copies this gnsh to " + install.DefaultBin + " (--bin), writes " + install.UnitPath + "\n" +
			"(not over a mask), " + install.ConfigPath + " if absent (the annotated example) and the man\n" +
			"pages, and switches the four commands to gnsh in one of three modes (below). A first\n" +
			"install (no record, no gnsh.service found) enables gnsh.service and starts it when\n" +
			"systemd runs the target; later runs leave it enabled, disabled or masked as it is,\n" +
			"restarting it only when it runs and its binary or unit changed.\n\n" +
			"  divert        Debian/Ubuntu: dpkg-divert of /sbin/reboot … to /sbin/reboot.distrib\n" +
			"                (package gnsh), gnsh linked in their place. dpkg then writes every\n" +
			"                update or reinstall of systemd-sysv to the diverted names, so the\n" +
			"                switch survives upgrades. RHEL family (rpm has no diversions):\n" +
			"                /usr/sbin/reboot … replaced by links to gnsh, the originals kept as\n" +
			"                NAME.gnsh-orig; the gnsh package's trigger on systemd runs\n" +
			"                'gnsh install --mode divert' again after an update restored them.\n" +
			"  alternatives  the same originals kept aside, and an alternatives group per command\n" +
			"                at the system path (update-alternatives on Debian/Ubuntu, alternatives\n" +
			"                on RHEL): gnsh at priority 100, systemd's original at 10;\n" +
			"                'update-alternatives --config reboot' switches back and forth.\n" +
			"  symlink       links in /usr/local/sbin only. Absolute paths (/sbin/reboot),\n" +
			"                sudo's secure_path without /usr/local/sbin (RHEL's default) and\n" +
			"                Ansible's reboot module (it runs /sbin/shutdown) bypass it.\n\n" +
			"Default: the mode installed before; else divert on Debian/Ubuntu and the RHEL family\n" +
			"(ID and ID_LIKE in /etc/os-release: the only mode that every caller goes through and\n" +
			"that survives package updates), symlink elsewhere (with a warning). Another mode than\n" +
			"the one installed first undoes that one.\n\n" +
			"Every change is made beside the old file and renamed into place (the node always\n" +
			"has a working reboot), printed as one line \"gnsh: …\", and recorded in\n" +
			install.StatePath + " before it is made. When a change fails, or the record cannot\n" +
			"be written (a full or read-only /var), every change is undone: the files are as\n" +
			"before. A run interrupted by a kill or a power loss is finished by the next gnsh\n" +
			"install, or undone by gnsh uninstall. Nothing to do prints \"" + install.NothingToChange + "\".\n" +
			"Exit status 0, or 1 with one line naming the problem and the fix.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "mode", Usage: "how the commands are switched: `MODE` is divert, alternatives or symlink (default: see the description)"},
			rootFlag, dryFlag, pkgFlag,
			&cli.StringFlag{Name: "bin", Usage: "install gnsh as `PATH` (default " + install.DefaultBin + "; " + install.PackagedBin + " with --packaged); the unit's ExecStart follows"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("install takes no arguments (got %q)", c.Args().First())
			}
			err := install.Install(c.Context, install.Options{
				Root: c.String("root"), Mode: c.String("mode"), Bin: c.String("bin"),
				Packaged: c.Bool("packaged"), DryRun: c.Bool("dry-run"), Out: env.Stdout,
			})
			*code = dispatch.Report(env.Stderr, err)
			return nil
		},
	}
}

func uninstallCommand(code *int, env *dispatch.Env) *cli.Command {
	return &cli.Command{
		Name:  "uninstall",
		Usage: "put shutdown, poweroff, reboot and halt back as they were and remove what gnsh install added",
		Description: "Undoes what " + install.StatePath + " records: stops and disables gnsh.service,\n" +
			"puts every original command back exactly (the same link target or file, mode and\n" +
			"owner: the kept originals are renamed back), removes the diversions and\n" +
			"alternatives groups, the binary, the unit, the man pages and the directories it\n" +
			"made, and the configuration unless it was edited. With --packaged (the packages'\n" +
			"prerm/preun) only the commands and the unit's enablement: the package removes its\n" +
			"own files. Output and exit status as gnsh install's.",
		Flags: []cli.Flag{rootFlag, dryFlag,
			&cli.BoolFlag{Name: "packaged", Usage: "for the .deb/.rpm maintainer scripts: put the commands back and disable gnsh.service; remove no files"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("uninstall takes no arguments (got %q)", c.Args().First())
			}
			err := install.Uninstall(c.Context, install.Options{
				Root: c.String("root"), Packaged: c.Bool("packaged"), DryRun: c.Bool("dry-run"), Out: env.Stdout,
			})
			*code = dispatch.Report(env.Stderr, err)
			return nil
		},
	}
}
