#!/bin/sh
# node-setup.sh: makes a booted test container (systemd, logind) a node that
# runs the real kubelet on fakecri, for every boot, as on a real node. Run it
# inside the container, as root, once; it is idempotent. It refuses to run
# outside a container (systemd-detect-virt --container says none).
#
#   node-setup.sh NODE PORT [GRACE [CRITICAL]]
#
#   NODE      the Node's name (kubelet --hostname-override); the kubeconfig
#             must be system:node:NODE's
#   PORT      kubelet's port on 127.0.0.1; its healthz port is PORT+1. The
#             test containers share the host's network namespace: give each
#             node its own two free ports (no other port is opened:
#             readOnlyPort is 0)
#   GRACE     shutdownGracePeriod (default 20s)
#   CRITICAL  shutdownGracePeriodCriticalPods (default 5s)
#
# Environment (defaults in brackets):
#   KUBECONFIG_PATH  the node's kubeconfig [/etc/kubernetes/kubelet.conf, kubeadm's]
#   KUBELET_BIN      the kubelet binary [/usr/local/bin/kubelet]
#   FAKECRI_BIN      the fakecri binary [/usr/local/bin/fakecri]
#   NODE_START=0     only install and enable, do not start now [start]
#
# What it installs:
#   /etc/kubernetes/kubelet-config.yaml   kubelet's config (passed with --config,
#                                         a non-default path: gnsh doctor finds it
#                                         on the running kubelet's command line)
#   /usr/local/sbin/kubelet-node-prep     per boot, before kubelet (kubelet-node-prep.service):
#                                         /dev/kmsg -> /dev/console, and files holding
#                                         the values kubelet wants bind-mounted over
#                                         vm.overcommit_memory, kernel.panic,
#                                         kernel.panic_on_oops (read-only /proc/sys in nspawn)
#   fakecri.service, kubelet-node-prep.service, kubelet.service   enabled (multi-user.target)
#
# The binaries are not copied: bind them into the container (read-only) at
# KUBELET_BIN and FAKECRI_BIN. kubelet writes its own logind drop-in
# (/etc/systemd/logind.conf.d/99-kubelet.conf) raising InhibitDelayMaxSec to
# GRACE: no drop-in of the test's may sort after it with a lower value.
set -eu

[ $# -ge 2 ] && [ $# -le 4 ] || { echo "usage: node-setup.sh NODE PORT [GRACE [CRITICAL]]" >&2; exit 2; }
# Only in a test container: on a real node it would replace kubelet.service
# and kubelet's config.
virt=$(systemd-detect-virt --container 2>/dev/null) || true
case $virt in '' | none)
	echo "node-setup.sh: refusing to run outside a container (systemd-detect-virt --container: ${virt:-no answer}): on a real node it would overwrite kubelet.service and the kubelet config" >&2
	exit 1 ;;
esac
node=$1
port=$2
grace=${3:-20s}
critical=${4:-5s}
kubeconfig=${KUBECONFIG_PATH:-/etc/kubernetes/kubelet.conf}
kubelet=${KUBELET_BIN:-/usr/local/bin/kubelet}
fakecri=${FAKECRI_BIN:-/usr/local/bin/fakecri}
case $port in '' | *[!0-9]*) echo "node-setup.sh: PORT $port is not a number" >&2; exit 2 ;; esac
case $node in '' | *[!a-z0-9.-]*) echo "node-setup.sh: NODE $node is not a Node name" >&2; exit 2 ;; esac
for b in "$kubelet" "$fakecri"; do
	[ -x "$b" ] || { echo "node-setup.sh: $b is not an executable (bind it into the container)" >&2; exit 1; }
done
sock=/run/fakecri/fakecri.sock

mkdir -p /etc/kubernetes /var/lib/kubelet /etc/systemd/system
cat >/etc/kubernetes/kubelet-config.yaml <<EOF
# The real kubelet in a gnsh test container (test/k8s/kubelet/node-setup.sh).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $port
healthzBindAddress: 127.0.0.1
healthzPort: $((port + 1))
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://$sock
imageServiceEndpoint: unix://$sock
cgroupDriver: cgroupfs
# nspawn mounts the cgroup controllers read-only: no QoS cgroups, no
# allocatable enforcement, no cgroup v1 refusal.
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
makeIPTablesUtilChains: false
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
rotateCertificates: false
serverTLSBootstrap: false
resolvConf: ""
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
shutdownGracePeriod: $grace
shutdownGracePeriodCriticalPods: $critical
EOF
# --v=1 on kubelet's command line: it logs its shutdown manager's steps
# ("Shutdown manager detected new shutdown event", the pods it kills) only
# at verbosity 1.

cat >/usr/local/sbin/kubelet-node-prep <<'EOF'
#!/bin/sh
# Per boot, before kubelet (see node-setup.sh): kubelet opens /dev/kmsg,
# and sets three sysctls that are read-only in the container unless they
# already hold its values.
set -eu
[ -e /dev/kmsg ] || ln -s /dev/console /dev/kmsg
mkdir -p /run/kubelet-sysctl
for kv in vm/overcommit_memory=1 kernel/panic=10 kernel/panic_on_oops=1; do
	k=${kv%%=*} v=${kv#*=}
	[ "$(cat "/proc/sys/$k")" = "$v" ] && continue
	f=/run/kubelet-sysctl/$(echo "$k" | tr / .)
	echo "$v" >"$f"
	mount --bind "$f" "/proc/sys/$k"
done
EOF
chmod 0755 /usr/local/sbin/kubelet-node-prep

cat >/etc/systemd/system/kubelet-node-prep.service <<'EOF'
[Unit]
Description=gnsh test node: /dev/kmsg and kubelet's sysctls in the container
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/kubelet-node-prep
[Install]
WantedBy=multi-user.target
EOF

cat >/etc/systemd/system/fakecri.service <<EOF
[Unit]
Description=gnsh test node: fake container runtime (fakecri)
[Service]
ExecStart=$fakecri --socket $sock --cgroup-driver cgroupfs
Restart=always
RestartSec=1
[Install]
WantedBy=multi-user.target
EOF

cat >/etc/systemd/system/kubelet.service <<EOF
[Unit]
Description=kubelet (gnsh test node $node)
Wants=fakecri.service
Requires=kubelet-node-prep.service
After=fakecri.service kubelet-node-prep.service systemd-logind.service dbus.service
[Service]
ExecStart=$kubelet --config=/etc/kubernetes/kubelet-config.yaml --kubeconfig=$kubeconfig --hostname-override=$node --v=1
Restart=always
RestartSec=1
[Install]
WantedBy=multi-user.target
EOF

systemctl daemon-reload
systemctl enable --quiet kubelet-node-prep.service fakecri.service kubelet.service
if [ "${NODE_START:-1}" != 0 ]; then
	systemctl start kubelet.service
fi
