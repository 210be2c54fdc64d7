package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gnsh/gnsh/internal/window"
)

// A good slots.window loads, and QueueWindow reads it.
func TestLoadWindow(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"slots:\n  window:\n    days: mon-fri\n    start: \"02:00\"\n    end: \"05:00\"\n    timeZone: Europe/Berlin\n", "mon-fri 02:00-05:00 Europe/Berlin"},
		// Unquoted, YAML 1.1 reads these as strings too.
		{"slots:\n  window:\n    days: sat,sun\n    start: 22:00\n    end: 4:00\n    timeZone: UTC\n", "sat,sun 22:00-04:00 UTC"},
		{"slots:\n  window: {days: fri-mon, start: '00:00', end: '24:00', timeZone: Asia/Tokyo}\n", "fri-mon 00:00-24:00 Asia/Tokyo"},
		{"slots:\n  window:\n    start: \"01:00\"\n    end: \"03:00\"\n", "mon-sun 01:00-03:00 Local"},
	} {
		c, err := Parse([]byte(tt.yaml))
		if err != nil {
			t.Errorf("%q: %v", tt.yaml, err)
			continue
		}
		w, err := c.QueueWindow()
		if err != nil || w == nil || w.String() != tt.want {
			t.Errorf("%q: QueueWindow %v, %v; want %s", tt.yaml, w, err, tt.want)
		}
	}
	// No window: nil.
	if w, err := Default().QueueWindow(); w != nil || err != nil {
		t.Errorf("default: %v %v", w, err)
	}
	c, err := Parse([]byte("slots:\n  window:\n    days: sun\n    start: \"02:30\"\n    end: \"05:00\"\n    timeZone: Europe/Berlin\n"))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := c.QueueWindow()
	if open, _ := w.Next(time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC)); !open.Equal(time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)) {
		t.Errorf("%s: opens %s", w, open)
	}
}

// Each mistake in slots.window is one problem with its key and line.
func TestLoadWindowErrors(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want []string
	}{
		{"slots:\n  window:\n    days: mo-fr\n    start: \"02:00\"\n    end: \"05:00\"\n",
			[]string{`line 3: slots.window.days: "mo-fr" is not a list of days ("mo" is not a day); write them as mon-fri or sat,sun (three letters or the full name)`}},
		{"slots:\n  window:\n    start: \"2am\"\n    end: \"05:00\"\n",
			[]string{`line 3: slots.window.start: "2am" is not a time of day; write HH:MM on the 24-hour clock, such as 02:00`}},
		{"slots:\n  window:\n    start: \"02:00\"\n    end: \"25:00\"\n",
			[]string{`line 4: slots.window.end: "25:00" is not a time of day; write HH:MM on the 24-hour clock, such as 05:00 (24:00 for midnight)`}},
		{"slots:\n  window:\n    start: \"02:00\"\n    timeZone: Europe/Berln\n", []string{
			// end is not in the file: the line of window.
			`line 2: slots.window.end: left out while start is set; write the time the window closes, such as 05:00 (leave out both for the whole day)`,
			`line 4: slots.window.timeZone: "Europe/Berln" is not a time zone; write an IANA name such as Europe/Berlin, or UTC (left out: the node's local time)`}},
		// YAML 1.1 reads 0200 as the octal number 128.
		{"slots:\n  window:\n    start: 0200\n    end: 0500\n", []string{
			`line 3: slots.window.start: 0200 is a number in YAML, not a time of day; write HH:MM in quotes, such as "02:00"`,
			`line 4: slots.window.end: 0500 is a number in YAML, not a time of day; write HH:MM in quotes, such as "02:00"`}},
		// On one line, in the order of the file.
		{"slots:\n  window: {timeZone: Mars/Olympus, days: weekdays, start: '02:00', end: '05:00'}\n", []string{
			`line 2: slots.window.timeZone: "Mars/Olympus" is not a time zone; write an IANA name such as Europe/Berlin, or UTC (left out: the node's local time)`,
			`line 2: slots.window.days: "weekdays" is not a list of days ("weekdays" is not a day); write them as mon-fri or sat,sun (three letters or the full name)`}},
		// A value of the wrong type is said once, as such.
		{"slots:\n  window:\n    start: [2]\n    end: \"05:00\"\n", []string{`line 3: slots.window.start: must be a string, not a list`}},
		{"slots:\n  window: monday\n", []string{`line 2: slots.window: must be a map of keys, not "monday"`}},
		{"slots:\n  window:\n    day: mon\n", []string{`line 3: slots.window.day: unknown key; did you mean days?`}},
	} {
		c, err := Parse([]byte(tt.yaml))
		var ce *Error
		if !errors.As(err, &ce) || !reflect.DeepEqual(c, Default()) {
			t.Errorf("%q: %v, want an *Error", tt.yaml, err)
			continue
		}
		var got []string
		for _, p := range ce.Problems {
			got = append(got, p.String())
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q:\n got %q\nwant %q", tt.yaml, got, tt.want)
		}
	}
	// A Config not read by Parse: QueueWindow says what is wrong.
	c := Default()
	c.Slots.Window = &Window{Days: "mo"}
	var we *window.Error
	if w, err := c.QueueWindow(); w != nil || !errors.As(err, &we) || we.Fields[0].Field != "days" {
		t.Errorf("QueueWindow of a bad window: %v %v", w, err)
	}
}

// The window commented out in the annotated config file, uncommented, is
// a valid window.
func TestShippedWindowExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "install", "gnsh", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^  #window:\n(  #  .*\n)+`).Find(b)
	if m == nil {
		t.Fatal("install/gnsh/config.yaml: no commented slots.window")
	}
	y := "slots:\n" + regexp.MustCompile(`(?m)^  #`).ReplaceAllString(string(m), "  ")
	c, err := Parse([]byte(y))
	if err != nil {
		t.Fatalf("%s: %v", y, err)
	}
	if w, err := c.QueueWindow(); err != nil || w.String() != "mon-fri 02:00-05:00 Europe/Berlin" {
		t.Errorf("%v %v", w, err)
	}
}

// A window never open longer than drainTimeout admits nothing (the agent
// stops admitting drainTimeout before it closes): refused with the fix.
func TestWindowShorterThanDrainTimeout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("drainTimeout: 10m\nslots:\n  window: {start: \"02:00\", end: \"02:05\", timeZone: UTC}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), "slots.window: it is open at most 5m0s at a time, no longer than drainTimeout (10m0s)") {
		t.Fatalf("%v", err)
	}
	if err := os.WriteFile(p, []byte("drainTimeout: 10m\nslots:\n  window: {start: \"02:00\", end: \"03:00\", timeZone: UTC}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatal(err)
	}
}
