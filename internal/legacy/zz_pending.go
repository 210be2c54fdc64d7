package legacy

// TEMPORARY stand-in for the API being built on branch misc-hardening.

import (
	"math"
	"time"
)

func (r *Request) DueIn(now time.Time) time.Duration {
	n := Usec(now)
	if r.When <= n {
		return 0
	}
	d := r.When - n
	if d > uint64(math.MaxInt64/1000) {
		return math.MaxInt64
	}
	return time.Duration(d) * time.Microsecond
}
