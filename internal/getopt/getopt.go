// Package getopt reproduces glibc's getopt_long(3) closely enough that the
// legacy shutdown/halt grammars accept, reject and report exactly what
// systemd's own binaries do.
//
// It implements GNU argument permutation (options may follow positional
// arguments unless POSIXLY_CORRECT is set), "--" as the end of options,
// clustered short options ("-rk"), short options with a required argument
// ("-t5", "-t 5"), long options with unambiguous abbreviations
// ("--rebo" = "--reboot"), and glibc's diagnostic texts, which are part of
// the observable behaviour (shutdown -x prints "shutdown: invalid option --
// 'x'").
//
// Options are returned one at a time, in command-line order, because the
// legacy grammars act on them in that order (shutdown -r -h powers off,
// shutdown -h -r reboots) and stop at the first error or at --help.
package getopt

import (
	"fmt"
	"strings"
)

// ArgKind says whether a long option takes an argument.
type ArgKind int

const (
	// NoArgument options reject "--name=value".
	NoArgument ArgKind = iota
	// RequiredArgument options take "--name=value" or "--name value".
	RequiredArgument
)

// Long describes one long option. Key is what Next returns for it; a long
// option that aliases a short one uses that short option's character.
type Long struct {
	Name   string
	HasArg ArgKind
	Key    rune
	// Exact options match only when spelled out in full. gnsh's own long
	// options use it so that adding them never changes which abbreviations
	// of systemd's options are accepted or ambiguous.
	Exact bool
}

// Option is one parsed option.
type Option struct {
	Key rune   // the short option character, or the Long.Key
	Arg string // its argument, if it takes one
}

// Error is a diagnostic in glibc's exact wording (without the trailing
// newline). getopt_long prints it and returns '?'; callers print it to
// stderr and fail with exit status 1.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// Parser walks an argv the way getopt_long(argc, argv, short, long, NULL)
// does. The zero value is not usable; use New.
type Parser struct {
	prog   string // argv[0] as given, used in diagnostics
	args   []string
	short  string
	long   []Long
	posix  bool // stop at the first non-option (POSIXLY_CORRECT)
	i      int  // index of the next element of args to examine
	next   string
	fresh  bool     // next is a whole element after its first '-'
	pos    []string // non-option arguments seen so far, in order
	done   bool
	tailed bool // positional arguments after "--" already appended
}

// New returns a parser for argv (argv[0] is the program name). posixlyCorrect
// mirrors glibc's POSIXLY_CORRECT environment check: when true, option
// processing stops at the first non-option argument.
func New(argv []string, short string, long []Long, posixlyCorrect bool) *Parser {
	p := &Parser{short: short, long: long, posix: posixlyCorrect, i: 1, pos: []string{}}
	if len(argv) > 0 {
		p.prog = argv[0]
		p.args = argv
	} else {
		p.i = 0
	}
	return p
}

// Next returns the next option. ok is false when no options remain; err is a
// glibc-worded diagnostic for an invalid option.
func (p *Parser) Next() (opt Option, ok bool, err error) {
	if p.next == "" {
		if !p.advance() {
			return Option{}, false, nil
		}
	}
	return p.shortOpt()
}

// advance positions p.next on the next option element, collecting non-options
// on the way. It handles long options itself by leaving p.next with its "--".
func (p *Parser) advance() bool {
	if p.done {
		return false
	}
	for p.i < len(p.args) {
		a := p.args[p.i]
		if a == "--" {
			p.i++
			p.finish()
			return false
		}
		if len(a) < 2 || a[0] != '-' {
			if p.posix {
				p.finish()
				return false
			}
			p.pos = append(p.pos, a)
			p.i++
			continue
		}
		p.i++
		p.next = a[1:]
		p.fresh = true
		return true
	}
	p.finish()
	return false
}

func (p *Parser) finish() {
	if !p.tailed {
		p.pos = append(p.pos, p.args[p.i:]...)
		p.i = len(p.args)
		p.tailed = true
	}
	p.done = true
}

// Args returns the positional arguments in order, after Next reported that no
// options remain (the permuted argv[optind:] of getopt).
func (p *Parser) Args() []string { return p.pos }

func (p *Parser) shortOpt() (Option, bool, error) {
	// "--name" only at the start of an element: in "-p-x" glibc reads the
	// second '-' as a (invalid) short option, not as a long option.
	fresh := p.fresh
	p.fresh = false
	if fresh && strings.HasPrefix(p.next, "-") {
		s := p.next[1:]
		p.next = ""
		return p.longOpt(s)
	}
	c := p.next[0]
	p.next = p.next[1:]
	idx := strings.IndexByte(p.short, c)
	if idx < 0 || c == ':' {
		return Option{}, true, &Error{fmt.Sprintf("%s: invalid option -- '%c'", p.prog, c)}
	}
	if idx+1 < len(p.short) && p.short[idx+1] == ':' {
		if p.next != "" {
			arg := p.next
			p.next = ""
			return Option{Key: rune(c), Arg: arg}, true, nil
		}
		if p.i >= len(p.args) {
			return Option{}, true, &Error{fmt.Sprintf("%s: option requires an argument -- '%c'", p.prog, c)}
		}
		arg := p.args[p.i]
		p.i++
		return Option{Key: rune(c), Arg: arg}, true, nil
	}
	return Option{Key: rune(c)}, true, nil
}

// longOpt handles the text after "--" (s may contain "=value").
func (p *Parser) longOpt(s string) (Option, bool, error) {
	name, value, hasValue := strings.Cut(s, "=")
	var found *Long
	var matches []*Long
	for i := range p.long {
		l := &p.long[i]
		if l.Name == name {
			found = l
			break
		}
		if !l.Exact && strings.HasPrefix(l.Name, name) {
			matches = append(matches, l)
		}
	}
	if found == nil {
		switch {
		case len(matches) == 0:
			return Option{}, true, &Error{fmt.Sprintf("%s: unrecognized option '--%s'", p.prog, s)}
		case allEquivalent(matches):
			found = matches[0]
		default:
			var b strings.Builder
			fmt.Fprintf(&b, "%s: option '--%s' is ambiguous; possibilities:", p.prog, s)
			for _, m := range matches {
				fmt.Fprintf(&b, " '--%s'", m.Name)
			}
			return Option{}, true, &Error{b.String()}
		}
	}
	switch found.HasArg {
	case NoArgument:
		if hasValue {
			return Option{}, true, &Error{fmt.Sprintf("%s: option '--%s' doesn't allow an argument", p.prog, found.Name)}
		}
		return Option{Key: found.Key}, true, nil
	default:
		if hasValue {
			return Option{Key: found.Key, Arg: value}, true, nil
		}
		if p.i >= len(p.args) {
			return Option{}, true, &Error{fmt.Sprintf("%s: option '--%s' requires an argument", p.prog, found.Name)}
		}
		arg := p.args[p.i]
		p.i++
		return Option{Key: found.Key, Arg: arg}, true, nil
	}
}

// allEquivalent reports whether every prefix match would act the same, in
// which case glibc takes the first instead of calling it ambiguous.
func allEquivalent(ms []*Long) bool {
	for _, m := range ms[1:] {
		if m.HasArg != ms[0].HasArg || m.Key != ms[0].Key {
			return false
		}
	}
	return true
}
