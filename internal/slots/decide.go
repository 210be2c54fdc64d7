package slots

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// ControlPlaneLabel marks control-plane nodes (kubeadm's and most
// installers'): at most one of them is out at once, and only while etcd
// keeps its quorum. MasterLabel and EtcdLabel (etcd.go) mark nodes
// guarded the same way.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// NodeState is what the rules need of a Node.
type NodeState struct {
	Name          string
	UID           types.UID
	Labels        map[string]string
	Ready         bool // condition Ready is True
	Unschedulable bool // cordoned, by anyone
	Deleting      bool // deletionTimestamp set
	Boot          string
	// ControlPlane: guarded as a control-plane node (one at a time among
	// them, and etcd's quorum): labelled control-plane or master, or
	// hosting an etcd member (EtcdRole, or its etcd pod seen: etcd.go).
	ControlPlane bool
	// EtcdRole: labelled node-role.kubernetes.io/etcd (RKE2, k3s).
	EtcdRole bool
	// Unknown: the Node could not be read (only its name and UID are
	// known): as a holder it counts in every scope.
	Unknown bool
}

// StateOf reads a Node.
func StateOf(n *corev1.Node) NodeState {
	s := NodeState{Name: n.Name, UID: n.UID, Labels: n.Labels, Unschedulable: n.Spec.Unschedulable,
		Deleting: n.DeletionTimestamp != nil, Boot: n.Status.NodeInfo.BootID}
	s.EtcdRole = hasRole(n.Labels, EtcdLabel)
	s.ControlPlane = hasRole(n.Labels, ControlPlaneLabel) || hasRole(n.Labels, MasterLabel) || s.EtcdRole
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			s.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return s
}

// Out says why a node counts as out (NotReady, cordoned, being
// deleted), "" if it does not.
func (n NodeState) Out() string {
	var why []string
	if !n.Ready {
		why = append(why, "NotReady")
	}
	if n.Unschedulable {
		why = append(why, "cordoned")
	}
	if n.Deleting {
		why = append(why, "being deleted")
	}
	return strings.Join(why, ", ")
}

// Member is an etcd member seen as its static pod (etcd-NODE in
// kube-system), or as a Node labelled etcd (World.setEtcd).
type Member struct {
	Pod   string // its pod's name, or "etcd on NODE" (labelled: setEtcd)
	Node  string
	Ready bool
}

// Pool is a set of nodes with a limit.
type Pool struct {
	Name     string
	Selector labels.Selector
	Max      int
}

// Limits are the gate's limits.
type Limits struct {
	Max   int // cluster-wide
	Pools []Pool
	// Settle is how long a node back on a new boot must have been Ready
	// and schedulable before its slot is freed without its agent.
	Settle time.Duration
}

// World is the cluster as one decision sees it.
type World struct {
	Nodes map[string]NodeState
	// Etcd lists the etcd members (their pods, and the Nodes labelled
	// etcd: setEtcd), when the pods could be read (EtcdKnown); a cluster
	// whose etcd runs elsewhere has none.
	Etcd      []Member
	EtcdKnown bool
	// Heartbeats are the kubelets' heartbeats (their Leases in
	// kube-node-lease) of the holders this observer follows, by node.
	Heartbeats map[string]Heartbeat
	// outs are the Nodes that are out (NodeState.Out), found once per
	// decision (Decide): its first fit checks the limits for each waiter
	// ahead, and a thousand Nodes each time would be most of its cost.
	outs []NodeState
}

// Heartbeat is a kubelet's Lease as last seen.
type Heartbeat struct {
	Renewed  time.Time     // spec.renewTime, by the kubelet's clock
	Duration time.Duration // spec.leaseDurationSeconds
}

