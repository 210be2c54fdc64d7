#!/bin/sh
# make demo: the gap and the fix on Kubernetes nodes, in Debian bullseye
# containers (systemd 247; DEMO_SUITE=bookworm for Debian 12, systemd 252).
# A local control plane; each node runs the real kubelet (v1.37.1, on fakecri,
# a fake container runtime: pods "run" without processes), which registers
# its Node, runs the node's pods, raises logind's InhibitDelayMaxSec with its
# own drop-in and holds its Graceful Node Shutdown delay lock (grace 20 s,
# critical pods 5 s); node-z, a kwok Node, stands for the rest of the
# cluster (the budget's other web pods). Root types `reboot`: on node-a
# with the suite's own reboot, on node-b with gnsh installed over it and
# gnsh's node agent enabled (install/systemd/gnsh.service). The kubelet's own journal lines
# (its shutdown manager, the shutdown event, the pods it stops) are printed
# on the demo's clock beside gnsh's and the API server's. node-a is
# throwaway (--volatile=overlay). node-b boots from an overlayfs mounted
# here (lower: the cached rootfs, never changed; upper: in $WORK), so it
# boots a second time from the same disk, where the kubelet reports Ready
# and the agent lifts gnsh's cordon. Then the reboot-slot gate: gnsh's own
# identity (install/kubernetes/rbac.yaml, a ServiceAccount token bound to
# each Node), slots.maxUnavailable 1, and reboot typed on node-b and a third
# node, node-c (its own overlayfs disk, its own kubelet), at the same
# moment: one goes, the other waits until the first is back, then goes;
# watches of the Lease and the Nodes check that never two were out.
# Each container starts in cgroups of its own: the kubelet reloads logind
# through systemd (KillUnit), which fails when two containers' units share
# cgroup paths.
# Safety: commands that shut down run only inside the containers; in_node
# refuses to enter this machine's own PID namespace.
# Needs root, systemd-nspawn and debootstrap (make deps), the Kubernetes
# binaries and the kubelet set (make k8s; built here if missing) and gnsh
# (make build).
set -eu
cd "$(dirname "$0")/../.."
BIN=${GNSH_BIN:-$PWD/bin/gnsh}
[ -x "$BIN" ] || { echo "demo: build gnsh first (make build)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it boots containers)" >&2; exit 1; }
SUITE=${DEMO_SUITE:-bullseye}
GRACE="2 4 6" # terminationGracePeriodSeconds of each node's three web pods
DSGRACE=3     # and of its DaemonSet pod (drains leave it: the kubelet stops it)
# The kubelet's shutdownGracePeriod and shutdownGracePeriodCriticalPods; it
# raises logind's InhibitDelayMaxSec to the first (99-kubelet.conf).
DELAY=20 CRITICAL=5

# The control plane script needs these; minimal Debian/Ubuntu may lack some.
missing=
for c in curl:curl ss:iproute2 openssl:openssl setsid:util-linux; do
	command -v "${c%%:*}" >/dev/null 2>&1 || missing="$missing ${c#*:}"
done
# shellcheck disable=SC2086 # $missing: a list of packages
if [ -n "$missing" ]; then
	echo "== installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null; }
fi

echo "== preparing a Debian $SUITE root file system and the Kubernetes binaries (cached after the first run)"
ROOTFS=$(sh test/e2e/rootfs.sh "$SUITE" | tail -n 1)
K8S_BIN=$(sh test/k8s/build.sh | tail -n 1)
KUBELET_BIN=$(sh test/k8s/build.sh kubelet | tail -n 1)
WORK=$(mktemp -d)
CP=$WORK/cp
DISK=$WORK/node-b-disk # node-b's persistent root: upper, work and the merged root

