#!/bin/sh
# After the suite: nothing of Corral's may be left on this host.  Checks
# mounts, cgroups, processes (by name and by sandbox uid range), network
# namespaces, SysV IPC objects of sandbox uids in the host's IPC namespace.
# Exits 1 listing every leak.
set -u
leaks=0
leak() {
    echo "LEAK: $*"
    leaks=$((leaks + 1))
}

m=$(grep -i corral /proc/self/mountinfo || true)
[ -z "$m" ] || leak "mounts: $m"

for d in $(find /sys/fs/cgroup -maxdepth 3 -type d -iname '*corral*' 2>/dev/null); do
    leak "cgroup $d (procs: $(cat "$d/cgroup.procs" 2>/dev/null | tr '\n' ' '))"
done

# A process killed at the end of the suite may still be exiting, or be a
# zombie its new parent (this host's init) has yet to reap: give them 10 s.
i=0
while [ $i -lt 100 ] && { pgrep -x corrald || pgrep -x corral-spawner || pgrep -x corral-zygote; } >/dev/null; do
    sleep 0.1
    i=$((i + 1))
done
for name in corrald corral-spawner corral-zygote; do
    for p in $(pgrep -x "$name" || true); do
        leak "process $name pid $p ($(awk '/^State:/ {print $2; exit}' /proc/"$p"/status 2>/dev/null)," \
            "parent $(awk '/^PPid:/ {print $2; exit}' /proc/"$p"/status 2>/dev/null)):" \
            "$(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null)"
    done
done

# Sandbox processes run as uids from 2^30 up (corrald's default --uid-base).
for s in /proc/[0-9]*/status; do
    uid=$(awk '/^Uid:/ {print $2; exit}' "$s" 2>/dev/null) || continue
    [ -n "$uid" ] || continue
    if [ "$uid" -ge 1073741824 ] 2>/dev/null; then
        pid=${s#/proc/}
        pid=${pid%/status}
        leak "sandbox process pid $pid uid $uid: $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)"
    fi
done

# A sandbox's SysV segments, semaphores and queues live in its own IPC
# namespace and die with it: one of a sandbox uid here crossed into the
# host's (and stays charged to whichever memory cgroup made it).
for kind in shm sem msg; do
    awk -v kind="$kind" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "uid") col = i; next }
        col && $col >= 1073741824 { print "SysV " kind " key " $1 " id " $2 " uid " $col }' \
        /proc/sysvipc/"$kind" 2>/dev/null >/tmp/leakcheck.ipc.$$
    while read -r line; do leak "$line"; done </tmp/leakcheck.ipc.$$
    rm -f /tmp/leakcheck.ipc.$$
done

if [ -d /run/netns ] && ls /run/netns 2>/dev/null | grep -qi corral; then
    leak "network namespaces: $(ls /run/netns | grep -i corral)"
fi

if [ "$leaks" -gt 0 ]; then
    echo "leakcheck: $leaks leak(s)"
    exit 1
fi
echo "leakcheck: nothing of Corral's left (mounts, cgroups, processes, netns, SysV IPC)"
