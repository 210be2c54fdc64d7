// Package slots is gnsh's cluster-level gate: a node drains and goes down
// only while it holds a reboot slot, and at most so many nodes hold one or
// are out for any other reason (NotReady, cordoned, being deleted), in the
// whole cluster, in each pool and among the control-plane nodes, whose etcd
// quorum is kept.
//
// The slots are one record in one coordination.k8s.io/v1 Lease, which every
// node reads and writes with a compare-and-swap (the resourceVersion
// precondition of an update): a decision is made from one version of the
// record and of the Nodes and is written only if the record is still that
// version; after a conflict it is made again from fresh state. Nothing here
// compares another machine's clock with this one's: durations are measured
// on the local monotonic clock from changes this process saw (tracker.go).
//
// It is split by concern:
//
//   - record.go: the record (holders, waiters) and its encoding in the Lease;
//   - decide.go: the rules, one pure function from the record and the
//     cluster's state to a verdict;
//   - tracker.go: what this process observed, and for how long;
//   - gate.go: taking a slot (waiting in order), renewing and releasing it;
//   - keeper.go: the node agent's part: renew while a shutdown relies on
//     the slot, free it after the next boot.
package slots

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotation holds the record (JSON) on the Lease.
const Annotation = "gnsh.io/slots"

// Schema is the record's version this gnsh writes. A record of a later
// version was written by a newer gnsh: this one never overwrites it, and
// refuses to take a slot until the node is upgraded (a newer gnsh's
// holders cannot be read for sure, so none of its limits can be kept).
//
// The rule for a new member of the record or of an entry: one that an
// older gnsh may ignore safely (its limits and its freeing rules stay
// right without it, as with "when" and "run") stays in this schema; an
// older gnsh keeps it as it read it through every rewrite (unknown.go), so
// that a renewal by a node not upgraded yet strips it from nobody. One
// that an older gnsh must understand to keep the limits bumps the schema,
// which older gnsh refuse to write.
const Schema = 1

// Phase is where a holder is.
type Phase string

// Phases of a holder, in order.
const (
	// Admitted: the slot is taken; the node is not cordoned yet.
	Admitted Phase = "admitted"
	// Draining: cordoned, pods being evicted.
	Draining Phase = "draining"
	// ShuttingDown: drained and handed to systemd-logind (or scheduled).
	ShuttingDown Phase = "shutting-down"
	// Back: the node agent saw the node up on a new boot; the slot is
	// freed once the node has been Ready and uncordoned for the settle
	// time.
	Back Phase = "back"
)

// Entry is a holder or a waiter.
type Entry struct {
	Node string    `json:"node"`
	UID  types.UID `json:"uid"`  // the Node's UID when the entry was made: a new Node of that name is another node
	Boot string    `json:"boot"` // the node's boot ID when the entry was made
	// Ticket is the place in arrival order (Record.Next when the entry was
	// made); a waiter keeps it when admitted.
	Ticket int64  `json:"ticket"`
	Phase  Phase  `json:"phase,omitempty"` // holders only
	Action string `json:"action,omitempty"`
	Who    string `json:"who,omitempty"` // user (and tty) who asked
	// Since is when the entry was made, by the writer's clock: shown to
	// admins, never compared with another clock.
	Since time.Time `json:"since"`
	// Beat goes up by one with each renewal; Renew is the period (seconds)
	// its writer renews at. Silent for 3 periods, as seen by another
	// process's own clock, is gone (tracker.go).
	Beat  int64 `json:"beat"`
	Renew int64 `json:"renewSeconds"`
	// APITimeout (seconds) is a waiter's apiTimeout, which bounds each of
	// its writes, where the bounds others put on a waiter (waiterSilence,
	// stallAfter) must be longer for it; left out where they cover it
	// (the default apiTimeout), and in holders.
	APITimeout int64 `json:"apiTimeoutSeconds,omitempty"`
	// WasUnschedulable: the node was cordoned (not by this gnsh) when it
	// was admitted, so no cordon of gnsh's is lifted after its boot.
	WasUnschedulable bool `json:"wasUnschedulable,omitempty"`
	// Warned: a GnshSlotHeldLong Event was posted for it (by whichever
	// observer marked it first).
	Warned bool `json:"warned,omitempty"`
	// When is the time of the scheduled shutdown the slot was taken for
	// (shutdown -r +5), nil for one at once: the node agent keeps the slot
	// while logind still has that schedule.
	When *time.Time `json:"when,omitempty"`
	// Run identifies the request (one Acquire) that made the entry: the
	// same node asking again in another request (two admins, a retried
	// task) finds the slot held by someone else's request, which it never
	// frees; the same request finding its own entry (the answer to its
	// write was lost) knows the slot is its own.
	Run string `json:"run,omitempty"`
	// Bypass: the node agent wrote it for a shutdown that bypassed gnsh's
	// commands (systemctl reboot, the power button), before its cordon,
	// whatever the limits (Gate.Bypass): nothing can refuse that shutdown,
	// but every admission counts it from then on. Otherwise a holder like
	// any other (renewed, kept, freed after the boot). A gnsh that does not
	// know the field sees a plain holder, which counts all the same.
	Bypass bool `json:"bypass,omitempty"`
	// Queued: a waiter whose reboot is queued (the node agent carries it,
	// the command that asked has ended): shown by gnsh slots. A gnsh that
	// does not know the field sees a plain waiter, as it is.
	Queued bool `json:"queued,omitempty"`

	// unknown: members of a newer gnsh's entry that this one does not
	// know, written back as read (unknown.go).
	unknown unknown
}

