package slots

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/gnsh/gnsh/internal/kube"
)

// Event reasons the gate posts on Nodes.
const (
	ReasonWaiting        = "GnshSlotWaiting"
	ReasonTaken          = "GnshSlotTaken"
	ReasonReleased       = "GnshSlotReleased"
	ReasonReclaimed      = "GnshSlotReclaimed"
	ReasonQuorumRefused  = "GnshQuorumRefused"
	ReasonQuorumOverride = "GnshQuorumOverridden"
	ReasonHeldLong       = "GnshSlotHeldLong"
)

// Gate takes, renews and frees slots in one Lease.
type Gate struct {
	C          kubernetes.Interface
	Namespace  string
	Name       string
	Limits     Limits
	Renew      time.Duration // the period this process renews its entry at
	WarnAfter  time.Duration // a holder seen this long gets a Warning Event
	APITimeout time.Duration // bound of each request
	Clock      clock.WithTicker
	// Event posts an Event on a Node, best effort (nil: none).
	Event func(ctx context.Context, node, typ, reason, msg string)
	// Status shows where a waiting node stands; it is called again only
	// when that changes.
	Status func(string)
	// Debug prints a debug line (nil: none).
	Debug func(string)
	// Kubeconfig is the kubeconfig the gate's client was made from, for
	// the lines saying its credentials are refused ("": the gate's
	// kubeconfig, unnamed).
	Kubeconfig string
	// senseFirst is the first pause's bound of a node beyond the full
	// queue (0: senseWindow; tests shorten it).
	senseFirst time.Duration
}

func (g *Gate) clock() clock.WithTicker {
	if g.Clock == nil {
		return clock.RealClock{}
	}
	return g.Clock
}

func (g *Gate) debugf(format string, args ...any) {
	if g.Debug != nil {
		g.Debug(fmt.Sprintf(format, args...))
	}
}

func (g *Gate) event(ctx context.Context, node, typ, reason, format string, args ...any) {
	if g.Event != nil {
		g.Event(ctx, node, typ, reason, fmt.Sprintf(format, args...))
	}
}

// Where names the Lease: NAMESPACE/NAME.
func (g *Gate) Where() string { return g.Namespace + "/" + g.Name }

// UnavailableError: the gate cannot be used (no permission, no namespace,
// a record of a newer gnsh, the API server failing).
type UnavailableError struct {
	Where string
	Err   error
	// Kubeconfig is the gate's kubeconfig (Gate.Kubeconfig), named in the
	// 401 and 403 lines; "" names it by where gnsh looks for it.
	Kubeconfig string
}

// Unavailable is err as an *UnavailableError of this gate, naming its
// kubeconfig.
func (g *Gate) Unavailable(err error) *UnavailableError {
	return &UnavailableError{Where: g.Where(), Err: err, Kubeconfig: g.Kubeconfig}
}

// GnshKubeconfigUnnamed names the gate's kubeconfig when the gate was not
// told which it is.
const GnshKubeconfigUnnamed = "/etc/gnsh/kubeconfig (or slots.kubeconfig)"

// kubeconfig names the gate's kubeconfig for a line.
func (e *UnavailableError) kubeconfig() string {
	if e.Kubeconfig != "" {
		return e.Kubeconfig
	}
	return GnshKubeconfigUnnamed
}

