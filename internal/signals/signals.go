// Package signals is gnsh's one handler of SIGINT, SIGTERM, SIGHUP and
// SIGPIPE, made once in main and handed down. Library code never calls
// signal.Notify or signal.Ignore itself; it asks the handler for a mode:
//
//   - no mode (the start, and whenever every mode was left): no handler is
//     installed, so each signal has its default action, exactly as for
//     systemd's own commands. A machine that is not a Kubernetes node sees
//     no difference from systemd, and Ctrl-C during a D-Bus call ends the
//     command as it ends systemctl (never a fallback that bypasses
//     inhibitors).
//   - Drain: a drain is under way. SIGINT and SIGTERM cancel the context
//     Drain returned (the drain stops and undoes gnsh's cordon); SIGHUP
//     (the ssh session dropped) and SIGPIPE (output gone) are reported
//     once and ignored, so the drain carries on. SIGTSTP (Ctrl-Z) is
//     reported and ignored too: a stopped command would keep the node's
//     reboot slot and drain lock for as long as it stays stopped (its
//     run lock tells the node agent that it still runs, so the agent
//     renews its slot), and every other node would wait on it.
//   - Hold: the hand-off to logind, or an undo, is under way and must not
//     be cut in half (each is bounded). Every signal is reported and held.
//
// Modes nest: leaving one returns to the mode before it. A caught signal is
// always reported on the say function, never dropped.
package signals

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Mode is how the handler treats a signal.
type Mode int

// Modes; see the package comment.
const (
	Default Mode = iota
	Drain
	Hold
)

// handled are the signals the handler takes over in Drain and Hold.
var handled = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGTSTP}

// Handler is the process's signal handler. Use New; a nil *Handler is
// valid and handles nothing (every method is a no-op), for library tests.
type Handler struct {
	say func(string) // one whole line, without the newline

	// Seams for tests; os/signal and kill(2) otherwise.
	notify func(chan<- os.Signal, ...os.Signal)
	reset  func(...os.Signal)
	raise  func(syscall.Signal)

	mu       sync.Mutex
	ch       chan os.Signal
	stack    []*frame
	caught   syscall.Signal // the first SIGINT/SIGTERM that interrupted a drain
	held     syscall.Signal // the first SIGINT/SIGTERM that came during a Hold
	toldHUP  bool
	toldPIP  bool
	toldTSTP bool
}

type frame struct {
	mode   Mode
	cancel context.CancelFunc // Drain only
	why    string             // Hold only: what must not be interrupted
}

// New returns a handler that reports caught signals through say (a line
// without its newline; "gnsh: " is included by the caller's say).
func New(say func(string)) *Handler {
	return &Handler{say: say, notify: signal.Notify, reset: signal.Reset,
		raise: func(s syscall.Signal) { _ = syscall.Kill(os.Getpid(), s) }}
}

// NewDetached returns a handler that never touches the process's signal
// dispositions: signals reach it only through Deliver. For tests of code
// that uses a Handler, and for callers that receive signals another way.
func NewDetached(say func(string)) *Handler {
	h := New(say)
	h.notify = func(chan<- os.Signal, ...os.Signal) {}
	h.reset = func(...os.Signal) {}
	h.raise = func(syscall.Signal) {}
	return h
}

// Deliver acts on sig as if the process had received it. With no mode
// active, a detached handler ignores it (a real one would have died).
func (h *Handler) Deliver(sig syscall.Signal) { h.handle(sig) }

// Drain enters Drain mode: the returned context is cancelled by the first
// SIGINT or SIGTERM (Caught then names it). leave returns to the previous
// mode; it is idempotent.
func (h *Handler) Drain(ctx context.Context) (_ context.Context, leave func()) {
	if h == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &frame{mode: Drain, cancel: cancel}
	h.push(f)
	return ctx, h.popper(f, cancel)
}

