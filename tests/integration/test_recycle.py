"""A recycled slot is indistinguishable from a new one: a sandbox leaves
every kind of trace it can (files, processes, SysV IPC, POSIX message
queues, keys, routes, hostname, cgroup settings, environment) and the next
sandbox of the same slot, with its reused cgroup and network namespace,
sees none of it (docs/architecture.md, "Reuse instead of churn")."""

import json

from conftest import need_debian, wait_for

# Run with python3 in the first sandbox: each trace it tries to leave, and
# whether the kernel let it.  ctypes reaches what the image has no tool for.
LEAVE = r'''
import ctypes, json, os, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)
done = {}
def tried(name, ok):
    done[name] = bool(ok)
for p in ("/tmp/trace", "/root/trace", "/dev/shm/trace", "/var/tmp/trace", "/etc/trace"):
    with open(p, "w") as f:
        f.write("left behind")
tried("files", True)
subprocess.Popen(["setsid", "sleep", "1000"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
tried("process", True)
IPC_CREAT = 0o1000
tried("shm", libc.shmget(0x7ace, 4096, IPC_CREAT | 0o666) >= 0)
tried("msg", libc.msgget(0x7ace, IPC_CREAT | 0o666) >= 0)
tried("sem", libc.semget(0x7ace, 1, IPC_CREAT | 0o666) >= 0)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
rt.mq_open.restype = ctypes.c_int
tried("mqueue", rt.mq_open(b"/trace", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0)
# add_key("user", "trace", "secret", 6, KEY_SPEC_USER_KEYRING)
tried("key", libc.syscall(248, b"user", b"trace", b"secret", 6, -4) >= 0)
tried("hostname", libc.sethostname(b"left-behind", 11) == 0)
def attempt(fn):
    try:
        fn()
        return True
    except OSError:
        return False
import fcntl, struct
ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
# the loopback link down (SIOCSIFFLAGS), a sysctl of the netns, a route (SIOCADDRT)
rtentry = struct.pack("@L16s16s16sH6xh2xL", 0, struct.pack("HH4s8x", 2, 0, bytes([10, 99, 0, 0])),
                      struct.pack("HH4s8x", 2, 0, bytes(4)),
                      struct.pack("HH4s8x", 2, 0, bytes([255, 255, 0, 0])), 1, 0, 0)
tried("netns_config",
      attempt(lambda: fcntl.ioctl(ctl, 0x8914, struct.pack("16sh22x", b"lo", 0)))
      or attempt(lambda: open("/proc/sys/net/ipv4/ip_forward", "w").write("1"))
      or attempt(lambda: fcntl.ioctl(ctl, 0x890B, rtentry)))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0trace-abstract")
s.listen()
tried("abstract_socket", True)
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", 7777))
t.listen()
tried("loopback_listener", True)
os.fork() or (os.setsid(), __import__("time").sleep(1000))
print(json.dumps(done), flush=True)
'''