die() {
	echo "demo: $*" >&2
	KEEP=1
	exit 1
}
# alive PID: PID runs (a zombie, not yet waited for, has ended).
alive() {
	_s=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$_s" ] && [ "$_s" != Z ]
}
# in_container PID: PID is a process of its own PID namespace, neither this
# machine's nor ours. in_node NODE-PID CMD...: CMD inside that container, as
# root logged in there (a clean environment); refuses anything else (reboot
# here would reboot this machine).
in_container() {
	case $1 in '' | *[!0-9]*) return 1 ;; esac
	_ns=$(readlink "/proc/$1/ns/pid" 2>/dev/null) || return 1
	[ "$_ns" != "$(readlink /proc/self/ns/pid)" ] && [ "$_ns" != "$(readlink /proc/1/ns/pid)" ]
}
in_node() {
	in_container "$1" || {
		echo "demo: refusing to run '$2' in PID $1: not a container's own PID namespace" >&2
		return 1
	}
	_p=$1
	shift
	nsenter -t "$_p" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LOGNAME=root USER=root ${SUDO_USER:+SUDO_USER=$SUDO_USER} "$@"
}
# mounted DIR: DIR is a mount point here.
mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }
# cont_ours: SIGCONT to every process this script started (its
# descendants). systemd-shutdown in a container stops every process of its
# PID namespace (SIGSTOP, then SIGTERM and SIGCONT); an nsenter of ours
# (in_node) whose child it stopped stops itself too, never to reap that
# child, and the container's end waits for the child.
cont_ours() {
	for _p in $(ps -e -o pid=,ppid= | awk -v r=$$ '{ p[$1] = $2 }
		END { for (x in p) { y = x; while ((y in p) && y != r && y > 1) y = p[y]; if (y == r && x != r) print x } }'); do
		kill -CONT "$_p" 2>/dev/null || true
	done
}
# stop_container NSPAWN-PID INIT-PID: orderly (nspawn asks the container's
# systemd to halt), else killed after 30 s.
stop_container() {
	alive "$1" && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = systemd-nspawn ] || return 0
	kill -TERM "$1" 2>/dev/null || true
	_i=0
	while alive "$1" && [ $_i -lt 150 ]; do
		cont_ours
		sleep 0.2
		_i=$((_i + 1))
	done
	alive "$1" || return 0
	echo "demo: container (systemd-nspawn $1) did not stop within 30 s; killing it" >&2
	! in_container "${2:-}" || kill -KILL "$2" 2>/dev/null || true
	kill -KILL "$1" 2>/dev/null || true
}
cleanup() {
	trap '' INT TERM # a second Ctrl-C must not cut the cleanup short
	# shellcheck disable=SC2013 # PIDs, several a line
	for p in $(cat "$WORK"/*.pid 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done
	for f in "$WORK"/*.nspawn; do
		[ -f "$f" ] && stop_container "$(cat "$f")" "$(cat "${f%.nspawn}.init" 2>/dev/null)"
	done
	# run/ holds the PIDs from the first process started: a start cut short
	# by Ctrl-C (no env yet) leaves etcd running too.
	[ ! -d "$CP/run" ] || GNSH_K8S_BIN=$K8S_BIN sh test/k8s/controlplane.sh stop "$CP" >/dev/null 2>&1 || true
	cont_ours
	wait 2>/dev/null || true
	# The containers' cgroups, deepest first (the containers' systemd made
	# the trees below them; rmdir fails on one still in use, which stays).
	if [ -f "$WORK/cgroups" ]; then
		while read -r _c; do
			if [ -d "$_c" ]; then find "$_c" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
		done <"$WORK/cgroups"
	fi
	for _r in "$WORK"/node-*-disk/root; do
		if mounted "$_r"; then
			umount "$_r" 2>/dev/null || umount -l "$_r" || echo "demo: cannot unmount $_r" >&2
		fi
	done
	if grep -qF " $WORK/" /proc/self/mountinfo; then
		echo "demo: something is still mounted under $WORK; not removing it" >&2
	elif [ "${KEEP:-0}" = 1 ]; then
		echo "demo: logs kept in $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
k() { "$K8S_BIN/kubectl" --kubeconfig "$CP/admin.kubeconfig" "$@"; }
# kwatch ARGS... &: kubectl itself in the background (so that $! is kubectl,
# not a subshell running k, and kill ends the watch).
kwatch() { exec "$K8S_BIN/kubectl" --kubeconfig "$CP/admin.kubeconfig" "$@"; }
# wait_for SECS WHAT CMD...: CMD until it succeeds, every 0.2 s; false, with
# a message, after SECS seconds.
wait_for() {
	_end=$(($(date +%s) + $1))
	_what=$2
	shift 2
	until "$@"; do
		[ "$(date +%s)" -lt "$_end" ] || {
			echo "demo: timed out waiting for $_what" >&2
			return 1
		}
		sleep 0.2
	done
}

echo "== a Kubernetes control plane on 127.0.0.1 (etcd, kube-apiserver, disruption controller)"
# CP_OWNER_PID: its watchdog stops it even if this script is killed outright.
GNSH_K8S_BIN=$K8S_BIN CP_KWOK=1 CP_NODES="node-a node-b node-c" CP_OWNER_PID=$$ sh test/k8s/controlplane.sh start "$CP" 2>"$WORK/cp.log" ||
	{ cat "$WORK/cp.log" >&2; exit 1; }
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata: {name: node-z, annotations: {kwok.x-k8s.io/node: fake}, labels: {kubernetes.io/hostname: node-z}}
---
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web, namespace: demo}
spec:
  replicas: 6
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: web, image: registry.invalid/web:1}]}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-agent, namespace: demo}
spec:
  selector: {matchLabels: {app: node-agent}}
  template: {metadata: {labels: {app: node-agent}}, spec: {containers: [{name: agent, image: registry.invalid/agent:1}]}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: demo}
spec: {minAvailable: 1, selector: {matchLabels: {app: web}}}
EOF
RS=$(k -n demo get rs web -o jsonpath='{.metadata.uid}')
DS=$(k -n demo get ds node-agent -o jsonpath='{.metadata.uid}')
# pod NAME NODE APP GRACE OWNER-KIND OWNER-NAME OWNER-UID [kwok]: a pod
# bound to NODE, as its controller would make it (no controller runs here
# but the disruption controller); the node's kubelet runs it on fakecri,
# whose stop of a container takes the pod's grace period; kwok: kwok runs
# it (at once, and keeps it).
pod() {
	cat <<EOF
---
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: demo
  labels: {app: $3}
  ownerReferences: [{apiVersion: apps/v1, kind: $5, name: $6, uid: $7, controller: true}]
EOF
	[ "${8:-}" != kwok ] || cat <<EOF
  annotations: {pod-create.stage.kwok.x-k8s.io/delay: 0s, pod-create.stage.kwok.x-k8s.io/jitter-delay: 0s,
    pod-ready.stage.kwok.x-k8s.io/delay: 0s, pod-ready.stage.kwok.x-k8s.io/jitter-delay: 0s}
EOF
	echo "spec: {nodeName: $2, terminationGracePeriodSeconds: $4, containers: [{name: $3, image: registry.invalid/$3:1}]}"
}
pods_on() { k -n demo get pods --field-selector "spec.nodeName=$1" -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}'; }

# follow FILE PID: FILE as written, until PID ends. FILE is made first if
# its writer, started just before, has not made it yet (tail -f would end
# at once, and the lines of the watch be lost).
follow() {
	: >>"$1"
	tail -n +1 -f --pid="$2" "$1" 2>/dev/null
}
pid1() { # the container's PID 1: a child of nspawn whose NSpid ends in 1
	for c in $(pgrep -P "$1"); do
		grep -Eq '^NSpid:.*[[:space:]]1$' "/proc/$c/status" 2>/dev/null && { echo "$c"; return 0; }
	done
	return 1
}
now() { date +%s.%N; }
# at T0 T MSG: MSG stamped with T - T0 seconds.
at() { printf '   [%s] %s\n' "$(echo "$1 $2" | awk '{printf "%+6.2fs", $2-$1}')" "$3"; }
# stamp T0FILE: stamp each line with the seconds since the time in T0FILE.
stamp() { while IFS= read -r l; do at "$(cat "$1")" "$(now)" "$l"; done; }
delay_max() { # NODE-PID: logind's InhibitDelayMaxUSec, in seconds
	in_node "$1" busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec |
		awk '{ printf "%g s", $2 / 1000000 }'
}
logind_up() {
	in_node "$1" busctl call org.freedesktop.login1 /org/freedesktop/login1 \
		org.freedesktop.login1.Manager ListInhibitors >/dev/null 2>&1
}
# inhibitors NODE-PID: the shutdown delay locks held, one a line.
inhibitors() { in_node "$1" systemd-inhibit --list --no-pager 2>/dev/null | awk '/shutdown/ && /delay/'; }
# holds NODE-PID WHO...: each WHO holds a shutdown delay lock there.
holds() {
	_held=$(inhibitors "$1")
	shift
	for _w; do echo "$_held" | grep -q "^ *$_w " || return 1; done
}
down() { ! alive "$NS"; } # the container of NS has ended
both_nonempty() { [ -s "$1" ] && [ -s "$2" ]; }
# kubelet_conf NODE FILE: the node's kubeconfig where kubeadm puts it,
# naming the kubelet's rotated client certificate.
kubelet_conf() {
	sed "s|$CP/pki/node-$1.pem|/var/lib/kubelet/pki/kubelet-client-current.pem|" "$CP/node-$1.kubeconfig" >"$2"
}

# hierarchies: each cgroup hierarchy mounted here, as "MOUNT-POINT PATH" (PATH:
# this process's cgroup in it), v1 and v2.
hierarchies() {
	awk 'NR == FNR { i = index($0, ":"); r = substr($0, i + 1); j = index(r, ":"); want[substr(r, 1, j - 1)] = substr(r, j + 1); next }
	{
		for (i = 7; i <= NF && $i != "-"; i++) ;
		if ($(i + 1) == "cgroup2" && ("" in want)) print $5, want[""]
		if ($(i + 1) != "cgroup") next
		n = split($(i + 3), o, ",")
		for (c in want) {
			if (c == "") continue
			m = split(c, cc, ","); ok = 1
			for (j = 1; j <= m; j++) { f = 0; for (x = 1; x <= n; x++) if (o[x] == cc[j]) f = 1; if (!f) ok = 0 }
			if (ok) print $5, want[c]
		}
	}' /proc/self/cgroup /proc/self/mountinfo
}
# own_cgroup NAME: the calling (sub)shell into a cgroup NAME of its own, made
# under its current one in every hierarchy (recorded in $WORK/cgroups and
# removed by cleanup): the container's systemd builds its unit tree there,
# apart from the other containers'.
own_cgroup() {
	hierarchies >"$WORK/$1.hierarchies" || return 1
	while read -r _m _p; do # not in a pipe: this shell moves, not a pipe's
		_c=$_m${_p%/}/$1
		mkdir -p "$_c" && echo "$_c" >>"$WORK/cgroups" || return 1
		for _f in cpuset.cpus cpuset.mems; do # v1 cpuset: empty until copied from the parent
			[ ! -f "$_c/$_f" ] || [ -n "$(cat "$_c/$_f")" ] || cat "${_c%/*}/$_f" >"$_c/$_f" || return 1
		done
		echo 0 >"$_c/cgroup.procs" || return 1 # 0: the writer, this shell
	done <"$WORK/$1.hierarchies"
}

# boot NAME NODE NSPAWN-OPTIONS...: boots the container of node NODE (logs in
# $WORK/NAME), from cgroups of its own, with gnsh, the kubelet, fakecri and
# the kubelet's node setup bound in, and waits until its systemd has booted
# and logind answers. Sets NS (systemd-nspawn's PID) and L (the container's
# PID 1).
boot() {
	_log=$WORK/$1 _node=$2 _cg=gnsh-demo-$$-$1
	mkdir -p "$_log"
	shift 2
	(
		own_cgroup "$_cg" || die "cannot make cgroups for $_node"
		exec systemd-nspawn -q "$@" -b --register=no --keep-unit --machine="$_node" \
			--bind-ro="$BIN:/usr/local/sbin/gnsh" --bind="$_log:/var/log/demo" \
			--bind-ro="$KUBELET_BIN/kubelet:/usr/local/bin/kubelet" --bind-ro="$KUBELET_BIN/fakecri:/usr/local/bin/fakecri" \
			--bind-ro="$PWD/test/k8s/kubelet/node-setup.sh:/usr/local/lib/demo/node-setup.sh" \
			>"$_log/console" 2>&1 </dev/null
	) &
	NS=$!
	echo "$NS" >"$_log.nspawn"
	L=
	wait_for 20 "the $_node container to start" pid1 "$NS" >/dev/null || {
		cat "$_log/console" >&2
		die "container $_node did not start"
	}
	L=$(pid1 "$NS")
	echo "$L" >"$_log.init"
	wait_for 60 "systemd-logind in $_node" logind_up "$L" || die "$_node: no logind; console in $_log/console"
	_st=$(in_node "$L" timeout 60 systemctl is-system-running --wait 2>/dev/null) || true
	case $_st in running | degraded) ;; *) die "$_node did not finish booting within 60 s ($_st)" ;; esac
}

# reboot_case NAME NODE JOURNAL-DIR: with node NODE booted (NS, L), its
# delay lock held: types reboot, shows what happened as it happens (the
# kubelet's lines from its journal in JOURNAL-DIR), waits until the
# container is down.
reboot_case() {
	name=$1 node=$2 log=$WORK/$1 jdir=$3
	in_node "$L" systemd-run --quiet --unit=demo-monitor -p StandardOutput=file:/var/log/demo/monitor \
		dbus-monitor --system "type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForShutdown'"
	wait_for 5 "dbus-monitor in $node" test -s "$log/monitor" || die "dbus-monitor did not start"
	echo "-- $node: /usr/sbin/reboot -> $(in_node "$L" readlink /usr/sbin/reboot); shutdown delay locks held:"
	inhibitors "$L" | sed 's/^/     /'
	echo "   logind waits for them up to $(delay_max "$L") (InhibitDelayMaxSec; the kubelet's $(in_node "$L" cat /etc/systemd/logind.conf.d/99-kubelet.conf 2>/dev/null | awk -F= '/^InhibitDelayMaxSec=/ { print "99-kubelet.conf: " $2 }'))"
	echo "   root types: reboot"

	# The node and its pods as the API server sees them, while reboot runs
	# (each watch first lists what is there: then it is established).
	kwatch get node "$node" --watch --output-watch-events --no-headers -o custom-columns=E:.type,U:.object.spec.unschedulable \
		>"$log/node-watch" 2>/dev/null &
	kn=$!
	kwatch -n demo get pods --field-selector "spec.nodeName=$node" --watch --output-watch-events --no-headers \
		-o custom-columns=E:.type,N:.object.metadata.name,D:.object.metadata.deletionTimestamp,G:.object.spec.terminationGracePeriodSeconds \
		>"$log/pod-watch" 2>/dev/null &
	kp=$!
	echo "$kn $kp" >"$WORK/$name-watch.pid"
	follow "$log/node-watch" "$kn" | while read -r _ u; do
		[ "$u" = true ] && { echo "node $node cordoned (unschedulable)"; break; }
	done | stamp "$log/t0" &
	tn=$!
	follow "$log/pod-watch" "$kp" | while read -r ev pod del grace; do
		case $ev in
		MODIFIED) [ "$del" != "<none>" ] && ! grep -qx "$pod" "$log/seen" 2>/dev/null &&
			echo "$pod" >>"$log/seen" && echo "pod $pod evicted: terminating (grace $grace s)" ;;
		DELETED) echo "pod $pod gone" ;;
		esac
	done | stamp "$log/t0" &
	tp=$!
	# The kubelet's journal, followed from the container's start: once the
	# follower has written the kubelet's start, it is established.
	bid=$(boot_id "$L")
	kubelet_journal "$jdir" "$bid" -f >"$log/kubelet-journal" 2>/dev/null &
	kj=$!
	echo "$kj" >"$WORK/$name-journal.pid"
	kubelet_story "$log/t0" "$log/kubelet-journal" "$kj" &
	tk=$!
	wait_for 20 "the watches of $node and its pods" both_nonempty "$log/node-watch" "$log/pod-watch" ||
		die "kubectl watch did not start"
	wait_for 20 "the kubelet's journal on $node" grep -q '"Creating node shutdown manager"' "$log/kubelet-journal" ||
		die "$node: the kubelet's journal shows no shutdown manager"
	t0=$(now)
	echo "$t0" >"$log/t0"

	# As root logged in on the node; gnsh writes its progress to stderr.
	{
		in_node "$L" timeout --foreground 120 reboot 2>&1 && echo 0 >"$log/reboot-rc" || echo $? >"$log/reboot-rc"
	} | stamp "$log/t0"
	[ "$(cat "$log/reboot-rc")" != 124 ] || die "$node: reboot did not return within 120 s"
	for _ in $(seq 40); do grep -q 'boolean true' "$log/monitor" 2>/dev/null && break; alive "$NS" || break; sleep 0.05; done
	pfs=$(awk '/member=PrepareForShutdown/ { sub(/.*time=/, ""); t = $1 } /boolean true/ && t { print t; exit }' "$log/monitor")
	if [ -n "$pfs" ]; then
		at "$t0" "$pfs" "logind: PrepareForShutdown(true); the kubelet's delay lock now holds the reboot (up to $DELAY s)"
	else
		echo "no PrepareForShutdown: logind was bypassed, the delay lock ignored" | stamp "$log/t0"
	fi
	wait_for 60 "$node to go down" down || die "$node did not go down within 60 s of reboot"
	rc=0
	wait "$NS" || rc=$?
	end=$(now)
	sleep 0.3 # the watches' last events
	kill "$kn" "$kp" "$kj" 2>/dev/null || true
	wait "$tn" "$tp" "$tk" 2>/dev/null || true
	at "$t0" "$end" "container down: exit $rc"
	# The kubelet's account, from its journal as the container left it: its
	# shutdown event (when), and the web pods it stopped itself.
	(kubelet_journal "$jdir" "$bid") >"$log/kubelet-journal" 2>/dev/null ||
		die "$node: cannot read the kubelet's journal in $jdir"
	ke=$(kevent "$log/kubelet-journal" "$t0")
	echo "${ke:+yes}" | sed 's/^$/no/' >"$log/kevent"
	[ -z "$ke" ] || echo "$ke" >"$log/kevent-time"
	kkilled "$log/kubelet-journal" "$t0" | wc -l | tr -d ' ' >"$log/kkilled"
	grep -c . "$log/seen" 2>/dev/null >"$log/evicted" || echo 0 >"$log/evicted"
	echo "${pfs:+yes}" | sed 's/^$/no/' >"$log/pfs"
	[ -n "$pfs" ] && echo "$pfs $t0" | awk '{printf "%.1f", $1-$2}' >"$log/pfs-at"
	echo "$t0 $end" | awk '{printf "%.1f", $2-$1}' >"$log/secs"
	echo "$rc" >"$log/rc"
	left=$(k -n demo get pods --field-selector "spec.nodeName=$node" -o jsonpath='{range .items[?(@.metadata.ownerReferences[0].kind=="ReplicaSet")]}{.metadata.name}{" "}{end}')
	echo "$left" | wc -w | tr -d ' ' >"$log/left"
	sched=$(k get node "$node" -o jsonpath='{.spec.unschedulable}')
	[ "$sched" = true ] && echo yes >"$log/cordoned" || echo no >"$log/cordoned"
	# What the API shows of the web pods left: Running, or stopped by the
	# kubelet (DisruptionTarget, TerminationByKubelet).
	k -n demo get pods --field-selector "spec.nodeName=$node" \
		-o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.status.conditions[?(@.type=="DisruptionTarget")].reason}{"\n"}{end}' >"$log/pods-after"
	awk '$1 ~ /^web-/ && $2 == "Running"' "$log/pods-after" | wc -l | tr -d ' ' >"$log/running"
	awk '$1 ~ /^web-/ && $3 == "TerminationByKubelet"' "$log/pods-after" | wc -l | tr -d ' ' >"$log/bykubelet"
}

# gnsh_disk NODE: NODE's persistent root, an overlayfs on the cached rootfs
# mounted at $WORK/NODE-disk/root (upper layer beside it), with gnsh's unit
# and the node's kubeconfig and client certificate, as make install and
# kubeadm would leave them.
gnsh_disk() {
	_d=$WORK/$1-disk
	mkdir -p "$_d/upper" "$_d/work" "$_d/root"
	mount -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$_d/upper,workdir=$_d/work" "$_d/root" ||
		die "cannot mount an overlayfs on $_d/root"
	_d=$_d/root
	install -D -m 0644 install/systemd/gnsh.service "$_d/etc/systemd/system/gnsh.service"
	kubelet_conf "$1" "$WORK/$1.kubelet.conf"
	install -D -m 0600 "$WORK/$1.kubelet.conf" "$_d/etc/kubernetes/kubelet.conf"
	install -D -m 0600 "$CP/pki/node-$1.pem" "$_d/var/lib/kubelet/pki/kubelet-client-current.pem"
}
# gnsh_enable NODE: in NODE's container (L), gnsh over the four commands,
# the agent enabled and holding its lock beside the kubelet's.
gnsh_enable() {
	for c in reboot poweroff halt shutdown; do in_node "$L" ln -sf /usr/local/sbin/gnsh "/usr/sbin/$c"; done
	echo "   root: ln -sf /usr/local/sbin/gnsh /usr/sbin/reboot (and poweroff, halt, shutdown)"
	echo "   root: systemctl enable --now gnsh.service (the node agent)"
	in_node "$L" systemctl enable --quiet --now gnsh.service
	wait_for 30 "the agent's and the kubelet's delay locks on $1" holds "$L" kubelet gnsh ||
		{ agent_log "$L" 0 >&2; die "$1: the agent or the kubelet holds no delay lock"; }
}

# free_port: sets PORT to a port on 127.0.0.1 that is free, with the next
# one (the kubelet's port and its healthz port: the containers share this
# machine's network), and not given out before.
PORTS=
free_port() {
	PORT=$((20250 + $$ % 1000 * 8))
	while :; do
		case " $PORTS " in
		*" $PORT "*) ;;
		*) if [ -z "$(ss -Htln "( sport = :$PORT or sport = :$((PORT + 1)) )")" ]; then
			PORTS="$PORTS $PORT"
			return 0
		fi ;;
		esac
		PORT=$((PORT + 2))
	done
}
# node_ready NODE: its Ready condition is True. node_boot NODE BOOT-ID: its
# kubelet reported that boot (status.nodeInfo.bootID).
node_ready() { [ "$(k get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; }
node_boot() { [ "$(k get node "$1" -o jsonpath='{.status.nodeInfo.bootID}' 2>/dev/null)" = "$2" ]; }
ready_for() { node_boot "$1" "$2" && node_ready "$1"; }
boot_id() { in_node "$1" cat /proc/sys/kernel/random/boot_id; }
# kubelet_node NODE: in NODE's container (L), the real kubelet on fakecri
# set up for every boot (test/k8s/kubelet/node-setup.sh: its config, a
# port of its own, grace $DELAY s, critical pods $CRITICAL s) and started;
# kubelet_up waits until it holds its delay lock and has reported this
# boot, Ready.
kubelet_node() {
	free_port
	in_node "$L" sh /usr/local/lib/demo/node-setup.sh "$1" "$PORT" "${DELAY}s" "${CRITICAL}s" ||
		die "$1: the kubelet's node setup failed"
	kubelet_up "$1"
}
kubelet_up() {
	wait_for 60 "the kubelet's delay lock on $1" holds "$L" kubelet ||
		{ in_node "$L" journalctl -b -u kubelet -n 20 --no-pager >&2; die "$1: the kubelet holds no delay lock"; }
	_b=$(boot_id "$L")
	wait_for 60 "the kubelet of $1 to report this boot, Ready" ready_for "$1" "$_b" ||
		die "$1: its Node is not Ready for this boot"
}
# kubelet_started NODE NODE-PID: the kubelet's version and its story so far
# (its shutdown manager, its Node's registration), from its journal.
kubelet_started() {
	echo "   $1: $(in_node "$2" kubelet --version), Ready; its journal:"
	in_node "$2" journalctl -b -u kubelet -o cat --no-pager 2>/dev/null | grep -E "$KSTORY" | while IFS= read -r _l; do
		echo "     kubelet| $(kmsg "$_l")"
	done
}
# The kubelet's journal lines that tell the story (klog messages).
KSTORY='"(Creating node shutdown manager|Shutdown manager detected new shutdown event|Shutdown manager killing pod with gracePeriod|Shutdown manager completed processing shutdown event[^"]*|Node became not ready|Successfully registered node)"'
# kubelet_journal JOURNAL-DIR BOOT-ID [-f]: the kubelet's journal of that boot
# of the container whose /var/log/journal is JOURNAL-DIR here, as "SECONDS
# kubelet[PID]: MESSAGE" lines; -f: followed, until killed. Read from here,
# not inside the container: systemd-shutdown stops every process in the
# container's PID namespace (SIGSTOP, then SIGTERM), and nsenter, stopped
# with its child, would never reap it, holding the shutdown up.
kubelet_journal() {
	exec journalctl -D "$1" "_BOOT_ID=$(echo "$2" | tr -d -)" _SYSTEMD_UNIT=kubelet.service \
		-o short-unix --no-hostname --no-pager ${3:+-f --no-tail}
}
# kubelet_story T0FILE FILE PID: the story lines of FILE (followed until PID
# ends) from T0FILE's time on, stamped with their own journal time.
kubelet_story() {
	follow "$2" "$3" | grep --line-buffered -E "$KSTORY" | while read -r _ts _ _m; do
		_t0=$(cat "$1" 2>/dev/null) || continue
		awk -v t="$_ts" -v t0="$_t0" 'BEGIN { exit !(t >= t0) }' || continue
		at "$_t0" "$_ts" "kubelet| $(kmsg "$_m")"
	done
}
# kmsg KLOG-LINE: its message, without klog's header; a Node condition's
# long record cut down to its reason and message.
kmsg() {
	_k=${1#*] }
	case $_k in *'condition={'*) _k="${_k%% condition=\{*} condition: $(echo "$_k" | sed -n 's/.*\("reason":"[^"]*"\).*\("message":"[^"]*"\).*/\1 \2/p')" ;; esac
	echo "$_k"
}
# kevent FILE T0: the journal time of the kubelet's shutdown event in FILE
# at or after T0 (empty: none).
kevent() { awk -v t0="$2" '$1 >= t0 && /"Shutdown manager detected new shutdown event"/ { print $1; exit }' "$1"; }
# kkilled FILE T0: the web pods the kubelet stopped at or after T0.
kkilled() { awk -v t0="$2" '$1 >= t0 && /"Shutdown manager killing pod with gracePeriod"/ && /pod="demo\/web-/' "$1" | sed 's/.*pod="demo\/\([^"]*\)".*/\1/' | sort -u; }

r() { cat "$WORK/$1/$2"; }
cordoned() { [ "$(k get node "$1" -o jsonpath='{.spec.unschedulable}')" = true ]; }
schedulable() { ! cordoned "$1"; }
annotation() { k get node "$1" -o jsonpath='{.metadata.annotations.gnsh\.io/cordoned}'; }
# agent_log NODE-PID BOOT: the agent's own lines in that boot's journal.
agent_log() { in_node "$1" journalctl -q -u gnsh -b "$2" -o cat --no-pager 2>/dev/null | grep '^gnsh: ' | sed 's/^/     /'; }

echo "== node-a and node-b boot ($SUITE); each runs the real kubelet on fakecri, which registers its Node"
echo "   node-a: a throwaway container; node-b: its own disk, an overlayfs on the cached rootfs (upper"
echo "   layer in $DISK): it survives a reboot. In each: test/k8s/kubelet/node-setup.sh NODE PORT ${DELAY}s ${CRITICAL}s"
mkdir -p "$WORK/stock"
kubelet_conf node-a "$WORK/stock/kubelet.conf"
mkdir -p "$WORK/stock/journal" # node-a's journal, kept here
boot stock node-a -D "$ROOTFS" --volatile=overlay --bind="$WORK/stock/journal:/var/log/journal" \
	--bind-ro="$WORK/stock/kubelet.conf:/etc/kubernetes/kubelet.conf" \
	--bind-ro="$CP/pki/node-node-a.pem:/var/lib/kubelet/pki/kubelet-client-current.pem"
kubelet_node node-a
LA=$L NA=$NS
gnsh_disk node-b
D=$DISK/root
boot gnsh node-b -D "$D"
kubelet_node node-b
LB=$L NB=$NS
kubelet_started node-a "$LA"
kubelet_started node-b "$LB"
for n in a b; do
	i=0
	for g in $GRACE; do
		i=$((i + 1))
		pod "web-$n-$i" "node-$n" web "$g" ReplicaSet web "$RS"
	done
	pod "node-agent-$n" "node-$n" node-agent "$DSGRACE" DaemonSet node-agent "$DS"
done | k apply -f - >/dev/null
# node-z: the rest of the cluster, where the budget's other web pods run
# (kwok plays its kubelet; nothing reboots it). Without them, a stock
# reboot that stops node-a's pods (Debian 12's: through logind) would
# leave too few healthy pods for node-b's drain, which would then wait on
# the budget until its timeout.
for i in 1 2 3; do pod "web-z-$i" node-z web 2 ReplicaSet web "$RS" kwok; done | k apply -f - >/dev/null
# Running and Ready (the kubelets run them), budget processed.
k -n demo wait --for=condition=Ready pod --all --timeout=60s >/dev/null || die "pods not Ready within 60 s"
k -n demo wait --for=jsonpath='{.status.disruptionsAllowed}'=8 pdb/web --timeout=60s >/dev/null ||
	die "the disruption controller did not process the budget within 60 s"
for n in node-a node-b; do echo "   $n: pods $(pods_on $n)(all Running, run by its kubelet)"; done
echo "   node-z: pods $(pods_on node-z)(the rest of the cluster: kwok plays its kubelet)"
echo "   PodDisruptionBudget web: minAvailable 1; grace periods: web pods $GRACE s, node-agent $DSGRACE s"

echo "== case 1: $SUITE's own reboot on node-a (a throwaway container)"
L=$LA NS=$NA
reboot_case stock node-a "$WORK/stock/journal"
echo "   afterwards: node-a cordoned: $(r stock cordoned); web pods still bound to it: $(r stock left)"
# The kubelet can only have seen a shutdown that logind announced.
[ "$(r stock kevent)" = "$(r stock pfs)" ] ||
	die "node-a: PrepareForShutdown sent: $(r stock pfs), but the kubelet's shutdown event seen: $(r stock kevent)"

echo "== case 2: gnsh installed over reboot on node-b, its node agent enabled"
L=$LB NS=$NB
gnsh_enable node-b
echo "   journalctl -u gnsh (the agent, this boot):"
agent_log "$L" 0
reboot_case gnsh node-b "$D/var/log/journal"
echo "   afterwards (node-b down):"
k get nodes | sed 's/^/     /'
echo "     gnsh.io/cordoned on node-b: $(annotation node-b)"
echo "     pods on node-b: $(pods_on node-b)(the DaemonSet's: left, as kubectl drain does)"
k get events --field-selector involvedObject.name=node-b -o custom-columns=EVENT:.reason,MESSAGE:.message >"$WORK/events"
for e in EVENT GnshDrainStarted GnshDrainFinished GnshShutdown NodeShutdown; do grep "^$e " "$WORK/events" | sed 's/^/     /'; done

if ! { [ "$(r gnsh pfs)" = yes ] && [ "$(r gnsh rc)" = 133 ] && [ "$(r gnsh left)" = 0 ] && [ "$(r gnsh cordoned)" = yes ]; }; then
	die "gnsh's reboot did not cordon and drain node-b and go through logind as expected"
fi
# The kubelet's side: its shutdown event came after gnsh had recorded the
# drain finished (the "drained" time gnsh wrote before it handed off, on
# this machine's clock, as the journal's), and it stopped no web pod.
drained=$(annotation node-b | sed -n 's/.*"drained":"\([^"]*\)".*/\1/p')
[ -n "$drained" ] || die "node-b: gnsh's cordon record has no drained time"
[ "$(r gnsh kevent)" = yes ] || die "node-b: the kubelet's journal shows no shutdown event after gnsh's reboot"
after=$(echo "$(date -d "$drained" +%s.%N) $(r gnsh kevent-time)" | awk '{ if ($2 > $1) printf "%.2f", $2 - $1 }')
[ -n "$after" ] || die "node-b: the kubelet's shutdown event ($(r gnsh kevent-time)) came before gnsh's drain finished ($drained)"
[ "$(r gnsh kkilled)" = 0 ] || die "node-b: the kubelet stopped web pods itself: $(kkilled "$WORK/gnsh/kubelet-journal" "$(r gnsh t0)" | tr '\n' ' ')"
echo "     the kubelet's shutdown event: $after s after gnsh recorded the drain finished; it stopped itself:"
echo "     $(awk -v t0="$(r gnsh t0)" '$1 >= t0 && /"Shutdown manager killing pod with gracePeriod"/' "$WORK/gnsh/kubelet-journal" |
	sed 's/.*pod="demo\/\([^"]*\)".*/\1/' | sort -u | tr '\n' ' ')(the pods drains leave)"

