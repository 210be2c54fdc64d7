package legacy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gnsh/gnsh/internal/getopt"
)

// DrainFlags are gnsh's own long options on the legacy commands. systemd
// has none of them; they match only when spelled out in full, so every
// abbreviation systemd accepts (--no-w for --no-wall) still means what it
// meant.
type DrainFlags struct {
	Skip    bool          // --no-drain
	Timeout time.Duration // --drain-timeout=DURATION; 0 = the configured one
	Force   bool          // --force-drain: hand off even when the drain is blocked
	// ForceQuorum (--force-quorum): a control-plane or etcd node takes a reboot
	// slot even when etcd would lose its quorum.
	ForceQuorum bool
	// Queue (--queue) and NoQueue (--no-queue) override slots.queue for
	// this command: queue it when no reboot slot is free (automation's
	// way), or wait for one in the command (a person's way, not held by
	// slots.window). The last given wins.
	Queue, NoQueue bool
}

// Keys of the drain options, out of the range the grammars use.
const (
	keyNoDrain rune = 0x200 + iota
	keyDrainTimeout
	keyForceDrain
	keyForceQuorum
	keyQueue
	keyNoQueue
)

// DrainLongOptions are appended to each grammar's long options.
var DrainLongOptions = []getopt.Long{
	{Name: "no-drain", Key: keyNoDrain, Exact: true},
	{Name: "drain-timeout", HasArg: getopt.RequiredArgument, Key: keyDrainTimeout, Exact: true},
	{Name: "force-drain", Key: keyForceDrain, Exact: true},
	{Name: "force-quorum", Key: keyForceQuorum, Exact: true},
	{Name: "queue", Key: keyQueue, Exact: true},
	{Name: "no-queue", Key: keyNoQueue, Exact: true},
}

// HelpLine is the one line gnsh adds at the end of systemd's --help text
// of shutdown, poweroff, reboot and halt, which it prints otherwise as it
// is: gnsh's own options (DrainLongOptions) and where they are described.
const HelpLine = "gnsh adds --no-drain, --drain-timeout=DURATION, --force-drain, --force-quorum, --queue, --no-queue; see gnsh-shutdown(8).\n"

// DrainOption applies o if it is one of DrainLongOptions and reports
// whether it was. A bad --drain-timeout is an error with exit status 1.
func (r *Request) DrainOption(o getopt.Option) (bool, error) {
	switch o.Key {
	case keyNoDrain:
		r.Drain.Skip = true
	case keyForceDrain:
		r.Drain.Force = true
	case keyForceQuorum:
		r.Drain.ForceQuorum = true
	case keyQueue:
		r.Drain.Queue, r.Drain.NoQueue = true, false
	case keyNoQueue:
		r.Drain.Queue, r.Drain.NoQueue = false, true
	case keyDrainTimeout:
		d, err := ParseDuration(o.Arg)
		if err != nil {
			return true, Fail("%s: invalid --drain-timeout '%s': %v", r.Prog, o.Arg, err)
		}
		r.Drain.Timeout = d
	default:
		return false, nil
	}
	return true, nil
}

// ParseDuration reads a positive duration: Go's syntax ("90s", "10m",
// "1h30m") or a plain number of seconds.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, fmt.Errorf("use a duration such as 90s, 10m or 1h")
	}
	if d <= 0 {
		return 0, fmt.Errorf("the duration must be positive")
	}
	return d, nil
}
