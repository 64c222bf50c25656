"""The cgroup v2 code path, end to end.

Production hosts are v2; this machine has its controllers in v1 and an
empty v2 hierarchy at /sys/fs/cgroup/unified.  A corrald on that hierarchy
(--cgroup-no-limits: it has no memory or pids controller to limit with)
still exercises everything v2-specific: init/ and exec leaves, attaching,
cgroup.kill for timeouts and destroys, the cgroup namespace, reconcile.
"""

import time
from pathlib import Path

import pytest

from conftest import SMALL

UNIFIED = Path("/sys/fs/cgroup/unified")
def _is_cgroup2(path):
    """Is a cgroup2 file system mounted exactly at path?"""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, fs = line.partition(" - ")
        if fields.split()[4] == str(path) and fs.split()[0] == "cgroup2":
            return True
    return False


pytestmark = pytest.mark.skipif(not _is_cgroup2(UNIFIED),
                                reason=f"no cgroup2 hierarchy mounted at {UNIFIED}")


@pytest.fixture
def v2(corrald_factory):
    return corrald_factory(["--cgroup", "v2", "--cgroup-root", str(UNIFIED),
                            "--cgroup-no-limits"])


def test_v2_layout_exec_and_timeout(v2):
    with v2.client() as c, c.create(**SMALL) as sb:
        parent = UNIFIED / v2.cgroup_parent
        cg = parent / sb.inspect()["container"]["cgroup"]
        init = sb.inspect()["container"]["init_pid"]
        assert str(init) in (cg / "init" / "cgroup.procs").read_text().split()
        # an exec runs in a leaf of its own below init/, seen as /e<N> inside
        r = sb.exec("cat /proc/self/cgroup")
        assert r.exit_code == 0
        line = [l for l in r.stdout.decode().splitlines() if l.startswith("0::")][0]
        assert line.startswith("0::/e"), line
        # a timeout kills the whole tree through cgroup.kill
        r = sb.exec("sleep 100 & setsid sleep 100 & sleep 100", timeout=0.5)
        assert r.reason == "timeout"
        ps = sb.exec(["ps", "-o", "args"]).stdout
        assert b"sleep 100" not in ps, ps
    assert not [d for d in parent.iterdir() if d.is_dir() and any(
        (p / "cgroup.procs").read_text().strip() for p in [d, *d.rglob("*")] if p.is_dir())]


def _stat(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None


def test_v2_destroy_kills_daemonised_processes(v2):
    with v2.client() as c:
        sb = c.create(**SMALL)
        sb.exec("setsid sh -c 'sleep 1000 & sleep 1000' >/dev/null 2>&1 </dev/null &")
        cg = UNIFIED / v2.cgroup_parent / sb.inspect()["container"]["cgroup"]
        deadline = time.monotonic() + 5
        while True:  # the backgrounded shell forks its sleeps soon after the exec returns
            pids = [int(p) for d in [cg, *cg.rglob("*")] if d.is_dir()
                    for p in (d / "cgroup.procs").read_text().split()]
            if len(pids) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert len(pids) >= 3  # init and two sleeps
        sb.destroy()
        # DELETE answers once nothing of it runs: PID 1 may still be a
        # zombie for its spawner to reap, nothing else is there at all
        stats = {p: stat for p in pids if (stat := _stat(p))}
        assert all(stat.rsplit(")", 1)[1].split()[0] == "Z" and "(corral-init)" in stat
                   for stat in stats.values()), stats
        # and every pid is free again soon after
        deadline = time.monotonic() + 5
        while any(_stat(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not {p: stat for p in pids if (stat := _stat(p))}


def test_v2_sigkill_and_adoption(v2):
    """On v2 too, a corrald killed with -9 leaves its sandbox running in its
    cgroup (PID 1 in init/, the exec's daemon in a leaf below), and the next
    start adopts it."""
    with v2.client() as c:
        sb = c.create(**SMALL)
        sb.exec("sleep 1000 >/dev/null 2>&1 &")
        info = sb.inspect()["container"]
    v2.kill()
    init = UNIFIED / v2.cgroup_parent / info["cgroup"] / "init"
    assert str(info["init_pid"]) in (init / "cgroup.procs").read_text().split()
    v2.start()
    assert [s["id"] for s in v2.live_sandboxes()] == [sb.id]
    with v2.client() as c:
        a = c.get(sb.id)
        assert a.inspect()["container"]["init_pid"] == info["init_pid"]
        assert b"sleep 1000" in a.exec("ps").stdout
        assert a.exec("echo hi").stdout == b"hi\n"
    v2.shutdown_and_check()
    assert not (UNIFIED / v2.cgroup_parent).exists()
