package handoff

import (
	"context"
	"errors"

	"github.com/gnsh/gnsh/internal/legacy"
)

// Inhibitor is one entry of logind's ListInhibitors() a(ssssuu).
type Inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// Caps is what the running logind offers, read from its introspection data
// rather than guessed from a version number.
type Caps struct {
	Methods map[string]bool // org.freedesktop.login1.Manager methods
}

// Has reports whether logind exports the Manager method m.
func (c Caps) Has(m string) bool { return c.Methods[m] }

// Logind is the part of org.freedesktop.login1.Manager that gnsh uses.
// Implementations return *BusError for D-Bus error replies and
// *UnreachableError when the bus or logind cannot be reached at all.
type Logind interface {
	// Caps introspects /org/freedesktop/login1.
	Caps(ctx context.Context) (Caps, error)
	// SetWallMessage(in s wall_message, in b enable).
	SetWallMessage(ctx context.Context, msg string, enable bool) error
	// ShutdownWithFlags calls PowerOffWithFlags, RebootWithFlags or
	// HaltWithFlags (in t flags); method is "PowerOff", "Reboot" or "Halt".
	ShutdownWithFlags(ctx context.Context, method string, flags uint64) error
	// Shutdown calls PowerOff, Reboot or Halt (in b interactive).
	Shutdown(ctx context.Context, method string, interactive bool) error
	// ScheduleShutdown(in s type, in t usec) with usec in CLOCK_REALTIME µs.
	ScheduleShutdown(ctx context.Context, typ string, usec uint64) error
	// CancelScheduledShutdown(out b cancelled).
	CancelScheduledShutdown(ctx context.Context) (bool, error)
	// ScheduledShutdown reads the property of that name, (st).
	ScheduledShutdown(ctx context.Context) (typ string, usec uint64, err error)
	// ListInhibitors(out a(ssssuu) inhibitors).
	ListInhibitors(ctx context.Context) ([]Inhibitor, error)
}

// Systemd is the part of org.freedesktop.systemd1.Manager gnsh uses as a
// fallback when logind cannot be used. It bypasses every inhibitor.
type Systemd interface {
	// StartUnit(in s name, in s mode, out o job).
	StartUnit(ctx context.Context, name, mode string) error
}

// RebootCmd is a reboot(2) command.
type RebootCmd int

// The reboot(2) commands halt_now uses.
const (
	CmdEnableCAD RebootCmd = iota // LINUX_REBOOT_CMD_CAD_ON
	CmdHalt                       // LINUX_REBOOT_CMD_HALT
	CmdPowerOff                   // LINUX_REBOOT_CMD_POWER_OFF
	CmdRestart                    // LINUX_REBOOT_CMD_RESTART
	CmdRestart2                   // LINUX_REBOOT_CMD_RESTART2 with an argument
)

// String names the command as the kernel headers do.
func (c RebootCmd) String() string {
	return [...]string{"CAD_ON", "HALT", "POWER_OFF", "RESTART", "RESTART2"}[c]
}

// Kernel is the last resort: sync(2) and reboot(2).
//
// IMPORTANT: the real implementation really reboots the machine. Tests use
// a recorder, or run the binary in a new PID namespace, where reboot(2) only
// ends that namespace.
type Kernel interface {
	Sync()
	Reboot(cmd RebootCmd, arg string) error
}

// Session is an entry of /run/systemd/sessions, as sd_get_sessions() and
// sd_session_get_*() read them.
type Session struct {
	ID, Class, Type, TTY, Seat, Service string
	UID                                 uint32
}

// Host is what the hand-off asks of the machine itself.
type Host interface {
	Euid() int
	UID() int       // real user ID
	OnTTY() bool    // stdout and stderr are terminals
	InChroot() bool // systemd's running_in_chroot() > 0
	InContainer() bool
	// RebootParam reads /run/systemd/reboot-param ("" if absent).
	RebootParam() string
	// WriteRebootParam and UnlinkRebootParam change /run/systemd/reboot-param
	// as systemd's update_reboot_parameter_and_warn() does.
	WriteRebootParam(param string) error
	UnlinkRebootParam() error
	Sessions() []Session
	UserName(uid uint32) string
	ProcessComm(pid uint32) string
}

