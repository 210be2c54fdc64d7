package getopt

import (
	"reflect"
	"strings"
	"testing"
)

var testLong = []Long{
	{Name: "help", Key: 0x100},
	{Name: "halt", Key: 'H'},
	{Name: "reboot", Key: 'r'},
	{Name: "no-wall", Key: 0x101},
	{Name: "no-wtmp", Key: 'd'},
	{Name: "kexec", Key: 'K'},
	{Name: "time", HasArg: RequiredArgument, Key: 't'},
	{Name: "timer", HasArg: RequiredArgument, Key: 't'}, // equivalent to --time
}

// run collects options as "k" or "k=arg" plus the positionals, stopping at
// the first error like the legacy grammars do.
func run(argv []string, posix bool) (opts []string, args []string, err string) {
	p := New(argv, "Hrkt:c", testLong, posix)
	for {
		o, ok, e := p.Next()
		if e != nil {
			return opts, nil, e.Error()
		}
		if !ok {
			break
		}
		s := string(o.Key)
		if o.Key >= 0x100 {
			s = map[rune]string{0x100: "help", 0x101: "no-wall"}[o.Key]
		}
		if o.Arg != "" || o.Key == 't' {
			s += "=" + o.Arg
		}
		opts = append(opts, s)
	}
	return opts, p.Args(), ""
}

func TestParser(t *testing.T) {
	for _, tt := range []struct {
		argv  string
		posix bool
		opts  []string
		args  []string
		err   string
	}{
		{argv: "p", opts: nil, args: []string{}},
		{argv: "p -r now", opts: []string{"r"}, args: []string{"now"}},
		{argv: "p now -r", opts: []string{"r"}, args: []string{"now"}},                         // GNU permutation
		{argv: "p now -r", posix: true, opts: nil, args: []string{"now", "-r"}},                // POSIXLY_CORRECT
		{argv: "p -rk +5 a b", opts: []string{"r", "k"}, args: []string{"+5", "a", "b"}},       // cluster
		{argv: "p +5 -- -r", opts: nil, args: []string{"+5", "-r"}},                            // "--" ends options
		{argv: "p a -- -r b", opts: nil, args: []string{"a", "-r", "b"}},                       // after earlier positionals
		{argv: "p - -r", opts: []string{"r"}, args: []string{"-"}},                             // "-" is positional
		{argv: "p -t5 -t 6 -t -r", opts: []string{"t=5", "t=6", "t=-r"}, args: []string{}},     // required argument
		{argv: "p -rt", opts: []string{"r"}, err: "p: option requires an argument -- 't'"},     // missing
		{argv: "p -x", err: "p: invalid option -- 'x'"},                                        // unknown short
		{argv: "p -r -x -k", opts: []string{"r"}, err: "p: invalid option -- 'x'"},             // stops at first error
		{argv: "p -:", err: "p: invalid option -- ':'"},                                        // ':' is never an option
		{argv: "p --rebo", opts: []string{"r"}, args: []string{}},                              // abbreviation
		{argv: "p --reboot=1", err: "p: option '--reboot' doesn't allow an argument"},          // no argument allowed
		{argv: "p --rebo=1", err: "p: option '--reboot' doesn't allow an argument"},            // full name in message
		{argv: "p --h", err: "p: option '--h' is ambiguous; possibilities: '--help' '--halt'"}, // ambiguous
		{argv: "p --no-w=x", err: "p: option '--no-w=x' is ambiguous; possibilities: '--no-wall' '--no-wtmp'"},
		{argv: "p --foo=bar", err: "p: unrecognized option '--foo=bar'"},                           // unknown long
		{argv: "p --tim 3 --time=4", opts: []string{"t=3", "t=4"}, args: []string{}},               // equivalent matches
		{argv: "p --time", err: "p: option '--time' requires an argument"},                         // missing
		{argv: "p --halt --help -x", opts: []string{"H", "help"}, err: "p: invalid option -- 'x'"}, // caller stops at help
		{argv: "/sbin/p -x", err: "/sbin/p: invalid option -- 'x'"},                                // argv[0] as typed
	} {
		t.Run(tt.argv, func(t *testing.T) {
			opts, args, err := run(strings.Fields(tt.argv), tt.posix)
			if err != tt.err {
				t.Fatalf("err = %q, want %q", err, tt.err)
			}
			if !reflect.DeepEqual(opts, tt.opts) {
				t.Errorf("opts = %q, want %q", opts, tt.opts)
			}
			if tt.err == "" && !reflect.DeepEqual(args, tt.args) {
				t.Errorf("args = %q, want %q", args, tt.args)
			}
		})
	}
}

func TestEmptyArgv(t *testing.T) {
	p := New(nil, "r", nil, false)
	if _, ok, err := p.Next(); ok || err != nil {
		t.Fatalf("Next on empty argv = %v, %v", ok, err)
	}
	if len(p.Args()) != 0 {
		t.Fatalf("Args = %q", p.Args())
	}
}

func TestExactOptionsAreNotAbbreviated(t *testing.T) {
	long := []Long{{Name: "no-wall", Key: 'w'}, {Name: "no-drain", Key: 'd', Exact: true},
		{Name: "drain-timeout", HasArg: RequiredArgument, Key: 't', Exact: true}}
	for _, c := range []struct {
		arg, want string
	}{
		{"--no-", "w"},      // still only --no-wall, as without gnsh's options
		{"--no-d", "err"},   // no abbreviation of --no-drain
		{"--no-drain", "d"}, // the full name works
		{"--drain", "err"},  // not an abbreviation of --drain-timeout
		{"--drain-timeout=5m", "t5m"},
	} {
		p := New([]string{"prog", c.arg}, "", long, false)
		o, _, err := p.Next()
		got := string(o.Key) + o.Arg
		if err != nil {
			got = "err"
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.arg, got, c.want)
		}
	}
}

// In a cluster, a second '-' is a short option (invalid here), never the
// start of a long option: glibc checks for "--" only at an element's start.
func TestDashInsideCluster(t *testing.T) {
	long := []Long{{Name: "help", Key: 'H'}, {Name: "drain-timeout", HasArg: RequiredArgument, Key: 't', Exact: true}}
	for _, arg := range []string{"-p-help", "-p-drain-timeout"} {
		p := New([]string{"prog", arg, "1"}, "p", long, false)
		if o, _, err := p.Next(); err != nil || o.Key != 'p' {
			t.Fatalf("%s: first %v %v", arg, o, err)
		}
		_, _, err := p.Next()
		if err == nil || err.Error() != "prog: invalid option -- '-'" {
			t.Fatalf("%s: %v", arg, err)
		}
	}
}
