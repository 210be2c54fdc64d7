#!/bin/sh
# A throwaway Kubernetes control plane on loopback for tests (see README.md):
# etcd + kube-apiserver (Node,RBAC; NodeRestriction; no ServiceAccount
# admission) + kube-controller-manager running only the disruption
# controller, optionally kwok as a fake kubelet. All state lives in DIR;
# ports are picked at random and retried, so several can run side by side.
#
#   controlplane.sh start DIR           start; DIR/env, DIR/*.kubeconfig
#   controlplane.sh stop DIR            stop everything started in DIR
#   controlplane.sh node DIR NAME       client cert CN=system:node:NAME, O=system:nodes
#                                       -> DIR/node-NAME.kubeconfig (+ -data variant)
#   controlplane.sh user DIR NAME [GROUP,...]
#                                       client cert -> DIR/user-NAME.kubeconfig
#
# Environment:
#   GNSH_K8S_BIN   directory with the binaries (default: run build.sh)
#   CP_NODES       node identities to create at start (default "node1")
#   CP_KWOK=1      also run kwok for Nodes annotated kwok.x-k8s.io/node=fake
#   CP_AUDIT=1     audit log of every request at level Metadata (writes of
#                  Leases in namespace gnsh at RequestResponse, of nodes/status
#                  and pods/status at Request: a kubelet's conditions, a pod's
#                  phase) (JSON lines,
#                  stage RequestReceived omitted, blocking mode: none lost)
#                  in DIR/logs/audit.log (rotated at 1 GB to audit-*.log)
#   CP_FEATURE_GATES  the kube-apiserver's --feature-gates (e.g.
#                  NodeLifecycleConditions=true); default none
#   CP_TIMEOUT     seconds to wait for readiness (default 60)
#   CP_OWNER_PID   stop the control plane when this process is gone
set -eu

die() { echo "controlplane.sh: $*" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)

