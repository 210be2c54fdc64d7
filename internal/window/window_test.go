package window

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, days, start, end, tz string) Window {
	t.Helper()
	w, err := Parse(days, start, end, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q, %q, %q): %v", days, start, end, tz, err)
	}
	return w
}

func TestParseString(t *testing.T) {
	for _, tt := range []struct{ days, start, end, tz, want string }{
		{"mon-fri", "02:00", "05:00", "Europe/Berlin", "mon-fri 02:00-05:00 Europe/Berlin"},
		{"sat,sun", "2:00", "5:30", "UTC", "sat,sun 02:00-05:30 UTC"},
		{"SAT, Sun", "22:00", "04:00", "utc", "sat,sun 22:00-04:00 UTC"},
		{"fri-mon", "22:00", "24:00", "UTC", "fri-mon 22:00-24:00 UTC"},
		{"mon,wed-fri", "00:00", "00:00", "UTC", "mon,wed-fri 00:00-24:00 UTC"},
		{"Monday,Wednesday-Friday", "01:00", "01:00", "UTC", "mon,wed-fri 01:00-01:00 UTC"},
		{"sun,mon", "01:00", "02:00", "UTC", "sun,mon 01:00-02:00 UTC"},
		{"tue,sun", "01:00", "02:00", "UTC", "tue,sun 01:00-02:00 UTC"},
		{"mon-sun", "01:00", "02:00", "UTC", "mon-sun 01:00-02:00 UTC"},
		{"thu-wed", "01:00", "02:00", "UTC", "mon-sun 01:00-02:00 UTC"},
		{"sun-sat", "01:00", "02:00", "UTC", "mon-sun 01:00-02:00 UTC"},
		{"mon-mon", "01:00", "02:00", "UTC", "mon 01:00-02:00 UTC"},
		{"sat-tue,thu", "01:00", "02:00", "UTC", "thu,sat-tue 01:00-02:00 UTC"},
		{"mon,mon,tue", "01:00", "02:00", "UTC", "mon,tue 01:00-02:00 UTC"},
		{"", "", "", "", "mon-sun 00:00-24:00 Local"},
		{" mon ", " 02:00 ", " 03:00", " Local ", "mon 02:00-03:00 Local"},
		{"", "23:59", "0:00", "Asia/Tokyo", "mon-sun 23:59-24:00 Asia/Tokyo"},
	} {
		w := mustParse(t, tt.days, tt.start, tt.end, tt.tz)
		if got := w.String(); got != tt.want {
			t.Errorf("Parse(%q, %q, %q, %q) = %s, want %s", tt.days, tt.start, tt.end, tt.tz, got, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct {
		days, start, end, tz string
		want                 []FieldError
	}{
		{"mo-fr", "02:00", "05:00", "", []FieldError{{"days", `"mo-fr" is not a list of days ("mo" is not a day); write them as mon-fri or sat,sun (three letters or the full name)`}}},
		{"mon-fr", "02:00", "05:00", "", []FieldError{{"days", `"mon-fr" is not a list of days ("fr" is not a day); write them as mon-fri or sat,sun (three letters or the full name)`}}},
		{"mon,,fri", "02:00", "05:00", "", []FieldError{{"days", `"mon,,fri" is not a list of days (an empty item between commas); write them as mon-fri or sat,sun (three letters or the full name)`}}},
		{"mon-", "02:00", "05:00", "", []FieldError{{"days", `"mon-" is not a list of days ("mon-" lacks a day); write them as mon-fri or sat,sun (three letters or the full name)`}}},
		{"mon-tue-wed", "02:00", "05:00", "", []FieldError{{"days", `"mon-tue-wed" is not a list of days ("tue-wed" is not a day); write them as mon-fri or sat,sun (three letters or the full name)`}}},
		{"weekdays", "02:00", "05:00", "", []FieldError{{"days", `"weekdays" is not a list of days ("weekdays" is not a day); write them as mon-fri or sat,sun (three letters or the full name)`}}},
		{"", "2am", "05:00", "", []FieldError{{"start", `"2am" is not a time of day; write HH:MM on the 24-hour clock, such as 02:00`}}},
		{"", "02:00", "25:00", "", []FieldError{{"end", `"25:00" is not a time of day; write HH:MM on the 24-hour clock, such as 05:00 (24:00 for midnight)`}}},
		{"", "02:00", "05:60", "", []FieldError{{"end", `"05:60" is not a time of day; write HH:MM on the 24-hour clock, such as 05:00 (24:00 for midnight)`}}},
		{"", "02:00", "24:01", "", []FieldError{{"end", `"24:01" is not a time of day; write HH:MM on the 24-hour clock, such as 05:00 (24:00 for midnight)`}}},
		{"", "02:00:00", "05:00", "", []FieldError{{"start", `"02:00:00" is not a time of day; write HH:MM on the 24-hour clock, such as 02:00`}}},
		{"", "128", "05:00", "", []FieldError{{"start", `"128" is not a time of day; write HH:MM on the 24-hour clock, such as 02:00`}}},
		{"", "24:00", "05:00", "", []FieldError{{"start", `"24:00" is the end of a day, not a start; write 00:00 for midnight`}}},
		{"", "02:00", "", "", []FieldError{{"end", "left out while start is set; write the time the window closes, such as 05:00 (leave out both for the whole day)"}}},
		{"", "", "05:00", "", []FieldError{{"start", "left out while end is set; write the time the window opens, such as 02:00 (leave out both for the whole day)"}}},
		{"", "02:00", "05:00", "Europe/Berln", []FieldError{{"timeZone", `"Europe/Berln" is not a time zone; write an IANA name such as Europe/Berlin, or UTC (left out: the node's local time)`}}},
		{"", "02:00", "05:00", "+01:00", []FieldError{{"timeZone", `"+01:00" is not a time zone; write an IANA name such as Europe/Berlin, or UTC (left out: the node's local time)`}}},
		{"", "02:00", "05:00", "../../etc/passwd", []FieldError{{"timeZone", `"../../etc/passwd" is not a time zone; write an IANA name such as Europe/Berlin, or UTC (left out: the node's local time)`}}},
		{"x", "y", "z", "w/w", []FieldError{
			{"days", `"x" is not a list of days ("x" is not a day); write them as mon-fri or sat,sun (three letters or the full name)`},
			{"start", `"y" is not a time of day; write HH:MM on the 24-hour clock, such as 02:00`},
			{"end", `"z" is not a time of day; write HH:MM on the 24-hour clock, such as 05:00 (24:00 for midnight)`},
			{"timeZone", `"w/w" is not a time zone; write an IANA name such as Europe/Berlin, or UTC (left out: the node's local time)`},
		}},
	} {
		w, err := Parse(tt.days, tt.start, tt.end, tt.tz)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Parse(%q, %q, %q, %q) = %s, %v; want an *Error", tt.days, tt.start, tt.end, tt.tz, w, err)
			continue
		}
		if len(e.Fields) != len(tt.want) {
			t.Errorf("Parse(%q, %q, %q, %q): %v; want %v", tt.days, tt.start, tt.end, tt.tz, e.Fields, tt.want)
			continue
		}
		for i := range tt.want {
			if e.Fields[i] != tt.want[i] {
				t.Errorf("Parse(%q, %q, %q, %q):\n got %s: %s\nwant %s: %s", tt.days, tt.start, tt.end, tt.tz,
					e.Fields[i].Field, e.Fields[i].Msg, tt.want[i].Field, tt.want[i].Msg)
			}
		}
		if strings.Contains(err.Error(), "\n") || w.Contains(time.Now()) {
			t.Errorf("%q: %v", err, w)
		}
	}
}

func utc(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

// 2026-11-23 is a Monday.
func TestNextUTC(t *testing.T) {
	for _, tt := range []struct {
		days, start, end string
		at               string
		open, close      string
	}{
		{"mon-fri", "02:00", "05:00", "2026-11-23 01:59", "2026-11-23 02:00", "2026-11-23 05:00"},
		{"mon-fri", "02:00", "05:00", "2026-11-23 02:00", "2026-11-23 02:00", "2026-11-23 05:00"},
		{"mon-fri", "02:00", "05:00", "2026-11-23 04:59", "2026-11-23 02:00", "2026-11-23 05:00"},
		{"mon-fri", "02:00", "05:00", "2026-11-23 05:00", "2026-11-24 02:00", "2026-11-24 05:00"},
		{"mon-fri", "02:00", "05:00", "2026-11-27 06:00", "2026-11-30 02:00", "2026-11-30 05:00"}, // Friday after: Monday
		// Across midnight: the days name the day it opens.
		{"fri", "22:00", "04:00", "2026-11-28 03:00", "2026-11-27 22:00", "2026-11-28 04:00"},
		{"fri", "22:00", "04:00", "2026-11-28 04:00", "2026-12-04 22:00", "2026-12-05 04:00"},
		{"sat", "22:00", "04:00", "2026-11-28 03:00", "2026-11-28 22:00", "2026-11-29 04:00"},
		// start == end: 24 hours.
		{"wed", "06:00", "06:00", "2026-11-26 05:59", "2026-11-25 06:00", "2026-11-26 06:00"},
		// Openings that touch are one.
		{"mon-fri", "00:00", "24:00", "2026-11-25 12:00", "2026-11-25 00:00", "2026-11-28 00:00"},
		{"fri-mon", "00:00", "00:00", "2026-11-26 12:00", "2026-11-27 00:00", "2026-12-01 00:00"},
		{"mon-fri", "20:00", "20:00", "2026-11-23 19:00", "2026-11-23 20:00", "2026-11-28 20:00"},
		// Open all the time: a week at most.
		{"", "", "", "2026-11-25 12:00", "2026-11-25 00:00", "2026-12-02 00:00"},
		{"", "03:00", "03:00", "2026-11-25 01:00", "2026-11-24 03:00", "2026-12-01 03:00"},
	} {
		w := mustParse(t, tt.days, tt.start, tt.end, "UTC")
		at := utc(tt.at)
		o, c := w.Next(at)
		if !o.Equal(utc(tt.open)) || !c.Equal(utc(tt.close)) {
			t.Errorf("%s at %s: %s to %s, want %s to %s", w, tt.at, o.Format(time.DateTime), c.Format(time.DateTime), tt.open, tt.close)
		}
		if want := !at.Before(utc(tt.open)); w.Contains(at) != want {
			t.Errorf("%s at %s: Contains %v", w, tt.at, !want)
		}
	}
}

// The window is read on the clock of its zone, whatever the zone of t.
func TestZone(t *testing.T) {
	w := mustParse(t, "mon", "02:00", "03:00", "Asia/Tokyo") // UTC+9, no summer time
	in := utc("2026-11-22 17:30")                            // Monday 02:30 in Tokyo, Sunday in UTC
	if !w.Contains(in) || !w.Contains(in.In(time.FixedZone("x", -5*3600))) || w.Contains(utc("2026-11-23 02:30")) {
		t.Errorf("%s: Contains wrong", w)
	}
	if o, c := w.Next(in); !o.Equal(utc("2026-11-22 17:00")) || !c.Equal(utc("2026-11-22 18:00")) || o.Location().String() != "Asia/Tokyo" {
		t.Errorf("%s: %s to %s", w, o, c)
	}
}

func berlin(t *testing.T, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04 MST", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// In Europe/Berlin on 2026-03-29 the clocks go from 02:00 CET to 03:00
// CEST (01:00Z); on 2026-10-25 from 03:00 CEST back to 02:00 CET (01:00Z).
func TestDST(t *testing.T) {
	for _, tt := range []struct {
		name, days, start, end string
		at                     string // UTC
		open, close            string // UTC
	}{
		// Spring: a start in the skipped hour is the end of the jump.
		{"start skipped", "sun", "02:30", "05:00", "2026-03-29 00:00", "2026-03-29 01:00", "2026-03-29 03:00"},
		{"start at the jump", "sun", "02:00", "05:00", "2026-03-29 00:00", "2026-03-29 01:00", "2026-03-29 03:00"},
		{"end skipped", "sun", "01:00", "02:30", "2026-03-29 00:00", "2026-03-29 00:00", "2026-03-29 01:00"},
		{"across the jump", "sun", "01:00", "04:00", "2026-03-29 00:00", "2026-03-29 00:00", "2026-03-29 02:00"},
		{"24 hours from a skipped start", "sun", "02:30", "02:30", "2026-03-29 00:00", "2026-03-29 01:00", "2026-03-30 00:30"},
		{"ending in a skipped start", "sat", "02:30", "02:30", "2026-03-28 12:00", "2026-03-28 01:30", "2026-03-29 01:00"},
		// Wholly within the skipped hour: not that Sunday, the next.
		{"wholly skipped", "sun", "02:10", "02:50", "2026-03-28 12:00", "2026-04-05 00:10", "2026-04-05 00:50"},
		// Autumn: a start or end in the repeated hour is its first occurrence.
		{"start repeated", "sun", "02:30", "05:00", "2026-10-25 00:00", "2026-10-25 00:30", "2026-10-25 04:00"},
		{"end repeated", "sun", "01:00", "02:30", "2026-10-24 23:30", "2026-10-24 23:00", "2026-10-25 00:30"},
		{"within the repeated hour", "sun", "02:10", "02:50", "2026-10-25 00:00", "2026-10-25 00:10", "2026-10-25 00:50"},
		{"across the repeat", "sun", "01:00", "04:00", "2026-10-25 00:00", "2026-10-24 23:00", "2026-10-25 03:00"},
		{"after the repeat", "sun", "03:00", "04:00", "2026-10-25 00:00", "2026-10-25 02:00", "2026-10-25 03:00"},
		{"across midnight into it", "sat", "23:00", "02:30", "2026-10-24 22:00", "2026-10-24 21:00", "2026-10-25 00:30"},
	} {
		w := mustParse(t, tt.days, tt.start, tt.end, "Europe/Berlin")
		o, c := w.Next(utc(tt.at))
		if !o.Equal(utc(tt.open)) || !c.Equal(utc(tt.close)) {
			t.Errorf("%s: %s at %sZ: %s to %s, want %sZ to %sZ", tt.name, w, tt.at, o, c, tt.open, tt.close)
		}
	}
	// The wall times, as an admin reads them.
	w := mustParse(t, "sun", "02:30", "05:00", "Europe/Berlin")
	if o, _ := w.Next(berlin(t, "2026-03-29 01:00 CET")); o.Format("15:04 MST") != "03:00 CEST" {
		t.Errorf("spring: opens %s, want 03:00 CEST", o.Format("15:04 MST"))
	}
	if o, _ := w.Next(berlin(t, "2026-10-25 01:00 CEST")); o.Format("15:04 MST") != "02:30 CEST" {
		t.Errorf("autumn: opens %s, want 02:30 CEST", o.Format("15:04 MST"))
	}
}

// The zero Window is never open.
func TestZero(t *testing.T) {
	var w Window
	if o, c := w.Next(time.Now()); w.Contains(time.Now()) || !o.IsZero() || !c.IsZero() || w.String() != "never" {
		t.Errorf("%s %s %s", w, o, c)
	}
}

var zones = []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "America/Sao_Paulo", "Pacific/Apia"}

func randomWindow(r *rand.Rand, t *testing.T) Window {
	days := []string{"", "mon-fri", "sat,sun", "fri-mon", "mon,wed-fri", "sun", "tue,thu,sat"}[r.IntN(7)]
	hm := func() string {
		if r.IntN(4) == 0 { // on the hour, where the clocks change
			return time.Date(0, 1, 1, r.IntN(24), 0, 0, 0, time.UTC).Format("15:04")
		}
		return time.Date(0, 1, 1, r.IntN(24), r.IntN(60), 0, 0, time.UTC).Format("15:04")
	}
	start, end := hm(), hm()
	if r.IntN(8) == 0 {
		end = start
	}
	return mustParse(t, days, start, end, zones[r.IntN(len(zones))])
}

// For random windows and times (DST nights included): Next's opening is
// not empty and contains t or is after it; Contains agrees with it; Next
// does not go back as t goes on; no moment between t and a later opening
// is in the window.
func TestNextProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 21))
	base := utc("2020-01-01 00:00")
	for range 300 {
		w := randomWindow(r, t)
		at := base.Add(time.Duration(r.Int64N(int64(10 * 365 * 24 * time.Hour))))
		var prevOpen, prevClose time.Time
		for range 50 {
			o, c := w.Next(at)
			if !o.Before(c) || !at.Before(c) {
				t.Fatalf("%s at %s: %s to %s", w, at, o, c)
			}
			if c.Sub(o) > 8*24*time.Hour {
				t.Fatalf("%s at %s: %s to %s, longer than a week", w, at, o, c)
			}
			if got, want := w.Contains(at), !at.Before(o); got != want {
				t.Fatalf("%s at %s: Contains %v, Next %s to %s", w, at, got, o, c)
			}
			if o.Before(prevOpen) || c.Before(prevClose) {
				t.Fatalf("%s at %s: %s to %s, before %s to %s", w, at, o, c, prevOpen, prevClose)
			}
			if at.Before(o) {
				// A moment before the opening is outside.
				if s := at.Add(time.Duration(r.Int64N(int64(o.Sub(at))))); w.Contains(s) {
					t.Fatalf("%s: %s is inside, before the next opening %s", w, s, o)
				}
			}
			// The opening's own moments: its start is inside, its end is not,
			// unless the next opening starts there.
			if !w.Contains(o) {
				t.Fatalf("%s: its opening %s is outside", w, o)
			}
			if o2, _ := w.Next(c); w.Contains(c) && !o2.Equal(c) {
				t.Fatalf("%s: closes at %s, still open then (%s)", w, c, o2)
			}
			prevOpen, prevClose = o, c
			at = at.Add(time.Duration(r.Int64N(int64(30 * time.Hour))))
		}
	}
}

