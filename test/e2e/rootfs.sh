#!/bin/sh
# rootfs.sh SUITE [FLAVOR] — build (once) and print the path of a cached
# Debian root filesystem that boots real systemd + systemd-logind + the D-Bus
# system bus under systemd-nspawn, for the gnsh end-to-end tests (see
# README.md).
#
#   SUITE       bullseye (systemd 247) or bookworm (systemd 252)
#   FLAVOR      "" (default) or "ansible": also openssh-server, python3 and
#               python3-apt, for the Ansible role's tests (ssh.service
#               disabled: the test gives each container its own loopback
#               port before it starts sshd; the containers share the host's
#               network). Its own cache dir, so the default rootfs is unchanged.
#               "unattended": the ansible flavour plus Debian's own
#               unattended-upgrades, for the queued-reboot tests
#               (queue_test.go); its own cache dir too.
#   GNSH_CACHE  cache root (default /var/cache/gnsh); rootfs dirs live in
#               $GNSH_CACHE/rootfs/<suite>-<recipe-hash>/
#   GNSH_MIRROR Debian mirror (default http://deb.debian.org/debian)
#   GNSH_ROOTFS_TARBALL=1  also write <dir>.tar.gz next to the directory
#
# Idempotent: a finished rootfs carries a stamp file and is reused. Builds
# are serialised per suite with flock(1), host package installs globally,
# so concurrent runs are safe. Progress goes to stderr; the last line on
# stdout is the rootfs path. Must run as root.
set -eu

SUITE=${1:-}
FLAVOR=${2:-}
case "$SUITE" in
bullseye | bookworm) ;;
*)
	echo "usage: $0 bullseye|bookworm [ansible|unattended]" >&2
	exit 2
	;;
esac
case "$FLAVOR" in
"" | ansible | unattended) ;;
*)
	echo "usage: $0 bullseye|bookworm [ansible|unattended]" >&2
	exit 2
	;;
esac

if [ "$(id -u)" != 0 ]; then
	echo "rootfs.sh: must run as root" >&2
	exit 1
fi

CACHE=${GNSH_CACHE:-/var/cache/gnsh}
MIRROR=${GNSH_MIRROR:-http://deb.debian.org/debian}
HOSTNAME_IN_ROOTFS=gnsh-e2e

# The recipe: change anything here (or bump RECIPE_VERSION) and the hash,
# hence the cache key, changes and the rootfs is rebuilt.
RECIPE_VERSION=3
# sudo: the install case checks what `sudo reboot` runs (secure_path).
PACKAGES=systemd,systemd-sysv,dbus,libpam-systemd,procps,sudo
case "$SUITE" in
bookworm) PACKAGES=$PACKAGES,dbus-bin ;; # dbus-monitor (in package dbus on bullseye)
esac
NAME=$SUITE
case "$FLAVOR" in
ansible)
	PACKAGES=$PACKAGES,openssh-server,python3,python3-apt
	NAME=$SUITE-ansible
	;;
unattended)
	PACKAGES=$PACKAGES,openssh-server,python3,python3-apt,unattended-upgrades
	NAME=$SUITE-unattended
	;;
esac
# Units that are useless or slow inside a throwaway container.
MASK_UNITS="apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer systemd-tmpfiles-clean.timer console-getty.service getty@tty1.service"

# KEEP_DEBS stay in /var/cache/gnsh-e2e/debs of the rootfs (the install case
# reinstalls systemd-sysv offline, the version the rootfs has).
KEEP_DEBS="systemd-sysv"
RECIPE="v$RECIPE_VERSION suite=$SUITE variant=minbase include=$PACKAGES mirror=$MIRROR hostname=$HOSTNAME_IN_ROOTFS mask=$MASK_UNITS keep=$KEEP_DEBS"
KEY=$(printf '%s' "$RECIPE" | sha256sum | cut -c1-12)
BASE=$CACHE/rootfs
DIR=$BASE/$NAME-$KEY
STAMP=.gnsh-rootfs-ready

log() { echo "rootfs.sh[$NAME]: $*" >&2; }

mkdir -p "$BASE"

