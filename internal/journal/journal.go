// Package journal writes gnsh's lines to the system journal: the refusals
// and queued reboots of a command whose own output nobody may read
// (unattended-upgrades logs only "Failed to issue shutdown" and the exit
// status). The native protocol is go-systemd's (a well-kept client of
// journald's socket); where journald is not running (a container without
// it, a test machine), nothing is written.
package journal

import (
	"github.com/coreos/go-systemd/v22/journal"
)

// Identifier is the SYSLOG_IDENTIFIER of gnsh's lines: journalctl -t gnsh.
const Identifier = "gnsh"

// Send writes one line, at priority warning or info. Errors are dropped:
// the line was also said on the command's stderr.
func Send(warning bool, line string) {
	if !journal.Enabled() {
		return
	}
	p := journal.PriInfo
	if warning {
		p = journal.PriWarning
	}
	_ = journal.Send(line, p, map[string]string{"SYSLOG_IDENTIFIER": Identifier})
}
