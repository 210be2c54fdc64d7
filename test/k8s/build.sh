#!/bin/sh
# Builds the Kubernetes test control plane from Go modules, once:
#   kube-apiserver, kube-controller-manager, kubectl  (./tools, k8s.io/kubernetes)
#   etcd                                               (./etcd)
#   kwok + its stage configs                           (./kwok)
# into ${GNSH_CACHE:-/var/cache/gnsh}/k8s/<key>/bin, where <key> names the
# versions plus a hash of the module files, the Go version and the flags
# below, so any change builds a new set. Safe to run concurrently (flock).
# Progress goes to stderr; the last line on stdout is the bin directory.
# "build.sh --check" only prints it if the set is built, else exits 3.
#
# "build.sh kubelet [--check]" builds another set the same way, on its own:
#   kubelet, fakecri (a fake container runtime)        (./kubelet)
# into .../k8s/kubelet-<version>-<hash>/bin; the hash covers ./kubelet's
# go.mod, go.sum and fakecri sources. The default set's key does not depend
# on it.
set -eu

set=default
if [ "${1:-}" = kubelet ]; then
	set=kubelet
	shift
fi

here=$(cd "$(dirname "$0")" && pwd)
cache=${GNSH_CACHE:-/var/cache/gnsh}/k8s

ver() { awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$here/$1/go.mod"; }
if [ "$set" = kubelet ]; then
	K8S=$(ver kubelet k8s.io/kubernetes)
	[ -n "$K8S" ] || { echo "build.sh: cannot read the version from kubelet/go.mod" >&2; exit 1; }
else
	K8S=$(ver tools k8s.io/kubernetes)
	ETCD=$(ver etcd go.etcd.io/etcd/server/v3)
	KWOK=$(ver kwok sigs.k8s.io/kwok)
	[ -n "$K8S" ] && [ -n "$ETCD" ] && [ -n "$KWOK" ] || { echo "build.sh: cannot read versions from go.mod files" >&2; exit 1; }
fi

# Static binaries, no VCS stamping, never touch the go.mod files.
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"

minor=${K8S#v1.}
minor=${minor%%.*}
KLDF="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	KLDF="$KLDF -X $p.gitVersion=$K8S -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
KWLDF="-s -w"
BINS="kube-apiserver kube-controller-manager kubectl etcd kwok"

if [ "$set" = kubelet ]; then
	BINS="kubelet fakecri"
	sum=$(
		{
			go env GOVERSION GOOS GOARCH
			echo "$GOFLAGS $CGO_ENABLED $KLDF $BINS"
			cat "$here"/kubelet/go.mod "$here"/kubelet/go.sum "$here"/kubelet/fakecri/*.go
		} | sha256sum | cut -c1-12
	)
	key="kubelet-$K8S-$sum"
else
	sum=$(
		{
			go env GOVERSION GOOS GOARCH
			echo "$GOFLAGS $CGO_ENABLED $KLDF $KWLDF $BINS"
			cat "$here"/tools/go.mod "$here"/tools/go.sum "$here"/etcd/go.mod "$here"/etcd/go.sum \
				"$here"/kwok/go.mod "$here"/kwok/go.sum
		} | sha256sum | cut -c1-12
	)
	key="k8s-$K8S-etcd-$ETCD-kwok-$KWOK-$sum"
fi
dir=$cache/$key

if [ -f "$dir/complete" ]; then
	echo "$dir/bin"
	exit 0
fi
if [ "${1:-}" = --check ]; then
	echo "build.sh: $key is not built" >&2
	exit 3
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
echo "build.sh: waiting for $cache/.lock" >&2
flock 9
if [ -f "$dir/complete" ]; then # built by whoever held the lock
	echo "$dir/bin"
	exit 0
fi

now() { date +%s; }
build() { # module output package ldflags
	t0=$(now)
	echo "build.sh: $2 ..." >&2
	(cd "$here/$1" && go build -trimpath -ldflags "$4" -o "$dir/bin/$2" "$3") >&2
	echo "$2 $(($(now) - t0))s $(du -m "$dir/bin/$2" | cut -f1)MB" | tee -a "$times" >&2
}

if [ "$set" = kubelet ]; then
	echo "build.sh: building $key (cold: 5-7 min on 2 cores)" >&2
	rm -rf "$dir"
	mkdir -p "$dir/bin"
	times=$dir/build-times.txt
	: >"$times"
	build kubelet kubelet k8s.io/kubernetes/cmd/kubelet "$KLDF"
	build kubelet fakecri ./fakecri "-s -w"
	{
		echo "K8S_VERSION=$K8S"
		echo "GO_VERSION=$(go env GOVERSION)"
	} >"$dir/versions"
	touch "$dir/complete"
	echo "build.sh: done, $(du -sm "$dir" | cut -f1) MB in $dir" >&2
	echo "$dir/bin"
	exit 0
fi

echo "build.sh: building $key (cold: 6-8 min on 2 cores)" >&2
rm -rf "$dir"
mkdir -p "$dir/bin"
times=$dir/build-times.txt
: >"$times"

# Sequentially: the apiserver alone peaks near 3 GB and uses every core.
build tools kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$KLDF"
build tools kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$KLDF"
build tools kubectl k8s.io/kubernetes/cmd/kubectl "$KLDF"
build etcd etcd go.etcd.io/etcd/server/v3 "-s -w"
build kwok kwok sigs.k8s.io/kwok/cmd/kwok "$KWLDF"

# kwok has no built-in stages: a fast node initialisation, lease heartbeats
# and the general pod life cycle (create, ready, complete, delete).
kdir=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
for f in "$kdir"/kustomize/stage/node/fast/node-initialize.yaml \
	"$kdir"/kustomize/stage/node/heartbeat-with-lease/*.yaml \
	"$kdir"/kustomize/stage/pod/general/*.yaml; do
	echo "---"
	cat "$f"
done >"$dir/kwok-stages.yaml"

{
	echo "K8S_VERSION=$K8S"
	echo "ETCD_VERSION=$ETCD"
	echo "KWOK_VERSION=$KWOK"
	echo "GO_VERSION=$(go env GOVERSION)"
} >"$dir/versions"
touch "$dir/complete"
echo "build.sh: done, $(du -sm "$dir" | cut -f1) MB in $dir" >&2
echo "$dir/bin"
