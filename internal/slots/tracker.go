package slots

import (
	"time"

	"k8s.io/utils/clock"
)

// Tracker is what this process observed of the record and the nodes, on
// its own monotonic clock: since when each entry's Beat has not changed,
// since when each holder's node has been back and settled, since when each
// holder has been seen. An entry first seen now has lasted nothing yet, so
// a process that just started frees nothing early. Not safe for concurrent
// use.
type Tracker struct {
	Clock clock.PassiveClock // clock.RealClock if nil

	beats   map[string]beatSeen
	settled map[string]time.Time
	seen    map[string]time.Time
	warned  map[string]bool
	alive   map[string]aliveSeen
	fit     map[string]time.Time
	// boots: the boot ID each waiter's Node showed when first seen here
	// with one (FirstBoot).
	boots map[string]string
}

type beatSeen struct {
	beat  int64
	renew int64
	since time.Time
}

// aliveSeen is a holder's kubelet heartbeat while its Beat is beat:
// the kubelet's renewTime first and last seen (the kubelet's clock, only
// compared with itself), and when the last one was first seen here.
type aliveSeen struct {
	beat        int64
	first, last time.Time
	lastAt      time.Time
	fresh       time.Duration
}

var _ Observations = (*Tracker)(nil)

func (t *Tracker) now() time.Time {
	if t.Clock == nil {
		return time.Now()
	}
	return t.Clock.Now()
}

// Observe takes in one state of the record and the cluster.
func (t *Tracker) Observe(rec Record, w World) {
	now := t.now()
	if t.beats == nil {
		t.beats, t.settled, t.seen, t.warned = map[string]beatSeen{}, map[string]time.Time{}, map[string]time.Time{}, map[string]bool{}
		t.alive, t.boots = map[string]aliveSeen{}, map[string]string{}
	}
	live := map[string]bool{}
	for _, e := range append(rec.Holders[:len(rec.Holders):len(rec.Holders)], rec.Waiters...) {
		k := trackKey(e)
		live[k] = true
		// A new Beat, or a new period (a waiter admitted keeps its key
		// but not its role: see trackKey), starts the silence again.
		if b, ok := t.beats[k]; !ok || b.beat != e.Beat || b.renew != e.Renew {
			t.beats[k] = beatSeen{e.Beat, e.Renew, now}
		}
		if _, ok := t.seen[k]; !ok {
			t.seen[k] = now
		}
		if _, ok := t.boots[k]; !ok && e.Phase == "" {
			if n, ok := w.Nodes[e.Node]; ok && n.UID == e.UID && n.Boot != "" {
				t.boots[k] = n.Boot
			}
		}
	}
	for _, h := range rec.Holders {
		k := trackKey(h)
		if hb, ok := w.Heartbeats[h.Node]; ok && !hb.Renewed.IsZero() {
			a, seen := t.alive[k]
			fresh := max(hb.Duration/2, 10*time.Second)
			switch {
			case !seen || a.beat != h.Beat:
				a = aliveSeen{beat: h.Beat, first: hb.Renewed, last: hb.Renewed, lastAt: now}
			case hb.Renewed.After(a.last):
				if hb.Renewed.Sub(a.last) > fresh {
					// A gap in the heartbeat (the kubelet's own clock): the
					// node may have gone down and come back (a fast reboot,
					// its new boot ID not reported yet). Alive only since.
					a.first = hb.Renewed
				}
				a.last, a.lastAt = hb.Renewed, now
			}
			a.fresh = fresh
			t.alive[k] = a
		}
		if settled(h, w) {
			if _, ok := t.settled[k]; !ok {
				t.settled[k] = now
			}
		} else {
			delete(t.settled, k)
		}
	}
	for k := range t.beats {
		if !live[k] {
			delete(t.beats, k)
			delete(t.settled, k)
			delete(t.seen, k)
			delete(t.warned, k)
			delete(t.alive, k)
			delete(t.boots, k)
		}
	}
}

