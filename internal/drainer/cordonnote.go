package drainer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gnsh/gnsh/internal/drain"
)

// CordonNoteName is the file, in the lock directory, where a drain for a
// shutdown notes the cordon record it is about to make, and which process
// makes it, before the cordon: if that process is killed (SIGKILL, the OOM
// killer) nothing of it undoes the cordon, and the node agent's orphan
// watcher then does, once it is sure that nothing relies on the cordon
// (UndoOrphanCordon). /run is a tmpfs: the note is of this boot.
const CordonNoteName = "cordon"

// CordonNote is the content of CordonNoteName.
type CordonNote struct {
	PID int `json:"pid"`
	// Start is the process's start time (field 22 of /proc/PID/stat),
	// so that a PID used again is not taken for it.
	Start uint64          `json:"start"`
	Node  string          `json:"node"`
	Own   drain.Ownership `json:"record"`
}

// procStart is pid's start time in clock ticks since boot, from
// /proc/PID/stat.
func procStart(pid int) (uint64, error) {
	_, start, err := procStat(pid)
	return start, err
}

// procStat is pid's state (R, S, Z for a zombie, …) and start time, from
// /proc/PID/stat.
func procStat(pid int) (state string, start uint64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, err
	}
	// The command name may hold spaces and parentheses: the fields that
	// follow start after the last ") ".
	i := strings.LastIndex(string(b), ") ")
	if i < 0 {
		return "", 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return "", 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0], start, err
}

// noteCordon writes the note for the cordon record own on node, made by
// this process. A failure costs only the agent's undo after a crash: a
// debug line.
func (r *run) noteCordon(node string) {
	start, err := procStart(os.Getpid())
	if err == nil {
		var data []byte
		data, err = json.Marshal(CordonNote{PID: os.Getpid(), Start: start, Node: node, Own: r.own})
		if err == nil {
			err = r.d.writeRunFile(CordonNoteName, data)
		}
	}
	if err != nil {
		r.debug("cordon note %s not written: %v", CordonNoteName, err)
	}
}

// ReadCordonNote reads the note; an error wrapping os.ErrNotExist when
// there is none.
func (d *Drainer) ReadCordonNote() (CordonNote, error) {
	var n CordonNote
	err := d.readRunFile(CordonNoteName, &n)
	return n, err
}

// HolderGone reports whether the process that wrote the note has ended (or
// is this one: the agent answers for its own cordons, and a cordon of its
// own that serves no shutdown is as orphaned as a dead wrapper's).
func (d *Drainer) HolderGone(n CordonNote) bool {
	if OwnNote(n) {
		return true
	}
	start, err := procStart(n.PID)
	return err != nil || start != n.Start
}

// sameRecord reports whether o is the very record a (a note's): the same
// request, by the same user, made at the same time in the same boot.
func sameRecord(a, o *drain.Ownership) bool {
	sameWhen := a.When == nil && o.When == nil || a.When != nil && o.When != nil && a.When.Equal(*o.When)
	return o.Action == a.Action && o.User == a.User && o.TTY == a.TTY && o.Time.Equal(a.Time) && o.BootID == a.BootID && sameWhen
}

// OrphanWhy is the journal's and the Event's reason for an orphan undo.
const OrphanWhy = "no drain runs, no shutdown is pending or under way, and the gnsh that made it is gone"

// OwnOrphanWhy is OrphanWhy for a cordon the node agent's own drain made
// (its note names this process, which is not gone).
const OwnOrphanWhy = "no drain runs, no shutdown is pending or under way, and the node agent's drain that made it is over"

// OwnNote reports whether the note names this process: the node agent's
// own drain (ahead of a schedule, or for a shutdown that bypassed gnsh)
// made the cordon, not a gnsh that is gone.
func OwnNote(n CordonNote) bool { return n.PID == os.Getpid() }

// OrphanReason is the reason an orphan undo of n's cordon gives:
// OrphanWhy, or OwnOrphanWhy for the agent's own.
func OrphanReason(n CordonNote) string {
	if OwnNote(n) {
		return OwnOrphanWhy
	}
	return OrphanWhy
}

// UndoOrphanCordon is the node agent's undo of gnsh's cordon for a
// shutdown that nothing relies on any more: its gnsh was killed (SIGKILL:
// no undo ran) or its shutdown was cancelled behind gnsh's back. The note
// n names the record; it is undone only if, under the drain lock (so no
// drain runs), the record standing on the Node is the note's and Relies
// says no shutdown may rely on it (none under way, systemd not stopping,
// not the schedule it was made for, none due within drainTimeout). It
// drops the marker and the note (if it is still n: a newer gnsh may have
// written its own) and posts GnshUncordoned once the lock is released. A
// *HeldError: a drain runs, try again later; ErrShutdownPending: leave it.
// Bounded by 4×apiTimeout.
func (d *Drainer) UndoOrphanCordon(ctx context.Context, n CordonNote) (bool, error) {
	r := newRun(d, forShutdown, "orphan")
	if err := r.loadConfig(nil); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, 4*r.cfg.APITimeout.D())
	defer cancel()
	forget := func() {
		d.forgetNote(func(cur CordonNote) bool {
			return cur.PID == n.PID && cur.Start == n.Start && cur.Node == n.Node && sameRecord(&cur.Own, &n.Own)
		})
	}
	if n.Own.BootID != d.bootID() {
		forget() // of another boot (after a soft-reboot, /run stays): the uncordon after boot's
		return false, nil
	}
	s, err := d.connect(ctx, r.cfg, "", r.out)
	if err != nil {
		return false, err
	}
	r.sess = s
	if s.node != n.Node {
		return false, fmt.Errorf("the note names Node %s, this node is %s", n.Node, s.node)
	}
	undone, _, err := d.undoUnderLock(ctx, r, "undo a cordon its gnsh left", func(o *drain.Ownership) bool { return sameRecord(&n.Own, o) }, nil, forget)
	if undone {
		r.event(ctx, "Normal", ReasonUncordoned, "gnsh's cordon for the %s requested by %s at %s undone by the node agent: %s",
			n.Own.Request(), n.Own.Requester(), n.Own.Time.UTC().Format(time.RFC3339), OrphanReason(n))
	}
	return undone, err
}

// forgetNote removes the cordon note if it is the one match names (its
// cordon has been undone, or no longer stands): a newer gnsh's stays.
func (d *Drainer) forgetNote(match func(CordonNote) bool) {
	var cur CordonNote
	if d.readRunFile(CordonNoteName, &cur) == nil && match(cur) {
		_ = os.Remove(filepath.Join(d.lockDir(), CordonNoteName))
	}
}
