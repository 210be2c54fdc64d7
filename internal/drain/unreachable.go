package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"time"
)

// DefaultUnreachableAfter is how long the API server may stay unreachable
// in the middle of a drain before Drain gives up with *UnreachableError.
// A node must stay rebootable while its control plane is down, so the
// caller then hands off anyway.
const DefaultUnreachableAfter = 10 * time.Second

// UnreachableError means the API server could not be reached (connection
// refused or reset, no answer within the request timeout) for longer than
// Options.UnreachableAfter, or at all when the drain began.
type UnreachableError struct {
	For time.Duration // how long it has been unreachable
	Err error         // the last error
}

func (e *UnreachableError) Error() string {
	if e.For > 0 {
		return fmt.Sprintf("API server unreachable for %s: %v", e.For.Round(time.Second), e.Err)
	}
	return fmt.Sprintf("API server unreachable: %v", e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// IsUnreachable reports whether err means the API server did not answer at
// all, as opposed to answering with an error status.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		// Any transport failure: DNS, TLS handshake, timeouts.
		return true
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	// client-go's per-request timeout surfaces as a deadline on the
	// request's own context.
	return errors.Is(err, context.DeadlineExceeded)
}
