// Package legacy models a parsed legacy command line (shutdown, poweroff,
// reboot, halt) the way systemd's systemctl holds it in its arg_* globals,
// so that the grammars in wrappers/ and the hand-off in internal/handoff
// share one vocabulary.
package legacy

import (
	"fmt"
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

// FromUsec converts CLOCK_REALTIME microseconds to a time.
func FromUsec(u uint64) time.Time { return time.UnixMicro(int64(u)) }
