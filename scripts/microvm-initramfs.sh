#!/bin/sh
# A microVM's initramfs: a newc cpio holding /init (a static binary), the
# kernel directory's modules and their load order (/lib/modules/*.ko and
# /lib/modules/modules.order, from microvm-kernel.sh) and the directories a
# PID 1 mounts on.  Reproducible: entries sorted, owners root, one fixed
# mtime (SOURCE_DATE_EPOCH, default 0), no inode numbers.
#
#   microvm-initramfs.sh --kernel-dir DIR --init BINARY --out FILE [--compress none|gzip]
#
# Uncompressed by default: under TCG gzip and none boot alike (measured,
# docs/benchmarks.md); under KVM, gunzip in the guest costs more than QEMU
# copying the 1 MB more; none is also byte-for-byte what went in.
set -eu

kdir="" init="" out="" compress=none
while [ $# -gt 0 ]; do
    case "$1" in
    --kernel-dir) kdir=${2:?}; shift 2 ;;
    --init) init=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --compress) compress=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "microvm-initramfs: unknown argument $1" >&2; exit 64 ;;
    esac
done
[ -n "$kdir" ] && [ -n "$init" ] && [ -n "$out" ] || {
    echo "usage: microvm-initramfs.sh --kernel-dir DIR --init BINARY --out FILE [--compress none|gzip]" >&2
    exit 64
}
case "$compress" in none | gzip) ;; *) echo "microvm-initramfs: --compress none or gzip" >&2; exit 64 ;; esac
[ -s "$kdir/modules.order" ] || { echo "microvm-initramfs: $kdir has no modules.order" >&2; exit 1; }
[ -x "$init" ] || { echo "microvm-initramfs: $init is not executable" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage" "$out.tmp"' EXIT
umask 022
mkdir -p "$stage/lib/modules"
for d in dev proc sys mnt tmp run root; do mkdir "$stage/$d"; done
chmod 1777 "$stage/tmp"
chmod 700 "$stage/root"
cp "$init" "$stage/init"
chmod 755 "$stage/init"
while read -r m; do
    [ -n "$m" ] || continue
    cp "$kdir/modules/$m" "$stage/lib/modules/$m"
done <"$kdir/modules.order"
cp "$kdir/modules.order" "$stage/lib/modules/modules.order"
chmod 644 "$stage"/lib/modules/*

epoch=${SOURCE_DATE_EPOCH:-0}
find "$stage" -exec touch -h -d "@$epoch" {} +
(
    cd "$stage"
    find . -mindepth 1 | LC_ALL=C sort |
        cpio --quiet -o -H newc -R 0:0 --reproducible
) >"$out.tmp"
if [ "$compress" = gzip ]; then
    gzip -n -9 <"$out.tmp" >"$out.tmp.gz"
    mv "$out.tmp.gz" "$out.tmp"
fi
mv "$out.tmp" "$out"