func (e *UnavailableError) Error() string {
	var newer *NewerError
	switch {
	case errors.As(e.Err, &newer):
		return newer.Error()
	case Broken(e.Err):
		return e.Err.Error() // it names the Lease, and the reset
	case apierrors.IsForbidden(e.Err):
		return fmt.Sprintf("these credentials may not use the Lease %s (%s): the gate needs gnsh's own identity, a token bound to this node's Node "+
			"in %s (gnsh's rbac.yaml applied; the role or `gnsh token install` puts it there), not the kubelet's", e.Where, reasonOf(e.Err), e.kubeconfig())
	case apierrors.IsUnauthorized(e.Err):
		return fmt.Sprintf("the API server refuses these credentials (401 Unauthorized) for the Lease %s: the gate's token in %s "+
			"expired or was revoked (its Node deleted?); the node agent renews it, and gnsh status says why it could not: "+
			"re-run the playbook or `gnsh token install`", e.Where, e.kubeconfig())
	case apierrors.IsNotFound(e.Err):
		return fmt.Sprintf("the Lease %s cannot be made (%s): apply gnsh's rbac.yaml, which creates its namespace", e.Where, reasonOf(e.Err))
	}
	return fmt.Sprintf("the Lease %s: %v", e.Where, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

func reasonOf(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Message != "" {
		return st.Status().Message
	}
	return err.Error()
}

// WaitError: no slot came within the wait.
type WaitError struct {
	Waited time.Duration
	Blocks []Block // what held it back when last decided
	Err    error   // the API server's last failure, if it failed at the end
	// Place and Ticket: a request that keeps its place (Request.KeepPlace)
	// still stands in the queue there (Place 0: it has none, the queue
	// being full; Ticket 0: none given yet).
	Place  int
	Ticket int64
}

func (e *WaitError) Error() string {
	var newer *NewerError
	if errors.As(e.Err, &newer) || errors.Is(e.Err, errBadRecord) {
		return "no reboot slot: " + e.Err.Error()
	}
	var s []string
	for _, b := range e.Blocks {
		s = append(s, b.String())
	}
	msg := fmt.Sprintf("no reboot slot within %s", e.Waited.Round(time.Second))
	if len(s) > 0 {
		msg += ": " + strings.Join(s, "; ")
	}
	if e.Err != nil {
		msg += fmt.Sprintf(" (the Lease's API server last answered: %v)", e.Err)
	}
	return msg
}

// Request is a node asking for a slot.
type Request struct {
	Ask
	Self NodeState     // the asking node as it just read its Node
	Wait time.Duration // how long it may wait
	// KeepPlace: when the wait runs out, its waiter entry is left in the
	// queue (a queued reboot: the node agent asks on in the same boot,
	// and keeps the place), and the WaitError says where it stands.
	// Others drop it once it is no longer renewed.
	KeepPlace bool
	// StayOnCancel: its waiter entry stays when ctx ends too (the node
	// agent's run for a queued reboot: an agent restarting keeps the
	// place; a withdrawal removes the entry itself).
	StayOnCancel bool
	// Silent: no waiting line (Status) and no GnshSlotWaiting Event: its
	// caller says what became of it (a reboot queued at once).
	Silent bool
	// Stands, if set, reports whether the request still stands (the node
	// agent's run for a queued reboot: the queue file still holds it).
	// It is asked before a write that would put back its waiter entry
	// (or take a slot) when the Lease, as just read, holds no entry of
	// this request: shutdown -c removes the request first and its entry
	// next, so a request whose entry is gone and that no longer stands
	// was withdrawn, and Acquire ends with ErrWithdrawn, writing nothing.
	// An entry dropped by others (not renewed in time) is written back
	// in its place, the request standing.
	Stands func() bool
}

// snapshot is one state of the Lease and the cluster.
type snapshot struct {
	lease *coordinationv1.Lease // nil: there is none yet
	rec   Record
	world World
	// full: the queue is full and this node is not in the record: read
	// without the Nodes (world is empty), it can only wait. room: read
	// so too, by a node beyond the full queue, and a place is free.
	full, room bool
}

// Acquire takes a slot for r's node, waiting in arrival order while the
// limits hold it back (at most r.Wait: then a *WaitError). Cancelling ctx
// withdraws its place. A *UnavailableError says the gate cannot be used.
// The first attempt reads the Lease, then the Nodes, and writes once; only
// a node that must wait watches them. A node that finds the queue full
// (MaxWaiters) while the holders fill the cluster's limit reads and
// watches the Lease alone until a place frees.
func (g *Gate) Acquire(ctx context.Context, r Request) (*Slot, Verdict, error) {
	if r.Entry.Run == "" {
		r.Entry.Run = newRun()
	}
	if r.Entry.APITimeout == 0 { // its waiter entry says so where it matters (Decide)
		r.Entry.APITimeout = int64((g.APITimeout + time.Second - 1) / time.Second)
	}
	a := &acquirer{g: g, r: r, tr: &Tracker{Clock: g.clock()}, start: g.clock().Now(), kick: make(chan struct{}, 1)}
	s, v, err := a.run(ctx)
	a.stopWatches()
	return s, v, err
}

type acquirer struct {
	g     *Gate
	r     Request
	tr    *Tracker
	start time.Time

	lastBeat  time.Time // when its waiter entry was last renewed
	answered  bool      // the gate answered once: its failures from then on are waited out
	wrote     bool      // a write of the record succeeded: a 403 or 404 from then on is waited out too
	early     int       // failures before it answered (earlyTries at most)
	lastState string
	waited    bool // it waited (told, Event posted)
	quorum    bool // GnshQuorumRefused posted

	watching  bool
	stopWatch context.CancelFunc
	kick      chan struct{}
	leases    cache.Store
	nodes     cache.Store
	etcd      []Member
	etcdKnown bool
	etcdAt    time.Time
	// Whether this node hosts an etcd member though its labels do not say
	// so (selfHosts), once known (selfKnown): read once per request
	// (checkSelf, or any read of the members).
	selfHosts bool
	selfKnown bool
	selfAt    time.Time
	fresh     *coordinationv1.Lease // read after a conflict: newer than the watch's
	// seedLease and seedNodes are the Lease and the Nodes as last read
	// before the watches start: their first list (no request), which
	// they watch on from.
	seedLease *coordinationv1.Lease
	seedNodes *corev1.NodeList
	// hearts follows the kubelet heartbeat Leases of the holders that
	// have gone silent, by node (the given-up rule needs them).
	hearts map[string]heartWatch
	// nodeStates are the Nodes' states as last built from the watch;
	// nodesDirty says the watch brought a change since.
	nodeStates map[string]NodeState
	nodesDirty atomic.Bool
	wctx       context.Context    // the watches' context
	stopNodes  context.CancelFunc // ends the Node watch watchNodes started
	place      int                // its place in the queue at its last decision (0: none)
	// full: its last decision found the queue full (Unrecorded), or its
	// join takes the last place: its next write is spread in time
	// (sense), sensed once that pause is over; senseWindow is the
	// pause's bound, doubled by each conflict; decided is when it last
	// decided.
	full        bool
	sensed      bool
	senseWindow time.Duration
	decided     time.Time
}

// heartWatch watches one kubelet Lease.
type heartWatch struct {
	store cache.Store
	stop  context.CancelFunc
}

// newRun is a random name for one request (Entry.Run).
func newRun() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

func (a *acquirer) run(ctx context.Context) (*Slot, Verdict, error) {
	g := a.g
	deadline := a.start.Add(a.r.Wait)
	backoff := 10 * time.Millisecond
	tick := g.clock().NewTicker(time.Second)
	defer tick.Stop()
	var v Verdict
	late := 0 // conflicts once the wait ran out
	for {
		if a.full && !a.sensed && a.watching {
			// A node beyond the full queue decides at most every
			// fullEvery, however often the record changes: a crowd of a
			// thousand would otherwise decide a thousand times for each
			// write, each over every Node.
			if err := a.sleep(ctx, min(fullEvery-a.g.clock().Since(a.decided), deadline.Sub(a.g.clock().Now()))); err != nil {
				return nil, v, a.fail(ctx, err)
			}
		}
		snap, err := a.read(ctx)
		if err != nil {
			if err := a.trouble(ctx, err, deadline, v); err != nil {
				return nil, v, err
			}
			continue
		}
		a.answered = true
		if snap.room && g.clock().Now().Before(deadline) {
			// A place freed while it waited beyond the full queue,
			// from the Lease alone: its random pause first (sense),
			// the Nodes then read only if the place is still free.
			if err := a.sensePause(ctx, deadline, v); err != nil {
				return nil, v, err
			}
			continue
		}
		if snap.full || snap.room {
			// The queue full, this node not in it: it waits, from the
			// Lease alone (no Node read yet), until a place may be had.
			a.decided = g.clock().Now()
			v = Verdict{Record: snap.rec, Unrecorded: true, Blocks: []Block{{Limit: LimitQueueFull, Max: len(snap.rec.Waiters)}}}
			a.full, a.place, a.sensed = true, 0, false
		} else {
			a.decided = g.clock().Now()
			v = a.decide(ctx, snap)
			a.place = v.Place
			a.tr.Fits(v.Fit)
			if v.Changed && !v.Admitted && !v.Unrecorded && a.lastBeat.IsZero() && len(v.Record.Waiters) >= MaxWaiters {
				// Its join would take the queue's last place, which the
				// nodes beyond the full queue may be waiting for: it
				// waits its random moment as they do, or a stream of
				// newcomers would take every freed place ahead of them.
				a.full = true
			}
			if v.Changed && a.full && !a.sensed && g.clock().Now().Before(deadline) {
				// It found no place before and may write now (a place or a
				// slot came free): so may every node beyond the full queue,
				// all seeing the same write. Each first waits a random
				// moment and decides again from what the watch then shows:
				// the first to end writes, and the others mostly see its
				// write before theirs (it took the place) instead of all
				// conflicting.
				if !a.watching {
					if err := a.watch(ctx); err != nil {
						if err := a.trouble(ctx, err, deadline, v); err != nil {
							return nil, v, err
						}
						continue
					}
				}
				if err := a.sensePause(ctx, deadline, v); err != nil {
					return nil, v, err
				}
				continue
			}
			if v.Unrecorded {
				a.full = true
				if !v.Changed {
					a.sensed = false // the place went to another: sense again next time
					if a.stopNodes != nil && len(v.Record.Waiters) >= MaxWaiters && len(v.Record.Holders) >= g.Limits.Max {
						// Back to the Lease alone, as before the place
						// freed (only where the Lease alone says it
						// must wait: else it would list the Nodes again
						// at its next decision).
						a.stopNodes()
						a.stopNodes, a.nodes, a.nodeStates = nil, nil, nil
					}
				}
			}
			if w, ok := snap.rec.Waiter(a.r.Entry.Node); ok && w.UID == a.r.Entry.UID && w.Boot == a.r.Entry.Boot {
				// Its waiter entry stands (its write landed, whether or not
				// the answer came back): renewed from now on, and its place
				// kept.
				if a.lastBeat.IsZero() {
					a.lastBeat = g.clock().Now()
				}
				a.r.Ask.Ticket, a.r.Ask.HasTicket = w.Ticket, true
			}
			if !v.Admitted && g.clock().Since(a.lastBeat) >= WaiterPeriod(g.Renew) && v.Self.Ticket < v.Record.Next {
				// Renew its waiter entry (its first write counts as one).
				for i := range v.Record.Waiters {
					if v.Record.Waiters[i].Node == a.r.Entry.Node && !a.lastBeat.IsZero() {
						v.Record.Waiters[i].Beat++
						v.Changed = true
					}
				}
			}
			if v.Changed && a.withdrawnMeanwhile(snap) {
				// Withdrawn (shutdown -c) before its ctx says so: its
				// entry is gone, and is not written back.
				return nil, v, ErrWithdrawn
			}
			if v.Changed {
				err := a.write(ctx, snap, v)
				if err == nil && !v.Admitted && !v.Unrecorded {
					// Its place: kept if others ever drop it by mistake.
					a.r.Ask.Ticket, a.r.Ask.HasTicket = v.Self.Ticket, true
				}
				switch {
				case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || snap.lease != nil && apierrors.IsNotFound(err):
					// Another node wrote first (or deleted the Lease: the
					// reset the README names; the next decision creates it
					// again): decide again from fresh state,
					// from the watches from now on (a re-list of the Nodes
					// after each conflict would be a storm when many ask at
					// once), the Lease read again.
					a.fresh = nil
					if a.sensed {
						// Another node beyond the full queue wrote in the
						// same moment: a wider pause next time.
						a.senseWindow = min(2*a.senseWindow, maxSenseWindow)
						a.sensed = false
					}
					if !g.clock().Now().Before(deadline) {
						// A conflict says only that another node wrote
						// first (a routine renewal, often), never that there
						// is no slot: even with no wait left (the agent's
						// "too near" path asks with none) it is decided again
						// from fresh state, a few times and for at most
						// apiTimeout past the wait.
						// A crowd that asked at once gets in one write at a
						// time: the more already in the queue, the more
						// tries the last of them gets (a queued request
						// would otherwise lose its place to a full-looking
						// queue); still within apiTimeout.
						late++
						if late > conflictTries+len(v.Record.Waiters) || g.clock().Since(deadline) >= g.APITimeout {
							return nil, v, a.timeUp(v, err)
						}
					}
					// Not in the record yet, with time to wait: one of a
					// crowd that asked at once, most likely (a lone
					// node's write seldom conflicts): their next writes
					// spread over crowdBackoff at least, or most of them
					// would conflict again. A request with little or no
					// wait left (the agent's "too near" path, a drain
					// ahead with little budget) keeps the short pauses.
					left := deadline.Sub(g.clock().Now())
					first := a.lastBeat.IsZero() && left >= 2*crowdBackoff
					if first {
						backoff = max(backoff, crowdBackoff)
					}
					pause := jitter(backoff)
					if left > 0 {
						pause = min(pause, left)
					} else {
						pause = min(pause, maxBackoff)
					}
					if err := a.sleep(ctx, pause); err != nil {
						return nil, v, a.fail(ctx, err)
					}
					if first {
						// Joining the queue (or admitted at its first ask),
						// as a crowd does that asked at once: spread wider,
						// the wider the longer the queue (its place is taken
						// when its write lands, and it would wait anyway;
						// the writes that admit and free go first).
						backoff = min(2*backoff, max(maxJoinBackoff, time.Duration(len(v.Record.Waiters))*joinBackoffPerWaiter))
					} else {
						backoff = min(2*backoff, maxBackoff)
					}
					if !a.watching && late > 0 {
						continue // no wait left to watch in: read again
					}
					if !a.watching {
						if err := a.watch(ctx); err != nil {
							if err := a.trouble(ctx, err, deadline, v); err != nil {
								return nil, v, err
							}
							continue
						}
					}
					a.awaitNewer(ctx, snap.lease, err)
					continue
				case err != nil:
					if err := a.trouble(ctx, err, deadline, v); err != nil {
						return nil, v, err
					}
					continue
				}
				backoff = 10 * time.Millisecond
				a.wrote = true
				if !v.Unrecorded {
					a.full, a.sensed = false, false
				}
				if !v.Admitted && !v.Unrecorded {
					a.lastBeat = g.clock().Now()
				}
				a.report(ctx, v)
			}
			if v.Admitted {
				if v.Changed || !v.Already {
					g.event(ctx, a.r.Entry.Node, "Normal", ReasonTaken, "Took a reboot slot of %s for %s requested by %s%s",
						g.Where(), a.r.Entry.Action, a.r.Entry.Who, a.waitedFor())
				}
				if a.r.ForceQuorum && (a.r.Self.ControlPlane || v.Guarded) {
					g.event(ctx, a.r.Entry.Node, "Warning", ReasonQuorumOverride, "%s requested by %s with --force-quorum: the etcd quorum guard is overridden", a.r.Entry.Action, a.r.Entry.Who)
				}
				s := g.hold(v.Self, v.Already)
				s.when = a.r.Entry.When
				return s, v, nil
			}
		}
		a.tell(ctx, v)
		if !g.clock().Now().Before(deadline) {
			return nil, v, a.timeUp(v, nil)
		}
		if !a.watching {
			if err := a.watch(ctx); err != nil {
				if err := a.trouble(ctx, err, deadline, v); err != nil {
					return nil, v, err
				}
				continue
			}
		}
		left := g.clock().NewTimer(deadline.Sub(g.clock().Now()))
		select {
		case <-ctx.Done():
			left.Stop()
			a.cancelled(ctx)
			return nil, v, ctx.Err()
		case <-a.kick:
		case <-tick.C():
		case <-left.C():
		}
		left.Stop()
	}
}

// timeUp ends a wait that ran out (v its last decision, err the API
// server's last failure, if any): the WaitError, its waiter entry
// withdrawn, or kept (KeepPlace) where it stands.
func (a *acquirer) timeUp(v Verdict, err error) *WaitError {
	we := &WaitError{Waited: a.g.clock().Since(a.start), Blocks: v.Blocks, Err: err}
	if !a.r.KeepPlace {
		a.withdraw()
		return we
	}
	if a.r.HasTicket {
		we.Ticket = a.r.Ticket
	}
	if !a.lastBeat.IsZero() {
		we.Place = max(a.place, 1)
	}
	return we
}

func (a *acquirer) waitedFor() string {
	if !a.waited {
		return ""
	}
	return fmt.Sprintf(" after waiting %s", a.g.clock().Since(a.start).Round(time.Second))
}

// trouble decides what an error from the API server means: nil to try
// again (after a pause), else what Acquire returns. A gate that never
// answered, or whose first answer is that it cannot be used (403, 404), is
// unavailable (slots.gate decides whether the shutdown goes on). A record
// that cannot be read (a newer gnsh's, or broken) refuses. A gate that
// answered and then fails (5xx, 429, a timeout, and also 403 or 404: a
// RoleBinding or the namespace removed meanwhile) is tried again until the
// wait runs out, and then refuses: a node that was told to wait never goes
// on because an answer was lost.
func (a *acquirer) trouble(ctx context.Context, err error, deadline time.Time, v Verdict) error {
	var newer *NewerError
	switch {
	case ctx.Err() != nil:
		return a.fail(ctx, err)
	case errors.As(err, &newer), errors.Is(err, errBadRecord):
		// The Lease is there but its record cannot be read: whose slots
		// it holds is unknown, so no limit can be kept. A refusal, never
		// "unavailable" (which the optional gate goes past).
		return &WaitError{Waited: a.g.clock().Since(a.start), Blocks: v.Blocks, Err: err}
	case !a.wrote && !a.waited && (apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err)):
		// Refused before it ever wrote or was told to wait: these
		// credentials cannot use the gate (401: not accepted at all, the
		// gate's token expired or revoked; no place was taken, nobody
		// was told to wait). One told to wait without a place (the
		// queue full) waits it out like one that wrote.
		return a.fail(ctx, err)
	case !a.answered && !apierrors.IsTooManyRequests(err):
		// A 429 is an answer: the API server is there and busy (its
		// limit of requests in flight, as a fleet asking at once makes
		// it), so it is waited out until the wait ends, and then
		// refuses; never "unavailable", which the optional gate goes
		// past. Never answered yet: a moment's failure (a 5xx as etcd changes
		// leader, which control-plane reboots cause) is tried again a
		// few times, for at most 2×apiTimeout, before the gate counts as
		// unavailable (and the optional gate lets the shutdown go on).
		a.early++
		if a.early >= earlyTries || a.g.clock().Since(a.start) >= 2*a.g.APITimeout || !a.g.clock().Now().Before(deadline) {
			return a.fail(ctx, err)
		}
	case !a.g.clock().Now().Before(deadline):
		return a.timeUp(v, err)
	}
	a.g.debugf("reboot slots: %v; trying again", err)
	if err := a.sleep(ctx, min(time.Second, deadline.Sub(a.g.clock().Now()))); err != nil {
		return a.fail(ctx, err)
	}
	return nil
}

// fail turns an error into what Acquire returns.
func (a *acquirer) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		a.cancelled(ctx)
		return ctx.Err()
	}
	// Its waiter entry, if any, is left: others drop it once it is no
	// longer renewed (a withdrawal would wait on the failing server).
	return a.g.Unavailable(err)
}

