// Package window reads and applies a maintenance window (slots.window in
// gnsh-config(5)): the days of the week, the hours and the time zone within
// which queued reboots are admitted.
//
// A window opens on each of its days when the clock, in the window's time
// zone, reads start, and closes when it next reads end: the same day when
// end is after start, the next day when it is before (fri 22:00-04:00
// closes on Saturday at 04:00), 24 hours later when they are equal.
// Openings that touch (mon-fri 00:00-24:00) are one, up to a week long.
//
// Daylight saving time: start and end are times on the clock of the zone,
// day by day. When the clocks skip an hour, a start or end within it is the
// moment the jump ends (in Europe/Berlin on the last Sunday of March, 02:30
// is 03:00 CEST), and a window wholly within the skipped hour does not open
// that day. When the clocks repeat an hour, a start or end within it is its
// first occurrence (on the last Sunday of October, 02:30 is 02:30 CEST, not
// the 02:30 CET an hour later). So on those nights a window is as long as
// the clock on the wall says: 01:00-04:00 lasts 2 hours in March and 4 in
// October.
package window

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	// A zone name must mean the same on every node, including a host
	// without /usr/share/zoneinfo (a minimal image): the static binary
	// carries the IANA database (400 kB, under 1% of gnsh), which
	// time.LoadLocation uses when the host has no zone files.
	_ "time/tzdata"
)

// Window is a parsed maintenance window. Make one with Parse: the zero
// Window is never open.
type Window struct {
	days  uint8 // bit d set: open on time.Weekday d
	start int   // minutes after midnight, 0 to 1439
	end   int   // minutes after midnight, 0 to 1439; 0 is midnight (24:00)
	loc   *time.Location
}

// Error is every mistake Parse found, at most one per field, in the order
// days, start, end, timeZone.
type Error struct {
	Fields []FieldError
}

// FieldError is a mistake in one field.
type FieldError struct {
	// Field is days, start, end or timeZone: the key under slots.window.
	Field string
	// Msg says what is wrong and, after "; ", what to write instead: one line.
	Msg string
}

func (e *Error) Error() string {
	s := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		s[i] = f.Field + ": " + f.Msg
	}
	return strings.Join(s, " | ")
}