// trackKey is what the tracker follows an entry by: its key and whether
// it is a holder (a phase) or a waiter, so that a waiter admitted starts a
// new silence as a holder.
func trackKey(e Entry) string {
	if e.Phase == "" {
		return e.key() + "/waiter"
	}
	return e.key() + "/holder"
}

// settled reports whether h's node is up on a new boot and back in
// service: Ready, schedulable (unless it was cordoned before), and for a
// control-plane node its etcd member Ready.
func settled(h Entry, w World) bool {
	n, ok := w.Nodes[h.Node]
	if !ok || n.UID != h.UID || n.Boot == "" || n.Boot == h.Boot || !n.Ready || n.Deleting ||
		n.Unschedulable && !h.WasUnschedulable {
		return false
	}
	return !n.ControlPlane || w.EtcdKnown && etcdReady(n.Name, w)
}

// etcdReady reports whether node's etcd member, if it has one, is Ready.
func etcdReady(node string, w World) bool {
	for _, m := range w.Etcd {
		if m.Node == node && !m.Ready {
			return false
		}
	}
	return true
}

// Silent is how long e's Beat has not changed, as seen here.
func (t *Tracker) Silent(e Entry) time.Duration {
	b, ok := t.beats[trackKey(e)]
	if !ok || b.beat != e.Beat || b.renew != e.Renew {
		return 0
	}
	return t.now().Sub(b.since)
}

// FirstBoot is the boot ID e's Node showed when this process first saw
// the waiter e with its Node showing one; "" if none was seen. A Node
// whose boot ID has changed since has rebooted while e waited; one that
// showed another boot than e's from the start may only be out of date.
func (t *Tracker) FirstBoot(e Entry) string { return t.boots[trackKey(e)] }

// Alive is how long e's node's kubelet has been seen renewing its
// heartbeat since e's Beat was last seen to change (Observations.Alive).
func (t *Tracker) Alive(e Entry) time.Duration {
	a, ok := t.alive[trackKey(e)]
	if !ok || a.beat != e.Beat || t.now().Sub(a.lastAt) > a.fresh {
		return 0
	}
	return a.last.Sub(a.first)
}

// Settled is how long e's node has been settled on a new boot.
func (t *Tracker) Settled(e Entry) time.Duration {
	s, ok := t.settled[trackKey(e)]
	if !ok {
		return 0
	}
	return t.now().Sub(s)
}

// HeldFor is how long this process has seen e.
func (t *Tracker) HeldFor(e Entry) time.Duration {
	s, ok := t.seen[trackKey(e)]
	if !ok {
		return 0
	}
	return t.now().Sub(s)
}

// Overdue lists the holders seen for longer than after and not reported
// yet (here, or by another observer: Warned), and marks them reported here.
func (t *Tracker) Overdue(rec Record, after time.Duration) []Entry {
	var due []Entry
	for _, h := range rec.Holders {
		k := trackKey(h)
		if !h.Warned && !t.warned[k] && t.HeldFor(h) >= after {
			t.warned[k] = true
			due = append(due, h)
		}
	}
	return due
}

// Unwarn forgets that h was reported here (its warning could not be
// posted): it is reported again at the next look.
func (t *Tracker) Unwarn(h Entry) { delete(t.warned, trackKey(h)) }

// Fits takes in the waiters a decision found fitting (Verdict.Fit): each
// is fitting since it was first seen so without a break.
func (t *Tracker) Fits(es []Entry) {
	now := t.now()
	if t.fit == nil {
		t.fit = map[string]time.Time{}
	}
	live := map[string]bool{}
	for _, e := range es {
		k := trackKey(e)
		live[k] = true
		if _, ok := t.fit[k]; !ok {
			t.fit[k] = now
		}
	}
	for k := range t.fit {
		if !live[k] {
			delete(t.fit, k)
		}
	}
}

// Fitting is how long e has been seen fitting (Fits) without taking its
// slot.
func (t *Tracker) Fitting(e Entry) time.Duration {
	s, ok := t.fit[trackKey(e)]
	if !ok {
		return 0
	}
	return t.now().Sub(s)
}