echo "== node-b boots again, from the same disk (gnsh and its agent's unit, the kubelet's units and config)"
echo "   its kubelet reports the new boot, Ready; then the agent lifts gnsh's cordon (it waits for Ready"
echo "   for this boot); nothing else would"
# node-b as the API server records it while it boots (the first line: as
# it went down), each line with its time of arrival here.
kwatch get node node-b --watch --no-headers \
	-o 'custom-columns=R:.status.conditions[?(@.type=="Ready")].status,B:.status.nodeInfo.bootID,U:.spec.unschedulable' \
	>"$WORK/boot2-watch" 2>/dev/null &
kw=$!
echo "$kw" >"$WORK/boot2-watch.pid"
wait_for 20 "the watch of node-b" test -s "$WORK/boot2-watch" || die "kubectl watch did not start"
follow "$WORK/boot2-watch" "$kw" | while read -r _r _b _u; do echo "$(now) $_r $_b $_u"; done >"$WORK/boot2-timed" &
tw=$!
t0=$(now)
boot gnsh-boot2 node-b -D "$D"
nb=$(boot_id "$L")
at "$t0" "$(now)" "node-b booted (boot ID $nb)"
wait_for 90 "gnsh's agent to uncordon node-b" schedulable node-b ||
	{ agent_log "$L" 0 >&2; die "node-b still cordoned 90 s after its second boot"; }