# --- host packages --------------------------------------------------------
need_host_pkgs() {
	for c in debootstrap systemd-nspawn dbus-monitor nsenter flock; do
		command -v "$c" >/dev/null 2>&1 || return 0
	done
	return 1
}
if need_host_pkgs; then
	# flock(1) itself is in util-linux (essential), so it is always there.
	exec 8>"$CACHE/host-packages.lock"
	flock 8
	if need_host_pkgs; then
		log "installing host packages: debootstrap systemd-container dbus"
		export DEBIAN_FRONTEND=noninteractive
		if ! apt-get install -y --no-install-recommends debootstrap systemd-container dbus >&2; then
			apt-get update >&2
			apt-get install -y --no-install-recommends debootstrap systemd-container dbus >&2
		fi
	fi
	exec 8>&-
fi

# --- rootfs ---------------------------------------------------------------
if [ -f "$DIR/$STAMP" ]; then
	echo "$DIR"
	exit 0
fi

exec 9>"$BASE/$NAME.lock"
flock 9
if [ -f "$DIR/$STAMP" ]; then # somebody else built it while we waited
	echo "$DIR"
	exit 0
fi

TMP=$BASE/.$NAME-$KEY.tmp.$$
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
rm -rf "$BASE/.$NAME-$KEY".tmp.* "$DIR"

start=$(date +%s)
log "debootstrap $SUITE into $TMP (recipe $KEY: $RECIPE)"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$TMP" "$MIRROR" >&2

# Fixed identity: debootstrap copies the host's /etc/hostname.
echo "$HOSTNAME_IN_ROOTFS" >"$TMP/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
	"$HOSTNAME_IN_ROOTFS" >"$TMP/etc/hosts"
# Empty machine-id: nspawn hands every boot a fresh transient one.
: >"$TMP/etc/machine-id"
rm -f "$TMP/var/lib/dbus/machine-id"
for u in $MASK_UNITS; do
	ln -sf /dev/null "$TMP/etc/systemd/system/$u"
done
mkdir -p "$TMP/var/cache/gnsh-e2e/debs"
for p in $KEEP_DEBS; do
	cp "$TMP"/var/cache/apt/archives/"$p"_*.deb "$TMP/var/cache/gnsh-e2e/debs/"
done
if [ "$FLAVOR" = ansible ] || [ "$FLAVOR" = unattended ]; then
	# sshd must not start on the host's port 22 (shared network): the test
	# enables it once the container has a port of its own.
	rm -f "$TMP/etc/systemd/system/multi-user.target.wants/ssh.service" "$TMP/etc/systemd/system/sshd.service" \
		"$TMP/etc/systemd/system/sockets.target.wants/ssh.socket"
	for f in /usr/sbin/sshd /usr/bin/python3 /usr/bin/sudo /etc/ssh/ssh_host_ed25519_key.pub; do
		if [ ! -e "$TMP$f" ]; then
			log "recipe broken: $f missing in the rootfs"
			exit 1
		fi
	done
fi
if [ "$FLAVOR" = unattended ] && [ ! -e "$TMP/usr/bin/unattended-upgrade" ]; then
	log "recipe broken: /usr/bin/unattended-upgrade missing in the rootfs"
	exit 1
fi
# Keep the rootfs small and free of host/build leftovers.
rm -rf "$TMP"/var/cache/apt/archives/*.deb "$TMP"/var/lib/apt/lists/* "$TMP"/var/log/journal/*
mkdir -p "$TMP/var/log/journal" "$TMP/etc/systemd/logind.conf.d" "$TMP/etc/systemd/journald.conf.d"

for f in /usr/bin/dbus-monitor /usr/bin/busctl /usr/bin/systemd-inhibit /usr/bin/systemd-run /bin/systemctl /usr/bin/pgrep /usr/bin/sudo; do
	if [ ! -e "$TMP$f" ]; then
		log "recipe broken: $f missing in the rootfs"
		exit 1
	fi
done
printf '%s\n' "$RECIPE" >"$TMP/.gnsh-rootfs-recipe"
touch "$TMP/$STAMP"
mv "$TMP" "$DIR"
trap - EXIT INT TERM
log "built $DIR in $(($(date +%s) - start)) s"

if [ "${GNSH_ROOTFS_TARBALL:-0}" = 1 ]; then
	tar -C "$DIR" -czf "$DIR.tar.gz.tmp" . && mv "$DIR.tar.gz.tmp" "$DIR.tar.gz"
	log "wrote $DIR.tar.gz"
fi
echo "$DIR"
