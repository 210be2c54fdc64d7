package halt

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/legacy"
)

var env = legacy.Env{Now: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), Location: time.UTC}

func TestOptions(t *testing.T) {
	type want struct {
		action         legacy.Action
		force          int
		dry, noSync    bool
		noWtmp, noWall bool
		op             legacy.ParamOp
		param          string
	}
	for _, tt := range []struct {
		argv     string
		kexec    bool
		runlevel bool
		want     want
	}{
		{argv: "halt", want: want{action: legacy.Halt}},
		{argv: "poweroff", want: want{action: legacy.PowerOff}},
		{argv: "reboot", want: want{action: legacy.Reboot, op: legacy.ParamUnlink}},
		{argv: "reboot", kexec: true, want: want{action: legacy.Kexec}},
		{argv: "reboot fw", want: want{action: legacy.Reboot, op: legacy.ParamWrite, param: "fw"}},
		{argv: "reboot -- -fw", want: want{action: legacy.Reboot, op: legacy.ParamWrite, param: "-fw"}},
		{argv: "halt -p", want: want{action: legacy.PowerOff}},
		{argv: "halt --poweroff", want: want{action: legacy.PowerOff}},
		{argv: "reboot -p", want: want{action: legacy.Reboot, op: legacy.ParamUnlink}}, // -p ignored as reboot
		{argv: "halt --reboot -p", want: want{action: legacy.Reboot, op: legacy.ParamUnlink}},
		{argv: "halt --halt -p", want: want{action: legacy.PowerOff}},
		{argv: "poweroff --halt", want: want{action: legacy.Halt}},
		{argv: "poweroff --reboot", want: want{action: legacy.Reboot, op: legacy.ParamUnlink}},
		{argv: "poweroff --reboot arg", want: want{action: legacy.Reboot, op: legacy.ParamWrite, param: "arg"}},
		{argv: "reboot --halt", want: want{action: legacy.Halt}},
		{argv: "reboot -f", want: want{action: legacy.Reboot, force: 2, op: legacy.ParamUnlink}},
		{argv: "reboot -ff", want: want{action: legacy.Reboot, force: 2, op: legacy.ParamUnlink}},
		{argv: "reboot --force -n", want: want{action: legacy.Reboot, force: 2, noSync: true, op: legacy.ParamUnlink}},
		{argv: "poweroff --no-sync", want: want{action: legacy.PowerOff, noSync: true}},
		{argv: "halt -w", want: want{action: legacy.Halt, dry: true}},
		{argv: "halt --wtmp-only", want: want{action: legacy.Halt, dry: true}},
		{argv: "halt -d", want: want{action: legacy.Halt, noWtmp: true}},
		{argv: "halt --no-wtmp", want: want{action: legacy.Halt, noWtmp: true}},
		{argv: "halt --no-wall", want: want{action: legacy.Halt, noWall: true}},
		{argv: "halt -i -h", want: want{action: legacy.Halt}},
		{argv: "poweroff", runlevel: true, want: want{action: legacy.PowerOff, force: 2}}, // utmp runlevel 0/6
		{argv: "reboot \"\"", want: want{action: legacy.Reboot, op: legacy.ParamUnlink}},
	} {
		t.Run(tt.argv, func(t *testing.T) {
			e := env
			e.KexecLoaded, e.RunlevelForce = tt.kexec, tt.runlevel
			argv := strings.Fields(strings.ReplaceAll(tt.argv, `""`, "\x00"))
			for i := range argv {
				argv[i] = strings.ReplaceAll(argv[i], "\x00", "")
			}
			r, err := Parse(argv[0], argv, e)
			if err != nil {
				t.Fatal(err)
			}
			got := want{r.Action, r.Force, r.DryRun, r.NoSync, r.NoWtmp, r.NoWall, r.ParamOp, r.Param}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if r.When != 0 {
				t.Errorf("When = %d: halt/poweroff/reboot are always immediate", r.When)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	long := strings.Repeat("x", 256)
	for _, tt := range []struct {
		argv  []string
		kexec bool
		msg   string
	}{
		{argv: []string{"halt", "now"}, msg: "Too many arguments."},
		{argv: []string{"poweroff", "x"}, msg: "Too many arguments."},
		{argv: []string{"reboot", "a", "b"}, msg: "Too many arguments."},
		{argv: []string{"reboot", "fw"}, kexec: true, msg: "Too many arguments."},
		{argv: []string{"reboot", long}, msg: "Invalid reboot parameter '" + long + "'."},
		{argv: []string{"reboot", "caf\u00e9"}, msg: "Invalid reboot parameter 'caf\u00e9'."},
		{argv: []string{"reboot", "-k"}, msg: "reboot: invalid option -- 'k'"},
		{argv: []string{"/sbin/halt", "-r"}, msg: "/sbin/halt: invalid option -- 'r'"},
		{argv: []string{"halt", "--no-w"}, msg: "halt: option '--no-w' is ambiguous; possibilities: '--no-wtmp' '--no-wall'"},
		{argv: []string{"halt", "--forc=1"}, msg: "halt: option '--force' doesn't allow an argument"},
		{argv: []string{"halt", "--show"}, msg: "halt: unrecognized option '--show'"},
	} {
		t.Run(strings.Join(tt.argv, " "), func(t *testing.T) {
			e := env
			e.KexecLoaded = tt.kexec
			name := map[string]string{"/sbin/halt": "halt"}[tt.argv[0]]
			if name == "" {
				name = tt.argv[0]
			}
			_, err := Parse(name, tt.argv, e)
			var ee *legacy.ExitError
			if !errors.As(err, &ee) || ee.Code != 1 || ee.Msg != tt.msg {
				t.Fatalf("err = %#v, want exit 1 %q", err, tt.msg)
			}
		})
	}
	if r, err := Parse("reboot", []string{"reboot", strings.Repeat("x", 255)}, env); err != nil || r.ParamOp != legacy.ParamWrite {
		t.Fatalf("a 255-byte parameter is valid: %v", err)
	}
}

func TestHelp(t *testing.T) {
	for _, tt := range []struct {
		name  string
		kexec bool
		head  string
	}{
		{"reboot", false, "reboot [OPTIONS...] [ARG]\n\nReboot the system.\n"},
		{"reboot", true, "reboot [OPTIONS...]\n\nHalt the system.\n"}, // systemd's own quirk
		{"poweroff", false, "poweroff [OPTIONS...]\n\nPower off the system.\n"},
		{"halt", false, "halt [OPTIONS...]\n\nHalt the system.\n"},
	} {
		e := env
		e.KexecLoaded = tt.kexec
		r, err := Parse(tt.name, []string{"/usr/sbin/" + tt.name, "--help", "extra", "-x"}, e)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(r.Help, tt.head) || !strings.HasSuffix(r.Help, "See the halt(8) man page for details.\n"+legacy.HelpLine) {
			t.Errorf("%s help = %q", tt.name, r.Help)
		}
		if r.ParamOp != legacy.ParamKeep {
			t.Errorf("--help must not touch the reboot parameter")
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "-f", "arg", "-p --reboot x", "--halt", "-w -d -n", "a b", "--h", "-- -f",
		"--no-drain", "--drain-timeout=90s --force-drain", "--drain-timeout 5", "--no-d", "--drain-timeout=0"} {
		f.Add("reboot", s)
		f.Add("halt", s)
	}
	f.Fuzz(func(t *testing.T, name, s string) {
		switch name {
		case "halt", "poweroff", "reboot":
		default:
			name = "poweroff"
		}
		argv := append([]string{name}, strings.Split(s, " ")...)
		r, err := Parse(name, argv, env)
		if err != nil {
			var ee *legacy.ExitError
			if !errors.As(err, &ee) || ee.Code != 1 || ee.Msg == "" {
				t.Fatalf("Parse(%q) error %#v: want exit status 1 with a message", argv, err)
			}
			return
		}
		if r.ParamOp == legacy.ParamWrite && (r.Action != legacy.Reboot || !validParam(r.Param) || r.Param == "") {
			t.Fatalf("Parse(%q) writes parameter %q for %v", argv, r.Param, r.Action)
		}
		if r.ParamOp != legacy.ParamKeep && r.Action != legacy.Reboot {
			t.Fatalf("Parse(%q) touches the reboot parameter for %v", argv, r.Action)
		}
		if r.Drain.Timeout < 0 || (r.Drain.Timeout > 0 && !strings.Contains(s, "--drain-timeout")) {
			t.Fatalf("Parse(%q) drain timeout %v", argv, r.Drain.Timeout)
		}
		if r.When != 0 || (r.Force != 0 && r.Force != 2) {
			t.Fatalf("Parse(%q) = when %d force %d", argv, r.When, r.Force)
		}
	})
}