// earlyTries is how many reads a gate that never answered gets before it
// counts as unavailable.
const earlyTries = 3

// conflictTries is how many conflicts a request whose wait ran out
// decides again after (each from fresh state), plus one per waiter
// already in the record, within apiTimeout: a crowd that always writes
// first still ends it.
const conflictTries = 5

// maxBackoff bounds the pause after a conflict (doubling from 10 ms, with
// jitter): long enough to spread a crowd, short enough that the head of the
// queue is not kept waiting by it.
const maxBackoff = 250 * time.Millisecond

// crowdBackoff is the least pause after a conflict of a node not yet in
// the record: a hundred nodes asking at once spread over it write a few
// at a time instead of all again.
const crowdBackoff = 500 * time.Millisecond

// maxJoinBackoff bounds the pause after a conflict of a node joining the
// queue (it must wait, and is not in the record yet): a hundred nodes
// asking at once need more than maxBackoff to write one after the other
// rather than all again after each write that landed.
const maxJoinBackoff = 8 * time.Second

// joinBackoffPerWaiter widens maxJoinBackoff for a long queue: a node
// joining a queue of 500 would wait behind them for far longer than 50 s.
const joinBackoffPerWaiter = 100 * time.Millisecond

func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d) }

// sensePause waits its random pause (sense), at most until deadline, and
// marks it sensed: its next decision may write. A wait that ends in the
// pause refuses without writing (a join now would be withdrawn at once),
// with v's blocks; a cancelled ctx ends it as fail does.
func (a *acquirer) sensePause(ctx context.Context, deadline time.Time, v Verdict) error {
	g := a.g
	if err := a.sleep(ctx, min(a.sense(), deadline.Sub(g.clock().Now()))); err != nil {
		return a.fail(ctx, err)
	}
	if !g.clock().Now().Before(deadline) {
		return a.timeUp(v, nil)
	}
	a.sensed = true
	return nil
}

