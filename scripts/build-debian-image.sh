#!/bin/sh
# Build the `debian` image (bookworm minbase + python3) with debootstrap
# into OUTDIR/debian, once: a later run with the image in place does nothing.
# corrald uses it through --images-from OUTDIR.
set -eu
outdir=${1:?usage: build-debian-image.sh OUTDIR}
final="$outdir/debian"
if [ -x "$final/rootfs/usr/bin/python3" ] && [ -f "$final/config.json" ]; then
    echo "image debian: cached in $final"
    exit 0
fi
# The mirror apt already uses (deb822 sources first, then sources.list).
mirror=$(sed -n 's/^URIs: *\([^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
mkdir -p "$outdir"
tmp="$outdir/.debian.tmp.$$"
trap 'rm -rf "$tmp"' EXIT INT TERM
rm -rf "$tmp"
mkdir -p "$tmp"
echo "image debian: debootstrap bookworm minbase + python3 from $mirror (a few minutes, once)"
debootstrap --variant=minbase --include=python3 bookworm "$tmp/rootfs" "$mirror" >"$tmp.log" 2>&1 || {
    tail -n 20 "$tmp.log" >&2
    rm -f "$tmp.log"
    exit 1
}
rm -f "$tmp.log"
rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
cat >"$tmp/config.json" <<'JSON'
{"env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
         "LANG=C.UTF-8"],
 "cwd": "/", "user": "0:0", "cmd": ["/bin/bash"]}
JSON
rm -rf "$final"
mv "$tmp" "$final"
trap - EXIT INT TERM
echo "image debian: built in $final ($(du -sh "$final" | cut -f1))"
