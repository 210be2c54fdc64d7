// Package legacy models a parsed legacy command line (shutdown, poweroff,
// reboot, halt) the way systemd's systemctl holds it in its arg_* globals,
// so that the grammars in wrappers/ and the hand-off in internal/handoff
// share one vocabulary.
package legacy

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Action is what the command line asks for (systemctl's enum action).
type Action int

// The actions the legacy commands can produce.
const (
	PowerOff Action = iota
	Reboot
	Halt
	Kexec
	Cancel // shutdown -c
	Show   // shutdown --show
)

var actionNames = [...]string{"poweroff", "reboot", "halt", "kexec", "cancel", "show"}

// String returns the systemctl verb for shutdown actions ("poweroff",
// "reboot", "halt", "kexec") and "cancel"/"show" for the others. These are
// also the ScheduleShutdown type strings.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// IsShutdown reports whether a turns the machine off or restarts it.
func (a Action) IsShutdown() bool { return a <= Kexec }

// Target is the systemd unit that performs the action.
func (a Action) Target() string { return a.String() + ".target" }

// Method is the logind Manager method for an immediate action: kexec is a
// Reboot with the REBOOT_VIA_KEXEC flag.
func (a Action) Method() string {
	switch a {
	case PowerOff:
		return "PowerOff"
	case Reboot, Kexec:
		return "Reboot"
	case Halt:
		return "Halt"
	}
	return ""
}

// ParamOp is what a reboot command does to /run/systemd/reboot-param while
// its arguments are parsed (systemd does this before any other check).
type ParamOp int

// Reboot parameter file operations.
const (
	ParamKeep   ParamOp = iota // not touched (shutdown, halt, poweroff)
	ParamWrite                 // reboot ARG
	ParamUnlink                // plain reboot
)

// String names the operation as gnsh plan prints it.
func (o ParamOp) String() string {
	return [...]string{"keep", "write", "unlink"}[o]
}

// Request is a fully parsed legacy command line.
type Request struct {
	Command string // personality: shutdown, reboot, poweroff or halt
	Prog    string // argv[0] as typed, for diagnostics
	Args    []string

	Action Action
	// Force is systemd's arg_force: 0, or 2 for halt/poweroff/reboot -f
	// (sync and reboot(2), never logind, never systemd).
	Force  int
	DryRun bool // shutdown -k, halt -w
	NoWall bool
	NoSync bool // -n: skip sync() before reboot(2) on the -f path
	NoWtmp bool // -d: accepted; only matters when not booted with systemd
	// When is the CLOCK_REALTIME deadline in microseconds; 0 means now.
	//
	// IMPORTANT: "shutdown +0" is now()+0, which is > 0 and therefore a
	// scheduled shutdown, while "shutdown now" is 0 and immediate.
	When uint64
	Wall []string // WALL words, joined with single spaces when sent

	ParamOp ParamOp
	Param   string

	// Help is the usage text when --help was given; nothing else applies.
	Help string

	// Drain holds gnsh's own options (--no-drain, --drain-timeout,
	// --force-drain).
	Drain DrainFlags
}

// WallMessage is the text sent to logind's SetWallMessage.
func (r *Request) WallMessage() string { return strings.Join(r.Wall, " ") }

// Immediate reports whether the request acts now rather than at a time.
func (r *Request) Immediate() bool { return r.When == 0 }

// Env is what parsing may look at besides argv. Parsers never read the
// clock, the environment or the file system themselves.
type Env struct {
	Now            time.Time      // CLOCK_REALTIME at parse time
	Location       *time.Location // local time zone for hh:mm
	KexecLoaded    bool           // /sys/kernel/kexec_loaded says 1
	PosixlyCorrect bool           // $POSIXLY_CORRECT is set
	// RunlevelForce is true when utmp says runlevel 0 or 6: halt, poweroff
	// and reboot then imply -f, as in systemd before v258 ("called in
	// sysvinit system as last command in shutdown/reboot").
	RunlevelForce bool
}

// ExitError is a failure with systemd's message and exit status. Msg may
// hold several lines; it is printed to stderr as is.
type ExitError struct {
	Msg  string
	Code int
}

func (e *ExitError) Error() string { return e.Msg }

// ExitCode implements the urfave/cli ExitCoder shape.
func (e *ExitError) ExitCode() int { return e.Code }

// Fail returns an ExitError with status 1, the only failure status the
// legacy commands use.
func Fail(format string, args ...any) *ExitError {
	return &ExitError{Msg: fmt.Sprintf(format, args...), Code: 1}
}

// Usec converts a time to CLOCK_REALTIME microseconds.
func Usec(t time.Time) uint64 { return uint64(t.UnixMicro()) }

// MaxTime is the latest time FromUsec returns: math.MaxInt64 µs after the
// epoch, in the year 294247.
var MaxTime = time.UnixMicro(math.MaxInt64)

// FromUsec converts CLOCK_REALTIME microseconds to a time.
//
// systemd's usec_t is unsigned, and "shutdown 160000000000" really asks
// logind for now + 9.6e18 µs, above math.MaxInt64. Converting that through
// int64 would give a time before 1970, so that a shutdown logind keeps
// pending for ever would look overdue. FromUsec saturates instead: every
// value above math.MaxInt64 gives MaxTime, so the result is never before
// the epoch and never earlier than the time asked for. Use Until or
// Request.DueIn for how long is left.
func FromUsec(u uint64) time.Time {
	if u > math.MaxInt64 {
		return MaxTime
	}
	return time.UnixMicro(int64(u))
}

// Until is how long from now until the CLOCK_REALTIME time usec, computed
// over the whole uint64 range as logind's timer sees it: 0 when usec is not
// after now (logind acts at once on a time in the past), and
// math.MaxInt64 (about 292 years) when the wait is longer than a
// time.Duration holds.
func Until(usec uint64, now time.Time) time.Duration {
	var left uint64
	if n := now.UnixMicro(); n >= 0 {
		if usec <= uint64(n) {
			return 0
		}
		left = usec - uint64(n)
	} else {
		// Only tests live before 1970; -n is at most 2^63.
		left = usec + uint64(-n)
		if left < usec {
			return math.MaxInt64
		}
	}
	if left > math.MaxInt64/uint64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(left) * time.Microsecond
}

// DueIn is how long from now until a request's shutdown is due, which is
// what the drain policy needs: 0 for an immediate request (When 0) and for
// a TIME at or before now. The minutes of "shutdown m" are multiplied and
// added in uint64 arithmetic, as systemd does, so a huge m can wrap around
// 2^64 to a time in the past (logind then shuts down at once: due now) or
// a few seconds ahead; a TIME beyond what a time.Duration holds gives
// math.MaxInt64.
func (r *Request) DueIn(now time.Time) time.Duration {
	if r.When == 0 {
		return 0
	}
	return Until(r.When, now)
}