// sense is the random pause of a node beyond the full queue before it
// writes: up to its window, which starts at senseWindow and is doubled by
// each conflict. No order is kept beyond the queue. (A window that
// narrowed the longer a node waited, to let the older go first, made the
// thousand-node bench conflict half as much again: a crowd that arrived
// together ages together.)
func (a *acquirer) sense() time.Duration {
	if a.senseWindow == 0 {
		a.senseWindow = cmp.Or(a.g.senseFirst, senseWindow)
	}
	return rand.N(a.senseWindow)
}

// senseWindow bounds the first pause of a node beyond the full queue
// before it writes: with a crowd of a thousand beyond it, the first of
// them writes within milliseconds, and few others before they see that
// write. The queue itself (MaxWaiters) is served meanwhile.
const senseWindow = 8 * time.Second

// maxSenseWindow bounds that pause however often it conflicted.
const maxSenseWindow = 64 * time.Second

// fullEvery is how often at most a node beyond the full queue decides.
const fullEvery = time.Second

func (a *acquirer) sleep(ctx context.Context, d time.Duration) error {
	t := a.g.clock().NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// decide makes the decision for one snapshot; a holder or waiter whose
// Node seems gone is checked with a fresh read first (a watch can lag).
func (a *acquirer) decide(ctx context.Context, snap snapshot) Verdict {
	a.tr.Observe(snap.rec, snap.world)
	v := Decide(snap.rec, snap.world, a.g.Limits, a.tr, a.r.Ask)
	var recheck []string
	for _, f := range append(v.Reclaimed[:len(v.Reclaimed):len(v.Reclaimed)], v.Dropped...) {
		if f.Why == WhyGone {
			recheck = append(recheck, f.Entry.Node)
		}
	}
	if len(recheck) == 0 {
		return v
	}
	for _, name := range recheck {
		if name == a.r.Self.Name {
			continue // its own Node is the caller's fresh read
		}
		rctx, cancel := context.WithTimeout(ctx, a.g.APITimeout)
		n, err := a.g.C.CoreV1().Nodes().Get(rctx, name, metav1.GetOptions{})
		cancel()
		if err == nil {
			snap.world.Nodes[name] = StateOf(n)
		} else if !apierrors.IsNotFound(err) {
			// Not sure: keep it, and so count it.
			snap.world.Nodes[name] = NodeState{Name: name, UID: uidOf(snap.rec, name), Unknown: true}
		}
	}
	return Decide(snap.rec, snap.world, a.g.Limits, a.tr, a.r.Ask)
}

func uidOf(rec Record, node string) (uid types.UID) {
	if h, ok := rec.Holder(node); ok {
		return h.UID
	}
	w, _ := rec.Waiter(node)
	return w.UID
}

// report posts the Events of a decision written: slots freed by it.
func (a *acquirer) report(ctx context.Context, v Verdict) {
	for _, f := range v.Reclaimed {
		a.g.event(ctx, f.Entry.Node, "Warning", ReasonReclaimed, "Reboot slot of %s (%s by %s) freed by gnsh on %s: %s",
			f.Entry.Node, f.Entry.Action, f.Entry.Who, a.r.Entry.Node, f.Why)
		a.g.debugf("freed the slot of %s: %s", f.Entry.Node, f.Why)
	}
	for _, f := range v.Dropped {
		a.g.debugf("dropped %s from the queue: %s", f.Entry.Node, f.Why)
	}
}

// tell says why it waits (when that changes), posts GnshSlotWaiting
// once, GnshQuorumRefused once, and a Warning on each holder seen longer
// than WarnAfter.
func (a *acquirer) tell(ctx context.Context, v Verdict) {
	g := a.g
	var why []string
	quorum := false
	for _, b := range v.Blocks {
		why = append(why, b.String())
		quorum = quorum || b.Limit == LimitQuorum
	}
	place := fmt.Sprintf("place %d in the queue of %s", v.Place, g.Where())
	if v.Unrecorded {
		place = "no place yet in the full queue of " + g.Where()
	}
	state := fmt.Sprintf("waiting for a reboot slot (%s): %s", place, strings.Join(why, "; "))
	if a.r.Silent {
		a.lastState = state
	}
	if state != a.lastState && g.Status != nil {
		g.Status(state)
	}
	a.lastState = state
	if !a.waited && !a.r.Silent {
		a.waited = true
		place = fmt.Sprintf("place %d", v.Place)
		if v.Unrecorded {
			place = "no place yet: the queue is full"
		}
		g.event(ctx, a.r.Entry.Node, "Normal", ReasonWaiting, "%s requested by %s waits for a reboot slot (%s): %s",
			a.r.Entry.Action, a.r.Entry.Who, place, strings.Join(why, "; "))
	}
	if quorum && !a.quorum {
		a.quorum = true
		g.event(ctx, a.r.Entry.Node, "Warning", ReasonQuorumRefused, "%s requested by %s held back: %s; --force-quorum overrides",
			a.r.Entry.Action, a.r.Entry.Who, strings.Join(why, "; "))
	}
	if g.WarnAfter > 0 && v.Place == 1 {
		for _, h := range a.tr.Overdue(v.Record, g.WarnAfter) {
			if !g.warnHeldLong(ctx, h, a.r.Entry.Node) {
				a.tr.Unwarn(h)
			}
		}
	}

}

// ErrWithdrawn is the cause (context.WithCancelCause) that ends the wait
// of a queued reboot withdrawn: its waiter entry goes, StayOnCancel or not.
// Acquire returns it too for a request found withdrawn (Request.Stands).
var ErrWithdrawn = errors.New("the queued request was withdrawn")

// withdrawnMeanwhile reports whether the request no longer stands
// (Request.Stands) while snap, as read, holds no entry of it: a write
// now would put back the place of a request withdrawn. Stands is asked
// after the read: a read that no longer shows the entry came after
// shutdown -c removed it, and so after it removed the request.
func (a *acquirer) withdrawnMeanwhile(snap snapshot) bool {
	if a.r.Stands == nil {
		return false
	}
	me := a.r.Entry
	if w, ok := snap.rec.Waiter(me.Node); ok && w.UID == me.UID && w.Boot == me.Boot {
		return false
	}
	if h, ok := snap.rec.Holder(me.Node); ok && h.UID == me.UID && h.Boot == me.Boot && h.Run == me.Run {
		return false
	}
	return !a.r.Stands()
}

// cancelled withdraws the request whose ctx ended, unless it stays
// (StayOnCancel, and not withdrawn: the node agent stopping; others drop
// its entry once it is no longer renewed, or the same request, asked
// again, renews it).
func (a *acquirer) cancelled(ctx context.Context) {
	if !a.r.StayOnCancel || errors.Is(context.Cause(ctx), ErrWithdrawn) {
		a.withdraw()
	}
}

// withdraw removes this node's waiter entry, and a holder entry of this
// very request (SIGINT, the wait ran out), a bounded best effort: an entry left behind is dropped by others once it
// is no longer renewed.
func (a *acquirer) withdraw() {
	if !a.answered {
		return // it never reached the Lease: it wrote nothing
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*a.g.APITimeout)
	defer cancel()
	me := a.r.Entry
	_, err := a.g.Update(ctx, func(rec *Record) bool {
		changed := false
		if w, ok := rec.Waiter(me.Node); ok && w.UID == me.UID && w.Boot == me.Boot {
			rec.Waiters = without(rec.Waiters, me.Node)
			changed = true
		}
		// Admitted by a write whose answer never came (the signal came
		// first): that slot is this request's, and it goes too.
		if h, ok := rec.Holder(me.Node); ok && h.UID == me.UID && h.Boot == me.Boot && h.Run == me.Run {
			rec.Holders = without(rec.Holders, me.Node)
			changed = true
		}
		return changed
	})
	if err != nil {
		a.g.debugf("withdrawing from the queue of %s: %v", a.g.Where(), err)
	}
}

// read returns the current state: from the watches once they run, else
// read now.
func (a *acquirer) read(ctx context.Context) (snapshot, error) {
	g := a.g
	var snap snapshot
	var nodes []corev1.Node
	if a.watching {
		snap.lease = a.leaseNow()
		if a.nodes == nil {
			// Watching the Lease alone (the queue was full): on while
			// it is, the Nodes read only once a place may be had
			// (after its random pause: run).
			if full, err := a.fullWithout(&snap); full || err != nil || snap.room && !a.sensed {
				return snap, err
			}
			snap.room = false
			if err := a.watchNodes(ctx); err != nil {
				return snap, err
			}
		}
		if a.nodesDirty.Swap(false) || a.nodeStates == nil {
			// The Nodes' states, again only when the watch brought a
			// change: a crowd of waiters decides far more often than
			// Nodes change, each over every Node.
			a.nodeStates = map[string]NodeState{}
			for _, o := range a.nodes.List() {
				st := StateOf(o.(*corev1.Node))
				a.nodeStates[st.Name] = st
			}
		}
	} else {
		// The Lease first: a node that finds the queue full reads no
		// Node (a thousand asking at once would each list them all,
		// most of them only to wait).
		l, lerr := g.get(ctx)
		if lerr != nil {
			return snap, lerr
		}
		snap.lease = l
		if full, err := a.fullWithout(&snap); full || err != nil {
			a.seedLease = l
			return snap, err
		}
		lctx, cancel := context.WithTimeout(ctx, g.APITimeout)
		// From the API server's cache (resourceVersion 0): a consistent
		// list waits about 100 ms for the cache to catch up, which would
		// be most of the gate's cost. The Nodes' states are as fresh as a
		// watch's anyway; what must be exact is its own Node (the
		// caller's fresh read) and the Lease (compare-and-swap), and a
		// holder or waiter missing from the list is read again.
		nl, err := g.C.CoreV1().Nodes().List(lctx, metav1.ListOptions{ResourceVersion: "0"})
		cancel()
		if err != nil {
			return snap, err
		}
		snap.lease, nodes = l, nl.Items
		a.seedLease, a.seedNodes = l, nl
	}
	snap.world.Nodes = make(map[string]NodeState, len(nodes)+len(a.nodeStates)+1)
	if a.watching {
		for name, st := range a.nodeStates {
			snap.world.Nodes[name] = st
		}
	}
	for i := range nodes {
		s := StateOf(&nodes[i])
		snap.world.Nodes[s.Name] = s
	}
	// Its own Node as it just read it, until the watch has a newer one.
	if cur, ok := snap.world.Nodes[a.r.Self.Name]; !a.watching || !ok || cur.UID != a.r.Self.UID {
		snap.world.Nodes[a.r.Self.Name] = a.r.Self
	}
	snap.rec = Record{Version: Schema}
	if snap.lease != nil {
		rec, err := Decode(snap.lease)
		if err != nil {
			return snap, err
		}
		snap.rec = rec
	}
	if a.watching {
		if a.full || a.place == 0 {
			// Only the queue's nodes apply the given-up rule (32 at
			// most): a thousand nodes beyond it, or joining, would
			// each watch the heartbeat of every holder that goes
			// quiet, most when the API server is slowest to take
			// their releases.
			a.followHearts(ctx, Record{})
		} else {
			a.followHearts(ctx, snap.rec)
		}
		snap.world.Heartbeats = a.heartbeats()
	}
	if a.needEtcd(ctx, snap) {
		a.readEtcd(ctx)
		if a.etcdKnown {
			snap.world.setEtcd(a.etcd)
		}
	}
	// A node whose labels do not make it guarded but that hosts an etcd
	// pod is guarded (setEtcd marks it when the members are known); so is
	// one that could not learn whether it does: in doubt, guarded, and its
	// quorum unknown holds it back until the pods can be read.
	if s, ok := snap.world.Nodes[a.r.Self.Name]; ok && !s.ControlPlane && (a.selfHosts || !a.selfKnown) {
		s.ControlPlane = true
		snap.world.Nodes[s.Name] = s
	}
	return snap, nil
}

// fullWithout decodes snap's Lease into snap.rec and reports whether the
// queue is full without this node in the record (it can only wait:
// snap.full). It follows the waiters' renewals meanwhile: a queue with a
// waiter silent past its bound (dead, most likely) is not full to it,
// for only a decision over the Nodes drops that waiter (and its own,
// with what it observed, does at once).
func (a *acquirer) fullWithout(snap *snapshot) (bool, error) {
	snap.rec = Record{Version: Schema}
	if snap.lease == nil {
		return false, nil
	}
	rec, err := Decode(snap.lease)
	if err != nil {
		return false, err
	}
	snap.rec = rec
	me := a.r.Entry.Node
	_, waits := rec.Waiter(me)
	_, holds := rec.Holder(me)
	if waits || holds || len(rec.Holders) < a.g.Limits.Max {
		// In the record, or a slot may be free (the cluster's limit
		// not reached by the holders alone): a decision over the
		// Nodes, which may admit it beyond a full queue.
		return false, nil
	}
	if len(rec.Waiters) < MaxWaiters {
		if a.full && a.nodes == nil {
			// A place is free: it may join once its random pause is
			// over (run), and reads the Nodes only then.
			snap.room = true
		}
		return false, nil
	}
	// Renewals only: without the Nodes nothing else it observes counts
	// (no holder settles, no boot is known), as for a node just started.
	a.tr.Observe(rec, World{})
	for _, w := range rec.Waiters {
		if a.tr.Silent(w) >= waiterSilence(w) {
			return false, nil
		}
	}
	snap.full = true
	return true, nil
}

// needEtcd says whether this decision needs the etcd members: this node
// is guarded (a control-plane node by its labels, or one hosting an etcd
// pod, or one that could not find out: the quorum guard), or a guarded
// holder is back on a new boot and Ready (is it settled? its etcd member
// must be Ready). Whether a node not labelled so hosts an etcd pod is
// read once per request (checkSelf: the pods of kube-system on this node
// alone); a worker with no holder to judge lists no other etcd pod; it
// leaves earlier guarded waiters their place (Decide).
func (a *acquirer) needEtcd(ctx context.Context, snap snapshot) bool {
	if a.r.Self.ControlPlane {
		return true
	}
	a.checkSelf(ctx)
	if a.selfHosts || !a.selfKnown {
		return true
	}
	for _, h := range snap.rec.Holders {
		n, ok := snap.world.Nodes[h.Node]
		if ok && n.ControlPlane && n.UID == h.UID && n.Ready && n.Boot != "" && n.Boot != h.Boot {
			return true
		}
	}
	return false
}

// readEtcd lists the etcd members (static pods etcd-* in kube-system), at
// most every etcdEvery. Members that cannot be listed are unknown, which
// holds a control-plane node back (quorum) and keeps a control-plane
// holder from counting as settled.
func (a *acquirer) readEtcd(ctx context.Context) {
	if !a.etcdAt.IsZero() && a.g.clock().Since(a.etcdAt) < etcdEvery {
		return
	}
	a.etcdAt = a.g.clock().Now()
	ms, err := a.g.EtcdMembers(ctx)
	if err != nil {
		if a.etcdKnown || a.etcdAt.Equal(a.start) || a.etcd == nil {
			a.g.debugf("etcd members not known: %v", err)
		}
		a.etcdKnown = false
		return
	}
	a.etcd, a.etcdKnown = ms, true
	a.selfHosts, a.selfKnown = slices.ContainsFunc(ms, func(m Member) bool { return m.Node == a.r.Self.Name }), true
}

// checkSelf learns, once per request, whether this node hosts an etcd pod
// (retried every etcdEvery while the pods cannot be listed).
func (a *acquirer) checkSelf(ctx context.Context) {
	if a.selfKnown || !a.selfAt.IsZero() && a.g.clock().Since(a.selfAt) < etcdEvery {
		return
	}
	a.selfAt = a.g.clock().Now()
	hosts, err := a.g.hostsEtcd(ctx, a.r.Self.Name)
	if err != nil {
		a.g.debugf("whether %s hosts an etcd member is not known: %v", a.r.Self.Name, err)
		return
	}
	a.selfHosts, a.selfKnown = hosts, true
}

// etcdEvery is how often a decision that needs the etcd members lists
// them again (a control-plane node waiting: one small list of kube-system
// every few seconds; the Lease and the Nodes are watched).
const etcdEvery = 3 * time.Second

// EtcdMembers lists the static etcd pods of kube-system (etcd-NODE, mirror
// pods or labelled component=etcd): those labelled component=etcd
// (kubeadm's, RKE2's), and only when there are none every pod of
// kube-system, for etcd pods named so but not labelled.
func (g *Gate) EtcdMembers(ctx context.Context) ([]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, g.APITimeout)
	defer cancel()
	pods := g.C.CoreV1().Pods(metav1.NamespaceSystem)
	pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "component=etcd"})
	if err == nil && len(pl.Items) == 0 {
		pl, err = pods.List(ctx, metav1.ListOptions{})
	}
	if err != nil {
		return nil, err
	}
	return etcdPods(pl.Items, ""), nil
}

