#!/bin/sh
# version.sh: this tree's version, from the VERSION file at the top of the
# repository (the latest release's semantic version, MAJOR.MINOR.PATCH) and
# git. Run it at the top of the tree.
#   the commit that set VERSION, clean    -> 0.1.0
#   a commit tagged v0.1.0, clean          -> 0.1.0 (the release, when
#                                             commits followed the one
#                                             that set VERSION)
#   7 commits after the one that set it    -> 0.1.0+git7.gabc1234
#   uncommitted or untracked changes      -> ….dirty appended (0.1.0+git0.gabc1234.dirty)
#   not a git checkout (a source archive)  -> 0.1.0
# dpkg and rpm both order these as the commits: 0.1.0 < 0.1.0+git7… <
# 0.1.0+git12… < 0.1.1 (deb: no '-', a digit first; rpm: no '-' in
# Version; '+' and '.' are fine in both). "Changes" counts what go build
# counts as vcs.modified: git status --porcelain, untracked files included.
#
# version.sh -ldflags [VERSION]: the -ldflags of a release build of this
# tree: -s -w and internal/version's Version (VERSION, default the above),
# Commit (12 hex digits) and Date (the commit's, UTC, YYYY-MM-DD; never the
# build's, so that two builds of one commit are the same file).
set -eu
pkg=github.com/gnsh/gnsh/internal/version
[ -f VERSION ] || { echo "version.sh: no VERSION file here: run it at the top of the gnsh tree" >&2; exit 1; }
base=$(cat VERSION)
case $base in
*[!0-9.]* | .* | *. | *..* | "") ok=no ;;
*) ok=$(printf %s "$base" | awk -F. 'NF == 3 { print "yes" }') ;;
esac
[ "$ok" = yes ] || { echo "version.sh: VERSION holds \"$base\": want MAJOR.MINOR.PATCH, such as 0.1.0" >&2; exit 1; }

git=no
if command -v git >/dev/null 2>&1 && [ -n "$(git rev-parse --verify -q HEAD 2>/dev/null)" ]; then
	git=yes
fi

version() {
	if [ "$git" = no ]; then
		echo "$base"
		return
	fi
	dirty=
	[ -z "$(git status --porcelain)" ] || dirty=.dirty
	set=$(git log -1 --format=%H -- VERSION)
	if [ -n "$set" ]; then
		n=$(git rev-list --count "$set..HEAD")
	else
		n=$(git rev-list --count HEAD)
	fi
	if [ -z "$dirty" ] && { [ "$n" = 0 ] || git tag --points-at HEAD | grep -qxF "v$base"; }; then
		echo "$base"
	else
		echo "$base+git$n.g$(git rev-parse --short=7 HEAD)$dirty"
	fi
}

case ${1:-} in
"") version ;;
-ldflags)
	v=${2:-$(version)}
	commit= date=
	if [ "$git" = yes ]; then
		commit=$(git rev-parse --short=12 HEAD)
		date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%d)
	fi
	echo "-s -w -X $pkg.Version=$v -X $pkg.Commit=$commit -X $pkg.Date=$date"
	;;
*) echo "version.sh: usage: version.sh [-ldflags [VERSION]]" >&2; exit 2 ;;
esac