// In a zone without summer time the window is plain arithmetic on the
// minutes of the week: an oracle written apart from Next.
func TestContainsOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		days := r.IntN(127) + 1
		var names []string
		for d := range 7 {
			if days&(1<<d) != 0 {
				names = append(names, dayNames[d])
			}
		}
		start, end := r.IntN(24*60), r.IntN(24*60)
		w := mustParse(t, strings.Join(names, ","), time.Date(0, 1, 1, 0, start, 0, 0, time.UTC).Format("15:04"),
			time.Date(0, 1, 1, 0, end, 0, 0, time.UTC).Format("15:04"), "UTC")
		at := utc("2026-01-01 00:00").Add(time.Duration(r.IntN(60*24*400)) * time.Minute)
		length := (end - start + 24*60) % (24 * 60)
		if length == 0 {
			length = 24 * 60
		}
		in := false
		for back := range 2 { // an opening of today, or of yesterday still open
			d := at.AddDate(0, 0, -back)
			open := time.Date(d.Year(), d.Month(), d.Day(), 0, start, 0, 0, time.UTC)
			if days&(1<<d.Weekday()) != 0 && !at.Before(open) && at.Before(open.Add(time.Duration(length)*time.Minute)) {
				in = true
			}
		}
		if w.Contains(at) != in {
			t.Fatalf("%s at %s: Contains %v, want %v", w, at, !in, in)
		}
	}
}