// key identifies one entry over its life: a new boot, a new Node of the
// same name or a new ticket is another entry.
func (e Entry) key() string {
	return fmt.Sprintf("%s/%s/%s/%d", e.Node, e.UID, e.Boot, e.Ticket)
}

// same reports whether o is the same entry as e (key).
func (e Entry) same(o Entry) bool {
	return e.Node == o.Node && e.UID == o.UID && e.Boot == o.Boot && e.Ticket == o.Ticket
}

// renewPeriod is the entry's renewal period (at least a second).
func (e Entry) renewPeriod() time.Duration {
	return time.Duration(max(e.Renew, 1)) * time.Second
}

// Record is the Lease's content.
type Record struct {
	Version int     `json:"version"`
	Next    int64   `json:"next"` // the next ticket
	Holders []Entry `json:"holders"`
	Waiters []Entry `json:"waiters"`

	// unknown: members of a newer gnsh's record that this one does not
	// know, written back as read (unknown.go).
	unknown unknown
}

// NewerError is a record written by a newer gnsh.
type NewerError struct{ Version int }

func (e *NewerError) Error() string {
	return fmt.Sprintf("the slots record is version %d, written by a newer gnsh (this one writes %d): upgrade gnsh on this node", e.Version, Schema)
}

// errBadRecord is a record that cannot be read: not JSON, not a JSON
// object, or an entry that names no node.
var errBadRecord = errors.New("not a valid record")

// Decode reads the record of a Lease. A Lease without one has an empty
// record.
func Decode(l *coordinationv1.Lease) (Record, error) {
	r := Record{Version: Schema}
	s, ok := l.Annotations[Annotation]
	if !ok || strings.TrimSpace(s) == "" {
		return r, nil
	}
	if err := r.UnmarshalJSON([]byte(s)); err != nil {
		return Record{}, fmt.Errorf("the slots record in Lease %s/%s (annotation %s) is %w (%v): whose slots it holds is unknown; "+
			"'%s' (admin credentials) starts a new one", l.Namespace, l.Name, Annotation, errBadRecord, err, ResetCommand)
	}
	if r.Version > Schema {
		return Record{}, &NewerError{r.Version}
	}
	r.Version = Schema
	r.sort()
	return r, nil
}

// Encode writes r into l: the annotation, and the holders' names as the
// Lease's holderIdentity (what `kubectl get lease` shows).
func (r Record) Encode(l *coordinationv1.Lease) {
	r.sort()
	b := r.encode()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[Annotation] = string(b)
	names := make([]string, 0, len(r.Holders))
	for _, h := range r.Holders {
		names = append(names, h.Node)
	}
	if len(names) == 0 {
		l.Spec.HolderIdentity = nil
	} else {
		s := strings.Join(names, ",")
		l.Spec.HolderIdentity = &s
	}
}

func (r *Record) sort() {
	byTicket := func(a, b Entry) int { return cmp.Compare(a.Ticket, b.Ticket) }
	slices.SortStableFunc(r.Holders, byTicket)
	slices.SortStableFunc(r.Waiters, byTicket)
}

// Equal reports whether two records say the same.
func (r Record) Equal(o Record) bool {
	return bytes.Equal(r.encode(), o.encode())
}

func (r Record) clone() Record {
	c := r
	c.Holders = slices.Clone(r.Holders)
	c.Waiters = slices.Clone(r.Waiters)
	return c
}

// Holder is node's holder entry, if any.
func (r Record) Holder(node string) (Entry, bool) {
	for _, h := range r.Holders {
		if h.Node == node {
			return h, true
		}
	}
	return Entry{}, false
}

// Waiter is node's waiter entry, if any.
func (r Record) Waiter(node string) (Entry, bool) {
	for _, w := range r.Waiters {
		if w.Node == node {
			return w, true
		}
	}
	return Entry{}, false
}

// Forget removes node from the holders and the waiters, and returns the
// entries it had (nil for none).
func (r *Record) Forget(node string) (holder, waiter *Entry) {
	if h, ok := r.Holder(node); ok {
		holder = &h
	}
	if w, ok := r.Waiter(node); ok {
		waiter = &w
	}
	r.Holders, r.Waiters = without(r.Holders, node), without(r.Waiters, node)
	return holder, waiter
}

// RemoveWaiter removes node's waiter entry (a queued reboot withdrawn).
func (r *Record) RemoveWaiter(node string) {
	r.Waiters = without(r.Waiters, node)
}

// without returns es without node's entries.
func without(es []Entry, node string) []Entry {
	return slices.DeleteFunc(slices.Clone(es), func(e Entry) bool { return e.Node == node })
}