// Preparer runs between "parsed" and "handed off": gnsh drains the node
// there.
type Preparer interface {
	// Prepare runs before anything is handed off, and before shutdown -c
	// cancels. A non-nil error aborts the command: nothing is handed off,
	// the reboot parameter gnsh wrote for it is restored (unless the error
	// is a RebootParamKeeper that keeps it: a reboot queued for the node
	// agent), and the error is reported as is (dispatch maps it to the
	// exit status). On success the
	// returned Prepared (nil: nothing to finish) hears how the hand-off
	// went.
	Prepare(ctx context.Context, req *legacy.Request) (Prepared, error)
}

// DryRunNoter is what a Preparer may also be: it hears of a dry run
// (shutdown -k TIME) that logind accepted to schedule for usec. logind's
// readers (ScheduledShutdown, /run/systemd/shutdown/scheduled) show a dry
// run as a real schedule, so gnsh's node agent learns it from here.
type DryRunNoter interface {
	NoteDryRun(usec uint64)
}

// NoDrainNoter is what a Preparer may also be: it hears of a shutdown
// scheduled with --no-drain that logind accepted for usec, which gnsh's
// node agent then neither drains ahead of nor gates.
type NoDrainNoter interface {
	NoteNoDrain(usec uint64)
}

// AcceptNoter is what a Preparer may also be: it hears that logind
// accepted req (a real request, not a dry run: scheduled it, or took the
// shutdown). The notes of the schedule req replaced (a dry run's, a
// --no-drain schedule's) go then, never before: a request logind refuses
// leaves the schedule that stands, and its notes.
type AcceptNoter interface {
	Accepted(req *legacy.Request)
}

// CancelReporter is what the Prepared of shutdown -c may also be: instead
// of Finish it hears whether logind's CancelScheduledShutdown cancelled a
// schedule (false: none stood) and, as Finish, the error of the call.
type CancelReporter interface {
	FinishCancel(ctx context.Context, cancelled bool, err error)
}

// QueueShower is what a Preparer may also be: shutdown --show prints its
// line about a queued reboot (gnsh's, which logind knows nothing of), ""
// for none.
type QueueShower interface {
	QueuedLine() string
}

// Prepared is the state of one successful preparation.
type Prepared interface {
	// Finish reports how the hand-off went: err is nil when logind (or a
	// fallback) accepted the request or cancelled the schedule. A failed
	// hand-off leaves the machine running, so the preparation is undone
	// there. Finish is called exactly once.
	Finish(ctx context.Context, err error)
}

// BusError is a D-Bus error reply.
type BusError struct {
	Name    string // e.g. org.freedesktop.DBus.Error.AccessDenied
	Message string
}

func (e *BusError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Name
}

// UnreachableError means the bus, or the service on it, could not be reached.
type UnreachableError struct {
	Op  string // "connect to bus", "introspect logind", …
	Err error
}

func (e *UnreachableError) Error() string { return e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// D-Bus error names that change what gnsh does next.
const (
	ErrUnknownMethod       = "org.freedesktop.DBus.Error.UnknownMethod"
	ErrInvalidArgs         = "org.freedesktop.DBus.Error.InvalidArgs"
	ErrAccessDenied        = "org.freedesktop.DBus.Error.AccessDenied"
	ErrAuthFailed          = "org.freedesktop.DBus.Error.AuthFailed"
	ErrInteractiveAuth     = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
	ErrNotSupported        = "org.freedesktop.DBus.Error.NotSupported"
	ErrOperationInProgress = "org.freedesktop.login1.OperationInProgress"
	ErrBlockedByInhibitor  = "org.freedesktop.login1.BlockedByInhibitorLock"
)

// busErrorName returns the D-Bus error name of err, or "".
func busErrorName(err error) string {
	var be *BusError
	if errors.As(err, &be) {
		return be.Name
	}
	return ""
}

// final reports whether systemd stops at this error instead of falling back
// to starting the target directly: EACCES, EOPNOTSUPP and EINPROGRESS
// (halt_main in v251+).
func final(err error) bool {
	switch busErrorName(err) {
	case ErrAccessDenied, ErrAuthFailed, ErrInteractiveAuth, ErrNotSupported, ErrOperationInProgress, ErrBlockedByInhibitor,
		"org.freedesktop.login1.NotSupported", "org.freedesktop.login1.SleepVerbNotSupported":
		return true
	}
	return false
}
