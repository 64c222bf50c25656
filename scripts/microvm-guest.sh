#!/bin/sh
# What the microvm backend boots: the guest kernel (microvm-kernel.sh:
# Debian's linux-image-cloud-amd64, downloaded once into a cache) and an
# initramfs around corral-agent (microvm-initramfs.sh), put in one
# directory as corrald looks for them: DIR/vmlinuz, DIR/initrd.cpio, and
# DIR/kernel.manifest (what kernel, which modules).  Run by
# `corral setup microvm` and by `make microvm-guest`.
#
#   microvm-guest.sh --agent BINARY --out DIR [--cache DIR]
#
# Each file is written beside its final name and renamed into place, so a
# corrald that reads DIR never sees half of one.  Exit 2 when apt cannot
# fetch the kernel (no mirror, nothing cached).
set -eu

here=$(dirname "$0")
agent="" out="" cache=""
while [ $# -gt 0 ]; do
    case "$1" in
    --agent) agent=${2:?--agent needs a file}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --cache) cache=${2:?--cache needs a directory}; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "microvm-guest: unknown argument $1" >&2; exit 64 ;;
    esac
done
[ -n "$agent" ] && [ -n "$out" ] || {
    echo "usage: microvm-guest.sh --agent BINARY --out DIR [--cache DIR]" >&2
    exit 64
}
[ -x "$agent" ] || { echo "microvm-guest: $agent is not an executable" >&2; exit 1; }

rc=0
kdir=$("$here/microvm-kernel.sh" ${cache:+--cache "$cache"}) || rc=$?
[ "$rc" = 0 ] || exit "$rc"
mkdir -p "$out"
trap 'rm -f "$out/vmlinuz.tmp" "$out/initrd.cpio.tmp" "$out/kernel.manifest.tmp"' EXIT
kernel=$(sed -n 's/^kernel=//p' "$kdir/manifest")
cp -f "$kdir/$kernel" "$out/vmlinuz.tmp"
"$here/microvm-initramfs.sh" --kernel-dir "$kdir" --init "$agent" --out "$out/initrd.cpio.tmp"
cp -f "$kdir/manifest" "$out/kernel.manifest.tmp"
mv -f "$out/vmlinuz.tmp" "$out/vmlinuz"
mv -f "$out/initrd.cpio.tmp" "$out/initrd.cpio"
mv -f "$out/kernel.manifest.tmp" "$out/kernel.manifest"
echo "microvm-guest: $(sed -n 's/^package=//p' "$out/kernel.manifest") ($(sed -n 's/^package_version=//p' "$out/kernel.manifest")), modules: $(sed -n 's/^modules=//p' "$out/kernel.manifest")"
echo "microvm-guest: $out/vmlinuz, $out/initrd.cpio"
