#!/bin/sh
# release.sh [OUTDIR]: a release of gnsh (make release; default OUTDIR
# bin/release, which must be empty or absent), for each architecture:
#   gnsh_VERSION_linux_ARCH.tar.gz   one directory gnsh_VERSION_linux_ARCH/
#       with the static binary gnsh, the man pages (gnsh.8,
#       gnsh-shutdown.8, gnsh-config.5), the node agent's unit gnsh.service
#       (ExecStart=/usr/local/sbin/gnsh), the annotated example config.yaml,
#       rbac.yaml, LICENSE, README.md and CHANGELOG.md
#   gnsh_VERSION-1_ARCH.deb, gnsh-VERSION-1.RPMARCH.rpm (build.sh)
# and SHA256SUMS over all of them (sha256sum -c SHA256SUMS).
# Reproducible: go build -trimpath, the commit and its date stamped in, the
# archive's files sorted, owned by 0:0, modes 0755/0644, their mtimes the
# commit's date (SOURCE_DATE_EPOCH overrides it), gzip without a name or
# time. Environment:
#   GNSH_RELEASE_VERSION  the version (default version.sh)
#   GNSH_RELEASE_ARCHS    default "amd64 arm64"
#   GNSH_RELEASE_FORMATS  default "tar deb rpm"
set -eu
cd "$(dirname "$0")/../.."
out=${1:-bin/release}
GO=${GO:-go}
version=${GNSH_RELEASE_VERSION:-$(sh install/package/version.sh)}
archs=${GNSH_RELEASE_ARCHS:-amd64 arm64}
formats=${GNSH_RELEASE_FORMATS:-tar deb rpm}
ldflags=$(sh install/package/version.sh -ldflags "$version")
case $version in
[0-9]*-* | [0-9]*_* | [!0-9]* | */* | "") echo "release.sh: version $version: want a digit first, no -, _ or /" >&2; exit 1 ;;
esac
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null) || SOURCE_DATE_EPOCH=
	[ -n "$SOURCE_DATE_EPOCH" ] || SOURCE_DATE_EPOCH=$(date -r VERSION +%s)
fi
export SOURCE_DATE_EPOCH
if [ -d "$out" ] && [ -n "$(ls -A "$out")" ]; then
	echo "release.sh: $out is not empty: remove it first (make release does)" >&2
	exit 1
fi
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

$GO run ./install/man/gen -version "$version" -out "$stage/man" install/man/*.md
for arch in $archs; do
	name=gnsh_${version}_linux_$arch
	top=$stage/$name
	mkdir -p "$top"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch $GO build -trimpath -ldflags "$ldflags" -o "$top/gnsh" ./cmd/gnsh
	chmod 0755 "$top/gnsh"
	for f in install/systemd/gnsh.service install/gnsh/config.yaml install/kubernetes/rbac.yaml LICENSE README.md CHANGELOG.md "$stage"/man/*; do
		cp "$f" "$top/"
		chmod 0644 "$top/$(basename "$f")"
	done
	pkgs=
	for f in $formats; do
		case $f in
		tar)
			# ustar: no atime, ctime or other extended headers.
			tar --format=ustar --sort=name --owner=0 --group=0 --numeric-owner --mode=u=rwX,go=rX \
				--mtime="@$SOURCE_DATE_EPOCH" -C "$stage" -cf - "$name" | gzip -9n >"$out/$name.tar.gz"
			;;
		deb | rpm) pkgs="$pkgs $f" ;;
		*) echo "release.sh: unknown format $f" >&2; exit 1 ;;
		esac
	done
	if [ -n "$pkgs" ]; then
		GNSH_PKG_BIN=$top/gnsh GNSH_PKG_VERSION=$version GNSH_PKG_ARCH=$arch GNSH_PKG_FORMATS=$pkgs sh install/package/build.sh "$out"
	fi
done
(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum --) >"$stage/SHA256SUMS"
mv "$stage/SHA256SUMS" "$out/SHA256SUMS"
(cd "$out" && ls -l)