// hostsEtcd reports whether node hosts an etcd pod, from the API
// server's cache (a static pod is there for as long as the node runs it).
func (g *Gate) hostsEtcd(ctx context.Context, node string) (bool, error) {
	ms, err := g.etcdOn(ctx, node, "0")
	return len(ms) > 0, err
}

// EtcdMembersOn lists the etcd pods on node (one small list of the pods of
// kube-system on that node, whatever the layout): the node agent of a
// node not labelled control-plane or etcd finds so whether it hosts a
// member, and whether it is Ready.
func (g *Gate) EtcdMembersOn(ctx context.Context, node string) ([]Member, error) {
	return g.etcdOn(ctx, node, "")
}

// etcdOn lists the etcd pods on node, at resourceVersion rv.
func (g *Gate) etcdOn(ctx context.Context, node, rv string) ([]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, g.APITimeout)
	defer cancel()
	pl, err := g.C.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(), ResourceVersion: rv})
	if err != nil {
		return nil, err
	}
	return etcdPods(pl.Items, node), nil
}

// etcdPods are the members among pods (those of node only, unless ""):
// static etcd pods, named etcd-NODE, mirror pods or labelled
// component=etcd.
func etcdPods(pods []corev1.Pod, node string) []Member {
	var ms []Member
	for _, p := range pods {
		if !strings.HasPrefix(p.Name, "etcd-") || p.Spec.NodeName == "" || node != "" && p.Spec.NodeName != node {
			continue
		}
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; !mirror && p.Labels["component"] != "etcd" {
			continue
		}
		m := Member{Pod: p.Name, Node: p.Spec.NodeName}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				m.Ready = c.Status == corev1.ConditionTrue
			}
		}
		ms = append(ms, m)
	}
	return ms
}

