#!/bin/sh
# version.sh: gnsh's version from git describe, as a version both dpkg and
# rpm accept and order by commit:
#   tag v1.2.3 on HEAD, clean       -> 1.2.3
#   7 commits after v1.2.3          -> 1.2.3+git7.gabc1234
#   no tag yet (183 commits)        -> 0.0.0+git183.gabc1234
#   uncommitted changes             -> ….dirty appended
# (deb: no '-' in the upstream version, which must start with a digit; rpm:
# no '-' in Version; '+' and '.' are fine in both.)
set -eu
d=$(git describe --tags --long --match 'v[0-9]*' --dirty --abbrev=7 2>/dev/null) || d=
dirty=
case "$d" in *-dirty) dirty=.dirty; d=${d%-dirty} ;; esac
if [ -n "$d" ]; then
	hash=${d##*-}; rest=${d%-*}; n=${rest##*-}; tag=${rest%-*}; base=${tag#v}
else
	[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty=.dirty
	base=0.0.0; n=$(git rev-list --count HEAD); hash=g$(git rev-parse --short=7 HEAD)
fi
base=$(printf %s "$base" | tr -c 'A-Za-z0-9.+~\n' '.')
if [ "$n" = 0 ] && [ -z "$dirty" ]; then
	echo "$base"
else
	echo "$base+git$n.$hash$dirty"
fi