// FuzzParse: Parse never panics; a window it accepts is one line, parses
// back from its String to the same window, and opens.
func FuzzParse(f *testing.F) {
	for _, s := range [][4]string{
		{"mon-fri", "02:00", "05:00", "Europe/Berlin"}, {"sat,sun", "2:00", "24:00", "UTC"}, {"fri-mon", "22:00", "04:00", ""},
		{"Monday,wed-FRI", "00:00", "00:00", "Local"}, {"mo-fr", "25:00", "5", "Europe/Berln"}, {"", "", "", ""},
		{",", "-1:00", "24:01", "../zoneinfo"}, {"sun-sun", "23:59", "23:59", "Australia/Lord_Howe"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, days, start, end, tz string) {
		w, err := Parse(days, start, end, tz)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Fields) == 0 || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error %q", err)
			}
			return
		}
		s := w.String()
		f := strings.SplitN(s, " ", 3)
		if len(f) != 3 || strings.ContainsAny(s, "\n\r") {
			t.Fatalf("String %q", s)
		}
		startEnd := strings.SplitN(f[1], "-", 2)
		if len(startEnd) != 2 {
			t.Fatalf("String %q", s)
		}
		back, err := Parse(f[0], startEnd[0], startEnd[1], f[2])
		if err != nil || !back.Equal(w) || back.String() != s {
			t.Fatalf("%q parses back as %s, %v", s, back, err)
		}
		now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
		if o, c := w.Next(now); !o.Before(c) || !now.Before(c) {
			t.Fatalf("%s: Next %s to %s", w, o, c)
		}
	})
}