// Hold enters Hold mode while why (e.g. "handing the reboot to
// systemd-logind") is under way. leave returns to the previous mode.
func (h *Handler) Hold(why string) (leave func()) {
	if h == nil {
		return func() {}
	}
	f := &frame{mode: Hold, why: why}
	h.push(f)
	return h.popper(f, nil)
}

// Caught returns the SIGINT or SIGTERM that interrupted a drain, or 0.
func (h *Handler) Caught() syscall.Signal {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.caught
}

// Held returns the first SIGINT or SIGTERM that came while a Hold was
// under way (reported, not acted on), or 0. A process that goes on after
// the Hold (the node agent) asks it to stop then.
func (h *Handler) Held() syscall.Signal {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// Mode returns the current mode.
func (h *Handler) Mode() Mode {
	if h == nil {
		return Default
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.stack) == 0 {
		return Default
	}
	return h.stack[len(h.stack)-1].mode
}

func (h *Handler) push(f *frame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.stack) == 0 {
		if h.ch == nil {
			h.ch = make(chan os.Signal, 8)
			go h.loop(h.ch)
		}
		h.notify(h.ch, handled...)
	}
	h.stack = append(h.stack, f)
}

func (h *Handler) popper(f *frame, cancel context.CancelFunc) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			for i := len(h.stack) - 1; i >= 0; i-- {
				if h.stack[i] == f {
					h.stack = append(h.stack[:i], h.stack[i+1:]...)
					break
				}
			}
			if len(h.stack) == 0 {
				// Back to the default actions. A signal already queued on
				// the channel is handled by loop, which re-raises it.
				h.reset(handled...)
			}
			h.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		})
	}
}

func (h *Handler) loop(ch <-chan os.Signal) {
	for s := range ch {
		sig, ok := s.(syscall.Signal)
		if !ok {
			continue
		}
		h.handle(sig)
	}
}

// handle acts on one signal according to the current mode.
func (h *Handler) handle(sig syscall.Signal) {
	h.mu.Lock()
	if len(h.stack) == 0 {
		// It arrived as the last mode was left: give it its default
		// action now, as if no handler had ever been installed.
		h.mu.Unlock()
		if sig != syscall.SIGPIPE {
			h.raise(sig)
		}
		return
	}
	top := h.stack[len(h.stack)-1]
	var line string
	switch sig {
	case syscall.SIGHUP:
		if !h.toldHUP {
			h.toldHUP = true
			line = "SIGHUP received (terminal or ssh session gone?); carrying on"
		}
	case syscall.SIGPIPE:
		// Output is gone; say it once (the line itself may fail with
		// EPIPE, which must not loop).
		if !h.toldPIP {
			h.toldPIP = true
			line = "SIGPIPE received (output closed); carrying on"
		}
	case syscall.SIGTSTP:
		if !h.toldTSTP {
			h.toldTSTP = true
			line = "SIGTSTP (Ctrl-Z) received: not stopping while gnsh holds this node's reboot slot or drain (other nodes would wait on a stopped command); carrying on, Ctrl-C interrupts it"
		}
	default: // SIGINT, SIGTERM
		switch {
		case top.mode == Hold:
			if h.held == 0 {
				h.held = sig
			}
			line = fmt.Sprintf("%s received while %s; not interrupting that (it is bounded)", Name(sig), top.why)
		case h.caught == 0:
			h.caught = sig
			// Every Drain under way stops, the outer ones too (the node
			// agent's life is one, its drains nest inside): each reports
			// the interruption itself.
			for _, f := range h.stack {
				if f.cancel != nil {
					f.cancel()
				}
			}
		default:
			line = fmt.Sprintf("%s received again; stopping as soon as gnsh's changes are undone", Name(sig))
		}
	}
	h.mu.Unlock()
	if line != "" && h.say != nil {
		h.say(line)
	}
}

// Name is "SIGINT", "SIGTERM", … for the signals gnsh handles.
func Name(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGTSTP:
		return "SIGTSTP"
	}
	return s.String()
}
