package legacy_test

import (
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/legacy"
	"github.com/gnsh/gnsh/wrappers/halt"
	"github.com/gnsh/gnsh/wrappers/shutdown"
)

func TestDrainOptions(t *testing.T) {
	env := legacy.Env{Now: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), Location: time.UTC}
	parse := func(argv ...string) (*legacy.Request, error) {
		if argv[0] == "shutdown" {
			return shutdown.Parse(argv, env)
		}
		return halt.Parse(argv[0], argv, env)
	}
	for _, c := range []struct {
		argv []string
		want legacy.DrainFlags
		err  string
	}{
		{argv: []string{"reboot", "--no-drain"}, want: legacy.DrainFlags{Skip: true}},
		{argv: []string{"reboot", "--force-drain", "--drain-timeout=90s"}, want: legacy.DrainFlags{Force: true, Timeout: 90 * time.Second}},
		{argv: []string{"shutdown", "-r", "now", "--drain-timeout", "120"}, want: legacy.DrainFlags{Timeout: 2 * time.Minute}},
		{argv: []string{"poweroff", "--drain-timeout=0"}, err: "poweroff: invalid --drain-timeout '0': the duration must be positive"},
		{argv: []string{"shutdown", "--drain-timeout=soon"}, err: "shutdown: invalid --drain-timeout 'soon': use a duration such as 90s, 10m or 1h"},
		// Never abbreviated: glibc's message for an unknown option.
		{argv: []string{"reboot", "--no-dr"}, err: "reboot: unrecognized option '--no-dr'"},
		{argv: []string{"shutdown", "--force-d"}, err: "shutdown: unrecognized option '--force-d'"},
	} {
		r, err := parse(c.argv...)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: err %v, want %q", c.argv, err, c.err)
			}
			continue
		}
		if err != nil || r.Drain != c.want {
			t.Errorf("%q: %+v %v, want %+v", c.argv, r, err, c.want)
		}
	}
	// shutdown's --no- still abbreviates --no-wall alone.
	if r, err := parse("shutdown", "--no-"); err != nil || !r.NoWall {
		t.Errorf("--no-w: %+v %v", r, err)
	}
}
