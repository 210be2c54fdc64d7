package gnshcli

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// termSafe escapes what must not reach a terminal raw: control
// characters (C0, DEL, C1: escape sequences, carriage returns, tabs that
// break columns), the bidirectional overrides and isolates that reorder
// what is shown, and bytes that are not UTF-8. They come out as \xNN or
// \uNNNN; everything else is left as it is.
func termSafe(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unsafeRune(r) {
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
		case r < 0x100 && unsafeRune(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		case unsafeRune(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unsafeRune: a control character, or a bidirectional formatting one.
func unsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r):
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