// Observations are what this process saw of the record over time
// (tracker.go): the rules that free a slot or drop a waiter depend on how
// long something has lasted, measured here.
type Observations interface {
	// Silent is how long e's Beat has not changed.
	Silent(e Entry) time.Duration
	// Settled is how long e's node has been up on another boot than
	// e.Boot, Ready, schedulable (unless e.WasUnschedulable) and, for a
	// control-plane node, with its etcd member Ready; 0 if it is not now.
	Settled(e Entry) time.Duration
	// Alive is how long e's node has been seen alive since e's Beat last
	// changed: the span of its kubelet's heartbeat (its Lease in
	// kube-node-lease, by the kubelet's own clock) while e was silent,
	// 0 if the heartbeat is not seen going on now. A node going down
	// stays Ready for the node controller's grace period (40-50 s) after
	// its kubelet stops; only a heartbeat that goes on says it is up.
	Alive(e Entry) time.Duration
}

// Ask is one node asking for a slot.
type Ask struct {
	Entry       Entry // Node, UID, Boot, Action, Who, Since, Renew, WasUnschedulable
	ForceQuorum bool  // --force-quorum: the etcd quorum does not hold it back
	// Ticket (HasTicket) is the place it was given before: a waiter that
	// others dropped (its renewals late, not stopped) comes back in it.
	Ticket    int64
	HasTicket bool
}

// Out is a node that counts against a limit, and why.
type Out struct {
	Node string `json:"node"`
	Why  string `json:"why"`
}

// Block is a limit that holds a node back.
type Block struct {
	Limit string // "cluster", "pool gpu", "control plane", "etcd quorum", "queue"
	Max   int
	Out   []Out
	// Bytes: the queue is full for the record's byte bound, not for
	// MaxWaiters (LimitQueueFull).
	Bytes bool
}

func (b Block) String() string {
	var s []string
	for _, o := range b.Out {
		s = append(s, o.Node+" ("+o.Why+")")
	}
	switch b.Limit {
	case LimitQuorum:
		return "etcd would lose its quorum: " + strings.Join(s, ", ") + " (--force-quorum overrides)"
	case LimitQueue:
		return "earlier in the queue: " + strings.Join(s, ", ")
	case LimitQueueFull:
		if b.Bytes {
			return fmt.Sprintf("the queue is full: %d nodes wait, and one more would take the slots record past %d KiB; this node asks again to join it as they go", b.Max, MaxRecordBytes>>10)
		}
		return fmt.Sprintf("the queue is full: %d nodes wait, %d at most; this node asks again to join it as they go", b.Max, MaxWaiters)
	case LimitRecordFull:
		return fmt.Sprintf("the slots record is full: %d holders and the waiters fill the %d KiB it may take of the Lease's 256 KiB; this node asks again as slots are freed", b.Max, MaxHeldBytes>>10)
	}
	return fmt.Sprintf("%s limit %d: %s", b.Limit, b.Max, strings.Join(s, ", "))
}

// Names of limits that are not pools.
const (
	LimitCluster      = "cluster"
	LimitControlPlane = "control plane"
	LimitQuorum       = "etcd quorum"
	LimitQueue        = "queue"
	LimitQueueFull    = "queue full"
	LimitRecordFull   = "record full"
)

// MaxWaiters bounds the queue the record keeps: a node that finds this many
// waiters recorded waits without a place (Verdict.Unrecorded), writing
// nothing, and asks to join as places free. Every node waiting watches the
// one Lease, and every write of it goes to each of them: a record that
// grew with a fleet asking at once (a thousand nodes whose unattended
// upgrades reboot at the same hour) would make each write cost the API
// server and every waiter in proportion to the crowd, twice over, and the
// crowd's joins would conflict with one another without end. Bounded, a
// write stays a few KiB; the nodes beyond it join as places free, spread
// in time (acquirer.sense), so that the queue is served in arrival order
// among the nodes that found a place, and the others join in no order.
const MaxWaiters = 32

