#!/bin/sh
# Installs the host packages gnsh's tests and demo use, on Debian or Ubuntu,
# as root: dbus-daemon (private test buses), unshare/mount (util-linux),
# debootstrap and systemd-nspawn (real systemd in containers), openssl (the
# test control plane's PKI), rpm (inspecting gnsh's .rpm), man-db (man -l).
set -eu
need=
command -v dbus-daemon >/dev/null 2>&1 || need="$need dbus-daemon"
command -v unshare >/dev/null 2>&1 || need="$need util-linux"
command -v debootstrap >/dev/null 2>&1 || need="$need debootstrap"
command -v systemd-nspawn >/dev/null 2>&1 || need="$need systemd-container"
command -v dbus-monitor >/dev/null 2>&1 || need="$need dbus-bin"
command -v gcc >/dev/null 2>&1 || need="$need gcc" # go test -race needs cgo
command -v openssl >/dev/null 2>&1 || need="$need openssl" # control-plane PKI
command -v rpm >/dev/null 2>&1 || need="$need rpm" # reading gnsh's .rpm (never installing it here)
command -v man >/dev/null 2>&1 || need="$need man-db" # man -l of gnsh's pages
[ -z "$need" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps.sh: missing$need; run as root (or install them) first" >&2
	exit 1
fi
# Debian names: dbus-daemon and dbus-bin are split from dbus since bookworm.
pkgs=$(echo "$need" | sed 's/dbus-daemon/dbus/')
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Older releases have no dbus-bin/dbus-daemon packages: fall back to dbus.
apt-get install -y -qq --no-install-recommends $pkgs >/dev/null ||
	apt-get install -y -qq --no-install-recommends $(echo "$pkgs" | sed 's/dbus-bin/dbus/') >/dev/null
