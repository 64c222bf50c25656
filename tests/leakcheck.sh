#!/bin/sh
# After the suite: nothing of Corral's may be left on this host.  Checks
# mounts, cgroups, processes (by name and by sandbox uid range), network
# namespaces, SysV IPC objects of sandbox uids in the host's IPC namespace.
# Exits 1 listing every leak.
#
#   leakcheck.sh                everything found is a leak
#   leakcheck.sh --save FILE    write what is here now (before a run) to FILE
#   leakcheck.sh --since FILE   a leak is what is here and not in FILE: a run
#                               answers for what it left, not for what an
#                               earlier, killed run left on a shared host
set -u
mode=${1:-}
file=${2:-}
case "$mode" in
"") ;;
--save | --since) [ -n "$file" ] || { echo "leakcheck: $mode needs a file" >&2; exit 2; } ;;
*) echo "usage: leakcheck.sh [--save FILE | --since FILE]" >&2; exit 2 ;;
esac
if [ "$mode" = --since ] && [ ! -r "$file" ]; then
    echo "leakcheck: cannot read $file" >&2
    exit 2
fi
found=$(mktemp)
trap 'rm -f "$found" "$found.x"' EXIT
leaks=0
before=0
# leak KEY DETAIL: KEY names the thing (a path, a pid, an id) from run to run.
leak() {
    echo "$1" >>"$found"
    if [ "$mode" = --since ] && grep -qxF -- "$1" "$file"; then
        echo "BEFORE: $1 $2"
        before=$((before + 1))
    elif [ "$mode" != --save ]; then
        echo "LEAK: $1 $2"
        leaks=$((leaks + 1))
    fi
}

grep -i corral /proc/self/mountinfo >"$found.x" || true
while read -r _ _ _ _ point _; do leak "mount $point" ""; done <"$found.x"

for d in $(find /sys/fs/cgroup -maxdepth 3 -type d -iname '*corral*' 2>/dev/null); do
    leak "cgroup $d" "(procs: $(cat "$d/cgroup.procs" 2>/dev/null | tr '\n' ' '))"
done

# A process killed at the end of the suite may still be exiting, or be a
# zombie its new parent (this host's init) has yet to reap: give them 10 s.
i=0
[ "$mode" != --save ] || i=100 # before a run: nothing of its is exiting
while [ $i -lt 100 ] && { pgrep -x corrald || pgrep -x corral-spawner || pgrep -x corral-zygote; } >/dev/null; do
    sleep 0.1
    i=$((i + 1))
done
for name in corrald corral-spawner corral-zygote; do
    for p in $(pgrep -x "$name" || true); do
        leak "process $name pid $p" "($(awk '/^State:/ {print $2; exit}' /proc/"$p"/status 2>/dev/null)," \
            "parent $(awk '/^PPid:/ {print $2; exit}' /proc/"$p"/status 2>/dev/null)):" \
            "$(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null)"
    done
done

# QEMU of Corral's microVMs (their sockets and RAM files are under
# corral-microvm-* paths): another user's QEMU on a shared host is not ours.
for p in $(pgrep -x qemu-system-x86 || true); do
    cmd=$(tr '\0' ' ' 2>/dev/null </proc/"$p"/cmdline) || continue
    case "$cmd" in *corral*) leak "process qemu pid $p" "$cmd" ;; esac
done
for f in /dev/shm/corral-microvm-*; do [ ! -e "$f" ] || leak "file $f" ""; done

# Sandbox processes run as uids from 2^30 up (corrald's default --uid-base).
for s in /proc/[0-9]*/status; do
    uid=$(awk '/^Uid:/ {print $2; exit}' "$s" 2>/dev/null) || continue
    [ -n "$uid" ] || continue
    if [ "$uid" -ge 1073741824 ] 2>/dev/null; then
        pid=${s#/proc/}
        pid=${pid%/status}
        leak "sandbox process pid $pid uid $uid" "$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)"
    fi
done

# A sandbox's SysV segments, semaphores and queues live in its own IPC
# namespace and die with it: one of a sandbox uid here crossed into the
# host's (and stays charged to whichever memory cgroup made it).
for kind in shm sem msg; do
    awk -v kind="$kind" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "uid") col = i; next }
        col && $col >= 1073741824 { print "SysV " kind " key " $1 " id " $2 " uid " $col }' \
        /proc/sysvipc/"$kind" 2>/dev/null >"$found.x"
    while read -r line; do leak "$line" ""; done <"$found.x"
done

# crlab-*: the tests' lab internet (tests/integration/netlab.py).
for n in $(ls /run/netns 2>/dev/null | grep -i -e corral -e '^crlab-'); do leak "network namespace $n" ""; done

# A sandbox network's table and host-side links (lib/os/vnet.c).  A link
# whose namespace was just dropped goes a moment later: give them 5 s.
i=0
while [ $i -lt 50 ] && ip -o link show 2>/dev/null | grep -qE '^[0-9]+: cr[0-9a-f]{6}s[0-9]+'; do
    sleep 0.1
    i=$((i + 1))
done
for l in $(ip -o link show 2>/dev/null | sed -nE 's/^[0-9]+: (cr[0-9a-f]{6}s[0-9]+)[@:].*/\1/p'); do
    leak "link $l" ""
done
for t in $(nft list tables 2>/dev/null | sed -nE 's/^table inet (corral_[0-9a-f]{6})$/\1/p'); do
    leak "nftables table inet $t" ""
done

if [ "$mode" = --save ]; then
    cp "$found" "$file"
    n=$(wc -l <"$file")
    [ "$n" -eq 0 ] || echo "leakcheck: $n thing(s) of Corral's on this host before this run (in $file)"
    exit 0
fi
[ "$before" -eq 0 ] || echo "leakcheck: $before thing(s) were here before this run: not its leaks"
if [ "$leaks" -gt 0 ]; then
    echo "leakcheck: $leaks leak(s)"
    exit 1
fi
echo "leakcheck: nothing of Corral's left${file:+ by this run} (mounts, cgroups, processes, QEMU, netns, SysV IPC, links, nftables)"