// write stores v.Record with a compare-and-swap on the snapshot's
// resourceVersion (or creates the Lease).
func (a *acquirer) write(ctx context.Context, snap snapshot, v Verdict) error {
	l, err := a.g.put(ctx, snap.lease, v.Record)
	if err == nil && a.watching {
		a.fresh = l
	}
	return err
}

// watch starts watching the Lease and the Nodes: a change kicks a new
// decision.
func (a *acquirer) watch(ctx context.Context) error {
	g := a.g
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.stopWatch, a.wctx = cancel, wctx
	// The first lists are the ones just read (no request: a queue of a
	// hundred nodes would list them all again at once); a list again
	// only if the watch cannot go on from it.
	var seedLease runtime.Object
	if a.seedLease != nil {
		seedLease = &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: a.seedLease.ResourceVersion},
			Items: []coordinationv1.Lease{*a.seedLease}}
	}
	// Its last read found the queue full (the Lease read, no Node): the
	// Lease alone, the Nodes once a place may be had (watchNodes).
	leaseOnly := a.seedNodes == nil && a.seedLease != nil
	var seedNodes runtime.Object
	if a.seedNodes != nil {
		seedNodes = a.seedNodes
	}
	a.seedLease, a.seedNodes = nil, nil
	// A plain list, then a watch: the lists are small (one Lease, the
	// Nodes), and fake clientsets have no streaming lists.
	ls, lc := leaseInformerFrom(g.C, g.Namespace, g.Name, seedLease, g.APITimeout, a.poke)
	a.leases, a.nodes = ls, nil
	ctrls := []cache.Controller{lc}
	if !leaseOnly {
		ns, nc := a.nodeInformer(seedNodes)
		a.nodes = ns
		ctrls = append(ctrls, nc)
	}
	for _, c := range ctrls {
		go c.RunWithContext(wctx)
	}
	if err := a.synced(ctx, ctrls...); err != nil {
		cancel()
		return err
	}
	a.watching = true
	return nil
}

// nodeInformer watches the Nodes, its first list seed when that is not
// nil: each change marks the Nodes' states to be built again, and kicks a
// new decision.
func (a *acquirer) nodeInformer(seed runtime.Object) (cache.Store, cache.Controller) {
	nodes := a.g.C.CoreV1().Nodes()
	apiTimeout := a.g.APITimeout
	lw := &cache.ListWatch{
		ListWithContextFunc: seeded(seed, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, o)
		}),
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			ctx = longWatch(ctx, &o, apiTimeout)
			return nodes.Watch(ctx, o)
		},
	}
	a.nodeStates = nil // built again from the watch's first list
	return cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, listThenWatch{}),
		ObjectType: &corev1.Node{}, Handler: onChange(func() { a.nodesDirty.Store(true); a.poke() })})
}

// synced waits until ctrls have their first lists, at most 3 × apiTimeout.
func (a *acquirer) synced(ctx context.Context, ctrls ...cache.Controller) error {
	sctx, scancel := context.WithTimeout(ctx, 3*a.g.APITimeout)
	defer scancel()
	for _, c := range ctrls {
		if !cache.WaitForCacheSync(sctx.Done(), c.HasSynced) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("watching the Lease %s and the Nodes: not in sync within %s", a.g.Where(), 3*a.g.APITimeout)
		}
	}
	return nil
}

// watchNodes starts watching the Nodes beside the Lease (a node that
// watched the Lease alone while the queue was full): one list, then a
// watch.
func (a *acquirer) watchNodes(ctx context.Context) error {
	ns, nc := a.nodeInformer(nil)
	nctx, stop := context.WithCancel(a.wctx)
	go nc.RunWithContext(nctx)
	if err := a.synced(ctx, nc); err != nil {
		stop()
		return err
	}
	a.nodes, a.stopNodes = ns, stop
	return nil
}

// leaseInformer watches the Lease: changed is called for each change.
func (g *Gate) leaseInformer(changed func()) (cache.Store, cache.Controller) {
	return leaseInformerFrom(g.C, g.Namespace, g.Name, nil, g.APITimeout, changed)
}

// leaseInformer watches the Lease ns/name alone (a list and a watch with
// a metadata.name field selector, which RBAC authorizes for that name):
// changed is called for each change.
func leaseInformer(c kubernetes.Interface, ns, name string, changed func()) (cache.Store, cache.Controller) {
	return leaseInformerFrom(c, ns, name, nil, 0, changed)
}

