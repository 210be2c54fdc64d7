#!/bin/sh
# Runs every Go fuzz target for a short while (default 10s each).
#
# A duration-based -fuzztime can end in a bare "context deadline exceeded"
# with no failing input: Go's fuzz coordinator races its own deadline when
# a worker is starved of CPU (go.dev/issue/75804; seen here once in seven
# 10 s runs of internal/config's target on 2 loaded cores, at 0 execs/s for
# 8 s). A real finding always writes a failing input under
# testdata/fuzz/TARGET: that fails at once. A failure without one replays
# the corpus deterministically and fuzzes once more, and fails only if that
# fails too.
set -eu
t=${1:-10s}
for pkg in ./wrappers/shutdown ./wrappers/halt ./internal/config ./internal/window ./internal/gatetoken/claims; do
	for f in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
		corpus="$pkg/testdata/fuzz/$f"
		before=$(ls "$corpus" 2>/dev/null || true)
		echo "fuzz $pkg $f ($t)"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg" && continue
		if [ "$(ls "$corpus" 2>/dev/null || true)" != "$before" ]; then
			echo "fuzz: $pkg $f wrote a failing input to $corpus (see above)" >&2
			exit 1
		fi
		echo "fuzz: $pkg $f stopped without a failing input (go.dev/issue/75804); replaying the corpus, then once more"
		go test -count=1 -run "^$f\$" "$pkg"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
	done
done
