package drainer

import (
	"os"
	"strconv"
	"strings"
)

// Requester is who asked for the shutdown or drain.
type Requester struct {
	User string // SUDO_USER, else LOGNAME, else "uid N"
	TTY  string // e.g. pts/0; "" without a terminal
}

// WhoAsks finds the requesting user and terminal: sudo's SUDO_USER names
// the person behind a root shell, LOGNAME the login.
func WhoAsks(getenv func(string) string) Requester {
	r := Requester{User: getenv("SUDO_USER")}
	if r.User == "" {
		r.User = getenv("LOGNAME")
	}
	if r.User == "" {
		r.User = "uid " + strconv.Itoa(os.Getuid())
	}
	for _, fd := range []string{"0", "1", "2"} {
		if t, err := os.Readlink("/proc/self/fd/" + fd); err == nil && strings.HasPrefix(t, "/dev/") &&
			(strings.HasPrefix(t, "/dev/pts/") || strings.HasPrefix(t, "/dev/tty") || strings.HasPrefix(t, "/dev/console")) {
			r.TTY = strings.TrimPrefix(t, "/dev/")
			break
		}
	}
	return r
}

// BootID reads the kernel's boot ID, which tells the node agent whether a
// cordon was made in this boot or before the reboot.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
