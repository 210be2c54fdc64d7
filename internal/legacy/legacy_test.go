package legacy

import (
	"math"
	"testing"
	"time"
)

func TestFromUsec(t *testing.T) {
	for _, tt := range []struct {
		usec uint64
		want time.Time
	}{
		{0, time.Unix(0, 0)},
		{1_795_000_000_123_456, time.UnixMicro(1_795_000_000_123_456)},
		{math.MaxInt64, MaxTime},
		// Above math.MaxInt64 an int64 conversion gives a time before 1970.
		{math.MaxInt64 + 1, MaxTime},
		{9_601_795_000_000_000_000, MaxTime}, // shutdown 160000000000 in 2026
		{math.MaxUint64 - 1, MaxTime},
		{math.MaxUint64, MaxTime},
	} {
		got := FromUsec(tt.usec)
		if !got.Equal(tt.want) {
			t.Errorf("FromUsec(%d) = %v, want %v", tt.usec, got, tt.want)
		}
		if got.Before(time.Unix(0, 0)) {
			t.Errorf("FromUsec(%d) = %v, before the epoch", tt.usec, got)
		}
	}
	if MaxTime.Year() != 294247 {
		t.Errorf("MaxTime = %v", MaxTime)
	}
}

func TestDueIn(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 15, 30, 250_000_000, time.UTC)
	n := Usec(now)
	const minute = uint64(60_000_000)
	// plus is now + m minutes in uint64 arithmetic (C's wrap-around, which
	// Go constants refuse).
	plus := func(m uint64) uint64 { return n + m*minute }
	for _, tt := range []struct {
		name string
		when uint64
		want time.Duration
	}{
		{"immediate", 0, 0},
		{"now", n, 0},
		{"past", n - 1, 0},
		{"1µs", n + 1, time.Microsecond},
		{"+5", n + 5*minute, 5 * time.Minute},
		{"largest Duration in µs", n + math.MaxInt64/1000, math.MaxInt64 / 1000 * 1000},
		{"one µs more", n + math.MaxInt64/1000 + 1, math.MaxInt64},
		{"+153722867280 (just above MaxInt64)", plus(153722867280), math.MaxInt64},
		{"+160000000000", plus(160000000000), math.MaxInt64},
		{"MaxUint64", math.MaxUint64, math.MaxInt64},
		// now + 307445734561 min wraps past 2^64 to about 50 s ago.
		{"+307445734561 wraps into the past", plus(307445734561), 0},
		// now + 307445734562 min wraps to about 10.4 s from now.
		{"+307445734562 wraps into the future", plus(307445734562), 10448384 * time.Microsecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Request{When: tt.when}
			if got := r.DueIn(now); got != tt.want {
				t.Errorf("DueIn(When=%d) = %v, want %v", tt.when, got, tt.want)
			}
		})
	}
}

func TestUntilBeforeEpoch(t *testing.T) {
	before := time.Unix(-10, 0)
	if got := Until(0, before); got != 10*time.Second {
		t.Errorf("Until(0, -10s) = %v", got)
	}
	if got := Until(math.MaxUint64, time.UnixMicro(math.MinInt64)); got != math.MaxInt64 {
		t.Errorf("Until(MaxUint64, MinInt64 µs) = %v", got)
	}
	if got := Until(1, before); got != 10*time.Second+time.Microsecond {
		t.Errorf("Until(1, -10s) = %v", got)
	}
}