# Run in the next sandbox: what it sees of each trace.
LOOK = r'''
import ctypes, json, os, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)
seen = {}
seen["files"] = [p for p in ("/tmp/trace", "/root/trace", "/dev/shm/trace", "/var/tmp/trace",
                             "/etc/trace") if os.path.exists(p)]
seen["processes"] = sorted(
    open(f"/proc/{p}/cmdline").read().replace("\0", " ").strip()
    for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid())
seen["shm"] = libc.shmget(0x7ace, 0, 0) >= 0
seen["msg"] = libc.msgget(0x7ace, 0) >= 0
seen["sem"] = libc.semget(0x7ace, 0, 0) >= 0
seen["sysvipc"] = [l for f in ("shm", "msg", "sem")
                   for l in open(f"/proc/sysvipc/{f}").read().splitlines()[1:]]
rt = ctypes.CDLL("librt.so.1", use_errno=True)
seen["mqueue"] = rt.mq_open(b"/trace", os.O_RDWR, 0, None) >= 0
# request_key("user", "trace", NULL, 0): searches the process's keyrings
seen["key"] = libc.syscall(249, b"user", b"trace", None, 0) >= 0
seen["hostname"] = socket.gethostname()
seen["routes"] = open("/proc/net/route").read()
ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
import fcntl, struct
seen["lo_flags"] = struct.unpack("16sh22x", fcntl.ioctl(ctl, 0x8913, struct.pack("16sh22x", b"lo", 0)))[1]
seen["sysctls"] = [open(f"/proc/sys/net/{k}").read() for k in ("ipv4/ip_forward", "ipv4/conf/lo/forwarding", "core/somaxconn")]
seen["links"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0trace-abstract")
    seen["abstract_socket"] = True
except OSError:
    seen["abstract_socket"] = False
t = socket.socket()
seen["loopback_listener"] = t.connect_ex(("127.0.0.1", 7777)) == 0
seen["env"] = sorted(k for k in os.environ if k.startswith("TRACE"))
print(json.dumps(seen), flush=True)
'''


def slot_of(sb):
    info = sb.info["container"]
    return info["uid_base"], info["cgroup"]


def cgroup_file(d, cgroup, ctl, name):
    with open(f"/sys/fs/cgroup/{ctl}/{d.cgroup_parent}/{cgroup}/{name}") as f:
        return f.read().strip()


@need_debian
def released(c):
    """A destroy answers once nothing of the sandbox runs; its slot is given
    back just after: wait for that, so the next create takes it again."""
    wait_for(lambda: c.host()["used"]["releasing"] == 0, 10, "destroyed sandboxes' release")


def test_a_recycled_slot_keeps_nothing_of_its_last_tenant(corrald_factory):
    d = corrald_factory([])
    with d.client() as c:
        with c.create(image="debian", memory_mb=256, cpus=0.5) as clean:
            fresh = json.loads(clean.exec(["python3", "-c", LOOK]).stdout)
            fresh_slot = slot_of(clean)
        released(c)
        first = c.create(image="debian", memory_mb=200, cpus=0.5, pids=77,
                         env={"TRACE_ME": "1"})
        assert slot_of(first) == fresh_slot, "the slot is reused"
        r = first.exec(["python3", "-c", LEAVE], timeout=30)
        assert r.exit_code == 0, r.stderr
        left = json.loads(r.stdout.decode().splitlines()[-1])
        # What the kernel let it do (the rest it was refused, which is the
        # point too: a sandbox's root cannot route or firewall its netns).
        assert left["files"] and left["process"] and left["shm"] and left["msg"]
        assert left["sem"] and left["mqueue"] and left["abstract_socket"]
        assert not left["netns_config"], "root in a sandbox cannot configure its netns"
        first.destroy()
        released(c)

        second = c.create(image="debian", memory_mb=256, cpus=0.5)
        try:
            assert slot_of(second) == fresh_slot, "the same slot, its cgroup and netns again"
            seen = json.loads(second.exec(["python3", "-c", LOOK]).stdout)
            fresh["hostname"] = second.id  # each sandbox is named after itself
            assert seen == fresh, {k: (seen[k], fresh[k]) for k in seen if seen[k] != fresh[k]}
            assert not seen["files"] and not seen["shm"] and not seen["mqueue"]
            assert not seen["key"] and not seen["abstract_socket"]
            assert not seen["loopback_listener"] and not seen["env"]
            assert "sleep" not in " ".join(seen["processes"])
            # The cgroup is the new spec's, not the last tenant's.
            cg = slot_of(second)[1]
            if c.host()["cgroup"].startswith("v1"):
                assert cgroup_file(d, cg, "memory", "memory.limit_in_bytes") == str(256 << 20)
                assert cgroup_file(d, cg, "pids", "pids.max") != "77"
                assert int(cgroup_file(d, cg, "memory", "memory.max_usage_in_bytes")) < 200 << 20
        finally:
            second.destroy()
