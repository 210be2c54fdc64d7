// Package shutdown is the grammar of the legacy shutdown command, exactly as
// systemd ≥ 251 parses it (systemctl-compat-shutdown.c).
//
// Synopsis:
//
//	shutdown [OPTIONS...] [TIME] [WALL...]
//
// Options -H/--halt, -P/--poweroff, -r/--reboot, -K/--kexec, -h, -k,
// --no-wall, -c, --show and --help act in command-line order; -a, -t ARG,
// -f and -F are accepted and ignored. TIME is "now", "+m" or "m" (minutes,
// strtoull base 0) or "hh:mm" (24-hour local time, rolling to the next day
// when not in the future); without TIME the shutdown is one minute from now.
// With -c every positional argument is WALL text.
package shutdown

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/gnsh/gnsh/internal/getopt"
	"github.com/gnsh/gnsh/internal/legacy"
)

const (
	keyHelp rune = 0x100 + iota
	keyNoWall
	keyShow
)

var longOptions = []getopt.Long{
	{Name: "help", Key: keyHelp},
	{Name: "halt", Key: 'H'},
	{Name: "poweroff", Key: 'P'},
	{Name: "reboot", Key: 'r'},
	{Name: "kexec", Key: 'K'}, // undocumented in systemd too
	{Name: "no-wall", Key: keyNoWall},
	{Name: "show", Key: keyShow},
}

// Help returns systemd's usage text for shutdown, then legacy.HelpLine;
// prog is argv[0].
func Help(prog string) string {
	return fmt.Sprintf(`%s [OPTIONS...] [TIME] [WALL...]

Shut down the system.

Options:
     --help      Show this help
  -H --halt      Halt the machine
  -P --poweroff  Power-off the machine
  -r --reboot    Reboot the machine
  -h             Equivalent to --poweroff, overridden by --halt
  -k             Don't halt/power-off/reboot, just send warnings
     --no-wall   Don't send wall message before halt/power-off/reboot
  -c             Cancel a pending shutdown
     --show      Show pending shutdown

See the shutdown(8) man page for details.
`, filepath.Base(prog)) + legacy.HelpLine
}

// Parse parses a shutdown command line; argv[0] is the program name.
func Parse(argv []string, env legacy.Env) (*legacy.Request, error) {
	r := &legacy.Request{Command: "shutdown", Action: legacy.PowerOff}
	if len(argv) > 0 {
		r.Prog, r.Args = argv[0], argv[1:]
	}
	p := getopt.New(argv, "HPrhkKat:fFc", append(longOptions, legacy.DrainLongOptions...), env.PosixlyCorrect)
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
			r.Help = Help(r.Prog)
			return r, nil
		case 'H':
			r.Action = legacy.Halt
		case 'P':
			r.Action = legacy.PowerOff
		case 'r':
			if env.KexecLoaded {
				r.Action = legacy.Kexec
			} else {
				r.Action = legacy.Reboot
			}
		case 'K':
			r.Action = legacy.Kexec
		case 'h':
			if r.Action != legacy.Halt {
				r.Action = legacy.PowerOff
			}
		case 'k':
			r.DryRun = true
		case keyNoWall:
			r.NoWall = true
		case 'a', 't', 'f', 'F':
			// Compatibility no-ops; -t's argument is ignored too.
		case 'c':
			r.Action = legacy.Cancel
		case keyShow:
			r.Action = legacy.Show
		default:
			if _, err := r.DrainOption(o); err != nil {
				return nil, err
			}
		}
	}
	args := p.Args()
	if len(args) > 0 && r.Action != legacy.Cancel {
		when, ok := ParseTime(args[0], env.Now, env.Location)
		if !ok {
			return nil, legacy.Fail("Failed to parse time specification: %s", args[0])
		}
		r.When = when
	} else {
		r.When = legacy.Usec(env.Now) + usecPerMinute
	}
	switch {
	case len(args) > 0 && r.Action == legacy.Cancel:
		r.Wall = args
	case len(args) > 1:
		r.Wall = args[1:]
	}
	return r, nil
}

const (
	usecPerMinute = uint64(60_000_000)
	usecPerDay    = 24 * 60 * usecPerMinute
)

// ParseTime is systemd's parse_shutdown_time_spec: "now" is 0 (immediate),
// "+m"/"m" are minutes from now (uint64 arithmetic, as in C), "hh:mm" is the
// next such local time strictly after now. loc is the local time zone.
func ParseTime(t string, now time.Time, loc *time.Location) (uint64, bool) {
	n := legacy.Usec(now)
	if t == "now" {
		return 0, true
	}
	if !strings.Contains(t, ":") {
		u, ok := safeAtou64(t)
		if !ok {
			return 0, false
		}
		return n + usecPerMinute*u, true
	}
	hour, rest, ok := strtol10(t)
	if !ok || !strings.HasPrefix(rest, ":") || hour < 0 || hour > 23 {
		return 0, false
	}
	minute, rest, ok := strtol10(rest[1:])
	if !ok || rest != "" || minute < 0 || minute > 59 {
		return 0, false
	}
	// localtime_r(now) then mktime() with tm_isdst as localtime_r left it:
	// glibc interprets the fields with the UTC offset of that DST state,
	// which is the offset in force now.
	local := now.In(loc)
	_, offset := local.Zone()
	y, mo, d := local.Date()
	at := time.Date(y, mo, d, int(hour), int(minute), 0, 0, time.FixedZone("", offset))
	ret := uint64(at.Unix()) * 1_000_000
	for ret <= n {
		ret += usecPerDay
	}
	return ret, true
}
