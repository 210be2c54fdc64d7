// Package halt is the grammar shared by the legacy halt, poweroff and reboot
// commands, exactly as systemd ≥ 251 parses it (systemctl-compat-halt.c).
//
// Synopsis:
//
//	halt [OPTIONS...]
//	poweroff [OPTIONS...]
//	reboot [OPTIONS...] [ARG]
//
// Options: --halt, -p/--poweroff (ignored after --reboot or as reboot),
// --reboot, -f/--force (sync and reboot(2): no logind, no systemd),
// -w/--wtmp-only (do nothing), -d/--no-wtmp, -n/--no-sync, --no-wall, --help;
// -i and -h are accepted and ignored. A reboot (by name or --reboot) with one
// positional ARG writes it to /run/systemd/reboot-param; with none it
// removes that file. Both happen while parsing, before any other check.
package halt

import (
	"fmt"
	"path/filepath"

	"github.com/gnsh/gnsh/internal/getopt"
	"github.com/gnsh/gnsh/internal/legacy"
)

const (
	keyHelp rune = 0x100 + iota
	keyHalt
	keyReboot
	keyNoWall
)

var longOptions = []getopt.Long{
	{Name: "help", Key: keyHelp},
	{Name: "halt", Key: keyHalt},
	{Name: "poweroff", Key: 'p'},
	{Name: "reboot", Key: keyReboot},
	{Name: "force", Key: 'f'},
	{Name: "wtmp-only", Key: 'w'},
	{Name: "no-wtmp", Key: 'd'},
	{Name: "no-sync", Key: 'n'},
	{Name: "no-wall", Key: keyNoWall},
}

// Help returns systemd's usage text, then legacy.HelpLine; it depends on
// the action chosen so far, as systemd's does (a kexec "reboot" calls
// itself "Halt").
func Help(prog string, a legacy.Action) string {
	arg, verb := "", "Halt"
	switch a {
	case legacy.Reboot:
		arg, verb = " [ARG]", "Reboot"
	case legacy.PowerOff:
		verb = "Power off"
	}
	return fmt.Sprintf(`%s [OPTIONS...]%s

%s the system.

Options:
     --help      Show this help
     --halt      Halt the machine
  -p --poweroff  Switch off the machine
     --reboot    Reboot the machine
  -f --force     Force immediate halt/power-off/reboot
  -w --wtmp-only Don't halt/power-off/reboot, just write wtmp record
  -d --no-wtmp   Don't write wtmp record
     --no-wall   Don't send wall message before halt/power-off/reboot

See the halt(8) man page for details.
`, filepath.Base(prog), arg, verb) + legacy.HelpLine
}

// Parse parses a halt, poweroff or reboot command line. command is the
// personality ("halt", "poweroff" or "reboot"); argv[0] is the program name.
func Parse(command string, argv []string, env legacy.Env) (*legacy.Request, error) {
	r := &legacy.Request{Command: command}
	if len(argv) > 0 {
		r.Prog, r.Args = argv[0], argv[1:]
	}
	switch command {
	case "halt":
		r.Action = legacy.Halt
	case "poweroff":
		r.Action = legacy.PowerOff
	case "reboot":
		r.Action = legacy.Reboot
		if env.KexecLoaded {
			r.Action = legacy.Kexec
		}
	default:
		return nil, fmt.Errorf("halt grammar: unknown command %q", command)
	}
	if env.RunlevelForce {
		r.Force = 2
	}
	p := getopt.New(argv, "pfwdnih", append(longOptions, legacy.DrainLongOptions...), env.PosixlyCorrect)
	for {
		o, ok, err := p.Next()
		if err != nil {
			return nil, legacy.Fail("%s", err)
		}
		if !ok {
			break
		}
		switch o.Key {
		case keyHelp:
			r.Help = Help(r.Prog, r.Action)
			return r, nil
		case keyHalt:
			r.Action = legacy.Halt
		case 'p':
			if r.Action != legacy.Reboot {
				r.Action = legacy.PowerOff
			}
		case keyReboot:
			r.Action = legacy.Reboot
		case 'f':
			r.Force = 2
		case 'w':
			r.DryRun = true
		case 'd':
			r.NoWtmp = true
		case 'n':
			r.NoSync = true
		case keyNoWall:
			r.NoWall = true
		case 'i', 'h':
			// Compatibility no-ops.
		default:
			if _, err := r.DrainOption(o); err != nil {
				return nil, err
			}
		}
	}
	args := p.Args()
	switch {
	case r.Action == legacy.Reboot && len(args) <= 1:
		r.ParamOp = legacy.ParamUnlink
		if len(args) == 1 && args[0] != "" {
			if !validParam(args[0]) {
				return nil, legacy.Fail("Invalid reboot parameter '%s'.", args[0])
			}
			r.ParamOp, r.Param = legacy.ParamWrite, args[0]
		}
	case len(args) > 0:
		return nil, legacy.Fail("Too many arguments.")
	}
	return r, nil
}

// validParam is systemd's reboot_parameter_is_valid(): 7-bit ASCII and at
// most NAME_MAX bytes.
func validParam(s string) bool {
	if len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
