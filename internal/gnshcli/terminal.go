package gnshcli

import (
	"fmt"
	"strings"
	"unicode/utf8"

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
