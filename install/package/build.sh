#!/bin/sh
# build.sh [OUTDIR]: gnsh's .deb and .rpm with nfpm (make package; default
# OUTDIR bin/pkg). Environment:
#   GNSH_PKG_BIN      the binary to package (default bin/gnsh, make build)
#   GNSH_PKG_VERSION  the version (default version.sh)
#   GNSH_PKG_ARCH     its architecture, Go's name (default go env GOARCH)
#   GNSH_PKG_FORMATS  the packages (default "deb rpm")
#   SOURCE_DATE_EPOCH the files' mtimes (default the commit's date), so
#                     that two builds of one commit are the same
# The packaged unit is install/systemd/gnsh.service with ExecStart naming
# /usr/sbin/gnsh, the man pages are rendered here with the package version.
set -eu
cd "$(dirname "$0")/../.."
out=${1:-bin/pkg}
GO=${GO:-go}
bin=${GNSH_PKG_BIN:-bin/gnsh}
[ -x "$bin" ] || { echo "build.sh: $bin missing: make build" >&2; exit 1; }
GNSH_PKG_VERSION=${GNSH_PKG_VERSION:-$(sh install/package/version.sh)}
GNSH_PKG_ARCH=${GNSH_PKG_ARCH:-$($GO env GOARCH)}
case $GNSH_PKG_VERSION in
[0-9]*-* | [0-9]*_* | [!0-9]* | "") echo "build.sh: version $GNSH_PKG_VERSION: want a digit first, no - or _" >&2; exit 1 ;;
esac
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null) || SOURCE_DATE_EPOCH=
	[ -n "$SOURCE_DATE_EPOCH" ] || SOURCE_DATE_EPOCH=$(date -r VERSION +%s)
fi
GNSH_PKG_STAGE=$(mktemp -d)
export GNSH_PKG_VERSION GNSH_PKG_ARCH GNSH_PKG_STAGE SOURCE_DATE_EPOCH
trap 'rm -rf "$GNSH_PKG_STAGE"' EXIT

cp "$bin" "$GNSH_PKG_STAGE/gnsh"
sed 's|^ExecStart=/usr/local/sbin/gnsh |ExecStart=/usr/sbin/gnsh |' install/systemd/gnsh.service >"$GNSH_PKG_STAGE/gnsh.service"
if [ "$(grep '^ExecStart=' "$GNSH_PKG_STAGE/gnsh.service")" != "ExecStart=/usr/sbin/gnsh agent" ]; then
	echo "build.sh: install/systemd/gnsh.service: want one ExecStart=/usr/local/sbin/gnsh agent to turn into /usr/sbin/gnsh" >&2
	exit 1
fi
$GO run ./install/man/gen -version "$GNSH_PKG_VERSION" -out "$GNSH_PKG_STAGE/man" install/man/*.md
gzip -9n "$GNSH_PKG_STAGE"/man/*

# Each package is built in a directory of its own, then moved to OUTDIR
# (which may hold the packages of another architecture).
mkdir -p "$out" "$GNSH_PKG_STAGE/out"
for f in ${GNSH_PKG_FORMATS:-deb rpm}; do
	case $f in
	deb) $GO tool nfpm package -f install/package/nfpm.yaml -p deb -t "$GNSH_PKG_STAGE/out/" ;;
	rpm)
		$GO tool nfpm package -f install/package/nfpm.yaml -p rpm -t "$GNSH_PKG_STAGE/out/"
		# nfpm has no RPM triggers: add %triggerin/%triggerpostun on systemd.
		$GO run ./install/package/rpmtrigger -on systemd -script install/package/rpm/trigger-systemd "$GNSH_PKG_STAGE/out/"*.rpm
		;;
	*) echo "build.sh: unknown format $f" >&2; exit 1 ;;
	esac
	mv "$GNSH_PKG_STAGE/out/"* "$out/"
done
