package nodefacts

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LogindConfMain is logind's main configuration file.
const LogindConfMain = "/etc/systemd/logind.conf"

// LogindConfDirs are logind's drop-in directories, highest priority
// first: a drop-in's name hides the same name in later directories.
var LogindConfDirs = []string{
	"/etc/systemd/logind.conf.d",
	"/run/systemd/logind.conf.d",
	"/usr/local/lib/systemd/logind.conf.d",
	"/usr/lib/systemd/logind.conf.d",
	"/lib/systemd/logind.conf.d", // without merged /usr (Debian 11 may have both)
}

// DefaultInhibitDelayMax is logind's built-in InhibitDelayMaxSec.
const DefaultInhibitDelayMax = 5 * time.Second

// ReadLogindConf reads InhibitDelayMaxSec the way logind does: the main
// file, then the drop-ins (*.conf of every directory, a name in a
// higher-priority directory hiding the same name below, a link to
// /dev/null or an empty file masking it) sorted by file name, each
// setting overriding the one before. The last one wins: unattended-
// upgrades' "unattended-upgrades-logind-maxdelay.conf" sorts after
// kubelet's "99-kubelet.conf".
func ReadLogindConf(root string) LogindConfFacts {
	f := LogindConfFacts{}
	rp := func(p string) string { return filepath.Join(root, p) }
	files := []string{}
	if _, err := os.Stat(rp(LogindConfMain)); err == nil {
		files = append(files, LogindConfMain)
	}
	byName := map[string]string{}
	masked := map[string]bool{}
	var errs []string
	for _, dir := range LogindConfDirs {
		ents, err := os.ReadDir(rp(dir))
		if err != nil {
			if !os.IsNotExist(err) {
				errs = append(errs, err.Error())
			}
			continue
		}
		for _, e := range ents {
			name := e.Name()
			if !strings.HasSuffix(name, ".conf") {
				continue
			}
			if _, seen := byName[name]; seen {
				continue
			}
			p := filepath.Join(dir, name)
			byName[name] = p
			if isMask(rp(p)) {
				masked[name] = true
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		files = append(files, byName[n])
	}

	eff, effFile := DefaultInhibitDelayMax, ""
	for _, p := range files {
		cf := ConfFile{Path: p}
		if masked[filepath.Base(p)] && p != LogindConfMain {
			cf.Masked = true
			f.Files = append(f.Files, cf)
			continue
		}
		data, err := os.ReadFile(rp(p))
		if err != nil {
			cf.Error = err.Error()
			f.Files = append(f.Files, cf)
			continue
		}
		if v, ok := inhibitDelaySetting(data); ok {
			cf.InhibitDelayMaxSec = v
			if v == "" {
				eff, effFile = DefaultInhibitDelayMax, p
			} else if d, err := ParseTimespan(v); err != nil {
				cf.Error = err.Error() // logind ignores it and keeps the value before
			} else {
				eff, effFile = d, p
			}
		}
		f.Files = append(f.Files, cf)
	}
	f.EffectiveFile = effFile
	if eff == math.MaxInt64 {
		f.Effective, f.EffectiveSec = "infinity", -1
	} else {
		f.Effective, f.EffectiveSec = eff.String(), eff.Seconds()
	}
	if len(errs) > 0 {
		f.Error = strings.Join(errs, "; ")
	}
	return f
}

// isMask reports whether a drop-in masks its name: a link to /dev/null
// or an empty file.
func isMask(p string) bool {
	if t, err := os.Readlink(p); err == nil && t == "/dev/null" {
		return true
	}
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Size() == 0
}

// inhibitDelaySetting returns the last InhibitDelayMaxSec= value in the
// [Login] section, and whether there is one.
func inhibitDelaySetting(data []byte) (string, bool) {
	var val string
	found := false
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[] \t")
		case section == "Login":
			k, v, ok := strings.Cut(line, "=")
			if ok && strings.TrimSpace(k) == "InhibitDelayMaxSec" {
				val, found = strings.TrimSpace(v), true
			}
		}
	}
	return val, found
}

// timeUnits are systemd's time span units (parse_sec).
var timeUnits = map[string]float64{
	"us": 1e-6, "usec": 1e-6, "µs": 1e-6, "μs": 1e-6,
	"ms": 1e-3, "msec": 1e-3,
	"s": 1, "sec": 1, "second": 1, "seconds": 1, "": 1,
	"m": 60, "min": 60, "minute": 60, "minutes": 60,
	"h": 3600, "hr": 3600, "hour": 3600, "hours": 3600,
	"d": 86400, "day": 86400, "days": 86400,
	"w": 7 * 86400, "week": 7 * 86400, "weeks": 7 * 86400,
	"M": 2629800, "month": 2629800, "months": 2629800,
	"y": 31557600, "year": 31557600, "years": 31557600,
}

// ParseTimespan parses a systemd time span in seconds by default ("30",
// "1min 30s", "2.5s", "infinity"); infinity is math.MaxInt64.
func ParseTimespan(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "infinity" {
		return math.MaxInt64, nil
	}
	if s == "" {
		return 0, fmt.Errorf("empty time span")
	}
	var total float64
	rest := s
	for rest != "" {
		rest = strings.TrimLeft(rest, " \t")
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("invalid time span %q", s)
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("invalid time span %q", s)
		}
		rest = strings.TrimLeft(rest[i:], " \t")
		j := 0
		for j < len(rest) && !(rest[j] >= '0' && rest[j] <= '9') && rest[j] != ' ' && rest[j] != '\t' {
			j++
		}
		mult, ok := timeUnits[rest[:j]]
		if !ok {
			return 0, fmt.Errorf("invalid time span %q: unknown unit %q", s, rest[:j])
		}
		total += n * mult
		rest = rest[j:]
	}
	if total*1e9 >= math.MaxInt64 {
		return math.MaxInt64, nil
	}
	return time.Duration(total * 1e9).Round(time.Microsecond), nil
}