// leaseInformerFrom is leaseInformer whose first list is first when that
// is not nil (a Lease just read), and whose watches stay open for
// watchSeconds, each bounded by that plus apiTimeout (longWatch).
func leaseInformerFrom(c kubernetes.Interface, ns, name string, first runtime.Object, apiTimeout time.Duration, changed func()) (cache.Store, cache.Controller) {
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	leases := c.CoordinationV1().Leases(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: seeded(first, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return leases.List(ctx, o)
		}),
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			ctx = longWatch(ctx, &o, apiTimeout)
			return leases.Watch(ctx, o)
		},
	}
	return cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, listThenWatch{}),
		ObjectType: &coordinationv1.Lease{}, Handler: onChange(changed)})
}

func onChange(f func()) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f() },
		UpdateFunc: func(any, any) { f() },
		DeleteFunc: func(any) { f() },
	}
}

// seeded is list whose first call returns first instead (when not nil):
// state just read, which the watch goes on from.
func seeded(first runtime.Object, list func(context.Context, metav1.ListOptions) (runtime.Object, error)) func(context.Context, metav1.ListOptions) (runtime.Object, error) {
	var mu sync.Mutex
	return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		mu.Lock()
		f := first
		first = nil
		mu.Unlock()
		if f != nil {
			return f, nil
		}
		return list(ctx, o)
	}
}

// watchSeconds is how long the API server keeps one watch of the gate
// open (then it is started again from where it ended, without a list).
const watchSeconds = 120

// longWatch lets a watch stay open for watchSeconds instead of one
// request's bound (apiTimeout: a client of gnsh's ends every request,
// watches included, after it, and a queue of waiters would start all its
// watches again every few seconds); the client still ends it apiTimeout
// after the API server should have. An apiTimeout of 0 changes nothing.
func longWatch(ctx context.Context, o *metav1.ListOptions, apiTimeout time.Duration) context.Context {
	if apiTimeout <= 0 {
		return ctx
	}
	s := int64(watchSeconds)
	o.TimeoutSeconds = &s
	return kube.WithBound(ctx, watchSeconds*time.Second+apiTimeout)
}

// listThenWatch tells client-go's reflector not to use streaming lists.
type listThenWatch struct{}

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (a *acquirer) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *acquirer) stopWatches() {
	if a.stopWatch != nil {
		a.stopWatch()
	}
	for node, h := range a.hearts {
		h.stop()
		delete(a.hearts, node)
	}
}

// NodeLeaseNamespace holds the kubelets' heartbeat Leases, one per node,
// named after it.
const NodeLeaseNamespace = "kube-node-lease"

// followHearts watches the kubelet heartbeat of each holder (other than
// itself) whose renewals have stopped for a period, and stops watching the
// others: the given-up rule needs to see a silent holder's node still up.
// Best effort, never waited for: without permission to read them (an
// rbac.yaml older than this gnsh) nothing is seen, and no holder counts as
// given up (the node agents free those).
func (a *acquirer) followHearts(ctx context.Context, rec Record) {
	want := map[string]bool{}
	for _, h := range rec.Holders {
		if h.Node != a.r.Self.Name && a.tr.Silent(h) >= h.renewPeriod() {
			want[h.Node] = true
		}
	}
	for node, h := range a.hearts {
		if !want[node] {
			h.stop()
			delete(a.hearts, node)
		}
	}
	for node := range want {
		if _, ok := a.hearts[node]; ok {
			continue
		}
		if a.hearts == nil {
			a.hearts = map[string]heartWatch{}
		}
		store, ctrl := leaseInformerFrom(a.g.C, NodeLeaseNamespace, node, nil, a.g.APITimeout, a.poke)
		hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		go ctrl.RunWithContext(hctx)
		a.hearts[node] = heartWatch{store: store, stop: stop}
	}
}

// heartbeats are the kubelet heartbeats followed, as last seen.
func (a *acquirer) heartbeats() map[string]Heartbeat {
	m := map[string]Heartbeat{}
	for node, h := range a.hearts {
		o, ok, _ := h.store.GetByKey(NodeLeaseNamespace + "/" + node)
		if !ok {
			continue
		}
		l := o.(*coordinationv1.Lease)
		var hb Heartbeat
		if l.Spec.RenewTime != nil {
			hb.Renewed = l.Spec.RenewTime.Time
		}
		if l.Spec.LeaseDurationSeconds != nil {
			hb.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		m[node] = hb
	}
	return m
}

// awaitNewer waits, after a write over old conflicted (err), until the
// watch has a newer Lease than old (the version that won), at most
// awaitWatch: no read per conflict, which a queue of a hundred nodes
// joining at once would multiply. Failing that (or the Lease deleted) it
// reads the Lease.
func (a *acquirer) awaitNewer(ctx context.Context, old *coordinationv1.Lease, err error) {
	if !apierrors.IsNotFound(err) {
		t := a.g.clock().NewTimer(awaitWatch)
		defer t.Stop()
		for {
			if l := a.leaseNow(); l != nil && (old == nil || newer(l, old)) {
				return
			}
			select {
			case <-a.kick:
				continue
			case <-ctx.Done():
				return
			case <-t.C():
			}
			break
		}
	}
	a.refetch(ctx)
}

// awaitWatch bounds the wait for the watch to bring the version of the
// Lease that won over a write (it usually comes within milliseconds).
const awaitWatch = time.Second

// refetch reads the Lease after a conflict: the watch may not have the
// version that won yet.
func (a *acquirer) refetch(ctx context.Context) {
	l, err := a.g.get(ctx)
	if err == nil {
		a.fresh = l
	}
}

// leaseNow is the newest Lease known: the watch's, or one read or
// written since that is newer.
func (a *acquirer) leaseNow() *coordinationv1.Lease {
	var watched *coordinationv1.Lease
	if o, ok, _ := a.leases.GetByKey(a.g.Namespace + "/" + a.g.Name); ok {
		watched = o.(*coordinationv1.Lease)
	}
	if a.fresh != nil && (watched == nil || newer(a.fresh, watched)) {
		return a.fresh
	}
	return watched
}

// newer reports whether a is a later version of the Lease than b. The
// resourceVersions of one object from one API server increase; they are
// compared as numbers when they are (etcd's are), else a wins.
func newer(a, b *coordinationv1.Lease) bool {
	var x, y uint64
	if _, err := fmt.Sscan(a.ResourceVersion, &x); err != nil {
		return true
	}
	if _, err := fmt.Sscan(b.ResourceVersion, &y); err != nil {
		return true
	}
	return x > y
}

// get reads the Lease; nil when there is none.
func (g *Gate) get(ctx context.Context) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, g.APITimeout)
	defer cancel()
	l, err := g.C.CoordinationV1().Leases(g.Namespace).Get(ctx, g.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return l, err
}

// put writes rec over l (its resourceVersion as precondition), or creates
// the Lease when l is nil (AlreadyExists if another node did first).
func (g *Gate) put(ctx context.Context, l *coordinationv1.Lease, rec Record) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, g.APITimeout)
	defer cancel()
	if l == nil {
		nl := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: g.Name, Namespace: g.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "gnsh"}}}
		rec.Encode(nl)
		return g.C.CoordinationV1().Leases(g.Namespace).Create(ctx, nl, metav1.CreateOptions{})
	}
	l = l.DeepCopy()
	rec.Encode(l)
	return g.C.CoordinationV1().Leases(g.Namespace).Update(ctx, l, metav1.UpdateOptions{})
}

// Update applies change to the record, compare-and-swap, again from fresh
// state after each conflict, until it is written or change makes no
// change (false). It returns the record as it now stands.
// ReserveTicket takes the next ticket (its place in arrival order) for a
// request that does not ask yet (a queued reboot outside its window): one
// write, no entry. Asked later with it (Ask.HasTicket), it comes before
// the nodes that arrived after it.
func (g *Gate) ReserveTicket(ctx context.Context) (int64, error) {
	var t int64
	_, err := g.Update(ctx, func(rec *Record) bool {
		// Never 0: a ticket of 0 reads as none (QueuedReboot.Ticket).
		t = max(rec.Next, 1)
		rec.Next = t + 1
		return true
	})
	return t, err
}