// MaxRecordBytes bounds the record's footprint (its JSON, and room for
// its holders to grow: footprint) for a waiter's join: a Lease's
// annotations hold 256 KiB in all (the API server refuses more), about
// 900 entries. A join that would take the record past 200 KiB is not
// written (Verdict.Unrecorded). Admissions go on up to MaxHeldBytes: the
// 40 KiB between are room for about 100 holders more, that the limits let
// out beyond a full queue.
const MaxRecordBytes = 200 << 10

// MaxHeldBytes bounds the record's footprint for an admission: one that
// would take it further waits (LimitRecordFull), recorded if it was, and
// asks again as slots are freed. The 16 KiB left below the Lease's 256 KiB
// are for the writes that are never refused (the node agent's holder for
// a shutdown that bypassed gnsh, a renewal's beat gaining a digit) and the
// Lease's other annotations.
const MaxHeldBytes = 240 << 10

// holderGrowth is what a holder's entry may still grow by once written
// (its phase, its schedule's when, the warned mark, its beat's digits:
// about 80 bytes), with room to spare.
const holderGrowth = 128

// footprint is r's size encoded, and room for each holder to grow.
func footprint(r Record) int {
	return len(r.encode()) + holderGrowth*len(r.Holders)
}

// tooLarge reports whether r's footprint is over MaxRecordBytes.
func tooLarge(r Record) bool {
	return footprint(r) > MaxRecordBytes
}

// Freed is a holder whose slot the rules free, or a waiter they drop.
type Freed struct {
	Entry Entry
	Why   string
}

// Verdict is the outcome of one decision.
type Verdict struct {
	Admitted bool
	// Already: the node held a slot before this decision (asked again).
	Already bool
	Record  Record // the record to write when Changed
	Changed bool
	Self    Entry   // this node's entry in Record
	Blocks  []Block // why it waits (not Admitted)
	Place   int     // its place among the waiters, from 1 (not Admitted)
	// Reclaimed are holders freed, Dropped waiters dropped, by this
	// decision; Gone lists those freed or dropped because their Node is
	// gone (a caller confirms that with a fresh read before writing).
	Reclaimed []Freed
	Dropped   []Freed
	// Fit are the waiters ahead of the node that the rules would admit
	// (first fit), stalled ones included: the caller's Tracker.Fits
	// measures how long each has been so.
	Fit []Entry
	// QuorumWarning: the node is a control-plane node of an etcd of one or
	// two members, which loses its quorum whatever the order.
	QuorumWarning string
	// Guarded: the node was decided as a control-plane node (its labels,
	// an etcd pod on it, or in doubt whether it has one), so that
	// --force-quorum overrode its quorum guard.
	Guarded bool
	// Unrecorded: it waits without a place, the queue being full (its
	// waiter entry would take the record past MaxRecordBytes): nothing
	// of it is written, Place is 0, it asks again.
	Unrecorded bool
}

