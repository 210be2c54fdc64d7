#!/bin/sh
# make demo: the gap and the fix on Kubernetes nodes, in Debian bullseye
# containers (systemd 247). A local control plane (kwok plays the kubelet)
# has two nodes with pods; each container holds a kubelet-style delay
# inhibitor and the node's kubelet.conf. Root types `reboot`: on node-a with
# bullseye's own reboot, on node-b with gnsh installed over it and gnsh's
# node agent enabled (install/systemd/gnsh.service). node-a is throwaway
# (--volatile=overlay). node-b boots from an overlayfs mounted here (lower:
# the cached rootfs, never changed; upper: in $WORK), so it boots a second
# time from the same disk, where the agent lifts gnsh's cordon. Then the
# reboot-slot gate: gnsh's own identity (install/kubernetes/rbac.yaml, a
# ServiceAccount token), slots.maxUnavailable 1, and reboot typed on node-b
# and a third node, node-c (its own overlayfs disk), at the same moment:
# one goes, the other waits until the first is back, then goes; watches of
# the Lease and the Nodes check that never two were out.
# Safety: commands that shut down run only inside the containers; in_node
# refuses to enter this machine's own PID namespace.
# Needs root, systemd-nspawn and debootstrap (make deps), the Kubernetes
# binaries (make k8s; built here if missing) and gnsh (make build).
set -eu
cd "$(dirname "$0")/../.."
BIN=${GNSH_BIN:-$PWD/bin/gnsh}
[ -x "$BIN" ] || { echo "demo: build gnsh first (make build)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it boots containers)" >&2; exit 1; }
SUITE=${DEMO_SUITE:-bullseye}
GRACE="2 4 6" # terminationGracePeriodSeconds of each node's three web pods
DELAY=5       # InhibitDelayMaxSec: how long logind waits for the delay lock

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
# stop_container NSPAWN-PID INIT-PID: orderly (nspawn asks the container's
# systemd to halt), else killed after 30 s.
stop_container() {
	alive "$1" && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = systemd-nspawn ] || return 0
	kill -TERM "$1" 2>/dev/null || true
	_i=0
	while alive "$1" && [ $_i -lt 150 ]; do
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
	wait 2>/dev/null || true
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
printf '[Login]\nInhibitDelayMaxSec=%s\n' "$DELAY" >"$WORK/delay.conf"
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

echo "== a Kubernetes control plane on 127.0.0.1 (etcd, kube-apiserver, disruption controller; kwok plays the kubelet)"
# CP_OWNER_PID: its watchdog stops it even if this script is killed outright.
GNSH_K8S_BIN=$K8S_BIN CP_KWOK=1 CP_NODES="node-a node-b" CP_OWNER_PID=$$ sh test/k8s/controlplane.sh start "$CP" 2>"$WORK/cp.log" ||
	{ cat "$WORK/cp.log" >&2; exit 1; }
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata: {name: node-a, annotations: {kwok.x-k8s.io/node: fake}, labels: {kubernetes.io/hostname: node-a}}
---
apiVersion: v1
kind: Node
metadata: {name: node-b, annotations: {kwok.x-k8s.io/node: fake}, labels: {kubernetes.io/hostname: node-b}}
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
pod() { # NAME NODE APP GRACE OWNER-KIND OWNER-NAME OWNER-UID; kwok: start at once, finish at the end of the grace period
	cat <<EOF
---
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: demo
  labels: {app: $3}
  ownerReferences: [{apiVersion: apps/v1, kind: $5, name: $6, uid: $7, controller: true}]
  annotations: {pod-create.stage.kwok.x-k8s.io/delay: 0s, pod-create.stage.kwok.x-k8s.io/jitter-delay: 0s,
    pod-ready.stage.kwok.x-k8s.io/delay: 0s, pod-ready.stage.kwok.x-k8s.io/jitter-delay: 0s, pod-delete.stage.kwok.x-k8s.io/delay: 1h}
spec: {nodeName: $2, terminationGracePeriodSeconds: $4, containers: [{name: $3, image: registry.invalid/$3:1}]}
EOF
}
for n in a b; do
	i=0
	for g in $GRACE; do
		i=$((i + 1))
		pod "web-$n-$i" "node-$n" web "$g" ReplicaSet web "$RS"
	done
	pod "node-agent-$n" "node-$n" node-agent 30 DaemonSet node-agent "$DS"
