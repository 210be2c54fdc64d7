package logind

import (
	"context"
	"errors"
	"sync"

	"github.com/godbus/dbus/v5"
)

// ErrDisconnected ends a ShutdownWatch whose connection was closed or lost.
var ErrDisconnected = errors.New("D-Bus connection closed")

const (
	busName  = "org.freedesktop.DBus"
	busPath  = dbus.ObjectPath("/org/freedesktop/DBus")
	errNoOwn = "org.freedesktop.DBus.Error.NameHasNoOwner"

	// watchBuffer is the godbus-side channel. godbus delivers every signal
	// of the connection to every registered channel, and when a channel
	// is full it hands the signal to a new goroutine: order is then lost.
	// The watch loop only moves signals into its own queue, so a roomy
	// buffer keeps godbus on the ordered path.
	watchBuffer = 64
	// maxQueued bounds the values waiting for a slow reader; the oldest
	// are dropped first (logind sends a handful per shutdown).
	maxQueued = 16
)

// ShutdownWatch delivers logind's PrepareForShutdown(b) signals: true when
// logind starts a shutdown (delay locks now have InhibitDelayMaxSec to be
// released), false when it gives the shutdown up (a failed or cancelled
// job; delay locks may be taken again).
//
// Only signals sent by the current owner of org.freedesktop.login1 count.
// kubelet's match rule has no sender, so any local process may emit a
// PrepareForShutdown(true) on /org/freedesktop/login1 (the system bus
// allows signals from anyone) and make it kill every pod; for an agent
// that drains the node that would be a denial of service. The match rule
// names org.freedesktop.login1 as sender, which dbus-daemon resolves to
// its owner when it routes each signal, and the watch checks the sender
// again itself: godbus hands every signal of the connection to every
// listener, so a broader match rule elsewhere on the same connection would
// otherwise let a forged one through. The owner's unique name is followed
// across logind restarts through NameOwnerChanged. A fake logind in tests
// works as long as it owns org.freedesktop.login1 (logindtest's does).
type ShutdownWatch struct {
	conn  *dbus.Conn
	sigs  chan *dbus.Signal
	out   chan bool
	stop  chan struct{}
	done  chan struct{}
	rules [][]dbus.MatchOption

	stopOnce sync.Once
	mu       sync.Mutex
	err      error
}

// WatchPrepareForShutdown subscribes to PrepareForShutdown on
// /org/freedesktop/login1, interface org.freedesktop.login1.Manager. ctx
// bounds the setup only. If nobody owns org.freedesktop.login1 yet, the
// watch starts anyway and follows the first owner that appears.
//
// A watch set up after logind has sent PrepareForShutdown(true) never sees
// that signal: read PreparingForShutdown after subscribing to catch up.
func (l *Logind) WatchPrepareForShutdown(ctx context.Context) (*ShutdownWatch, error) {
	if l.conn == nil {
		return nil, errors.New("no D-Bus connection")
	}
	w := &ShutdownWatch{
		conn: l.conn,
		sigs: make(chan *dbus.Signal, watchBuffer),
		out:  make(chan bool),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	l.conn.Signal(w.sigs)
	for _, rule := range [][]dbus.MatchOption{
		{ // first, so that no change of owner after GetNameOwner is missed
			dbus.WithMatchSender(busName), dbus.WithMatchObjectPath(busPath),
			dbus.WithMatchInterface(busName), dbus.WithMatchMember("NameOwnerChanged"),
			dbus.WithMatchArg(0, Login1Service),
		},
		{
			dbus.WithMatchSender(Login1Service), dbus.WithMatchObjectPath(Login1Path),
			dbus.WithMatchInterface(Login1Manager), dbus.WithMatchMember("PrepareForShutdown"),
		},
	} {
		if err := l.conn.AddMatchSignalContext(ctx, rule...); err != nil {
			w.unsubscribe(ctx)
			return nil, convert(err)
		}
		w.rules = append(w.rules, rule)
	}
	// GetNameOwner's reply and the signals share one sequence: a
	// NameOwnerChanged older than the reply is already reflected in it.
	call := l.conn.BusObject().CallWithContext(ctx, busName+".GetNameOwner", 0, Login1Service)
	var owner string
	if err := call.Store(&owner); err != nil {
		if name, _, ok := dbusError(err); !ok || name != errNoOwn {
			w.unsubscribe(ctx)
			return nil, convert(err)
		}
	}
	go w.loop(owner, call.ResponseSequence)
	return w, nil
}

// C delivers the values in the order logind sent them. It is closed when
// the watch ends: after Stop, or when the connection is gone (then the
// values received before are delivered first); Err tells which.
func (w *ShutdownWatch) C() <-chan bool { return w.out }

// Err is nil while the watch runs and after Stop, and ErrDisconnected once
// the connection was closed or lost: dial again, take the lock again and
// read PreparingForShutdown, since signals may have been missed.
func (w *ShutdownWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stop ends the watch, closes C and removes the match rules (bounded by
// ctx; a connection that is already gone is not an error). Stop may be
// called more than once.
func (w *ShutdownWatch) Stop(ctx context.Context) error {
	var err error
	w.stopOnce.Do(func() {
		close(w.stop)
		<-w.done
		err = w.unsubscribe(ctx)
	})
	return err
}

func (w *ShutdownWatch) unsubscribe(ctx context.Context) error {
	w.conn.RemoveSignal(w.sigs)
	var errs []error
	for _, rule := range w.rules {
		if !w.conn.Connected() {
			break
		}
		if err := w.conn.RemoveMatchSignalContext(ctx, rule...); err != nil && w.conn.Connected() {
			errs = append(errs, convert(err))
		}
	}
	w.rules = nil
	return errors.Join(errs...)
}

func (w *ShutdownWatch) loop(owner string, ownerSeq dbus.Sequence) {
	defer close(w.done)
	defer close(w.out)
	var queue []bool
	var lastPFS dbus.Sequence
	sigs := w.sigs
	for {
		if sigs == nil && len(queue) == 0 {
			return
		}
		var out chan<- bool
		var next bool
		if len(queue) > 0 {
			out, next = w.out, queue[0]
		}
		select {
		case <-w.stop:
			return
		case out <- next:
			queue = queue[1:]
		case s, ok := <-sigs:
			if !ok { // godbus closes it when the connection ends
				w.mu.Lock()
				w.err = ErrDisconnected
				w.mu.Unlock()
				sigs = nil
				continue
			}
			switch {
			case s.Name == busName+".NameOwnerChanged" && s.Sender == busName && s.Path == busPath:
				if len(s.Body) == 3 && s.Body[0] == Login1Service && s.Sequence > ownerSeq {
					if o, ok := s.Body[2].(string); ok {
						owner, ownerSeq = o, s.Sequence
					}
				}
			case s.Name == Login1Manager+".PrepareForShutdown" && s.Path == Login1Path:
				start, ok := firstBool(s.Body)
				// Signals that godbus had to hand to a goroutine may come
				// late; a state signal older than the last one is stale.
				if !ok || owner == "" || s.Sender != owner || s.Sequence < lastPFS {
					continue
				}
				lastPFS = s.Sequence
				if len(queue) == maxQueued {
					queue = queue[1:]
				}
				queue = append(queue, start)
			}
		}
	}
}

func firstBool(body []any) (bool, bool) {
	if len(body) == 0 {
		return false, false
	}
	b, ok := body[0].(bool)
	return b, ok
}
