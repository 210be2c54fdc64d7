package dispatch

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/gnsh/gnsh/internal/legacy"
)

func TestPersonality(t *testing.T) {
	for argv0, want := range map[string]string{
		"reboot":               "reboot",
		"/usr/sbin/reboot":     "reboot",
		"/sbin/halt":           "halt",
		"poweroff":             "poweroff",
		"shutdown":             "shutdown",
		"/usr/local/sbin/gnsh": "gnsh",
		"gnsh":                 "gnsh",
		"my-reboot-wrapper":    "reboot",   // substring, as systemd's invoked_as()
		"halt-or-poweroff":     "halt",     // halt is tested first
		"poweroff-then-reboot": "poweroff", // poweroff before reboot
		"reboot-shutdown":      "reboot",
		"/opt/shutdown.d/gnsh": "gnsh", // only the last path component counts
		"systemctl":            "gnsh",
		"":                     "gnsh",
	} {
		if got := Personality(argv0); got != want {
			t.Errorf("Personality(%q) = %q, want %q", argv0, got, want)
		}
	}
}

type sigErr syscall.Signal

func (e sigErr) Error() string          { return "stopped" }
func (e sigErr) Signal() syscall.Signal { return syscall.Signal(e) }

func TestExitStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{legacy.Fail("Need to be root."), 1},
		{&legacy.ExitError{Code: 1}, 1},
		{errors.New("anything else"), 1},
		{sigErr(syscall.SIGINT), 130},
		{fmt.Errorf("wrapped: %w", sigErr(syscall.SIGTERM)), 143},
	} {
		if got := ExitStatus(c.err); got != c.want {
			t.Errorf("ExitStatus(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