sleep 0.3 # the watch's last events
kill "$kw" 2>/dev/null || true
wait "$tw" 2>/dev/null || true
# When (arrival) and in which order (the API server's) the Node showed
# Ready for this boot, and then no cordon.
ready_at=$(awk -v b="$nb" '$2 == "True" && $3 == b { print NR, $1; exit }' "$WORK/boot2-timed")
free_at=$(awk '$4 != "true" { print NR, $1; exit }' "$WORK/boot2-timed")
[ -n "$ready_at" ] || die "node-b: the watch never saw its Node Ready for the new boot"
[ -n "$free_at" ] || die "node-b: the watch never saw its cordon lifted"
[ "${ready_at% *}" -le "${free_at% *}" ] || die "node-b: its cordon was lifted before its Node was Ready for this boot"
echo "   this boot, on the demo's clock: the kubelet's and the agent's journal, and node-b in the API:"
{
	echo "${ready_at#* } API: node-b Ready, this boot (reported by its kubelet)"
	echo "${free_at#* } API: node-b schedulable"
	in_node "$L" journalctl -b -u kubelet -o short-unix --no-hostname --no-pager 2>/dev/null | grep -E "$KSTORY" |
		while read -r _ts _ _m; do echo "$_ts kubelet| $(kmsg "$_m")"; done
	in_node "$L" journalctl -b -u gnsh -o short-unix --no-hostname --no-pager 2>/dev/null |
		awk '$3 == "gnsh:" { $2 = ""; sub(/  /, " "); print }'
} | sort -n -k1,1 | while read -r _ts _m; do at "$t0" "$_ts" "$_m"; done
echo "${free_at#* } $t0" | awk '{printf "%.1f", $1-$2}' >"$WORK/gnsh/uncordon-at"
echo "${free_at#* } ${ready_at#* }" | awk '{printf "%.1f", $1-$2}' >"$WORK/gnsh/uncordon-after-ready"
echo "   shutdown delay locks held again:"
inhibitors "$L" | sed 's/^/     /'
echo "   journalctl -u gnsh, the boot before (the reboot gnsh drained for):"
agent_log "$L" -1
echo "   kubectl get nodes:"
k get nodes | sed 's/^/     /'
a=$(annotation node-b)
echo "     gnsh.io/cordoned on node-b: ${a:-(none: removed with the cordon)}"
uncordon_event() {
	k get events --field-selector involvedObject.name=node-b,reason=GnshUncordoned \
		-o custom-columns=EVENT:.reason,MESSAGE:.message >"$WORK/uncordoned" 2>/dev/null &&
		grep -q '^GnshUncordoned ' "$WORK/uncordoned"
}
wait_for 15 "the GnshUncordoned Event" uncordon_event || true
sed 's/^/     /' "$WORK/uncordoned"
echo "   gnsh status (inside node-b; reads only):"
in_node "$L" timeout 60 gnsh status 2>&1 | sed 's/^/     /' || true