done | k apply -f - >/dev/null
# Running and Ready (a Pending pod would bypass the budget), budget processed.
k wait --for=condition=Ready node/node-a node/node-b --timeout=60s >/dev/null || die "nodes not Ready within 60 s"
k -n demo wait --for=condition=Ready pod --all --timeout=60s >/dev/null || die "pods not Ready within 60 s"
k -n demo wait --for=jsonpath='{.status.disruptionsAllowed}'=5 pdb/web --timeout=60s >/dev/null ||
	die "the disruption controller did not process the budget within 60 s"
pods_on() { k -n demo get pods --field-selector "spec.nodeName=$1" -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}'; }
for n in node-a node-b; do echo "   $n: pods $(pods_on $n)(all Running)"; done
echo "   PodDisruptionBudget web: minAvailable 1; web pods' grace periods: $GRACE s"

follow() { tail -n +1 -f --pid="$2" "$1" 2>/dev/null; } # FILE PID: FILE as written, until PID ends
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

# boot NAME NODE NSPAWN-OPTIONS...: boots the container of node NODE (logs in
# $WORK/NAME) and waits until its systemd has booted and logind answers.
# Sets NS (systemd-nspawn's PID) and L (the container's PID 1).
boot() {
	_log=$WORK/$1 _node=$2
	mkdir -p "$_log"
	shift 2
	systemd-nspawn -q "$@" -b --register=no --keep-unit --machine="$_node" \
		--bind-ro="$BIN:/usr/local/sbin/gnsh" --bind="$_log:/var/log/demo" \
		>"$_log/console" 2>&1 </dev/null &
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

# reboot_case NAME NODE: with node NODE booted (NS, L), its delay lock held:
# types reboot, shows what happened as it happens, waits until the container
# is down.
reboot_case() {
	name=$1 node=$2 log=$WORK/$1
	in_node "$L" systemd-run --quiet --unit=demo-monitor -p StandardOutput=file:/var/log/demo/monitor \
		dbus-monitor --system "type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForShutdown'"
	wait_for 5 "dbus-monitor in $node" test -s "$log/monitor" || die "dbus-monitor did not start"
	echo "-- $node: /usr/sbin/reboot -> $(in_node "$L" readlink /usr/sbin/reboot); shutdown delay locks held:"
	inhibitors "$L" | sed 's/^/     /'
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
	wait_for 20 "the watches of $node and its pods" both_nonempty "$log/node-watch" "$log/pod-watch" ||
		die "kubectl watch did not start"
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
	kill "$kn" "$kp" 2>/dev/null || true
	wait "$tn" "$tp" 2>/dev/null || true
	at "$t0" "$end" "container down: exit $rc"
	echo "${pfs:+yes}" | sed 's/^$/no/' >"$log/pfs"
	[ -n "$pfs" ] && echo "$pfs $t0" | awk '{printf "%.1f", $1-$2}' >"$log/pfs-at"
	echo "$t0 $end" | awk '{printf "%.1f", $2-$1}' >"$log/secs"
	echo "$rc" >"$log/rc"
	left=$(k -n demo get pods --field-selector "spec.nodeName=$node" -o jsonpath='{range .items[?(@.metadata.ownerReferences[0].kind=="ReplicaSet")]}{.metadata.name}{" "}{end}')
	echo "$left" | wc -w | tr -d ' ' >"$log/left"
	sched=$(k get node "$node" -o jsonpath='{.spec.unschedulable}')
	[ "$sched" = true ] && echo yes >"$log/cordoned" || echo no >"$log/cordoned"
}

# gnsh_disk NODE: NODE's persistent root, an overlayfs on the cached rootfs
# mounted at $WORK/NODE-disk/root (upper layer beside it), with gnsh's unit,
# the delay-lock setting and the stand-in kubelet, as make install and
# kubeadm would leave them.
gnsh_disk() {
	_d=$WORK/$1-disk
	mkdir -p "$_d/upper" "$_d/work" "$_d/root"
	mount -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$_d/upper,workdir=$_d/work" "$_d/root" ||
		die "cannot mount an overlayfs on $_d/root"
	_d=$_d/root
	install -D -m 0644 install/systemd/gnsh.service "$_d/etc/systemd/system/gnsh.service"
	install -D -m 0644 "$WORK/delay.conf" "$_d/etc/systemd/logind.conf.d/demo.conf"
	mkdir -p "$_d/var/lib/kubelet"
	printf '%s\n' "apiVersion: kubelet.config.k8s.io/v1beta1" "kind: KubeletConfiguration" \
		"shutdownGracePeriod: ${DELAY}s" "shutdownGracePeriodCriticalPods: 2s" >"$_d/var/lib/kubelet/config.yaml"
	cat >"$_d/etc/systemd/system/demo-kubelet.service" <<EOF
[Unit]
Description=demo stand-in for the kubelet: its graceful node shutdown delay lock
After=dbus.service systemd-logind.service
[Service]
ExecStart=/usr/bin/systemd-inhibit --what=shutdown --mode=delay --who=kubelet --why="Kubelet needs time to handle node shutdown" sleep infinity
[Install]
WantedBy=multi-user.target
EOF
}
# gnsh_enable NODE: in NODE's container (L), gnsh over the four commands,
# the agent and the stand-in kubelet enabled and holding their locks.
gnsh_enable() {
	for c in reboot poweroff halt shutdown; do in_node "$L" ln -sf /usr/local/sbin/gnsh "/usr/sbin/$c"; done
	echo "   root: ln -sf /usr/local/sbin/gnsh /usr/sbin/reboot (and poweroff, halt, shutdown)"
	echo "   root: systemctl enable --now gnsh.service demo-kubelet.service (the agent; the stand-in kubelet)"
	in_node "$L" systemctl enable --quiet --now gnsh.service demo-kubelet.service
	wait_for 30 "the agent's and the kubelet's delay locks on $1" holds "$L" kubelet gnsh ||
		{ agent_log "$L" 0 >&2; die "$1: the agent or the kubelet holds no delay lock"; }
}
# report_boot NODE: the kubelet's part that kwok does not play: the Node's
# status.nodeInfo.bootID is the container's boot ID (L's), as a kubelet
# reports after each boot; the reboot-slot gate frees a slot once its
# Node shows a new boot.
report_boot() {
	_b=$(in_node "$L" cat /proc/sys/kernel/random/boot_id)
	k patch node "$1" --subresource=status --type=merge -p "{\"status\":{\"nodeInfo\":{\"bootID\":\"$_b\"}}}" >/dev/null ||
		die "cannot set the boot ID of Node $1"
}

r() { cat "$WORK/$1/$2"; }
cordoned() { [ "$(k get node "$1" -o jsonpath='{.spec.unschedulable}')" = true ]; }
schedulable() { ! cordoned "$1"; }
annotation() { k get node "$1" -o jsonpath='{.metadata.annotations.gnsh\.io/cordoned}'; }
# agent_log NODE-PID BOOT: the agent's own lines in that boot's journal.
agent_log() { in_node "$1" journalctl -q -u gnsh -b "$2" -o cat --no-pager 2>/dev/null | grep '^gnsh: ' | sed 's/^/     /'; }

echo "== case 1: $SUITE's own reboot on node-a (a throwaway container)"
mkdir -p "$WORK/stock"
kubelet_conf node-a "$WORK/stock/kubelet.conf"
boot stock node-a -D "$ROOTFS" --volatile=overlay \
	--bind-ro="$WORK/delay.conf:/etc/systemd/logind.conf.d/demo.conf" \
	--bind-ro="$WORK/stock/kubelet.conf:/etc/kubernetes/kubelet.conf" \
	--bind-ro="$CP/pki/node-node-a.pem:/var/lib/kubelet/pki/kubelet-client-current.pem"
in_node "$L" systemd-run --quiet --unit=demo-kubelet \
	systemd-inhibit --what=shutdown --mode=delay --who=kubelet --why="Kubelet needs time to handle node shutdown" sleep 1000
wait_for 10 "the stand-in kubelet's lock on node-a" holds "$L" kubelet || die "no kubelet lock on node-a"
reboot_case stock node-a
echo "   afterwards: node-a cordoned: $(r stock cordoned); web pods still bound to it: $(r stock left)"

echo "== case 2: gnsh installed over reboot on node-b, its node agent enabled"
echo "   node-b's disk: an overlayfs on the cached rootfs (upper layer in $DISK): it survives the reboot"
gnsh_disk node-b
D=$DISK/root
kubelet_conf node-b "$WORK/node-b.kubelet.conf"
install -D -m 0600 "$WORK/node-b.kubelet.conf" "$D/etc/kubernetes/kubelet.conf"
install -D -m 0600 "$CP/pki/node-node-b.pem" "$D/var/lib/kubelet/pki/kubelet-client-current.pem"
boot gnsh node-b -D "$D"
gnsh_enable node-b
echo "   journalctl -u gnsh (the agent, this boot):"
agent_log "$L" 0
reboot_case gnsh node-b
echo "   afterwards (node-b down):"
k get nodes | sed 's/^/     /'
echo "     gnsh.io/cordoned on node-b: $(annotation node-b)"
echo "     pods on node-b: $(pods_on node-b)(the DaemonSet's: left, as kubectl drain does)"
k get events --field-selector involvedObject.name=node-b -o custom-columns=EVENT:.reason,MESSAGE:.message >"$WORK/events"
for e in EVENT GnshDrainStarted GnshDrainFinished GnshShutdown; do grep "^$e " "$WORK/events" | sed 's/^/     /'; done

if ! { [ "$(r gnsh pfs)" = yes ] && [ "$(r gnsh rc)" = 133 ] && [ "$(r gnsh left)" = 0 ] && [ "$(r gnsh cordoned)" = yes ]; }; then
	die "gnsh's reboot did not cordon and drain node-b and go through logind as expected"
fi

echo "== node-b boots again, from the same disk (gnsh, its enabled unit, the kubelet's, kubelet.conf)"
echo "   the agent lifts gnsh's cordon once the Node is Ready for this boot (here at once: kwok, the"
echo "   stand-in kubelet, keeps it Ready throughout); nothing else would"
t0=$(now)
boot gnsh-boot2 node-b -D "$D"
at "$t0" "$(now)" "node-b booted (boot ID $(in_node "$L" cat /proc/sys/kernel/random/boot_id))"
wait_for 90 "gnsh's agent to uncordon node-b" schedulable node-b ||
	{ agent_log "$L" 0 >&2; die "node-b still cordoned 90 s after its second boot"; }
up=$(now)
at "$t0" "$up" "node-b schedulable again"
echo "$t0 $up" | awk '{printf "%.1f", $2-$1}' >"$WORK/gnsh/uncordon-at"
echo "   shutdown delay locks held again:"
inhibitors "$L" | sed 's/^/     /'
echo "   journalctl -u gnsh, the boot before (the reboot gnsh drained for):"
agent_log "$L" -1
echo "   journalctl -u gnsh, this boot:"
agent_log "$L" 0
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

echo "== node-a, for contrast: bullseye's reboot went straight to PID 1. Its $(r stock left) web pods were not evicted"
echo "   (on a real node they die with it; the budget was never asked), and it was never cordoned:"
echo "   no cordon to lift after its boot, and nothing kept new pods off it while it went down."

echo
printf '%-36s %-24s %s\n' "" "stock reboot ($SUITE)" "gnsh reboot"
printf '%-36s %-24s %s\n' "web pods evicted before going down" "no ($(r stock left) left)" "yes ($(r gnsh left) left)"
printf '%-36s %-24s %s\n' "node cordoned" "$(r stock cordoned)" "$(r gnsh cordoned)"
printf '%-36s %-24s %s\n' "PrepareForShutdown sent by logind" "$(r stock pfs)" "$(r gnsh pfs)$([ -s "$WORK/gnsh/pfs-at" ] && echo ", after the drain (+$(r gnsh pfs-at) s)")"
printf '%-36s %-24s %s\n' "down after (s; lock allows $DELAY s)" "$(r stock secs)" "$(r gnsh secs)"
printf '%-36s %-24s %s\n' "container exit (133 = reboot)" "$(r stock rc)" "$(r gnsh rc)"
lifted="yes, but no GnshUncordoned Event"
! grep -q '^GnshUncordoned ' "$WORK/uncordoned" || lifted="yes, by gnsh's agent (+$(r gnsh uncordon-at) s)"
printf '%-36s %-24s %s\n' "cordon lifted after the next boot" "(never cordoned)" "$lifted"
echo
if grep -q '^GnshUncordoned ' "$WORK/uncordoned"; then
	echo "gnsh drained node-b (cordon, evictions through the Eviction API with the kubelet's"
	echo "credentials, PodDisruptionBudget honoured), then routed the reboot through systemd-logind:"
	echo "the delay inhibitor (kubelet's graceful node shutdown lock) was honoured. After the next"
	echo "boot, its agent (gnsh.service) lifted its own cordon once the node was Ready again."
else
	die "node-b is schedulable again, but the agent posted no GnshUncordoned Event"
fi

echo
echo "== case 3: reboot typed on two nodes at once, one reboot slot for the cluster (slots.maxUnavailable: 1)"
echo "   admin, once: kubectl apply -f install/kubernetes/rbac.yaml (gnsh's own identity: the gate's Lease"
echo "   and the Node list, which the kubelet's credentials may not read); on each node, a ServiceAccount"
echo "   token in /etc/gnsh/kubeconfig (0600) and /etc/gnsh/config.yaml: slots: {maxUnavailable: 1, settle: 5s}"
k apply -f install/kubernetes/rbac.yaml >/dev/null
KC=$WORK/gnsh.kubeconfig
SERVER=$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')
kc() { "$K8S_BIN/kubectl" --kubeconfig "$KC" "$@"; }
kc config set-cluster demo --server="$SERVER" --certificate-authority="$CP/pki/ca.crt" --embed-certs=true >/dev/null
# The token goes from kubectl to the file, never to the terminal.
kc config set-credentials gnsh --token="$(k -n kube-system create token gnsh --duration=1h)" >/dev/null
kc config set-context demo --cluster=demo --user=gnsh >/dev/null
kc config use-context demo >/dev/null
chmod 600 "$KC"
may_use_lease() { [ "$(kc auth can-i update leases/reboot-slots -n gnsh 2>/dev/null)" = yes ]; }
wait_for 30 "RBAC to grant gnsh's ServiceAccount the Lease" may_use_lease || die "gnsh's ServiceAccount may not use the Lease"
# node-c: a third Node, with two web pods of its own; node-b gets one back.
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata: {name: node-c, annotations: {kwok.x-k8s.io/node: fake}, labels: {kubernetes.io/hostname: node-c}}
EOF
{
	pod web-b-4 node-b web 2 ReplicaSet web "$RS"
	pod web-c-1 node-c web 2 ReplicaSet web "$RS"
	pod web-c-2 node-c web 4 ReplicaSet web "$RS"
} | k apply -f - >/dev/null
k wait --for=condition=Ready node/node-c --timeout=60s >/dev/null || die "node-c not Ready within 60 s"
k -n demo wait --for=condition=Ready pod/web-b-4 pod/web-c-1 pod/web-c-2 --timeout=60s >/dev/null || die "pods not Ready within 60 s"
# slots_config NODE DIR: gnsh's identity and config on NODE's disk.
slots_config() {
	install -D -m 0600 "$KC" "$2/etc/gnsh/kubeconfig"
	printf 'node: %s\nslots: {maxUnavailable: 1, settle: 5s}\n' "$1" >"$WORK/$1.config.yaml"
	install -D -m 0644 "$WORK/$1.config.yaml" "$2/etc/gnsh/config.yaml"
}
slots_config node-b "$D"
in_node "$L" systemctl restart gnsh.service # the agent reads its config at start
LB=$L NB=$NS
echo "   node-c: booted like node-b (its own overlayfs disk), gnsh installed the same way"
gnsh_disk node-c
DC=$WORK/node-c-disk/root
slots_config node-c "$DC"
boot slots-c node-c -D "$DC"
gnsh_enable node-c >/dev/null
LC=$L NC=$NS
L=$LB report_boot node-b
L=$LC report_boot node-c
wait_for 30 "node-b's agent to hold its delay lock again" holds "$LB" gnsh || die "node-b: no agent lock after the restart"

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
	_b= _c=
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
typed() {
	{
		in_node "$1" timeout --foreground 300 reboot 2>&1 && echo 0 >"$log/rc-$2" || echo $? >"$log/rc-$2"
	} | tee "$log/out-$2" | sed -u "s/^/$2| /" | stamp "$log/t0"
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
report_boot "node-$first"
echo "node-$first up (its Node shows the new boot ID); its agent lifts gnsh's cordon, and frees the slot 5 s later" | stamp "$log/t0"
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
[ "$(cat "$log/rc-$first" 2>/dev/null)" = 0 ] && [ "$(cat "$log/rc-$second" 2>/dev/null)" = 0 ] ||
	die "a reboot command failed (node-b: $(cat "$log/rc-b" 2>/dev/null), node-c: $(cat "$log/rc-c" 2>/dev/null))"
echo
echo "With one reboot slot, the two reboots typed at once went one after the other: node-$second's"
echo "reboot waited, naming the holder, until node-$first was back, Ready and uncordoned for the"
echo "settle time; then it drained and went down. The Lease never had two holders, and the two"
echo "nodes were never cordoned at the same time."