// Decide is the gate's rule: from the record, the cluster and what this
// process observed, whether a's node may take a slot now, and the record
// that says so (a holder entry), or that it waits (a waiter entry, in
// arrival order). Stale entries are freed first. It changes nothing it is
// given.
func Decide(rec Record, w World, lim Limits, obs Observations, a Ask) Verdict {
	w.outs = outNodes(w.Nodes)
	v := Verdict{Record: rec.clone()}
	v.Record.Version = Schema
	v.reclaim(w, lim, obs, a.Entry)
	me := a.Entry

	// Asked again on the same boot: the node holds a slot (two admins, a
	// retried task, a schedule asked for again). Its own request finding
	// its entry (the answer to its write was lost) holds it as its own;
	// another request holds it as someone else's (Already), never to free.
	// A node back on a new boot that asks again is a new request: its
	// earlier boot's slot (still settling) stays until it is admitted,
	// and it is admitted only where a new node would be.
	if h, ok := v.Record.Holder(me.Node); ok && h.UID == me.UID && h.Boot == me.Boot {
		v.Admitted = true
		v.Already = h.Run == "" || h.Run != me.Run
		if v.Already {
			// A sign of life now: an observer that watched its earlier
			// taker stop renewing must not free it under this one. The
			// schedule (When) stays the one that stands until this
			// request's own does (shutdown -r +9 after +8): Slot.Keep
			// writes it once handed off; a request refused after it
			// joined leaves it as logind still has it.
			h.Beat++
		}
		v.Record.Holders = append(without(v.Record.Holders, me.Node), h)
		v.Record.Waiters = without(v.Record.Waiters, me.Node)
		v.Self = h
		v.finish(rec)
		return v
	}
	// in: its waiter entry stands (a renewal, not a join); newTicket: it
	// is given the next ticket now.
	in, newTicket := false, false
	if ws, ok := v.Record.Waiter(me.Node); ok && ws.UID == me.UID && ws.Boot == me.Boot {
		me.Ticket, me.Beat, me.Since = ws.Ticket, ws.Beat, ws.Since
		in = true
	} else if a.HasTicket && a.Ticket < v.Record.Next {
		me.Ticket = a.Ticket
	} else {
		me.Ticket = v.Record.Next
		v.Record.Next++
		newTicket = true
	}
	v.Record.Waiters = without(v.Record.Waiters, me.Node)

	self, ok := w.Nodes[me.Node]
	if !ok { // the caller read its own Node; a world without it is a bug
		self = NodeState{Name: me.Node, UID: me.UID}
	}
	v.Guarded = self.ControlPlane
	held := holdersOut(v.Record.Holders)
	// Earlier waiters that fit go first: this node takes a slot only if it
	// fits beside them (first fit in arrival order). Its own earlier
	// boot's slot, which its admission would replace, does not hold them
	// back here: it must not get ahead of them by asking again. Their
	// etcd quorum is checked where the members are known (a control-plane
	// or etcd node asking, or a worker judging whether a guarded holder
	// has settled); a worker that does not read them lets a guarded node
	// ahead keep its place.
	sim := maps(held)
	delete(sim, me.Node)
	var ahead []Out
	for _, e := range v.Record.Waiters {
		if e.Ticket >= me.Ticket {
			break
		}
		n, ok := w.Nodes[e.Node]
		if !ok {
			continue
		}
		if len(blocks(n, sim, w, lim, !w.EtcdKnown)) == 0 {
			v.Fit = append(v.Fit, e)
			if stalled(e, n, w, obs) {
				continue
			}
			sim[e.Node] = "waiting before it"
			ahead = append(ahead, Out{Node: e.Node, Why: "waiting since " + e.Since.Local().Format("15:04:05")})
		}
	}
	bs := blocks(self, sim, w, lim, a.ForceQuorum)
	if len(bs) == 0 {
		h := me
		h.Phase, h.Beat, h.Renew, h.APITimeout = Admitted, 0, a.Entry.Renew, 0
		// Its earlier boot's entry, if any, gives way to this one.
		admitted := v.Record
		admitted.Holders = append(without(v.Record.Holders, me.Node), h)
		if footprint(admitted) <= MaxHeldBytes {
			v.Admitted = true
			v.Record = admitted
			v.Self = h
			v.QuorumWarning = quorumWarning(self, w)
			v.finish(rec)
			return v
		}
		// The record cannot take one more holder: the API server would
		// refuse it, and every write after it (renewals, releases).
		bs = []Block{{Limit: LimitRecordFull, Max: len(v.Record.Holders)}}
	} else if len(blocks(self, held, w, lim, a.ForceQuorum)) == 0 {
		bs = []Block{{Limit: LimitQueue, Out: ahead}}
	}
	v.Blocks = bs
	me.Phase = ""
	me.Renew = int64(WaiterPeriod(time.Duration(a.Entry.Renew)*time.Second) / time.Second)
	if bare := withoutAPI(me); waiterSilence(bare) >= waiterSilence(me) && stallAfter(bare) >= stallAfter(me) {
		me.APITimeout = 0 // the bounds cover its apiTimeout: not written
	}
	others := v.Record.Waiters
	v.Record.Waiters = append(v.Record.Waiters, me)
	v.Self = me
	if !in && (len(others) >= MaxWaiters || tooLarge(v.Record)) {
		// The queue is full: MaxWaiters wait, or the record would
		// outgrow its bound (long names, many holders). It
		// waits without a place (nothing written for it) and asks
		// again; it is admitted only by a write that records it as a
		// holder, where a new node would be.
		v.Record.Waiters = others // as read: none stays null
		if newTicket {
			v.Record.Next--
		}
		v.Unrecorded = true
		if bs[0].Limit != LimitRecordFull {
			v.Blocks = append(v.Blocks, Block{Limit: LimitQueueFull, Max: len(v.Record.Waiters), Bytes: len(others) < MaxWaiters})
		}
		v.finish(rec)
		return v
	}
	v.finish(rec)
	for i, e := range v.Record.Waiters {
		if e.Node == me.Node {
			v.Place = i + 1
		}
	}
	return v
}

