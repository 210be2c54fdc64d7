#!/bin/sh
# Runs every Go fuzz target for a short while (default 10s each).
set -eu
t=${1:-10s}
for pkg in ./wrappers/shutdown ./wrappers/halt ./internal/config; do
	for f in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
		echo "fuzz $pkg $f ($t)"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
	done
done
