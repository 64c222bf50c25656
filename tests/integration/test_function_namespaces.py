"""A function sandbox's namespaces of its own (issue 10), probed from inside
and checked from the host.

Each function sandbox's keeper (lib/backend/function/keeper.h) is PID 1 of
mount, pid, ipc, uts, net, cgroup and time namespaces made for it, with a
root whose one writable filesystem is a tmpfs of disk_mb.  So: an IPC
object made in one sandbox is invisible to every other and to the host,
and dies with it; a recycled slot starts with nothing charged to it;
disk_mb caps what a sandbox holds in all, not each file, and usage says
how much; its hostname, /proc and clocks are its own; /sys is not there.
"""

import ctypes
import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest

import corral
from conftest import descendants, wait_for, wait_gone
from test_function import create_fn, host_path, runtime  # noqa: F401 (a fixture)

KEY = 0x43524C00 + os.getpid() % 256  # a SysV key of this run's

# Python run in a sandbox: makes or looks for the IPC objects of key K and
# the POSIX queue Q, printing {what: errno} (0: made or found).
IPC = """\
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
K, Q, MAKE, MB = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3] == "make", int(sys.argv[4])
IPC_CREAT, IPC_EXCL, O_CREAT, O_RDWR = 0o1000, 0o2000, 0o100, 0o2
flags = IPC_CREAT | IPC_EXCL | 0o666 if MAKE else 0
got = {}
def res(what, r):
    got[what] = 0 if r >= 0 else ctypes.get_errno()
    return r
shm = res("shm", libc.shmget(K, MB << 20 if MAKE else 0, flags))
if MAKE and shm >= 0:
    p = libc.shmat(shm, None, 0)
    ctypes.memset(p, 0x5a, MB << 20)  # charged to the sandbox's memory
res("sem", libc.semget(K, 1 if MAKE else 0, flags))
res("msg", libc.msgget(K, flags))
res("mq", libc.mq_open(Q, O_RDWR | (O_CREAT if MAKE else 0), 0o666, None))
print(json.dumps(got))
"""


def ipc(sb, make, mb=0):
    src = f"import sys\nsys.argv = ['ipc', '{KEY}', '/corral-it-{KEY}', " \
          f"'{'make' if make else 'find'}', '{mb}']\n" + IPC
    r = sb.exec(src, timeout=60)
    assert r.exit_code == 0, r
    return json.loads(r.stdout)


def host_sysv(kind):
    """The keys of the host's SysV objects of one kind (shm, sem, msg)."""
    lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines}


# Made, then found in a later call; found nowhere else.  POSIX message
# queues live on the ipc namespace's internal mqueue filesystem, which no
# Landlock rule can name: the jail refuses to open them (EACCES), though
# mq_open(O_CREAT) has made the queue by then; so a queue is the sandbox's
# own all the same, and only its own sandbox finds it (EACCES, not ENOENT).
MADE = FOUND = {"shm": 0, "sem": 0, "msg": 0, "mq": errno.EACCES}
ABSENT = dict.fromkeys(["shm", "sem", "msg", "mq"], errno.ENOENT)


def test_ipc_objects_are_the_sandboxs_own(client):
    """A segment, a semaphore set and a message queue made in one sandbox:
    a concurrent sandbox (another uid) finds none of them, nor does the
    host, and a later sandbox finds none either."""
    with create_fn(client, "python", memory_mb=256) as a, create_fn(client, "python") as b:
        assert ipc(a, make=True, mb=64) == MADE
        assert ipc(a, make=False) == FOUND, "the sandbox finds its own again in a later call"
        assert ipc(b, make=False) == ABSENT
        for kind in ("shm", "sem", "msg"):
            assert KEY not in host_sysv(kind), f"the sandbox's {kind} is the host's"
    with create_fn(client, "python") as c:
        assert ipc(c, make=False) == ABSENT


def test_a_host_segment_is_invisible(client):
    libc = ctypes.CDLL(None, use_errno=True)
    key = KEY + 0x100
    shm = libc.shmget(key, 4096, 0o1000 | 0o2000 | 0o600)  # IPC_CREAT | IPC_EXCL, root's
    assert shm >= 0, os.strerror(ctypes.get_errno())
    try:
        with create_fn(client, "python") as sb:
            r = sb.exec(f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                        f"print(libc.shmget({key}, 0, 0), ctypes.get_errno())")
            assert r.stdout.split() == [b"-1", str(errno.ENOENT).encode()], r
    finally:
        libc.shmctl(shm, 0, None)  # IPC_RMID


def test_a_recycled_slot_starts_with_nothing_charged(corrald_factory):
    """What a sandbox held in IPC and on its disk goes with it: the next
    sandbox in its slot (and its reused cgroup) starts near empty."""
    d = corrald_factory()
    with d.client() as c:
        with create_fn(c, "python", memory_mb=256) as a:
            slot = a.info["function"]["cgroup"]
            assert ipc(a, make=True, mb=64)["shm"] == 0
            assert a.exec("open('f', 'wb').write(bytes(16 << 20))").exit_code == 0
            used = a.inspect()["usage"]["memory_bytes"]
            assert used >= 80 << 20, f"the segment and the file are charged: {used}"
        with create_fn(c, "python", memory_mb=256) as b:
            assert b.info["function"]["cgroup"] == slot, "the same slot, and cgroup, again"
            left = b.inspect()["usage"]["memory_bytes"]
            assert left < 4 << 20, f"{left} bytes still charged to the recycled slot"
            assert ipc(b, make=False)["shm"] == errno.ENOENT


