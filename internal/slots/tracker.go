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
}

type beatSeen struct {
	beat  int64
	since time.Time
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
	}
	live := map[string]bool{}
	for _, e := range append(rec.Holders[:len(rec.Holders):len(rec.Holders)], rec.Waiters...) {
		k := e.key()
		live[k] = true
		if b, ok := t.beats[k]; !ok || b.beat != e.Beat {
			t.beats[k] = beatSeen{e.Beat, now}
		}
		if _, ok := t.seen[k]; !ok {
			t.seen[k] = now
		}
	}
	for _, h := range rec.Holders {
		k := h.key()
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
		}
	}
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
	b, ok := t.beats[e.key()]
	if !ok || b.beat != e.Beat {
		return 0
	}
	return t.now().Sub(b.since)
}

// Settled is how long e's node has been settled on a new boot.
func (t *Tracker) Settled(e Entry) time.Duration {
	s, ok := t.settled[e.key()]
	if !ok {
		return 0
	}
	return t.now().Sub(s)
}

// HeldFor is how long this process has seen e.
func (t *Tracker) HeldFor(e Entry) time.Duration {
	s, ok := t.seen[e.key()]
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
		k := h.key()
		if !h.Warned && !t.warned[k] && t.HeldFor(h) >= after {
			t.warned[k] = true
			due = append(due, h)
		}
	}
	return due
}
