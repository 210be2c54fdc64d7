package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gnsh/gnsh/internal/handoff"
	"github.com/gnsh/gnsh/internal/logind"
)

// connectTimeout bounds connecting and authenticating to a bus.
const connectTimeout = 5 * time.Second

// Buses dials the system bus for logind and, for the fallback, systemd on
// the bus or on PID 1's private socket. It keeps connections open until
// Close.
type Buses struct {
	Getenv func(string) string
	conns  []*logind.Conn
	bus    *logind.Conn
	busErr error
	dialed bool
}

func (b *Buses) systemBus(ctx context.Context) (*logind.Conn, error) {
	if !b.dialed {
		b.dialed = true
		ctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		b.bus, b.busErr = logind.Dial(ctx, logind.SystemBusAddress(b.Getenv), false)
		if b.bus != nil {
			b.conns = append(b.conns, b.bus)
		}
	}
	return b.bus, b.busErr
}

// Logind connects to org.freedesktop.login1 on the system bus.
func (b *Buses) Logind(ctx context.Context) (handoff.Logind, error) {
	c, err := b.systemBus(ctx)
	if err != nil {
		return nil, err
	}
	return c.Logind(), nil
}

// Systemd returns systemd's Manager, trying the system bus first and PID
// 1's private socket when the bus or systemd on it cannot be reached.
func (b *Buses) Systemd(ctx context.Context) (handoff.Systemd, error) {
	return systemdChain{b}, nil
}

type systemdChain struct{ b *Buses }

func (s systemdChain) StartUnit(ctx context.Context, name, mode string) error {
	var errBus error
	if c, err := s.b.systemBus(ctx); err == nil {
		errBus = c.Systemd().StartUnit(ctx, name, mode)
		var ue *handoff.UnreachableError
		if errBus == nil || !errors.As(errBus, &ue) {
			return errBus
		}
	} else {
		errBus = err
	}
	dctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	p, err := logind.Dial(dctx, logind.SystemdPrivate, true)
	if err != nil {
		return fmt.Errorf("system bus: %v; %v", errBus, err)
	}
	s.b.conns = append(s.b.conns, p)
	return p.Systemd().StartUnit(ctx, name, mode)
}

// Close closes every connection opened.
func (b *Buses) Close() {
	for _, c := range b.conns {
		_ = c.Close()
	}
}
