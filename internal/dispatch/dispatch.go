// Package dispatch picks gnsh's personality from argv[0] and is the only
// place that turns errors into exit statuses.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gnsh/gnsh/internal/drainer"
	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/internal/system"
	"github.com/gnsh/gnsh/wrappers/halt"
	"github.com/gnsh/gnsh/wrappers/shutdown"
)

// Legacy command names, in the order systemd tests them (substring match
// on the last path component, as its invoked_as() does).
var legacyNames = []string{"halt", "poweroff", "reboot", "shutdown"}

// Personality returns "halt", "poweroff", "reboot" or "shutdown" when argv0
// names one of them the way systemd recognises it, and "gnsh" otherwise.
func Personality(argv0 string) string {
	base := filepath.Base(argv0)
	for _, n := range legacyNames {
		if strings.Contains(base, n) {
			return n
		}
	}
	return "gnsh"
}

// IsLegacy reports whether name is one of the four legacy commands.
func IsLegacy(name string) bool {
	for _, n := range legacyNames {
		if n == name {
			return true
		}
	}
	return false
}

// Env is everything a personality needs from the outside world.
type Env struct {
	Stdout, Stderr io.Writer
	LookupEnv      func(string) (string, bool)
	Now            func() time.Time
	Location       *time.Location
	Host           *system.Host
	Kernel         handoff.Kernel
	DialLogind     func(ctx context.Context) (handoff.Logind, error)
	DialSystemd    func(ctx context.Context) (handoff.Systemd, error)
	Preparer       handoff.Preparer
	// NewDrainer makes the drainer for `gnsh drain` and `gnsh uncordon`.
	NewDrainer func() *drainer.Drainer
}

func (e *Env) getenv(k string) string {
	v, _ := e.LookupEnv(k)
	return v
}

// ParseEnv gathers what the grammars may look at for command name.
func (e *Env) ParseEnv(name string) legacy.Env {
	_, posix := e.LookupEnv("POSIXLY_CORRECT")
	pe := legacy.Env{Now: e.Now(), Location: e.Location, PosixlyCorrect: posix}
	if name == "reboot" || name == "shutdown" {
		pe.KexecLoaded = e.Host.KexecLoaded()
	}
	if name != "shutdown" {
		if rl, ok := e.Host.Runlevel(); ok && (rl == '0' || rl == '6') {
			pe.RunlevelForce = true
		}
	}
	return pe
}

// Parse parses a legacy command line for personality name.
func Parse(name string, argv []string, env legacy.Env) (*legacy.Request, error) {
	if name == "shutdown" {
		return shutdown.Parse(argv, env)
	}
	return halt.Parse(name, argv, env)
}

// Runner returns a hand-off runner wired to env.
func (e *Env) Runner() *handoff.Runner {
	return &handoff.Runner{
		Stdout: e.Stdout, Stderr: e.Stderr, Host: e.Host, Kernel: e.Kernel,
		DialLogind: e.DialLogind, DialSystemd: e.DialSystemd, Preparer: e.Preparer, Location: e.Location,
	}
}

// RunLegacy runs a legacy command line (argv[0] is the program name) and
// returns its exit status.
func RunLegacy(ctx context.Context, name string, argv []string, env *Env) int {
	req, err := Parse(name, argv, env.ParseEnv(name))
	if err == nil {
		err = env.Runner().Run(ctx, req)
	}
	return Report(env.Stderr, err)
}

// Report prints err (if it has text) and returns the exit status for it.
func Report(stderr io.Writer, err error) int {
	if err != nil {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, msg)
		}
	}
	return ExitStatus(err)
}

// ExitStatus is the one mapping from errors to exit statuses: 0 for nil;
// systemd's own status for its messages (legacy.ExitError, always 1 for
// the legacy commands); 128+N for a command stopped by signal N (SIGINT
// 130, SIGTERM 143), as a shell reports a command that signal killed;
// 1 for everything else.
func ExitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	var sig interface{ Signal() syscall.Signal }
	if errors.As(err, &sig) {
		return 128 + int(sig.Signal())
	}
	return 1
}
