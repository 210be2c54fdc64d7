package gnshcli

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/gnsh/gnsh/internal/dispatch"
	"github.com/gnsh/gnsh/internal/drainer"
)

// termSafe escapes what must not reach a terminal raw (drainer.UnsafeRune:
// control characters, escape sequences, carriage returns and tabs that
// break columns among them; line separators; the bidirectional marks,
// overrides and isolates that reorder what is shown), and bytes that are
// not UTF-8. They come out as \xNN or
// \uNNNN; everything else is left as it is.
func termSafe(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || drainer.UnsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r < 0x100 && drainer.UnsafeRune(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		case drainer.UnsafeRune(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// defaultWidth is the width text output is wrapped to when it does not
// go to a terminal (a pipe, a file, an Ansible task's log).
const defaultWidth = 100

// outputWidth is the width to wrap gnsh's text output to: $COLUMNS if
// set, else the terminal's when stdout is one, else defaultWidth.
func outputWidth(env *dispatch.Env) int {
	if v, ok := env.LookupEnv("COLUMNS"); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	if f, ok := env.Stdout.(interface{ Fd() uintptr }); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	return defaultWidth
}