echo "== node-a, for contrast: $SUITE's own reboot, as its kubelet saw it"
if [ "$(r stock pfs)" = no ]; then
	echo "   It went straight to PID 1 (no PrepareForShutdown from logind): the kubelet's journal, followed"
	echo "   live until the container ended, shows no shutdown event, and it stopped none of its pods. Its"
	echo "   $(r stock left) web pods were not evicted either (the budget was never asked): on a real node they die"
	echo "   with it, while the API still shows $(r stock running) of them Running. It was never cordoned: no cordon to"
	echo "   lift after its boot, and nothing kept new pods off it while it went down."
else
	echo "   It went through logind (PrepareForShutdown): the kubelet saw the shutdown and stopped"
	echo "   $(r stock kkilled) web pods itself, none evicted (the budget was never asked), on a node never cordoned."
fi

row() { printf '%-42s %-30s %s\n' "$1" "$2" "$3"; }
# kseen NAME: did the kubelet log its shutdown event, and when.
kseen() {
	[ "$(r "$1" kevent)" = yes ] || { echo no; return; }
	echo "yes (+$(echo "$(r "$1" kevent-time) $(r "$1" t0)" | awk '{printf "%.1f", $1-$2}') s)$([ "$1" = gnsh ] && echo ", after the drain")"
}
# kstopped NAME: the web pods the kubelet stopped itself (its journal; the
# API's DisruptionTarget TerminationByKubelet), else what became of them.
kstopped() {
	_n=$(r "$1" kkilled)
	if [ "$_n" -gt 0 ]; then
		echo "$_n (API: $(r "$1" bykubelet) TerminationByKubelet)"
	elif [ "$(r "$1" evicted)" -gt 0 ]; then
		echo "0 ($(r "$1" evicted) evicted first)"
	else
		echo "0 ($(r "$1" running) left Running in the API)"
	fi
}
echo
row "" "stock reboot ($SUITE)" "gnsh reboot"
row "web pods evicted before going down" "no ($(r stock left) left)" "yes ($(r gnsh left) left)"
row "node cordoned" "$(r stock cordoned)" "$(r gnsh cordoned)"
row "PrepareForShutdown sent by logind" "$(r stock pfs)" "$(r gnsh pfs)$([ -s "$WORK/gnsh/pfs-at" ] && echo ", after the drain (+$(r gnsh pfs-at) s)")"
row "kubelet saw the shutdown (its event)" "$(kseen stock)" "$(kseen gnsh)"
row "web pods stopped by kubelet, not evicted" "$(kstopped stock)" "$(kstopped gnsh)"
row "down after (s; kubelet's lock: up to $DELAY s)" "$(r stock secs)" "$(r gnsh secs)"
row "container exit (133 = reboot)" "$(r stock rc)" "$(r gnsh rc)"
lifted="yes, but no GnshUncordoned Event"
! grep -q '^GnshUncordoned ' "$WORK/uncordoned" ||
	lifted="yes, by gnsh's agent (+$(r gnsh uncordon-at) s, $(r gnsh uncordon-after-ready) s after Ready)"
