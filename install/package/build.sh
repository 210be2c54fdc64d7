#!/bin/sh
# build.sh [OUTDIR]: gnsh's .deb and .rpm with nfpm (make package; default
# OUTDIR bin/pkg). Uses bin/gnsh (make build). Environment:
# GNSH_PKG_VERSION overrides version.sh, GNSH_PKG_ARCH go env GOARCH,
# GNSH_PKG_FORMATS (default "deb rpm") picks the packages.
# The packaged unit is install/systemd/gnsh.service with ExecStart naming
# /usr/sbin/gnsh, the man pages are rendered here with the package version.
set -eu
cd "$(dirname "$0")/../.."
out=${1:-bin/pkg}
GO=${GO:-go}
[ -x bin/gnsh ] || { echo "build.sh: bin/gnsh missing: make build" >&2; exit 1; }
GNSH_PKG_VERSION=${GNSH_PKG_VERSION:-$(sh install/package/version.sh)}
GNSH_PKG_ARCH=${GNSH_PKG_ARCH:-$($GO env GOARCH)}
case $GNSH_PKG_VERSION in
[0-9]*-* | [0-9]*_* | [!0-9]* | "") echo "build.sh: version $GNSH_PKG_VERSION: want a digit first, no - or _" >&2; exit 1 ;;
esac
GNSH_PKG_STAGE=$(mktemp -d)
export GNSH_PKG_VERSION GNSH_PKG_ARCH GNSH_PKG_STAGE
trap 'rm -rf "$GNSH_PKG_STAGE"' EXIT

cp bin/gnsh "$GNSH_PKG_STAGE/gnsh"
sed 's|^ExecStart=/usr/local/sbin/gnsh |ExecStart=/usr/sbin/gnsh |' install/systemd/gnsh.service >"$GNSH_PKG_STAGE/gnsh.service"
if [ "$(grep '^ExecStart=' "$GNSH_PKG_STAGE/gnsh.service")" != "ExecStart=/usr/sbin/gnsh agent" ]; then
	echo "build.sh: install/systemd/gnsh.service: want one ExecStart=/usr/local/sbin/gnsh agent to turn into /usr/sbin/gnsh" >&2
	exit 1
fi
$GO run ./install/man/gen -version "$GNSH_PKG_VERSION" -out "$GNSH_PKG_STAGE/man" install/man/*.md
gzip -9n "$GNSH_PKG_STAGE"/man/*

mkdir -p "$out"
for f in ${GNSH_PKG_FORMATS:-deb rpm}; do
	case $f in
	deb) $GO tool nfpm package -f install/package/nfpm.yaml -p deb -t "$out/" ;;
	rpm)
		$GO tool nfpm package -f install/package/nfpm.yaml -p rpm -t "$out/"
		# nfpm has no RPM triggers: add %triggerin/%triggerpostun on systemd.
		$GO run ./install/package/rpmtrigger -on systemd -script install/package/rpm/trigger-systemd "$out/gnsh-$GNSH_PKG_VERSION-1".*.rpm
		;;
	*) echo "build.sh: unknown format $f" >&2; exit 1 ;;
	esac
done