def test_disk_mb_caps_the_sandbox_not_each_file(client, runtime):
    """Eight files of 2 MiB into 8 MiB: the writes stop with ENOSPC when the
    sandbox's disk is full, usage says what it holds, and the next call
    works (and frees space)."""
    with create_fn(client, runtime, disk_mb=8) as sb:
        src = {"shell": "for i in 1 2 3 4 5 6 7 8; do head -c 2097152 /dev/zero > f$i || exit 3;"
                        " done",
               "python": "import sys\nfor i in range(1, 9):\n    try:\n"
                         "        open(f'f{i}', 'wb').write(bytes(2 << 20))\n"
                         "    except OSError as e:\n        print(e); sys.exit(3)"}[runtime]
        r = sb.exec(src)
        assert r.exit_code == 3 and b"No space left on device" in (r.stdout + r.stderr), r
        held = sum(p.stat().st_size for p in host_path(sb).iterdir())
        assert 6 << 20 <= held <= 8 << 20, held
        usage = sb.inspect()["usage"]
        assert usage["disk_limit_bytes"] == 8 << 20
        assert held <= usage["disk_bytes"] <= held + (256 << 10), (held, usage)
        df = sb.exec("df -k /scratch | tail -1" if runtime == "shell" else
                     "import os\ns = os.statvfs('/scratch')\n"
                     "print(s.f_blocks * s.f_frsize // 1024, (s.f_blocks - s.f_bfree) * "
                     "s.f_frsize // 1024)")
        fields = df.stdout.split()
        total_kb, used_kb = (int(fields[1]), int(fields[2])) if runtime == "shell" else \
            map(int, fields)
        assert total_kb == 8 << 10 and abs(used_kb * 1024 - usage["disk_bytes"]) < 64 << 10, df
        assert sb.exec("rm f1 f2" if runtime == "shell" else
                       "import os; os.remove('f1'); os.remove('f2')").exit_code == 0
        assert sb.inspect()["usage"]["disk_bytes"] <= usage["disk_bytes"] - (4 << 20)
        assert sb.exec({"shell": "head -c 1048576 /dev/zero > g",
                        "python": "open('g', 'wb').write(bytes(1 << 20))"}[runtime]).exit_code == 0


def test_an_upload_past_the_cap_is_refused_whole(client):
    with create_fn(client, "shell", disk_mb=2) as sb:
        with pytest.raises(corral.Error) as e:
            sb.files.write("/big", bytes(3 << 20))
        assert e.value.status == 507, e.value
        assert not host_path(sb, "big").exists()
        assert sb.files.write("/small", b"x") == {"path": "/small", "bytes": 1}


PROCS = """\
import json, os, socket
print(socket.gethostname(), os.uname().nodename)
procs = {}
for p in os.listdir('/proc'):
    if p.isdigit():
        st = dict(l.split(':', 1) for l in open(f'/proc/{p}/status').read().splitlines())
        procs[p] = [int(st['PPid']), int(st['Uid'].split()[0])]
print(json.dumps(procs))
print(os.getpid())
"""


def test_hostname_and_proc_are_the_sandboxs(client, corrald):
    """Its hostname is its id; its /proc shows its own processes only: its
    keeper as PID 1, the call, and the keeper's spares (root's, forked
    ahead of the next calls)."""
    with create_fn(client, "python") as sb:
        r = sb.exec(PROCS)
        assert r.exit_code == 0, r
        names, procs, me = r.stdout.decode().splitlines()
        assert names.split() == [sb.id, sb.id]
        procs = {int(p): v for p, v in json.loads(procs).items()}
        uid = sb.info["function"]["uid"]
        assert procs.pop(1) == [0, 0], "its keeper: PID 1, root"
        assert procs.pop(int(me)) == [1, uid], "the call: the keeper's child, the sandbox's uid"
        assert all(v == [1, 0] for v in procs.values()) and len(procs) <= 2, procs
    with create_fn(client, "shell") as sb:
        r = sb.exec("ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '")
        assert [int(p) for p in r.stdout.split()][0] == 1 and \
            max(int(p) for p in r.stdout.split()) < 100, r.stdout
        assert str(corrald.pid).encode() not in r.stdout.split()


