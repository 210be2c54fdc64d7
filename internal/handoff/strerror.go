package handoff

import (
	"errors"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// Strerror renders err the way glibc's %m does ("Permission denied"): Go
// spells the same errno texts in lower case.
func Strerror(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		c, n := utf8.DecodeRuneInString(s)
		return string(unicode.ToUpper(c)) + s[n:]
	}
	return err.Error()
}
