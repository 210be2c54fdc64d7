package shutdown

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Berlin for the DST cases, whatever the host has

	"github.com/gnsh/gnsh/internal/legacy"
)

var (
	cet = time.FixedZone("CET", 3600)
	// now is Saturday 2026-11-21 10:15:30.25 CET.
	now = time.Date(2026, 11, 21, 10, 15, 30, 250_000_000, cet)
	env = legacy.Env{Now: now, Location: cet}
)

func usec(t time.Time) uint64 { return legacy.Usec(t) }

const minute = uint64(60_000_000)

func TestOptions(t *testing.T) {
	plus1 := usec(now) + minute
	for _, tt := range []struct {
		args   string
		kexec  bool
		action legacy.Action
		when   uint64
		wall   []string
		dry    bool
		noWall bool
	}{
		{args: "", action: legacy.PowerOff, when: plus1},               // no TIME: +1 min
		{args: "now", action: legacy.PowerOff, when: 0},                // immediate
		{args: "-H now", action: legacy.Halt},                          // --halt
		{args: "--halt now", action: legacy.Halt},                      //
		{args: "-P now", action: legacy.PowerOff},                      //
		{args: "--poweroff now", action: legacy.PowerOff},              //
		{args: "-r now", action: legacy.Reboot},                        //
		{args: "--reboot now", action: legacy.Reboot},                  //
		{args: "-r now", kexec: true, action: legacy.Kexec},            // kexec loaded
		{args: "-K now", action: legacy.Kexec},                         // undocumented
		{args: "--kexec now", action: legacy.Kexec},                    //
		{args: "-h now", action: legacy.PowerOff},                      // -h = poweroff
		{args: "-r -h now", action: legacy.PowerOff},                   // order matters
		{args: "-h -r now", action: legacy.Reboot},                     //
		{args: "-H -h now", action: legacy.Halt},                       // -h does not override --halt
		{args: "-H -P now", action: legacy.PowerOff},                   //
		{args: "now -r", action: legacy.Reboot},                        // permutation
		{args: "-k", action: legacy.PowerOff, when: plus1, dry: true},  // warnings only
		{args: "-k now", action: legacy.PowerOff, dry: true},           //
		{args: "--no-wall now", action: legacy.PowerOff, noWall: true}, //
		{args: "-a -f -F -t 5 now", action: legacy.PowerOff},           // accepted and ignored
		{args: "-t5 now", action: legacy.PowerOff},                     //
		{args: "-c", action: legacy.Cancel, when: plus1},               // cancel
		{args: "-c now bye all", action: legacy.Cancel, when: plus1, wall: []string{"now", "bye", "all"}},
		{args: "--show", action: legacy.Show, when: plus1}, //
		{args: "-r +5 kernel update", action: legacy.Reboot, when: usec(now) + 5*minute, wall: []string{"kernel", "update"}},
		{args: "-r +0", action: legacy.Reboot, when: usec(now)}, // +0 schedules now, not immediate
		{args: "0", action: legacy.PowerOff, when: usec(now)},   //
		{args: "now hello -r world", action: legacy.Reboot, wall: []string{"hello", "world"}},
		{args: "-- now -r", action: legacy.PowerOff, wall: []string{"-r"}}, // "--" ends options
	} {
		t.Run(tt.args, func(t *testing.T) {
			e := env
			e.KexecLoaded = tt.kexec
			r, err := Parse(append([]string{"shutdown"}, strings.Fields(tt.args)...), e)
			if err != nil {
				t.Fatal(err)
			}
			if r.Action != tt.action || r.When != tt.when || !reflect.DeepEqual(r.Wall, tt.wall) ||
				r.DryRun != tt.dry || r.NoWall != tt.noWall || r.Force != 0 || r.ParamOp != legacy.ParamKeep {
				t.Errorf("got action=%v when=%d wall=%q dry=%v nowall=%v force=%d param=%v", r.Action, r.When, r.Wall,
					r.DryRun, r.NoWall, r.Force, r.ParamOp)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	for _, tt := range []struct{ argv, msg string }{
		{"shutdown -n", "shutdown: invalid option -- 'n'"},
		{"shutdown -i", "shutdown: invalid option -- 'i'"},
		{"/usr/sbin/shutdown -x now", "/usr/sbin/shutdown: invalid option -- 'x'"},
		{"shutdown --foo", "shutdown: unrecognized option '--foo'"},
		{"shutdown -t", "shutdown: option requires an argument -- 't'"},
		{"shutdown --reboot=yes", "shutdown: option '--reboot' doesn't allow an argument"},
		{"shutdown --h", "shutdown: option '--h' is ambiguous; possibilities: '--help' '--halt'"},
		{"shutdown +5m", "Failed to parse time specification: +5m"},
		{"shutdown tomorrow", "Failed to parse time specification: tomorrow"},
		{"shutdown -r 24:00", "Failed to parse time specification: 24:00"},
		{"shutdown -r now -x", "shutdown: invalid option -- 'x'"},
	} {
		t.Run(tt.argv, func(t *testing.T) {
			_, err := Parse(strings.Fields(tt.argv), env)
			var ee *legacy.ExitError
			if !errors.As(err, &ee) || ee.Code != 1 || ee.Msg != tt.msg {
				t.Fatalf("err = %#v, want exit 1 %q", err, tt.msg)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	r, err := Parse([]string{"/sbin/shutdown", "-r", "--help", "-x"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Help, "shutdown [OPTIONS...] [TIME] [WALL...]\n\nShut down the system.\n") ||
		!strings.HasSuffix(r.Help, "\nSee the shutdown(8) man page for details.\n"+legacy.HelpLine) {
		t.Fatalf("help = %q", r.Help)
	}
	if _, err := Parse([]string{"shutdown", "-x", "--help"}, env); err == nil {
		t.Fatal("an invalid option before --help must fail")
	}
}

func TestTime(t *testing.T) {
	n := usec(now)
	at := func(day, h, m int) uint64 { return usec(time.Date(2026, 11, day, h, m, 0, 0, cet)) }
	for _, tt := range []struct {
		spec string
		want uint64
		ok   bool
	}{
		{"now", 0, true},
		{"+0", n, true},
		{"0", n, true},
		{"+5", n + 5*minute, true},
		{"5", n + 5*minute, true},
		{" 5", n + 5*minute, true},                 // leading whitespace
		{"\t+5", n + 5*minute, true},               //
		{"0x10", n + 16*minute, true},              // strtoull base 0: hex
		{"010", n + 8*minute, true},                // octal
		{"08", 0, false},                           // not octal
		{"0b101", n + 5*minute, true},              // systemd's 0b prefix
		{"0o17", n + 15*minute, true},              // systemd's 0o prefix
		{"0b", 0, false},                           //
		{"0x", 0, false},                           //
		{"-0", n, true},                            // negative zero is zero
		{"-1", 0, false},                           // ERANGE since v239
		{"+-1", 0, false},                          //
		{"5 ", 0, false},                           // trailing garbage
		{"+5m", 0, false},                          //
		{"", 0, false},                             //
		{"+", 0, false},                            //
		{"18446744073709551615", n - minute, true}, // wraps like C: max*60e6 = -60e6
		{"18446744073709551616", 0, false},         // overflow
		{"NOW", 0, false},                          //
		{"10:20", at(21, 10, 20), true},            // later today
		{"10:15", at(22, 10, 15), true},            // current minute: tomorrow
		{"10:14", at(22, 10, 14), true},            // past: tomorrow
		{"0:00", at(22, 0, 0), true},               //
		{"23:59", at(21, 23, 59), true},            //
		{"9:5", at(22, 9, 5), true},                //
		{"+11:-0", at(21, 11, 0), true},            // strtol signs
		{" 11: 5", at(21, 11, 5), true},            // strtol whitespace
		{"11:", at(21, 11, 0), true},               // no minute digits = 0
		{"24:00", 0, false},                        //
		{"-1:00", 0, false},                        //
		{"12:60", 0, false},                        //
		{"12:00:00", 0, false},                     //
		{"12:5x", 0, false},                        //
		{"x:30", 0, false},                         //
		{" :30", 0, false},                         // no digits: end = start
		{"99999999999999999999:00", 0, false},      // ERANGE
	} {
		t.Run(tt.spec, func(t *testing.T) {
			got, ok := ParseTime(tt.spec, now, cet)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Fatalf("ParseTime(%q) = %d, %v; want %d, %v", tt.spec, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestHugeTime pins what systemd does with TIMEs of many minutes: now +
// 60e6·m µs in uint64, wrapping around 2^64 as C does, and what that means
// for the drain policy (Request.DueIn).
func TestHugeTime(t *testing.T) {
	n := usec(now)
	// plus is n + m minutes with C's wrap-around (Go constants refuse it).
	plus := func(m uint64) uint64 { return n + m*minute }
	for _, tt := range []struct {
		spec  string
		when  uint64
		dueIn time.Duration
	}{
		{"+5", n + 5*minute, 5 * time.Minute},
		{"153722867", n + 153722867*minute, 153722867 * time.Minute}, // 292 years: the longest time.Duration in minutes
		{"153722868", n + 153722868*minute, math.MaxInt64},           // saturates
		{"10000000000", plus(10000000000), math.MaxInt64},            // year 21039
		// The first m whose time is above math.MaxInt64 µs: through int64
		// it would read as before 1970, i.e. overdue.
		{"153722867281", plus(153722867281), math.MaxInt64},
		{"160000000000", plus(160000000000), math.MaxInt64},
		{"0x4000000000", plus(0x4000000000), math.MaxInt64},
		// The largest m whose product fits; the sum wraps past 2^64 to 49.5 s
		// ago: logind acts at once, so the drain is due now.
		{"307445734561", n - 49_551_616, 0},
		// The product itself wraps: 10.448384 s from now.
		{"307445734562", n + 10_448_384, 10_448_384 * time.Microsecond},
		{"18446744073709551615", n - minute, 0},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			r, err := Parse([]string{"shutdown", "-r", tt.spec}, env)
			if err != nil {
				t.Fatal(err)
			}
			if r.When != tt.when || r.Immediate() {
				t.Errorf("When = %d, want %d (scheduled)", r.When, tt.when)
			}
			if got := r.DueIn(now); got != tt.dueIn {
				t.Errorf("DueIn = %v, want %v", got, tt.dueIn)
			}
			if tt.when > math.MaxInt64 && legacy.FromUsec(r.When).Before(now) {
				t.Errorf("FromUsec(%d) = %v: before now", r.When, legacy.FromUsec(r.When))
			}
		})
	}
}

// TestTimeColonHour pins the C behaviour for ":30": strtol finds no digits,
// returns 0 and leaves the end at ':', so the hour is 0 and the time is
// 00:30 (tomorrow, at 10:15).
func TestTimeColonHour(t *testing.T) {
	got, ok := ParseTime(":30", now, cet)
	want := usec(time.Date(2026, 11, 22, 0, 30, 0, 0, cet))
	if !ok || got != want {
		t.Fatalf("ParseTime(:30) = %d, %v; want %d", got, ok, want)
	}
}

func TestTimeDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// 2026-03-29 01:30 CET; clocks jump from 02:00 CET to 03:00 CEST.
	n := time.Date(2026, 3, 29, 1, 30, 0, 0, berlin)
	// glibc's mktime keeps the DST state of now (CET, +01:00): "03:30" is
	// 03:30+01:00 = 04:30 CEST.
	got, ok := ParseTime("03:30", n, berlin)
	want := usec(time.Date(2026, 3, 29, 2, 30, 0, 0, time.UTC))
	if !ok || got != want {
		t.Fatalf("03:30 across DST = %v, want %v", legacy.FromUsec(got).UTC(), legacy.FromUsec(want).UTC())
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "-r +5 hi", "-c bye", "now", "--show", "-t", "--h", "10:20", "0x1f", "-k -H", "-- -r",
		"-r now --no-drain", "--drain-timeout=10m -r +1", "--force-drain -c", "--no-dr", "--drain-timeout x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		argv := append([]string{"shutdown"}, strings.Split(s, " ")...)
		r, err := Parse(argv, env)
		if err != nil {
			var ee *legacy.ExitError
			if !errors.As(err, &ee) || ee.Code != 1 || ee.Msg == "" {
				t.Fatalf("Parse(%q) error %#v: want exit status 1 with a message", argv, err)
			}
			return
		}
		if r.Command != "shutdown" || r.Force != 0 || r.ParamOp != legacy.ParamKeep {
			t.Fatalf("Parse(%q) = %+v: shutdown never forces or touches the reboot parameter", argv, r)
		}
	})
}

// FuzzTime checks the TIME grammar's invariants: hh:mm is always strictly
// in the future, at most a day away and on a whole minute. (Numbers wrap
// around 2^64 as in C, so they have no such bound.)
func FuzzTime(f *testing.F) {
	for _, s := range []string{"now", "+5", "0x10", "010", "10:20", "10:15", " 1: 2", "-0", "0b11", "99999999999999999999",
		"160000000000", "307445734561", "307445734562", "0xffffffffffffffff"} {
		f.Add(s)
	}
	n := usec(now)
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseTime(s, now, cet)
		if ok {
			// Over the whole uint64 range: never negative, 0 exactly when
			// not after now, else the exact wait or the saturated maximum.
			d := (&legacy.Request{When: got}).DueIn(now)
			switch {
			case got <= n && d != 0:
				t.Fatalf("ParseTime(%q) = %d, not after now, but DueIn = %v", s, got, d)
			case got > n && got-n <= math.MaxInt64/1000 && d != time.Duration(got-n)*time.Microsecond:
				t.Fatalf("ParseTime(%q) = %d, DueIn = %v, want %dµs", s, got, d, got-n)
			case got > n && got-n > math.MaxInt64/1000 && d != math.MaxInt64:
				t.Fatalf("ParseTime(%q) = %d, DueIn = %v, want saturation", s, got, d)
			}
		}
		switch {
		case !ok || s == "now":
		case strings.Contains(s, ":"):
			if got <= n || got > n+24*60*minute {
				t.Fatalf("ParseTime(%q) = %d, not within (now, now+24h]", s, got)
			}
			if got%minute != 0 {
				t.Fatalf("ParseTime(%q) = %d, not on a whole minute", s, got)
			}
		}
	})
}
