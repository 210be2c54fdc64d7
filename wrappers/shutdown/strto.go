package shutdown

import "strings"

// cSpace is isspace() in the C locale.
const cSpace = " \t\n\v\f\r"

// systemdWhitespace is systemd's WHITESPACE, skipped by safe_atou64 before
// strtoull sees the string.
const systemdWhitespace = " \t\n\r"

// safeAtou64 is systemd's safe_atou64(): leading whitespace and "0b"/"0o"
// prefixes, then strtoull(s, base 0), rejecting trailing garbage, overflow
// and negative numbers other than zero.
func safeAtou64(s string) (uint64, bool) {
	s = strings.TrimLeft(s, systemdWhitespace)
	base := 0
	switch {
	case strings.HasPrefix(s, "0b"), strings.HasPrefix(s, "0B"):
		base, s = 2, s[2:]
	case strings.HasPrefix(s, "0o"), strings.HasPrefix(s, "0O"):
		base, s = 8, s[2:]
	}
	v, rest, overflow, ok := strtoull(s, base)
	if overflow || !ok || rest != "" {
		return 0, false
	}
	if v != 0 && strings.HasPrefix(s, "-") {
		return 0, false
	}
	return v, true
}

// strtoull mirrors glibc's strtoull(s, &end, base) for base 0, 2, 8, 10 and
// 16: it returns the value (negated modulo 2^64 after a '-'), the unparsed
// rest, whether the value overflowed (ERANGE), and ok=false when no digits
// were found (end == s).
func strtoull(s string, base int) (v uint64, rest string, overflow, ok bool) {
	i := len(s) - len(strings.TrimLeft(s, cSpace))
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	if (base == 0 || base == 16) && i+1 < len(s) && s[i] == '0' && (s[i+1]|0x20) == 'x' {
		if i+2 < len(s) && digitVal(s[i+2]) < 16 {
			base = 16
			i += 2
		} else if base == 0 {
			base = 8 // "0x" without hex digits parses as "0"
		}
	}
	if base == 0 {
		if i < len(s) && s[i] == '0' {
			base = 8
		} else {
			base = 10
		}
	}
	start := i
	const max = ^uint64(0)
	for ; i < len(s); i++ {
		d := digitVal(s[i])
		if d >= base {
			break
		}
		if v > (max-uint64(d))/uint64(base) {
			overflow = true
		}
		v = v*uint64(base) + uint64(d)
	}
	if i == start {
		return 0, s, false, false
	}
	if overflow {
		return max, s[i:], true, true
	}
	if neg {
		v = -v
	}
	return v, s[i:], false, true
}

// strtol10 mirrors strtol(s, &end, 10) and reports ok=false for ERANGE. With
// no digits it returns 0 and the whole of s as the rest, as C does.
func strtol10(s string) (v int64, rest string, ok bool) {
	i := len(s) - len(strings.TrimLeft(s, cSpace))
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var u uint64
	overflow := false
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		u = u*10 + uint64(s[i]-'0')
		if u > 1<<63 {
			overflow = true
			u = 1 << 63
		}
	}
	if i == start {
		return 0, s, true
	}
	if overflow || (!neg && u > 1<<63-1) {
		return 0, s[i:], false
	}
	if neg {
		return -int64(u), s[i:], true
	}
	return int64(u), s[i:], true
}

func digitVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'Z':
		return int(c-'A') + 10
	}
	return 99
}