row "cordon lifted after the next boot" "(never cordoned)" "$lifted"
echo
if grep -q '^GnshUncordoned ' "$WORK/uncordoned"; then
	echo "gnsh drained node-b (cordon, evictions through the Eviction API with the kubelet's"
	echo "credentials, PodDisruptionBudget honoured), then routed the reboot through systemd-logind:"
	echo "the kubelet's Graceful Node Shutdown saw it after the drain, and stopped only the DaemonSet"
	echo "pod that drains leave. After the next boot, the kubelet reported the node Ready and gnsh's"
	echo "agent (gnsh.service) lifted its own cordon."
else
	die "node-b is schedulable again, but the agent posted no GnshUncordoned Event"
fi

echo
echo "== case 3: reboot typed on two nodes at once, one reboot slot for the cluster (slots.maxUnavailable: 1)"
LB=$L NB=$NS
# The gate counts a Node that is not Ready as out: node-a, down since case
# 1 (NotReady if its kubelet saw that shutdown), comes back first.
echo "   node-a boots again (a fresh throwaway container; its kubelet reports it Ready)"
boot stock-boot2 node-a -D "$ROOTFS" --volatile=overlay \
	--bind-ro="$WORK/stock/kubelet.conf:/etc/kubernetes/kubelet.conf" \
	--bind-ro="$CP/pki/node-node-a.pem:/var/lib/kubelet/pki/kubelet-client-current.pem"
