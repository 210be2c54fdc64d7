#!/bin/sh
# make demo: the gap and the fix, in a throwaway Debian bullseye container
# (systemd 247). A kubelet-style delay inhibitor is held, then `reboot` is
# typed as root: once with bullseye's own reboot, once with gnsh installed
# over it. Containers run with --volatile=overlay: the cached rootfs is not
# changed. Needs root, systemd-nspawn and debootstrap (make deps).
set -eu
cd "$(dirname "$0")/../.."
BIN=${GNSH_BIN:-$PWD/bin/gnsh}
[ -x "$BIN" ] || { echo "demo: build gnsh first (make build)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it boots containers)" >&2; exit 1; }
SUITE=${DEMO_SUITE:-bullseye}
echo "== preparing a Debian $SUITE root file system (cached after the first run)"
ROOTFS=$(sh test/e2e/rootfs.sh "$SUITE" | tail -n 1)
WORK=$(mktemp -d)
trap 'for p in $(cat "$WORK"/nspawn.pid 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT INT TERM
printf '[Login]\nInhibitDelayMaxSec=5\n' > "$WORK/delay.conf"

pid1() { # the container's PID 1: a child of nspawn whose NSpid ends in 1
	for c in $(pgrep -P "$1"); do
		grep -Eq '^NSpid:.*[[:space:]]1$' "/proc/$c/status" 2>/dev/null && { echo "$c"; return 0; }
	done
	return 1
}

# run_case NAME INSTALL_GNSH: boots, holds the lock, types reboot, reports.
run_case() {
	name=$1 gnsh=$2 log=$WORK/$1
	mkdir -p "$log"
	systemd-nspawn -q -D "$ROOTFS" -b --register=no --keep-unit --volatile=overlay \
		--machine="gnsh-demo-$name" \
		--bind-ro="$BIN:/usr/local/sbin/gnsh" \
		--bind-ro="$WORK/delay.conf:/etc/systemd/logind.conf.d/demo.conf" \
		--bind="$log:/var/log/demo" \
		>"$log/console" 2>&1 </dev/null &
	ns=$!
	echo "$ns" >>"$WORK/nspawn.pid"
	L=
	for _ in $(seq 200); do L=$(pid1 "$ns") && break; sleep 0.05; done
	[ -n "$L" ] || { echo "demo: container did not start; console:" >&2; cat "$log/console" >&2; exit 1; }
	for _ in $(seq 600); do
		nsenter -t "$L" -a busctl call org.freedesktop.login1 /org/freedesktop/login1 \
			org.freedesktop.login1.Manager ListInhibitors >/dev/null 2>&1 && break
		sleep 0.05
	done
	nsenter -t "$L" -a systemctl is-system-running --wait >/dev/null 2>&1 || true
	nsenter -t "$L" -a systemd-run --quiet --unit=demo-monitor -p StandardOutput=file:/var/log/demo/monitor \
		dbus-monitor --system "type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForShutdown'"
	nsenter -t "$L" -a systemd-run --quiet --unit=demo-kubelet \
		systemd-inhibit --what=shutdown --mode=delay --who=kubelet --why="Kubelet needs time to handle node shutdown" sleep 1000
	for _ in $(seq 100); do [ -s "$log/monitor" ] && break; sleep 0.05; done
	[ -s "$log/monitor" ] || { echo "demo: dbus-monitor did not start" >&2; exit 1; }
	if [ "$gnsh" = yes ]; then
		for c in reboot poweroff halt shutdown; do nsenter -t "$L" -a ln -sf /usr/local/sbin/gnsh "/usr/sbin/$c"; done
	fi
	what=$(nsenter -t "$L" -a readlink /usr/sbin/reboot)
	echo "-- $name: /usr/sbin/reboot -> $what; inhibitors held:"
	nsenter -t "$L" -a systemd-inhibit --list --no-pager 2>/dev/null | sed -n '/kubelet/p' | sed 's/^/     /'
	echo "   root types: reboot"
	start=$(date +%s.%N)
	nsenter -t "$L" -a reboot >"$log/out" 2>&1 || true
	rc=0
	wait "$ns" || rc=$?
	end=$(date +%s.%N)
	secs=$(echo "$start $end" | awk '{printf "%.1f", $2-$1}')
	pfs=no
	# the monitor's log is on the host, so it survives the container
	grep -q 'boolean true' "$log/monitor" 2>/dev/null && pfs=yes
	echo "$pfs" >"$log/pfs"; echo "$secs" >"$log/secs"; echo "$rc" >"$log/rc"
	sed 's/^/   reboot said: /' "$log/out"
}

echo "== case 1: $SUITE's own reboot"
run_case stock no
echo "== case 2: gnsh installed over reboot"
run_case gnsh yes

r() { cat "$WORK/$1/$2"; }
echo
printf '%-34s %-26s %s\n' "" "stock reboot ($SUITE)" "gnsh reboot"
printf '%-34s %-26s %s\n' "PrepareForShutdown sent by logind" "$(r stock pfs)" "$(r gnsh pfs)"
printf '%-34s %-26s %s\n' "down after (s; lock allows 5 s)" "$(r stock secs)" "$(r gnsh secs)"
printf '%-34s %-26s %s\n' "container exit (133 = reboot)" "$(r stock rc)" "$(r gnsh rc)"
echo
if [ "$(r gnsh pfs)" = yes ] && [ "$(r gnsh rc)" = 133 ]; then
	echo "gnsh routed the reboot through systemd-logind: the delay inhibitor (kubelet's"
	echo "graceful node shutdown lock) was honoured."
else
	echo "demo: gnsh's reboot did not go through logind as expected; logs in $WORK" >&2
	trap - EXIT
	exit 1
fi