// Parse reads a window as written in the configuration.
//
// days is a list of days of the week and ranges of them, separated by
// commas: mon-fri, sat,sun, mon,wed-fri, fri-mon (a range wraps round the
// end of the week). A day is its English name or its first three letters,
// in any case. Empty: every day.
//
// start and end are times of day on the 24-hour clock, HH:MM (a one-digit
// hour too: 2:00); end may be 24:00, the midnight that ends the day. End
// before start: the window ends the next day (days name the day it opens);
// end equal to start: 24 hours later. Both empty: the whole day (00:00 to
// 24:00); one alone empty is an error.
//
// timeZone is an IANA zone name (Europe/Berlin), UTC, or Local; empty: the
// node's local time (time.Local).
//
// Surrounding blanks are ignored. A mistake is an *Error naming each field
// in error.
func Parse(days, start, end, timeZone string) (Window, error) {
	var w Window
	var e Error
	bad := func(field, format string, args ...any) {
		e.Fields = append(e.Fields, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	days, start, end, timeZone = strings.TrimSpace(days), strings.TrimSpace(start), strings.TrimSpace(end), strings.TrimSpace(timeZone)

	var msg string
	if w.days, msg = parseDays(days); msg != "" {
		bad("days", "%s", msg)
	}
	switch {
	case start == "" && end == "":
		// The whole day: 00:00 to 24:00.
	case start == "":
		bad("start", "left out while end is set; write the time the window opens, such as 02:00 (leave out both for the whole day)")
	case end == "":
		bad("end", "left out while start is set; write the time the window closes, such as 05:00 (leave out both for the whole day)")
	}
	if start != "" {
		m, ok := clock(start)
		switch {
		case ok && m == 24*60:
			bad("start", "%q is the end of a day, not a start; write 00:00 for midnight", start)
		case ok:
			w.start = m
		default:
			bad("start", "%q is not a time of day; write HH:MM on the 24-hour clock, such as 02:00", start)
		}
	}
	if end != "" {
		m, ok := clock(end)
		if ok {
			w.end = m % (24 * 60)
		} else {
			bad("end", "%q is not a time of day; write HH:MM on the 24-hour clock, such as 05:00 (24:00 for midnight)", end)
		}
	}
	var err error
	if w.loc, err = zone(timeZone); err != nil {
		bad("timeZone", "%q is not a time zone; write an IANA name such as Europe/Berlin, or UTC (left out: the node's local time)", timeZone)
	}
	if len(e.Fields) > 0 {
		return Window{}, &e
	}
	return w, nil
}

// dayNames are the days as String writes them, by time.Weekday.
var dayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// day is the time.Weekday of a day's name or its first three letters (in
// lower case); false if it is neither.
func day(s string) (time.Weekday, bool) {
	for d := time.Sunday; d <= time.Saturday; d++ {
		if s == dayNames[d] || s == strings.ToLower(d.String()) {
			return d, true
		}
	}
	return 0, false
}

// parseDays reads days into a set of weekdays (bit d: time.Weekday d);
// msg says what is wrong ("" if nothing).
func parseDays(s string) (set uint8, msg string) {
	if s == "" {
		return 1<<7 - 1, ""
	}
	for item := range strings.SplitSeq(strings.ToLower(s), ",") {
		item = strings.TrimSpace(item)
		from, to, isRange := strings.Cut(item, "-")
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		if !isRange {
			to = from
		}
		a, okA := day(from)
		b, okB := day(to)
		if !okA || !okB {
			notDay := from
			if okA {
				notDay = to
			}
			what := fmt.Sprintf("%q is not a day", notDay)
			switch {
			case item == "":
				what = "an empty item between commas"
			case notDay == "":
				what = fmt.Sprintf("%q lacks a day", item)
			}
			return 0, fmt.Sprintf("%q is not a list of days (%s); write them as mon-fri or sat,sun (three letters or the full name)", s, what)
		}
		for d := a; ; d = (d + 1) % 7 {
			set |= 1 << d
			if d == b {
				break
			}
		}
	}
	return set, ""
}

var hhmm = regexp.MustCompile(`^([0-9]{1,2}):([0-9]{2})$`)

// clock is the time of day s (H:MM or HH:MM, up to 24:00) in minutes
// after midnight.
func clock(s string) (int, bool) {
	m := hhmm.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	h, _ := strconv.Atoi(m[1])
	mi, _ := strconv.Atoi(m[2])
	if mi > 59 || h > 24 || h == 24 && mi != 0 {
		return 0, false
	}
	return h*60 + mi, true
}

// zone is the location named s: "" and Local are the node's local time.
func zone(s string) (*time.Location, error) {
	switch {
	case s == "" || strings.EqualFold(s, "Local"):
		return time.Local, nil
	case strings.EqualFold(s, "UTC"):
		return time.UTC, nil
	}
	return time.LoadLocation(s)
}

// String is the window on one line, as Parse reads it back: days, hours and
// zone, such as "mon-fri 02:00-05:00 Europe/Berlin" (every day is mon-sun;
// an end at midnight is 24:00).
func (w Window) String() string {
	if w.days == 0 || w.loc == nil {
		return "never"
	}
	end := 24 * 60
	if w.end != 0 {
		end = w.end
	}
	return fmt.Sprintf("%s %02d:%02d-%02d:%02d %s", w.daysString(), w.start/60, w.start%60, end/60, end%60, w.loc)
}

// daysString is the days as runs from Monday on (a run across Sunday
// first): mon-fri, sat,sun, fri-mon, mon,wed-fri.
func (w Window) daysString() string {
	if w.days == 1<<7-1 {
		return "mon-sun"
	}
	on := func(i int) bool { return w.days&(1<<((i+7)%7)) != 0 }
	// The first day, from Monday on, that starts a run.
	first := 1
	for !on(first) || on(first-1) {
		first++
	}
	var parts []string
	for i := first; i < first+7; {
		if !on(i) {
			i++
			continue
		}
		j := i
		for j+1 < first+7 && on(j+1) {
			j++
		}
		switch j - i {
		case 0:
			parts = append(parts, dayNames[i%7])
		case 1:
			parts = append(parts, dayNames[i%7], dayNames[j%7])
		default:
			parts = append(parts, dayNames[i%7]+"-"+dayNames[j%7])
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// Equal reports whether w and o are the same window: the same days, hours
// and zone name.
func (w Window) Equal(o Window) bool {
	if w.days != o.days || w.start != o.start || w.end != o.end || (w.loc == nil) != (o.loc == nil) {
		return false
	}
	return w.loc == nil || w.loc.String() == o.loc.String()
}

// Location is the window's time zone.
func (w Window) Location() *time.Location { return w.loc }

// Contains reports whether the window is open at t.
func (w Window) Contains(t time.Time) bool {
	open, close := w.Next(t)
	return !t.Before(open) && t.Before(close)
}

// Next is the opening of the window that contains t (open <= t < close),
// else the next one after t. Openings that touch are one, up to a week long
// (a window open every day for 24 hours closes a week after it opened). It
// returns zero times for the zero Window.
func (w Window) Next(t time.Time) (open, close time.Time) {
	if w.days == 0 || w.loc == nil {
		return time.Time{}, time.Time{}
	}
	y, mo, d := t.In(w.loc).Date()
	found, joined := false, 0
	// An opening lasts at most a day and an hour: the one of the day
	// before may still be open; one opens within a week (two, if the day's
	// opening was skipped by the clocks), and six more may join it.
	for i := -1; i <= 15; i++ {
		if !w.on(y, mo, d+i) {
			continue
		}
		o, c := w.opening(y, mo, d+i)
		if !o.Before(c) {
			continue // wholly within an hour the clocks skip
		}
		switch {
		case !found && t.Before(c):
			open, close, found = o, c, true
		case found && o.Equal(close) && joined < 6:
			close = c
			joined++
		case found:
			return open, close
		}
	}
	return open, close
}

// on reports whether the window opens on the date y-mo-d (d may be out of
// the month's range, as time.Date allows).
func (w Window) on(y int, mo time.Month, d int) bool {
	return w.days&(1<<time.Date(y, mo, d, 12, 0, 0, 0, time.UTC).Weekday()) != 0
}

// opening is the opening of the window on the date y-mo-d.
func (w Window) opening(y int, mo time.Month, d int) (open, close time.Time) {
	open = at(y, mo, d, w.start, w.loc)
	if w.end <= w.start {
		d++ // the next day's end (24:00 is the next day's 00:00)
	}
	return open, at(y, mo, d, w.end, w.loc)
}

// at is the moment the clock in loc first reads m minutes after midnight
// on the date y-mo-d: the end of the jump when the clocks skip that time,
// its first occurrence when they show it twice.
func at(y int, mo time.Month, d, m int, loc *time.Location) time.Time {
	t := time.Date(y, mo, d, m/60, m%60, 0, 0, loc)
	want := time.Date(y, mo, d, m/60, m%60, 0, 0, time.UTC)
	got := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
	zoneStart, zoneEnd := t.ZoneBounds()
	switch {
	case got.After(want) && !zoneStart.IsZero():
		// A time the clocks skip, which time.Date puts after the jump:
		// the jump ends where t's zone starts.
		return zoneStart
	case got.Before(want) && !zoneEnd.IsZero():
		// The same, put before the jump.
		return zoneEnd
	case !got.Equal(want):
		return t
	}
	if zoneStart.IsZero() {
		return t
	}
	// A time the clocks show twice (back from summer time): time.Date may
	// pick the later; the earlier is the same wall time in the zone before.
	_, off := t.Zone()
	_, before := zoneStart.Add(-time.Nanosecond).Zone()
	if before > off {
		if u := t.Add(-time.Duration(before-off) * time.Second); u.Before(zoneStart) {
			return u
		}
	}
	return t
}