func (g *Gate) Update(ctx context.Context, change func(*Record) bool) (Record, error) {
	backoff := 10 * time.Millisecond
	for {
		l, err := g.get(ctx)
		if err != nil {
			return Record{}, err
		}
		rec := Record{Version: Schema}
		if l != nil {
			if rec, err = Decode(l); err != nil {
				return Record{}, err
			}
		}
		if !change(&rec) {
			return rec, nil
		}
		_, err = g.put(ctx, l, rec)
		switch {
		case err == nil:
			return rec, nil
		case !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err):
			return Record{}, err
		}
		t := g.clock().NewTimer(jitter(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return Record{}, ctx.Err()
		case <-t.C():
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// warnHeldLong posts GnshSlotHeldLong on h's Node, once for all
// observers: the one whose compare-and-swap marks the entry Warned posts.
// It reports false when the mark could not be written (to try again).
func (g *Gate) warnHeldLong(ctx context.Context, h Entry, by string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*g.APITimeout)
	defer cancel()
	_, _, marked, err := g.changeHolder(ctx, h, func(e *Entry) bool {
		if e.Warned {
			return false
		}
		e.Warned = true
		return true
	})
	if err != nil {
		return false
	}
	if !marked {
		return true
	}
	g.event(ctx, h.Node, "Warning", ReasonHeldLong, "%s has held a reboot slot of %s for more than %s (%s by %s, %s; seen from %s): "+
		"a node that is down keeps its slot; it is freed once the node is back and settled, or by 'gnsh slots release --node %s'",
		h.Node, g.Where(), g.WarnAfter, h.Action, h.Who, h.Phase, by, h.Node)
	return true
}

// changeHolder applies f to the holder entry that is h (the same node, UID,
// boot and ticket), compare-and-swap, again from fresh state after each
// conflict; f reports whether it changed the entry. found says whether
// the entry is still there, e is it as written (or as found).
func (g *Gate) changeHolder(ctx context.Context, h Entry, f func(*Entry) bool) (e Entry, found, changed bool, err error) {
	_, err = g.Update(ctx, func(rec *Record) bool {
		found, changed = false, false
		for i := range rec.Holders {
			if rec.Holders[i].same(h) {
				found, changed = true, f(&rec.Holders[i])
				e = rec.Holders[i]
				return changed
			}
		}
		return false
	})
	return e, found, changed, err
}

// Free removes the holders match picks, compare-and-swap, and returns
// them.
func (g *Gate) Free(ctx context.Context, match func(Entry) bool) ([]Entry, error) {
	var freed []Entry
	_, err := g.Update(ctx, func(rec *Record) bool {
		freed = nil
		keep := rec.Holders[:0:0]
		for _, h := range rec.Holders {
			if match(h) {
				freed = append(freed, h)
			} else {
				keep = append(keep, h)
			}
		}
		rec.Holders = keep
		return len(freed) > 0
	})
	if err != nil {
		return nil, err
	}
	return freed, nil
}

// Read returns the record as it stands (empty without a Lease).
func (g *Gate) Read(ctx context.Context) (Record, *coordinationv1.Lease, error) {
	l, err := g.get(ctx)
	if err != nil || l == nil {
		return Record{Version: Schema}, l, err
	}
	rec, err := Decode(l)
	return rec, l, err
}

// Slot is a slot held by this process: renewed until Release or Keep.
type Slot struct {
	g     *Gate
	mu    sync.Mutex
	entry Entry
	// lost is set when the entry was found gone (freed by an admin or
	// reclaimed): renewing stops.
	lost    bool
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	stopped bool
	// ctx bounds every renewal; halt cancels it, so that a renewal in
	// flight does not hold up Keep or Release (its write is moot then).
	ctx    context.Context
	cancel context.CancelFunc
	// lostFn, if set, is called once when the slot is found freed by
	// someone else.
	lostFn func(string)
	// Before: the node held this slot before this process asked (asked
	// again): it is the earlier taker's, not this process's to free.
	Before bool
	// when is the schedule this process asked for (Entry.When): Keep
	// writes it, a slot it shares keeping the earlier one until then.
	when *time.Time
}

func (g *Gate) hold(e Entry, before bool) *Slot {
	s := &Slot{g: g, entry: e, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), Before: before}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.renew()
	return s
}

// OnLost sets what is called (once) when the slot is found freed by
// someone else.
func (s *Slot) OnLost(f func(string)) {
	s.mu.Lock()
	s.lostFn = f
	s.mu.Unlock()
}

// Entry is the slot's entry as last written.
func (s *Slot) Entry() Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entry
}

// SetPhase records the holder's phase with the next renewal, which comes
// at once.
func (s *Slot) SetPhase(p Phase) {
	s.mu.Lock()
	s.entry.Phase = p
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// renew bumps the entry's Beat every Renew period, and writes phase
// changes, until stopped.
func (s *Slot) renew() {
	defer close(s.done)
	t := s.g.clock().NewTicker(s.g.Renew)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C():
		case <-s.kick:
		}
		ctx, cancel := context.WithTimeout(s.ctx, 2*s.g.APITimeout)
		err := s.write(ctx, func(h *Entry) { h.Beat++ })
		cancel()
		if err != nil && s.ctx.Err() == nil {
			s.g.debugf("renewing the slot of %s: %v", s.entry.Node, err)
		}
		if s.isLost() {
			return
		}
	}
}

func (s *Slot) isLost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// write changes this slot's holder entry (when it is still this one).
func (s *Slot) write(ctx context.Context, change func(*Entry)) error {
	s.mu.Lock()
	me := s.entry
	s.mu.Unlock()
	now, found, _, err := s.g.changeHolder(ctx, me, func(h *Entry) bool {
		h.Phase = me.Phase
		change(h)
		return true
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	if found {
		s.entry.Beat = now.Beat
		s.mu.Unlock()
		return nil
	}
	tell := !s.lost && s.lostFn != nil
	lostFn := s.lostFn
	s.lost = true
	s.mu.Unlock()
	if tell {
		// Outside the lock: the callback may ask the slot anything.
		lostFn(fmt.Sprintf("the reboot slot of %s in %s was freed by someone else ('gnsh slots release', or a node that found it stale)", me.Node, s.g.Where()))
	}
	return nil
}

// halt stops the renewals and waits for the last one to end: one in
// flight is cancelled (what comes next, Keep's write or Release's, is
// made from fresh state, compare-and-swap), so that halt takes no
// request's time (it used to wait up to 2×apiTimeout for it, outside
// Keep's bound).
func (s *Slot) halt() {
	s.mu.Lock()
	stopped := s.stopped
	s.stopped = true
	s.mu.Unlock()
	if !stopped {
		close(s.stop)
		s.cancel()
	}
	<-s.done
}

// Halt stops renewing and leaves the entry as it is (a slot held before
// this process asked: its earlier taker's, or the node agent's to free).
func (s *Slot) Halt() { s.halt() }

// Keep stops renewing and leaves the slot held, its phase and the
// schedule this process asked for written (bounded by ctx): after a
// hand-off (the shutdown, or its schedule, stands), the node agent keeps
// it and frees it after the next boot. With ctx already done nothing is
// written (ctx's error): the entry stands as last renewed, which the node
// agent's keeper renews and frees as any.
func (s *Slot) Keep(ctx context.Context, p Phase) error {
	s.halt()
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	s.entry.Phase, s.entry.When = p, s.when
	when := s.when
	s.mu.Unlock()
	return s.write(ctx, func(h *Entry) { h.Beat++; h.When = when })
}

// Release stops renewing and frees the slot (when it is still this
// one's), bounded by ctx; why goes into the GnshSlotReleased Event.
func (s *Slot) Release(ctx context.Context, why string) error {
	s.halt()
	me := s.Entry()
	freed, err := s.g.Free(ctx, me.same)
	if err == nil && len(freed) > 0 {
		s.g.event(ctx, me.Node, "Normal", ReasonReleased, "Freed the reboot slot of %s: %s", s.g.Where(), why)
	}
	return err
}