func (v *Verdict) finish(old Record) {
	v.Record.sort()
	v.Changed = !v.Record.Equal(old)
}

// reclaim frees the slots of holders that are gone, back and settled
// without their agent's release, or whose shutdown was given up, and drops
// waiters that are gone. A holder whose node is down (NotReady) keeps its
// slot whatever the time. The asking node's own waiter entry (self's
// node, UID and boot) is never dropped: it is alive, asking now.
func (v *Verdict) reclaim(w World, lim Limits, obs Observations, self Entry) {
	keep := v.Record.Holders[:0:0]
	for _, h := range v.Record.Holders {
		if why := freeWhy(h, w, lim.Settle, obs); why != "" {
			v.Reclaimed = append(v.Reclaimed, Freed{h, why})
			continue
		}
		keep = append(keep, h)
	}
	v.Record.Holders = keep
	waiting := v.Record.Waiters[:0:0]
	for _, e := range v.Record.Waiters {
		n, ok := w.Nodes[e.Node]
		// The Node shows another boot ID than the one the waiter asked
		// in: its node went down and came back (power-cycled, reset)
		// while it waited, or the Node is not up to date yet (a waiter
		// rebooted, its kubelet has not posted its new boot ID: the
		// reason an admin reboots again). Which one, the IDs cannot
		// tell.
		other := ok && n.Boot != "" && e.Boot != "" && n.Boot != e.Boot
		switch {
		case e.Node == self.Node && e.UID == self.UID && e.Boot == self.Boot:
			waiting = append(waiting, e)
		case !ok || n.UID != e.UID:
			v.Dropped = append(v.Dropped, Freed{e, WhyGone})
		case other && bootMoved(e, n, obs):
			// This observer saw the Node's boot ID change while the
			// waiter stood: the request that waited is gone with the
			// boot it was made in.
			v.Dropped = append(v.Dropped, Freed{e, "its node is up on another boot than the one it asked in"})
		case other && obs.Silent(e) >= waiterLate(e):
			// Not seen to change here (the Node was so when this
			// observer first saw the waiter), and a renewal missed: a
			// live waiter in a boot its Node does not show yet renews.
			v.Dropped = append(v.Dropped, Freed{e, fmt.Sprintf("its node shows another boot than the one it asked in, and its waiter stopped renewing %s ago", obs.Silent(e).Round(time.Second))})
		case obs.Silent(e) >= waiterSilence(e):
			v.Dropped = append(v.Dropped, Freed{e, fmt.Sprintf("its waiter stopped renewing %s ago", obs.Silent(e).Round(time.Second))})
		default:
			waiting = append(waiting, e)
		}
	}
	v.Record.Waiters = waiting
}