kubelet_node node-a
echo "   node-c: booted like node-b (its own overlayfs disk, its kubelet), gnsh installed the same way"
gnsh_disk node-c
DC=$WORK/node-c-disk/root
boot slots-c node-c -D "$DC"
kubelet_node node-c
gnsh_enable node-c >/dev/null
LC=$L NC=$NS
# node-c: two web pods of its own; node-b gets one back.
{
	pod web-b-4 node-b web 2 ReplicaSet web "$RS"
	pod web-c-1 node-c web 2 ReplicaSet web "$RS"
	pod web-c-2 node-c web 4 ReplicaSet web "$RS"
} | k apply -f - >/dev/null
k -n demo wait --for=condition=Ready pod/web-b-4 pod/web-c-1 pod/web-c-2 --timeout=60s >/dev/null || die "pods not Ready within 60 s"
echo "   admin, once: kubectl apply -f install/kubernetes/rbac.yaml (gnsh's own identity: the gate's Lease"
echo "   and the Node list, which the kubelet's credentials may not read); for each node, a token of it bound"
echo "   to the node's Node, and /etc/gnsh/config.yaml: slots: {maxUnavailable: 1, settle: 5s}:"
k apply -f install/kubernetes/rbac.yaml >/dev/null
may_use_lease() { [ "$(k auth can-i update leases/reboot-slots -n gnsh --as=system:serviceaccount:kube-system:gnsh 2>/dev/null)" = yes ]; }
wait_for 30 "RBAC to grant gnsh's ServiceAccount the Lease" may_use_lease || die "gnsh's ServiceAccount may not use the Lease"
# gate_identity NODE NODE-PID DISK: the token, from kubectl to the node's
# gnsh token install (never to the terminal), the config on its disk, the
# agent restarted (it reads its config at start).
gate_identity() {
	echo "   kubectl -n kube-system create token gnsh --bound-object-kind Node --bound-object-name $1 --duration 1h | gnsh token install (on $1):"
	k -n kube-system create token gnsh --bound-object-kind Node --bound-object-name "$1" --duration 1h |
		in_node "$2" gnsh token install 2>&1 | sed 's/^/     /'
	in_node "$2" test -s /etc/gnsh/kubeconfig || die "$1: gnsh token install wrote no /etc/gnsh/kubeconfig"
	printf 'node: %s\nslots: {maxUnavailable: 1, settle: 5s}\n' "$1" >"$WORK/$1.config.yaml"
	install -D -m 0644 "$WORK/$1.config.yaml" "$3/etc/gnsh/config.yaml"
	in_node "$2" systemctl restart gnsh.service
}
gate_identity node-b "$LB" "$D"
gate_identity node-c "$LC" "$DC"
agents_hold() { holds "$LB" gnsh && holds "$LC" gnsh; }
wait_for 30 "the agents' delay locks again" agents_hold || die "node-b or node-c: no agent lock after the restart"

