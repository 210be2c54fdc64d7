package dispatch

import "testing"

func TestPersonality(t *testing.T) {
	for argv0, want := range map[string]string{
		"reboot":               "reboot",
		"/usr/sbin/reboot":     "reboot",
		"/sbin/halt":           "halt",
		"poweroff":             "poweroff",
		"shutdown":             "shutdown",
		"/usr/local/sbin/gnsh": "gnsh",
		"gnsh":                 "gnsh",
		"my-reboot-wrapper":    "reboot",   // substring, as systemd's invoked_as()
		"halt-or-poweroff":     "halt",     // halt is tested first
		"poweroff-then-reboot": "poweroff", // poweroff before reboot
		"reboot-shutdown":      "reboot",
		"/opt/shutdown.d/gnsh": "gnsh", // only the last path component counts
		"systemctl":            "gnsh",
		"":                     "gnsh",
	} {
		if got := Personality(argv0); got != want {
			t.Errorf("Personality(%q) = %q, want %q", argv0, got, want)
		}
	}
}
