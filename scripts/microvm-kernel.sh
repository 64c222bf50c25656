#!/bin/sh
# The microvm backend's guest kernel: Debian's linux-image-cloud-amd64,
# downloaded with apt-get and unpacked into a cache, never installed as this
# host's kernel.  Keeps vmlinuz, its config and the modules the guest needs
# (with their dependencies, in load order), and prints the directory.
#
#   microvm-kernel.sh [--cache DIR]     (default ~/.cache/corral/microvm)
#
# Result: DIR/kernel-<ver>/{vmlinuz-<ver>, vmlinux-<ver>, config-<ver>,
# modules/*.ko, modules.order, manifest}.  vmlinux is the ELF inside the
# bzImage: QEMU boots it through its PVH entry, which under TCG saves the
# emulated decompression (about 0.3 s of a 1.6 s boot; docs/benchmarks.md).  Idempotent: a complete directory is reused.
# Exit 2 when apt cannot fetch the kernel (no mirror): callers may skip.
set -eu

cache=${XDG_CACHE_HOME:-$HOME/.cache}/corral/microvm
while [ $# -gt 0 ]; do
    case "$1" in
    --cache) cache=${2:?--cache needs a directory}; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "microvm-kernel: unknown argument $1" >&2; exit 64 ;;
    esac
done

# The modules the guest needs, each behind the config symbol that builds it:
# virtio over MMIO (microvm has no PCI) and over PCI (the vm backend's q35
# machine boots the same kernel and initramfs), the block devices for image layers
# and the writable disk, virtio-serial for the agent, EROFS for the layers,
# overlay to stack them.  ext4 and tmpfs are for a writable upper; on the
# cloud kernel they are built in, and then nothing is loaded for them.
WANT="VIRTIO_MMIO:virtio_mmio VIRTIO_PCI:virtio_pci VIRTIO_BLK:virtio_blk VIRTIO_CONSOLE:virtio_console
      VIRTIO_NET:virtio_net EROFS_FS:erofs OVERLAY_FS:overlay EXT4_FS:ext4 TMPFS:-"
# A cached directory made for another list is made again.
want_line="want=$(echo $WANT)"

# The real package behind the meta-package, e.g. linux-image-6.1.0-57-cloud-amd64.
resolve() {
    apt-cache depends linux-image-cloud-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}
pkg=$(resolve || true)
if [ -z "$pkg" ]; then
    echo "microvm-kernel: apt knows no linux-image-cloud-amd64; apt-get update" >&2
    apt-get update -qq >&2 || true
    pkg=$(resolve || true)
fi
if [ -z "$pkg" ]; then
    # Offline with a kernel cached already: use the newest one.
    last=$(ls -d "$cache"/kernel-*/manifest 2>/dev/null | sort -V | tail -n 1)
    if [ -n "$last" ]; then
        echo "microvm-kernel: apt cannot resolve linux-image-cloud-amd64: using the cached ${last%/manifest}" >&2
        echo "${last%/manifest}"
        exit 0
    fi
    echo "microvm-kernel: cannot resolve linux-image-cloud-amd64 (no apt mirror?)" >&2
    exit 2