// WaiterRenewFactor: a waiter renews its entry this many times less often
// than a holder (one write per waiter every 30 s by default: a queue of a
// hundred nodes does not crowd out the writes that admit and free), and at
// least every MaxWaiterRenew (WaiterPeriod).
const WaiterRenewFactor = 3

// MaxWaiterRenew bounds a waiter's period whatever slots.renew (up to 10m,
// which gives holders 30 min before others free a given-up slot): a waiter
// that died must not keep its place for that long. 30 s is the default
// period (3 × 10 s); a waiter's renewal is one small write, which may take
// up to 2 × apiTimeout to land (an apiTimeout longer than the period is
// valid: waiterSilence counts it).
const MaxWaiterRenew = 30 * time.Second

// MaxWaiterSilence bounds how long a waiter's silence is waited out, the
// entry's own period whatever (an older gnsh's waiter renewing every
// 30 min with slots.renew: 10m included): 3 × MaxWaiterRenew, three
// renewals missed by a waiter of this gnsh; longer only for a waiter whose
// apiTimeout needs it (waiterSilence). A live waiter dropped by mistake
// (its API server slow) comes back in its place with its next decision
// (Ask.Ticket).
const MaxWaiterSilence = 3 * MaxWaiterRenew

// WaiterPeriod is how often a waiter renews its entry when holders renew
// every renew.
func WaiterPeriod(renew time.Duration) time.Duration {
	return min(WaiterRenewFactor*renew, MaxWaiterRenew)
}

// waiterSilence is how long e may be silent before it is dropped: 3 of
// its periods, at most MaxWaiterSilence; and at least one period (at most
// MaxWaiterRenew) and one renewal's write (2 × its apiTimeout, as the
// entry says), so that a live waiter whose API server answers slowly,
// within its apiTimeout, is not dropped.
func waiterSilence(e Entry) time.Duration {
	return max(min(3*e.renewPeriod(), MaxWaiterSilence), min(e.renewPeriod(), MaxWaiterRenew)+2*e.apiTimeout())
}

// waiterLate is how long e may be silent while its Node shows another
// boot before it is dropped: one period (at most MaxWaiterRenew) and one
// renewal's write. An entry that does not say its apiTimeout has one that
// the bounds cover, at most a third of its period (Decide leaves it out
// only then).
func waiterLate(e Entry) time.Duration {
	p, api := min(e.renewPeriod(), MaxWaiterRenew), e.apiTimeout()
	if e.APITimeout == 0 {
		api = p / WaiterRenewFactor
	}
	return p + 2*api
}

// maxEntryAPITimeout bounds the apiTimeout an entry is given credit for
// (slots.renew's bound): a waiter that died keeps its place for
// 30 s + 2 × 10 min at the very most.
const maxEntryAPITimeout = 10 * time.Minute

// apiTimeout is e's APITimeout, at most maxEntryAPITimeout.
func (e Entry) apiTimeout() time.Duration {
	return time.Duration(min(max(e.APITimeout, 0), int64(maxEntryAPITimeout/time.Second))) * time.Second
}

func withoutAPI(e Entry) Entry {
	e.APITimeout = 0
	return e
}

// bootObserver is an Observations that also says which boot ID a
// waiter's Node showed when this observer first saw the waiter
// (Tracker.FirstBoot); without it, no Node is seen to change boot.
type bootObserver interface {
	FirstBoot(e Entry) string
}

// bootMoved reports whether obs saw e's Node (n) change its boot ID since
// it first saw e.
func bootMoved(e Entry, n NodeState, obs Observations) bool {
	b, ok := obs.(bootObserver)
	if !ok {
		return false
	}
	first := b.FirstBoot(e)
	return first != "" && first != n.Boot
}

// fitObserver is an Observations that also says how long a waiter has
// been seen fitting (Tracker.Fitting); without it, none is stalled.
type fitObserver interface {
	Fitting(e Entry) time.Duration
}

