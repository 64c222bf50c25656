#!/bin/sh
# Install every Debian package Corral needs to build, test, benchmark and
# demo.  Quick when they are all there already.
set -eu
PKGS="build-essential pkg-config libmicrohttpd-dev libjansson-dev libseccomp-dev
      libarchive-dev libcurl4-openssl-dev libssl-dev busybox-static debootstrap crun
      erofs-utils umoci skopeo zstd libc6-dev python3-dev zlib1g-dev
      python3 python3-pytest clang libclang-rt-14-dev ca-certificates libzstd-dev
      libnl-3-dev libnl-route-3-dev libnftables-dev nftables iproute2 libldns-dev
      libnetfilter-log-dev qemu-system-x86 qemu-utils etcd-server cpio xz-utils kmod lz4 e2fsprogs
      libacl1-dev liblz4-dev liblzma-dev libbz2-dev nettle-dev"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
        missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "deps: all installed"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "deps: missing:$missing (run as root to install)" >&2
    exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
