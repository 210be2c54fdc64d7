package handoff

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/legacy"
)

// plusMinutes is t0 + m minutes in uint64 arithmetic, wrapping like C.
func plusMinutes(m uint64) uint64 { return legacy.Usec(t0) + m*60_000_000 }

func TestFormatTimestamp(t *testing.T) {
	r := &Runner{Location: time.UTC}
	for _, tt := range []struct {
		usec uint64
		want string
	}{
		{legacy.Usec(t0), "Sat 2026-11-21 10:00:00 UTC"},
		{usecTimestampFormattableMax, "Thu 9999-12-30 23:59:59 UTC"},
		{usecTimestampFormattableMax + 1, "--- XXXX-XX-XX XX:XX:XX"},
		// Through int64 these would be dates before 1970.
		{math.MaxInt64 + 1, "--- XXXX-XX-XX XX:XX:XX"},
		{plusMinutes(160000000000), "--- XXXX-XX-XX XX:XX:XX"},
		{math.MaxUint64 - 1, "--- XXXX-XX-XX XX:XX:XX"},
		// NULL from format_timestamp_style, printed by glibc.
		{0, "(null)"},
		{math.MaxUint64, "(null)"},
		// Wrapped around 2^64: 49.5 s before t0.
		{plusMinutes(307445734561), "Sat 2026-11-21 09:59:10 UTC"},
	} {
		if got := r.formatTimestamp(tt.usec); got != tt.want {
			t.Errorf("formatTimestamp(%d) = %q, want %q", tt.usec, got, tt.want)
		}
	}
}

func TestPlanHugeTime(t *testing.T) {
	for _, tt := range []struct {
		name    string
		usec    uint64
		rfc3339 string
		note    bool
		stderr  string
	}{
		{"+5", plusMinutes(5), "2026-11-21T10:05:00Z", false, "Shutdown scheduled for Sat 2026-11-21 10:05:00 UTC, use 'shutdown -c' to cancel.\n"},
		{"+10000000000 (year 21039)", plusMinutes(10000000000), "", true, "Shutdown scheduled for --- XXXX-XX-XX XX:XX:XX, use 'shutdown -c' to cancel.\n"},
		{"+160000000000 (above MaxInt64)", plusMinutes(160000000000), "", true, "Shutdown scheduled for --- XXXX-XX-XX XX:XX:XX, use 'shutdown -c' to cancel.\n"},
		{"+307445734561 (wrapped into the past)", plusMinutes(307445734561), "2026-11-21T09:59:10Z", false, "Shutdown scheduled for Sat 2026-11-21 09:59:10 UTC, use 'shutdown -c' to cancel.\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := MakePlan(context.Background(), req(legacy.PowerOff, func(r *legacy.Request) { r.When = tt.usec }), &fakeHost{}, time.UTC, exitStatus, nil)
			if p.Scheduled == nil || p.Scheduled.Usec != tt.usec || p.Scheduled.RFC3339 != tt.rfc3339 || (p.Scheduled.Note != "") != tt.note {
				t.Errorf("scheduled = %+v, want usec %d, rfc3339 %q, note %v", p.Scheduled, tt.usec, tt.rfc3339, tt.note)
			}
			if p.ExitCode != 0 || p.Stderr != tt.stderr {
				t.Errorf("exit %d, stderr %q; want 0, %q", p.ExitCode, p.Stderr, tt.stderr)
			}
		})
	}
}

// exitStatus is dispatch.ExitStatus for the legacy errors (handoff cannot
// import dispatch).
func exitStatus(err error) int {
	var ee *legacy.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.Code
	}
	return 1
}

// A schedule has no fallback: when logind cannot be reached it is refused
// (exit 1), as systemd 252 refuses it; an immediate reboot starts the
// target on PID 1 instead.
func TestPlanScheduleHasNoFallback(t *testing.T) {
	p := MakePlan(context.Background(), req(legacy.Reboot, at(5)), &fakeHost{}, time.UTC, exitStatus, nil)
	if p.ExitCode != 0 || len(p.Fallback) != 0 {
		t.Errorf("schedule: exit %d, fallback %+v", p.ExitCode, p.Fallback)
	}
	p = MakePlan(context.Background(), req(legacy.Reboot), &fakeHost{}, time.UTC, exitStatus, nil)
	if len(p.Fallback) == 0 || p.Fallback[0].Method != "StartUnit" {
		t.Errorf("immediate: fallback %+v", p.Fallback)
	}
}