// stalled reports whether the waiter e, which the rules would admit (it
// fits, first in arrival order), has been seen so for longer than it
// takes a live waiter to take its slot: its next decision (within a
// second: its watch, its tick) and one write (at most its apiTimeout):
// stallAfter.
// A stalled waiter (killed, hung, its node going down) keeps its place but
// does not hold back those behind it: a slot is only given to it in
// simulation, its own write takes it. Only where its every limit was
// checked here: a control-plane waiter whose etcd quorum this observer
// could not read keeps holding its place (its own view may hold it back).
func stalled(e Entry, n NodeState, w World, obs Observations) bool {
	f, ok := obs.(fitObserver)
	if !ok || n.ControlPlane && !w.EtcdKnown {
		return false
	}
	return f.Fitting(e) >= stallAfter(e)
}

// stallAfter is how long a waiter that fits is given to take its slot:
// its holder period (e's period over WaiterRenewFactor, at most 10 s with
// MaxWaiterRenew), at least a second, and at least a second more than its
// apiTimeout (as the entry says).
func stallAfter(e Entry) time.Duration {
	return max(e.renewPeriod()/WaiterRenewFactor, time.Second+e.apiTimeout())
}

// WhyGone is why the entry of a node whose Node is gone is freed.
const WhyGone = "its Node is gone"

// freeWhy says why h's slot is free, "" if it is not.
func freeWhy(h Entry, w World, settle time.Duration, obs Observations) string {
	n, ok := w.Nodes[h.Node]
	switch {
	case !ok || n.UID != h.UID:
		return WhyGone
	case !n.Ready:
		return "" // down: it counts, however long
	case n.Boot != h.Boot:
		// The node agent frees it after settle; others give it two
		// renewal periods more to do so (the usual, quieter path).
		if d := obs.Settled(h); d > 0 && d >= settle+2*h.renewPeriod() {
			return fmt.Sprintf("it is back on a new boot, Ready and schedulable for %s, and its node agent did not free the slot", d.Round(time.Second))
		}
	case obs.Silent(h) >= 3*h.renewPeriod() && obs.Alive(h) >= 3*h.renewPeriod():
		// Silent, and yet up: the taker died or gave up, and the node
		// did not go down. A node that is going down is silent too, and
		// still Ready until the node controller sees its kubelet gone;
		// its kubelet's heartbeat stops with it.
		return fmt.Sprintf("its shutdown was given up: the same boot, Ready, its kubelet's heartbeat going on, and no renewal for %s", obs.Silent(h).Round(time.Second))
	}
	return ""
}

// outNodes lists the nodes that are out (NotReady, cordoned, being
// deleted).
func outNodes(nodes map[string]NodeState) []NodeState {
	o := []NodeState{} // not nil: found
	for _, s := range nodes {
		if !s.Ready || s.Unschedulable || s.Deleting {
			o = append(o, s)
		}
	}
	return o
}

// outs are w's nodes that are out: as found by Decide, else found now.
func outs(w World) []NodeState {
	if w.outs != nil {
		return w.outs
	}
	return outNodes(w.Nodes)
}

// holdersOut maps each holder to why it counts. The time is when its
// request was made (Since: a waiter admitted keeps its waiter entry's),
// not when it was admitted, and is labelled so.
func holdersOut(hs []Entry) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		asked := "asked at " + h.Since.Local().Format("15:04:05")
		if h.Who != "" {
			asked = h.Action + " by " + h.Who + ", " + asked
		}
		m[h.Node] = "holds a slot: " + string(h.Phase) + "; " + asked
	}
	return m
}