fi
ver=${pkg#linux-image-}
dir=$cache/kernel-$ver
if [ -s "$dir/manifest" ] && [ -s "$dir/vmlinuz-$ver" ] && grep -qxF "$want_line" "$dir/manifest"; then
    echo "$dir"
    exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.kernel-$ver.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/dl" "$tmp/x" "$tmp/out" "$tmp/out/modules"
# apt would drop to _apt to download, which cannot reach a 0700 home: the
# download is checked against apt's signed lists all the same.
if ! (cd "$tmp/dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >&2); then
    echo "microvm-kernel: apt-get download $pkg failed" >&2
    exit 2
fi
deb=$(ls "$tmp"/dl/*.deb)
pkgver=$(dpkg-deb -f "$deb" Version)
dpkg-deb -x "$deb" "$tmp/x"
rm -f "$deb"

boot=$tmp/x/boot
config=$boot/config-$ver
[ -s "$boot/vmlinuz-$ver" ] && [ -s "$config" ] || {
    echo "microvm-kernel: $pkg has no boot/vmlinuz-$ver or config" >&2
    exit 1
}
mdir=$(find "$tmp/x" -maxdepth 3 -type d -path "*/lib/modules/$ver" | head -n 1)
[ -n "$mdir" ] || { echo "microvm-kernel: $pkg has no modules dir" >&2; exit 1; }
# The package leaves modules.dep to its postinst (depmod): make it here,
# against the unpacked tree only.
depmod -b "${mdir%/lib/modules/$ver}" "$ver"

# load order: dependencies first (modules.dep lists the one to load last
# first), each module once.
order=""
builtin=""
add() {
    case " $order " in *" $1 "*) ;; *) order="$order $1" ;; esac
}
for w in $WANT; do
    sym=${w%%:*}
    mod=${w#*:}
    val=$(sed -n "s/^CONFIG_$sym=//p" "$config")
    case "$val" in
    y) builtin="$builtin CONFIG_$sym"; continue ;;
    m) ;;
    *) echo "microvm-kernel: CONFIG_$sym is not set in $ver: the guest needs it" >&2
       exit 1 ;;
    esac
    line=$(grep -E "(^|/)$mod\.ko(\.xz|\.zst|\.gz)?:" "$mdir/modules.dep") || {
        echo "microvm-kernel: $mod.ko not in $ver's modules.dep" >&2
        exit 1
    }
    deps=""
    for d in ${line#*:}; do deps="$d $deps"; done
    for p in $deps ${line%%:*}; do add "$p"; done
done

# Copy flat, named by module; decompress here, so that the guest's
# finit_module needs no MODULE_DECOMPRESS (6.1's cloud kernel lacks it) and
# the guest spends no emulated cycles on xz.
: >"$tmp/out/modules.order"
names=""
for p in $order; do
    base=${p##*/}
    name=${base%%.ko*}
    case "$base" in
    *.ko) cp "$mdir/$p" "$tmp/out/modules/$name.ko" ;;
    *.ko.xz) xz -dc "$mdir/$p" >"$tmp/out/modules/$name.ko" ;;
    *.ko.zst) zstd -qdc "$mdir/$p" >"$tmp/out/modules/$name.ko" ;;
    *.ko.gz) gzip -dc "$mdir/$p" >"$tmp/out/modules/$name.ko" ;;
    *) echo "microvm-kernel: unknown module file $p" >&2; exit 1 ;;
    esac
    echo "$name.ko" >>"$tmp/out/modules.order"
    names="$names $name"
done
cp "$boot/vmlinuz-$ver" "$config" "$tmp/out/"

# The bzImage's payload (boot protocol 2.08+): setup_sects at 0x1f1, then the
# payload's offset and length at 0x248 and 0x24c, counted from the
# protected-mode code; its last 4 bytes are the decompressed size.
u() { od -An -t"u$1" -j "$2" -N "$1" "$boot/vmlinuz-$ver" | tr -d ' '; }
vmlinux=""
start=$((($(u 1 0x1f1) + 1) * 512 + $(u 4 0x248)))
len=$(($(u 4 0x24c) - 4))
payload() { tail -c "+$((start + 1))" "$boot/vmlinuz-$ver" | head -c "$len"; }
case "$(payload | od -An -tx1 -N4 | tr -d ' ')" in
02214c18) unpack="lz4 -dc" ;;
1f8b*) unpack="gzip -dc" ;;
fd377a58) unpack="xz -dc" ;;
28b52ffd) unpack="zstd -qdc" ;;
*) unpack="" ;;
esac
if grep -q '^CONFIG_PVH=y' "$config" && [ -n "$unpack" ] &&
    payload | $unpack >"$tmp/out/vmlinux-$ver" 2>/dev/null &&
    [ "$(od -An -tx1 -N4 "$tmp/out/vmlinux-$ver" | tr -d ' ')" = 7f454c46 ]; then
    vmlinux=vmlinux-$ver
else
    echo "microvm-kernel: no PVH ELF in vmlinuz-$ver; guests boot the bzImage" >&2
    rm -f "$tmp/out/vmlinux-$ver"
fi
{
    echo "version=$ver"
    echo "package=$pkg"
    echo "package_version=$pkgver"
    echo "kernel=vmlinuz-$ver"
    echo "vmlinux=$vmlinux"
    echo "config=config-$ver"
    echo "modules=${names# }"
    echo "builtin=${builtin# }"
    echo "$want_line"
} >"$tmp/out/manifest"
chmod -R a+rX "$tmp/out"
# A directory without a manifest is an interrupted run's; one with a manifest
# is another run's that finished first, and as good as this one.
grep -qxF "$want_line" "$dir/manifest" 2>/dev/null || rm -rf "$dir"
mv -T "$tmp/out" "$dir" 2>/dev/null || [ -s "$dir/manifest" ] || {
    echo "microvm-kernel: cannot move the kernel into $dir" >&2
    exit 1
}
echo "$dir"
