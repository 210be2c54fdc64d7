#!/bin/sh
# make demo: the gap and the fix on Kubernetes nodes, in throwaway Debian
# bullseye containers (systemd 247). A local control plane (kwok plays the
# kubelet) has two nodes with pods; each container holds a kubelet-style
# delay inhibitor and the node's kubelet.conf. Root types `reboot`: on
# node-a with bullseye's own reboot, on node-b with gnsh installed over it.
# Containers run with --volatile=overlay: the cached rootfs is not changed.
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
cleanup() {
	for p in $(cat "$WORK"/*.pid 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done
	[ ! -f "$CP/env" ] || GNSH_K8S_BIN=$K8S_BIN sh test/k8s/controlplane.sh stop "$CP" >/dev/null 2>&1 || true
	wait 2>/dev/null || true
	[ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
printf '[Login]\nInhibitDelayMaxSec=%s\n' "$DELAY" >"$WORK/delay.conf"
k() { "$K8S_BIN/kubectl" --kubeconfig "$CP/admin.kubeconfig" "$@"; }

echo "== a Kubernetes control plane on 127.0.0.1 (etcd, kube-apiserver, disruption controller; kwok plays the kubelet)"
GNSH_K8S_BIN=$K8S_BIN CP_KWOK=1 CP_NODES="node-a node-b" sh test/k8s/controlplane.sh start "$CP" 2>"$WORK/cp.log" ||
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
k wait --for=condition=Ready node/node-a node/node-b --timeout=60s >/dev/null
k -n demo wait --for=condition=Ready pod --all --timeout=60s >/dev/null
k -n demo wait --for=jsonpath='{.status.disruptionsAllowed}'=5 pdb/web --timeout=60s >/dev/null
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

# run_case NAME NODE INSTALL_GNSH: boots node NODE, holds the lock, types
# reboot, shows what happened.
run_case() {
	name=$1 node=$2 gnsh=$3 log=$WORK/$1
	mkdir -p "$log"
	# The node's kubeconfig where kubeadm puts it: kubelet.conf naming the
	# kubelet's rotated client certificate.
	sed "s|$CP/pki/node-$node.pem|/var/lib/kubelet/pki/kubelet-client-current.pem|" "$CP/node-$node.kubeconfig" >"$log/kubelet.conf"
	systemd-nspawn -q -D "$ROOTFS" -b --register=no --keep-unit --volatile=overlay --machine="$node" \
		--bind-ro="$BIN:/usr/local/sbin/gnsh" \
		--bind-ro="$WORK/delay.conf:/etc/systemd/logind.conf.d/demo.conf" \
		--bind-ro="$log/kubelet.conf:/etc/kubernetes/kubelet.conf" \
		--bind-ro="$CP/pki/node-$node.pem:/var/lib/kubelet/pki/kubelet-client-current.pem" \
		--bind="$log:/var/log/demo" \
		>"$log/console" 2>&1 </dev/null &
	ns=$!
	echo "$ns" >"$WORK/$name-nspawn.pid"
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
	echo "-- $node: /usr/sbin/reboot -> $(nsenter -t "$L" -a readlink /usr/sbin/reboot); inhibitors held:"
	nsenter -t "$L" -a systemd-inhibit --list --no-pager 2>/dev/null | sed -n '/kubelet/p' | sed 's/^/     /'
	echo "   root types: reboot"

	# The node and its pods as the API server sees them, while reboot runs.
	k get node "$node" --watch-only --no-headers -o custom-columns=U:.spec.unschedulable >"$log/node-watch" 2>/dev/null &
	kn=$!
	k -n demo get pods --field-selector "spec.nodeName=$node" --watch-only --output-watch-events --no-headers \
		-o custom-columns=E:.type,N:.object.metadata.name,D:.object.metadata.deletionTimestamp,G:.object.spec.terminationGracePeriodSeconds \
		>"$log/pod-watch" 2>/dev/null &
	kp=$!
	echo "$kn $kp" >"$WORK/$name-watch.pid"
	follow "$log/node-watch" "$kn" | while read -r u; do
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
	sleep 0.3 # let the watch start
	t0=$(now)
	echo "$t0" >"$log/t0"

	# As root logged in on the node; gnsh writes its progress to stderr.
	nsenter -t "$L" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		LOGNAME=root ${SUDO_USER:+SUDO_USER=$SUDO_USER} reboot 2>&1 | stamp "$log/t0" || true
	for _ in $(seq 40); do grep -q 'boolean true' "$log/monitor" 2>/dev/null && break; kill -0 "$ns" 2>/dev/null || break; sleep 0.05; done
	pfs=$(awk '/member=PrepareForShutdown/ { sub(/.*time=/, ""); t = $1 } /boolean true/ && t { print t; exit }' "$log/monitor")
	if [ -n "$pfs" ]; then
		at "$t0" "$pfs" "logind: PrepareForShutdown(true); the kubelet's delay lock now holds the reboot (up to $DELAY s)"
	else
		echo "no PrepareForShutdown: logind was bypassed, the delay lock ignored" | stamp "$log/t0"
	fi
	rc=0
	wait "$ns" || rc=$?
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

r() { cat "$WORK/$1/$2"; }

echo "== case 1: $SUITE's own reboot on node-a"
run_case stock node-a no
echo "   afterwards: node-a cordoned: $(r stock cordoned); web pods still bound to it: $(r stock left)"
echo "== case 2: gnsh installed over reboot on node-b"
run_case gnsh node-b yes
echo "   afterwards:"
k get nodes | sed 's/^/     /'
echo "     gnsh.io/cordoned on node-b: $(k get node node-b -o jsonpath='{.metadata.annotations.gnsh\.io/cordoned}')"
echo "     pods on node-b: $(pods_on node-b)(the DaemonSet's: left, as kubectl drain does)"
k get events --field-selector involvedObject.name=node-b -o custom-columns=EVENT:.reason,MESSAGE:.message >"$WORK/events"
for e in EVENT GnshDrainStarted GnshDrainFinished GnshShutdown; do grep "^$e " "$WORK/events" | sed 's/^/     /'; done

echo
printf '%-36s %-24s %s\n' "" "stock reboot ($SUITE)" "gnsh reboot"
printf '%-36s %-24s %s\n' "web pods evicted before going down" "no ($(r stock left) left)" "yes ($(r gnsh left) left)"
printf '%-36s %-24s %s\n' "node cordoned" "$(r stock cordoned)" "$(r gnsh cordoned)"
printf '%-36s %-24s %s\n' "PrepareForShutdown sent by logind" "$(r stock pfs)" "$(r gnsh pfs)$([ -s "$WORK/gnsh/pfs-at" ] && echo ", after the drain (+$(r gnsh pfs-at) s)")"
printf '%-36s %-24s %s\n' "down after (s; lock allows $DELAY s)" "$(r stock secs)" "$(r gnsh secs)"
printf '%-36s %-24s %s\n' "container exit (133 = reboot)" "$(r stock rc)" "$(r gnsh rc)"
echo
if [ "$(r gnsh pfs)" = yes ] && [ "$(r gnsh rc)" = 133 ] && [ "$(r gnsh left)" = 0 ] && [ "$(r gnsh cordoned)" = yes ]; then
	echo "gnsh drained node-b (cordon, evictions through the Eviction API with the kubelet's"
	echo "credentials, PodDisruptionBudget honoured), then routed the reboot through systemd-logind:"
	echo "the delay inhibitor (kubelet's graceful node shutdown lock) was honoured."
else
	KEEP=1
	echo "demo: gnsh's reboot did not drain and go through logind as expected; logs in $WORK" >&2
	exit 1
fi