func maps(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// blocks lists the limits that hold n back, with held (node → why) taking
// slots: the cluster's, each pool's n is in, the control plane's and etcd's
// quorum. Each counts the held nodes in its scope and the scope's other
// nodes that are out (NotReady, cordoned, being deleted), plus n.
func blocks(n NodeState, held map[string]string, w World, lim Limits, forceQuorum bool) []Block {
	var bs []Block
	check := func(name string, max int, in func(NodeState) bool) {
		var out []Out
		seen := map[string]bool{n.Name: true}
		for node, why := range held {
			// A holder whose Node could not be read counts in every
			// scope: its labels are unknown.
			s, known := w.Nodes[node]
			if seen[node] || known && !s.Unknown && !in(s) || !known && name != LimitCluster {
				continue
			}
			seen[node] = true
			out = append(out, Out{node, why})
		}
		for _, s := range outs(w) {
			if seen[s.Name] || !in(s) {
				continue
			}
			if why := s.Out(); why != "" {
				seen[s.Name] = true
				out = append(out, Out{s.Name, why})
			}
		}
		if len(out)+1 > max {
			slices.SortFunc(out, func(a, b Out) int { return strings.Compare(a.Node, b.Node) })
			bs = append(bs, Block{Limit: name, Max: max, Out: out})
		}
	}
	check(LimitCluster, lim.Max, func(NodeState) bool { return true })
	for _, p := range lim.Pools {
		if p.Selector.Matches(labels.Set(n.Labels)) {
			check("pool "+p.Name, p.Max, func(s NodeState) bool { return p.Selector.Matches(labels.Set(s.Labels)) })
		}
	}
	if n.ControlPlane {
		check(LimitControlPlane, 1, func(s NodeState) bool { return s.ControlPlane })
		if !forceQuorum {
			if b, ok := quorum(n, held, w); !ok {
				bs = append(bs, b)
			}
		}
	}
	return bs
}

// quorum checks that etcd keeps a majority with n down besides the held
// nodes: its members that remain (each Ready, on a Node, not on n, not on
// a held node) must be more than half of all (one member per node:
// setEtcd). With one or two members no majority can
// be kept and it does not hold n back (quorumWarning says so); with none
// (etcd runs elsewhere) there is nothing to keep. Members that could not
// be read hold n back: --force-quorum goes without the guard.
func quorum(n NodeState, held map[string]string, w World) (Block, bool) {
	if !w.EtcdKnown {
		// Not "no etcd pods" (an external etcd): they could not be read.
		return Block{Limit: LimitQuorum, Out: []Out{{"its members", "unknown: the pods of kube-system cannot be listed"}}}, false
	}
	total := len(w.Etcd)
	if total < 3 {
		return Block{}, true
	}
	var down []Out
	for _, m := range w.Etcd {
		_, h := held[m.Node]
		_, isNode := w.Nodes[m.Node]
		switch {
		case m.Node == n.Name:
		case !isNode:
			// A pod bound to a node that is not a Node (deleted, its
			// mirror pod not collected yet): a member that may be down,
			// never one known to be up.
			down = append(down, Out{m.Pod, "its node " + m.Node + " is not a Node"})
		case !m.Ready:
			down = append(down, Out{m.Pod, w.notReady(m)})
		case h:
			down = append(down, Out{m.Pod, "its node " + m.Node + " holds a slot"})
		}
	}
	remain := total - len(down)
	for _, m := range w.Etcd {
		if m.Node == n.Name {
			remain--
		}
	}
	if remain > total/2 {
		return Block{}, true
	}
	return Block{Limit: LimitQuorum, Max: total, Out: down}, false
}

// quorumWarning is the warning for a control-plane node of an etcd that
// cannot keep a majority without it.
func quorumWarning(n NodeState, w World) string {
	if !n.ControlPlane || !w.EtcdKnown || len(w.Etcd) == 0 || len(w.Etcd) >= 3 {
		return ""
	}
	for _, m := range w.Etcd {
		if m.Node == n.Name {
			return fmt.Sprintf("etcd has %d member(s), one of them on %s: it is unavailable until %s is back", len(w.Etcd), n.Name, n.Name)
		}
	}
	return ""
}