log=$WORK/slots
mkdir -p "$log"
# The slots as the API server records them (the Lease's holders), and both
# Nodes' cordons, while the two reboots run.
kwatch -n gnsh get leases --field-selector metadata.name=reboot-slots --watch --output-watch-events --no-headers -o custom-columns=E:.type,H:.object.spec.holderIdentity \
	>"$log/lease-watch" 2>/dev/null &
kl=$!
kwatch get nodes --watch --output-watch-events --no-headers -o custom-columns=E:.type,N:.object.metadata.name,U:.object.spec.unschedulable \
	>"$log/node-watch" 2>/dev/null &
kn=$!
echo "$kl $kn" >"$WORK/slots-watch.pid"
wait_for 20 "the watch of the nodes" test -s "$log/node-watch" || die "kubectl watch did not start"
t0=$(now)
echo "$t0" >"$log/t0"
held=
follow "$log/lease-watch" "$kl" | while read -r _ h; do
	[ "$h" = "$held" ] && continue
	held=$h
	[ "$h" = "<none>" ] && echo "slots held: none" || echo "slots held: $h"
done | stamp "$log/t0" &
tl=$!
cordons() { # node-b's and node-c's cordons, as they change
	_b='' _c=''
	follow "$log/node-watch" "$kn" | while read -r _ n u; do
		case $n in
		node-b) [ "$u" = "$_b" ] && continue || _b=$u ;;
		node-c) [ "$u" = "$_c" ] && continue || _c=$u ;;
		*) continue ;;
		esac
		[ "$u" = true ] && echo "$n cordoned" || echo "$n schedulable"
	done
}
cordons | stamp "$log/t0" &
tc=$!
# typed NODE-PID N: reboot as root on that node, its lines prefixed "N| "
# (and kept in $log/out-N), its exit status in $log/rc-N.
# As root types it: at a terminal (script(1) makes one) in an interactive
# shell (sh -i; the typed line is fed to it), where gnsh waits for its slot
# in the foreground; a command without one (automation, or a terminal
# session started for that one command) would be queued for the node
# agent instead. Only gnsh's own lines are shown (not the prompt, the echo).
typed() {
	{
		echo "timeout --foreground 300 reboot" |
			in_node "$1" env SHELL=/bin/sh script -qe /dev/null 2>&1 && echo 0 >"$log/rc-$2" || echo $? >"$log/rc-$2"
	} | sed -u -n 's/\r$//; s/^\(# \)*\(gnsh: \)/\2/p' | tee "$log/out-$2" | sed -u "s/^/$2| /" | stamp "$log/t0"
}
echo "   root types reboot on node-b and on node-c at the same moment (their lines: b| and c|):"
typed "$LB" b &
cb=$!
typed "$LC" c &
cc=$!
# The first one down is the one that took the slot.
first=
while [ -z "$first" ]; do
	if ! alive "$NB"; then first=b; elif ! alive "$NC"; then first=c; fi
	[ "$(echo "$(now) $t0" | awk '{print ($1 - $2 > 120)}')" = 0 ] || die "neither node went down within 120 s"
	sleep 0.1
done
if [ "$first" = b ]; then second=c NS1=$NB NS2=$NC; else second=b NS1=$NC NS2=$NB; fi
wait "$NS1" 2>/dev/null || true
at "$t0" "$(now)" "node-$first container down (its reboot); node-$second up, its reboot waiting for the slot"
alive "$NS2" || die "node-$second went down too, before node-$first was back"
echo "node-$first boots again" | stamp "$log/t0"
if [ "$first" = b ]; then
	boot slots-b2 node-b -D "$D"
	LB=$L
else
	boot slots-c2 node-c -D "$DC"
	LC=$L
fi
kubelet_up "node-$first"
echo "node-$first up (its kubelet reports the new boot, Ready); its agent lifts gnsh's cordon, and frees the slot 5 s later" | stamp "$log/t0"
gone() { ! alive "$NS2"; }
wait_for 120 "node-$second to go down" gone || die "node-$second did not go down within 120 s of node-$first's return"
wait "$NS2" 2>/dev/null || true
at "$t0" "$(now)" "node-$second container down (its reboot)"
sleep 0.3 # the watches' last events
kill "$kl" "$kn" 2>/dev/null || true
wait "$tl" "$tc" "$cb" "$cc" 2>/dev/null || true
echo "   journalctl -u gnsh on node-$first, the boot after its reboot (its agent frees the slot):"
if [ "$first" = b ]; then agent_log "$LB" 0; else agent_log "$LC" 0; fi
# Checked from the API server's record: never two holders, never both cordoned.
two=$(awk '$2 ~ /,/ { print $2; exit }' "$log/lease-watch")
both=$(awk '$2 == "node-b" { b = $3 } $2 == "node-c" { c = $3 } b == "true" && c == "true" { print "yes"; exit }' "$log/node-watch")
for n in b c; do # the watches saw each node hold the slot, and cordoned
	awk -v n="node-$n" '$2 == n { f = 1 } END { exit !f }' "$log/lease-watch" || die "the Lease never listed node-$n as a holder"
	awk -v n="node-$n" '$2 == n && $3 == "true" { f = 1 } END { exit !f }' "$log/node-watch" || die "node-$n was never seen cordoned"
done
[ -z "$two" ] || die "the Lease listed two holders at once: $two"
[ -z "$both" ] || die "node-b and node-c were cordoned at the same time"
grep -q "^gnsh: waiting for a reboot slot" "$log/out-$second" || die "node-$second's reboot did not wait for the slot"
{ [ "$(cat "$log/rc-$first" 2>/dev/null)" = 0 ] && [ "$(cat "$log/rc-$second" 2>/dev/null)" = 0 ]; } ||
	die "a reboot command failed (node-b: $(cat "$log/rc-b" 2>/dev/null), node-c: $(cat "$log/rc-c" 2>/dev/null))"
echo
echo "With one reboot slot, the two reboots typed at once went one after the other: node-$second's"
echo "reboot waited, naming the holder, until node-$first was back, Ready and uncordoned for the"
echo "settle time; then it drained and went down. The Lease never had two holders, and the two"
echo "nodes were never cordoned at the same time."
