package gnshcli

import (
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/drainer"
)

// The shutdown guard's line about a shutdown gnsh drained for names a
// schedule only when the drain was ahead of one: shutdown -r 0 is a
// "schedule" for the time it was asked, long past when its drain ends.
func TestDrainedWhat(t *testing.T) {
	asked := time.Date(2026, 11, 27, 12, 38, 13, 0, time.UTC)
	drained := asked.Add(47 * time.Second)
	later := drained.Add(4 * time.Minute)
	for _, c := range []struct {
		m    drainer.Marker
		want string
	}{
		{drainer.Marker{Action: "reboot", Time: drained},
			"already drained for by gnsh reboot at 2026-11-27T12:39:00Z"},
		// shutdown -r 0: due when asked, drained after.
		{drainer.Marker{Action: "reboot", Time: drained, Deadline: &asked},
			"already drained for by gnsh reboot at 2026-11-27T12:39:00Z"},
		{drainer.Marker{Action: "reboot", Time: drained, Deadline: &drained},
			"already drained for by gnsh reboot at 2026-11-27T12:39:00Z"},
		// A drain ahead of a schedule still due.
		{drainer.Marker{Action: "poweroff", Time: drained, Deadline: &later},
			"already drained for by gnsh poweroff at 2026-11-27T12:39:00Z ahead of the schedule for 2026-11-27T12:43:00Z"},
	} {
		if got := drainedWhat(c.m); got != c.want {
			t.Errorf("%+v: %q, want %q", c.m, got, c.want)
		}
	}
}