def test_namespaces_differ_from_the_hosts(client):
    """From the host: the keeper's namespaces are none of the host's, nor
    another sandbox's."""
    with create_fn(client, "shell") as a, create_fn(client, "shell") as b:
        for sb in (a, b):  # (a call runs once its keeper has taken the sandbox's namespaces)
            assert sb.exec(["true"]).exit_code == 0
        kinds = ["mnt", "pid", "ipc", "uts", "net", "cgroup"]
        mine = {k: os.readlink(f"/proc/self/ns/{k}") for k in kinds}
        ka, kb = a.info["function"]["pid"], b.info["function"]["pid"]
        for k in kinds:
            na, nb = os.readlink(f"/proc/{ka}/ns/{k}"), os.readlink(f"/proc/{kb}/ns/{k}")
            assert na != mine[k] and nb != mine[k] and na != nb, k
        # a call's clocks: a time namespace of the sandbox's (its children's)
        na = os.readlink(f"/proc/{ka}/ns/time_for_children")
        assert na != os.readlink("/proc/self/ns/time")


def test_clocks_start_with_the_sandbox(client):
    host_uptime = float(Path("/proc/uptime").read_text().split()[0])
    if host_uptime < 60:
        pytest.skip(f"the host is up {host_uptime:.0f} s: too little to tell its uptime from "
                    "a sandbox's")
    with create_fn(client, "python") as sb:
        src = "import time\nprint(open('/proc/uptime').read().split()[0], time.monotonic())"
        first = sb.exec(src)
        time.sleep(0.5)
        second = sb.exec(src)
        up1, mono1 = map(float, first.stdout.split())
        up2, mono2 = map(float, second.stdout.split())
        assert up1 < 30 and mono1 < 30, first.stdout
        assert 0.4 < mono2 - mono1 < 5 and 0.4 < up2 - up1 < 5, (first.stdout, second.stdout)


def test_sys_is_not_there(client):
    with create_fn(client, "python") as sb:
        r = sb.exec("import os\ntry:\n    os.statvfs('/sys')\nexcept OSError as e:\n"
                    "    print(e.errno)\nprint('sys' in os.listdir('/'))")
        assert r.stdout.split() == [str(errno.ENOENT).encode(), b"False"], r


def _function_processes(d):
    """corrald's zygotes and keepers (each a corral-zygote, as forks of one)."""
    family = []
    for p in descendants(d.pid):
        try:
            if Path(f"/proc/{p}/comm").read_text().strip() == "corral-zygote":
                family.append(p)
        except OSError:
            pass
    return family


def _swallow(f, *args):
    try:
        f(*args)
    except corral.errors.Error:
        pass  # its corrald was killed under it


def test_keepers_end_with_a_killed_corrald(corrald_factory):
    """The zygotes, every keeper and everything in their namespaces end
    when corrald does, even mid-call; a restart reconciles the rest."""
    d = corrald_factory()
    with d.client() as c:
        boxes = [create_fn(c, rt) for rt in ("shell", "python")]
        assert boxes[0].exec("sleep 1000 > /dev/null 2>&1 &").exit_code == 0
        call = threading.Thread(target=_swallow, daemon=True,
                                args=(boxes[1].exec, "import time; time.sleep(1000)"))
        call.start()
        keeper = boxes[1].info["function"]["pid"]
        wait_for(lambda: descendants(keeper), what="the call to start")
        doomed = descendants(d.pid)  # zygotes, keepers, the call, the sleep, spawners
        zygotes = {sb.info["function"]["zygote_pid"] for sb in boxes}
        assert zygotes <= set(doomed) and len(_function_processes(d)) >= 4, doomed
    d.kill()
    assert not wait_gone(doomed, 5)
    call.join(5)
    d.start()
    assert d.live_sandboxes() == []
    with d.client() as c, create_fn(c, "python") as sb:
        assert sb.exec("print('again')").stdout == b"again\n"
    d.shutdown_and_check()  # nothing left: no cgroup, mount or process


def test_without_a_pool_a_create_waits_for_its_keeper(corrald_factory):
    """--function-pool 0: no keeper is made ahead (corrald's function
    processes are its two zygotes); each create has one made."""
    d = corrald_factory(["--function-pool", "0"])
    assert len(_function_processes(d)) == 2, "the two runtimes' zygotes, and no keeper"
    with d.client() as c:
        boxes = [create_fn(c, rt) for rt in ("shell", "python", "shell")]
        assert len(_function_processes(d)) == 2 + 3, "a keeper for each sandbox, no more"
        assert [sb.exec("echo hi" if sb.info["spec"]["runtime"] == "shell" else "print('hi')")
                .stdout for sb in boxes] == [b"hi\n"] * 3
        for sb in boxes:
            sb.destroy()


def test_limits_count_the_calls_alone(client):
    """The keeper and its spares live in a cgroup of corral's own: a
    sandbox's pids (and memory and CPU) are all its calls'."""
    with create_fn(client, "python", pids=8) as sb:
        assert sb.inspect()["usage"]["pids"] == 0, "nothing of the sandbox's runs between calls"
        r = sb.exec("import os, time\nkids = []\nfor i in range(7):\n    pid = os.fork()\n"
                    "    if pid == 0:\n        time.sleep(1)\n        os._exit(0)\n"
                    "    kids.append(pid)\nfor k in kids:\n    os.waitpid(k, 0)\nprint(len(kids))")
        assert r.exit_code == 0 and r.stdout == b"7\n", "the call and its 7 children are its 8 pids"