[ $# -ge 2 ] || die "usage: $0 start|stop|node|user DIR [NAME [GROUPS]]"
cmd=$1
mkdir -p "$2"
D=$(cd "$2" && pwd)
P=$D/pki
R=$D/run

# ---------- PKI (ECDSA P-256: instant to generate) ----------

# cert NAME CN [O,O,...] [ext-file-lines]: key + cert signed by the CA, and
# NAME.pem = cert + key (like the kubelet's kubelet-client-current.pem).
cert() {
	subj=
	if [ -n "${3:-}" ]; then
		for o in $(echo "$3" | tr ',' ' '); do subj="$subj/O=$o"; done
	fi
	subj="$subj/CN=$2"
	ext=$P/$1.ext
	printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" >"$ext"
	if [ -n "${4:-}" ]; then
		printf '%s\n' "$4" >>"$ext"
	else
		echo "extendedKeyUsage=clientAuth" >>"$ext"
	fi
	openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-keyout "$P/$1.key" -subj "$subj" -out "$P/$1.csr" 2>/dev/null
	openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
		-days 3650 -extfile "$ext" -out "$P/$1.crt" 2>/dev/null
	cat "$P/$1.crt" "$P/$1.key" >"$P/$1.pem"
	chmod 600 "$P/$1.key" "$P/$1.pem"
	rm -f "$P/$1.csr" "$ext"
}

pki() {
	[ -f "$P/ca.crt" ] && return 0
	command -v openssl >/dev/null || die "openssl missing (apt-get install openssl)"
	mkdir -p "$P"
	openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-keyout "$P/ca.key" -out "$P/ca.crt" -subj "/CN=gnsh-test-ca" -days 3650 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	cert apiserver kube-apiserver "" "extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert admin admin system:masters
	openssl ecparam -name prime256v1 -genkey -noout -out "$P/sa.key" 2>/dev/null
	openssl ec -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
	tok() { openssl rand -hex 16; }
	ADMIN_TOKEN=$(tok)
	NODE1_TOKEN=$(tok)
	printf '%s\n' "$ADMIN_TOKEN,admin,1,\"system:masters\"" \
		"$NODE1_TOKEN,system:node:node1,2,\"system:nodes\"" >"$P/tokens.csv"
	chmod 600 "$P"/*.key "$P/tokens.csv"
}

b64() { base64 -w0 <"$1"; }

# kubeconfig FILE CERTNAME embed(0|1): the layout of kubeadm's kubelet.conf.
kubeconfig() {
	if [ "$3" = 1 ]; then
		u="    client-certificate-data: $(b64 "$P/$2.crt")
    client-key-data: $(b64 "$P/$2.key")"
	else
		u="    client-certificate: $P/$2.pem
    client-key: $P/$2.pem"
	fi
	cat >"$1.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: $(b64 "$P/ca.crt")
    server: $SERVER
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
preferences: {}
users:
- name: default-auth
  user:
$u
EOF
	chmod 600 "$1.tmp"
	mv "$1.tmp" "$1"
}

load_env() {
	[ -f "$D/env" ] || die "$D/env missing: start the control plane first"
	. "$D/env"
}

node_identity() { # NAME
	case $1 in *[!a-z0-9.-]* | "") die "bad node name '$1'" ;; esac
	[ -f "$P/node-$1.crt" ] || cert "node-$1" "system:node:$1" system:nodes
	kubeconfig "$D/node-$1.kubeconfig" "node-$1" 0
	kubeconfig "$D/node-$1-data.kubeconfig" "node-$1" 1
}

user_identity() { # NAME [GROUPS]
	case $1 in *[!a-zA-Z0-9.:_-]* | "") die "bad user name '$1'" ;; esac
	f=$(echo "$1" | tr ':' '_')
	[ -f "$P/user-$f.crt" ] || cert "user-$f" "$1" "${2:-}"
	kubeconfig "$D/user-$f.kubeconfig" "user-$f" 1
}

# ---------- processes ----------

. "$here/procs.sh" # ours, alive, record, spawn

stop_all() {
	procs=
	for n in kwok kube-controller-manager kube-apiserver etcd watchdog; do
		f=$R/$n.pid
		[ -f "$f" ] || continue
		p=$(cat "$f")
		st=$(cat "$R/$n.start" 2>/dev/null || :)
		rm -f "$f" "$R/$n.start"
		[ "$p" = "$$" ] && continue # the watchdog stopping us
		if alive "$p" "$st"; then
			kill -TERM "$p" 2>/dev/null || :
			procs="$procs $p:$st"
		fi
	done
	i=0
	for ps in $procs; do
		p=${ps%%:*} st=${ps#*:}
		while alive "$p" "$st" && [ $i -lt 100 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		alive "$p" "$st" && kill -KILL "$p" 2>/dev/null || :
	done
	for ps in $procs; do # wait out SIGKILL too
		p=${ps%%:*} st=${ps#*:}
		j=0
		while alive "$p" "$st" && [ $j -lt 50 ]; do
			sleep 0.1
			j=$((j + 1))
		done
	done
	return 0
}

freeport() { # random port below the ephemeral range, not in use now
	while :; do
		p=$((10000 + $(od -An -N2 -tu2 /dev/urandom) % 22000))
		[ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ] && { echo $p; return; }
	done
}

now_ms() { date +%s%3N; }

# try_start: start etcd + apiserver once; 0 ready, 2 port clash, 1 failure.
try_start() {
	EC=$(freeport)
	EP=$(freeport)
	AP=$(freeport)
	[ "$EC" != "$EP" ] && [ "$EC" != "$AP" ] && [ "$EP" != "$AP" ] || return 2
	rm -rf "$D/etcd"
	set --
	[ -z "${CP_FEATURE_GATES:-}" ] || set -- "--feature-gates=$CP_FEATURE_GATES"
	if [ "${CP_AUDIT:-0}" = 1 ]; then
		# Writes of gnsh's slots Lease with their answers (the record each
		# version holds); node and pod status writes with their body (the
		# kubelet's "node is shutting down", a pod's terminal phase); every
		# other request at level Metadata.
		printf '%s\n' "apiVersion: audit.k8s.io/v1" "kind: Policy" "omitStages: [RequestReceived]" \
			"rules:" "- level: RequestResponse" "  namespaces: [gnsh]" "  verbs: [create, update, patch, delete]" \
			"  resources: [{group: coordination.k8s.io, resources: [leases]}]" \
			"- level: Request" "  verbs: [update, patch]" "  resources: [{group: \"\", resources: [nodes/status, pods/status]}]" \
			"- level: Metadata" >"$D/audit-policy.yaml"
		rm -f "$D"/logs/audit*.log
		set -- "$@" --audit-policy-file="$D/audit-policy.yaml" --audit-log-path="$D/logs/audit.log" \
			--audit-log-format=json --audit-log-mode=blocking --audit-log-maxsize=1024
	fi
	spawn etcd "$BIN/etcd" --name gnsh-test --data-dir "$D/etcd" \
		--listen-client-urls "http://127.0.0.1:$EC" --advertise-client-urls "http://127.0.0.1:$EC" \
		--listen-peer-urls "http://127.0.0.1:$EP" --initial-advertise-peer-urls "http://127.0.0.1:$EP" \
		--initial-cluster "gnsh-test=http://127.0.0.1:$EP" \
		--unsafe-no-fsync --quota-backend-bytes=2147483648 --log-level=warn
	spawn kube-apiserver "$BIN/kube-apiserver" \
		--etcd-servers="http://127.0.0.1:$EC" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
		--secure-port="$AP" --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
		--client-ca-file="$P/ca.crt" --token-auth-file="$P/tokens.csv" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
		--service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC \
		--enable-admission-plugins=NodeRestriction --disable-admission-plugins=ServiceAccount \
		--allow-privileged=true --endpoint-reconciler-type=none --profiling=false "$@"
	deadline=$(($(date +%s) + ${CP_TIMEOUT:-60}))
	while [ "$(date +%s)" -lt $deadline ]; do
		code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$P/ca.crt" \
			-H "Authorization: Bearer $ADMIN_TOKEN" "https://127.0.0.1:$AP/readyz" || :)
		[ "$code" = 200 ] && return 0
		for n in etcd kube-apiserver; do
			if ! ours "$n"; then
				if grep -qi 'address already in use' "$D/logs/$n.log"; then
					stop_all
					return 2
				fi
				echo "controlplane.sh: $n exited; last lines of $D/logs/$n.log:" >&2
				tail -n 20 "$D/logs/$n.log" >&2
				stop_all
				return 1
			fi
		done
		sleep 0.1
	done
	echo "controlplane.sh: apiserver not ready after ${CP_TIMEOUT:-60}s; see $D/logs/" >&2
	tail -n 20 "$D/logs/kube-apiserver.log" >&2
	stop_all
	return 1
}

start() {
	for c in curl ss setsid base64 od; do
		command -v $c >/dev/null || die "$c missing"
	done
	if [ -n "${GNSH_K8S_BIN:-}" ]; then
		BIN=$GNSH_K8S_BIN
	else
		BIN=$("$here/build.sh" | tail -n 1)
	fi
	for b in etcd kube-apiserver kube-controller-manager; do
		[ -x "$BIN/$b" ] || die "$BIN/$b missing"
	done
	for n in etcd kube-apiserver; do
		ours "$n" && die "already running in $D"
	done
	mkdir -p "$R" "$D/logs"
	rm -f "$D/env"
	t0=$(now_ms)
	pki
	ADMIN_TOKEN=$(awk -F, '$2=="admin"{print $1}' "$P/tokens.csv")
	NODE1_TOKEN=$(awk -F, '$2=="system:node:node1"{print $1}' "$P/tokens.csv")
	try=1
	while :; do
		rc=0
		try_start || rc=$?
		[ $rc = 0 ] && break
		[ $rc = 2 ] && [ $try -lt 5 ] || die "start failed"
		echo "controlplane.sh: port in use, retrying with other ports" >&2
		try=$((try + 1))
	done
	t1=$(now_ms)
	SERVER=https://127.0.0.1:$AP
	kubeconfig "$D/admin.kubeconfig" admin 1
	spawn kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$D/admin.kubeconfig" \
		--controllers=disruption-controller --leader-elect=false --secure-port=0
	# Bounded wait until the disruption controller runs (about 0.2 s).
	i=0
	until grep -q 'Starting disruption controller' "$D/logs/kube-controller-manager.log"; do
		if ! ours kube-controller-manager || [ $i -ge 300 ]; then
			tail -n 20 "$D/logs/kube-controller-manager.log" >&2
			stop_all
			die "kube-controller-manager did not start its disruption controller"
		fi
		sleep 0.1
		i=$((i + 1))
	done
	if [ "${CP_KWOK:-0}" = 1 ]; then
		[ -x "$BIN/kwok" ] || die "$BIN/kwok missing"
		spawn kwok "$BIN/kwok" --kubeconfig="$D/admin.kubeconfig" -c "$BIN/../kwok-stages.yaml" \
			--manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake
	fi
	for n in ${CP_NODES-node1}; do node_identity "$n"; done
	t2=$(now_ms)
	cat >"$D/env.tmp" <<EOF
# written by controlplane.sh start; sh-sourceable
CP_DIR='$D'
K8S_BIN='$BIN'
ETCD_PORT=$EC
ETCD_PEER_PORT=$EP
APISERVER_PORT=$AP
SERVER='$SERVER'
CA='$P/ca.crt'
ADMIN_KUBECONFIG='$D/admin.kubeconfig'
ADMIN_TOKEN=$ADMIN_TOKEN
NODE1_TOKEN=$NODE1_TOKEN
KUBECONFIG='$D/admin.kubeconfig'
READY_MS=$((t1 - t0))
STARTUP_MS=$((t2 - t0))
AUDIT_LOG='$([ "${CP_AUDIT:-0}" = 1 ] && echo "$D/logs/audit.log")'
EOF
	mv "$D/env.tmp" "$D/env"
	if [ -n "${CP_OWNER_PID:-}" ]; then
		setsid sh -c 'while kill -0 "$1" 2>/dev/null && [ -f "$2/run/kube-apiserver.pid" ]; do sleep 1; done
			exec "$0" stop "$2"' "$here/controlplane.sh" "$CP_OWNER_PID" "$D" >/dev/null 2>&1 </dev/null &
		record watchdog $!
	fi
	echo "controlplane.sh: ready at $SERVER: apiserver $((t1 - t0)) ms, all $((t2 - t0)) ms (state in $D)" >&2
}

case $cmd in
start) start ;;
stop) stop_all ;;
node)
	[ $# -eq 3 ] || die "usage: $0 node DIR NAME"
	load_env
	node_identity "$3"
	echo "$D/node-$3.kubeconfig"
	;;
user)
	[ $# -ge 3 ] || die "usage: $0 user DIR NAME [GROUP,...]"
	load_env
	user_identity "$3" "${4:-}"
	echo "$D/user-$(echo "$3" | tr ':' '_').kubeconfig"
	;;
*) die "unknown command $cmd" ;;
esac
