"""Faults of corrald itself: SIGKILL and restart, clean shutdown, lifetimes."""

import os
import re
import time
from pathlib import Path

from conftest import SMALL


def _alive(pid):
    try:
        os.kill(pid, 0)
        return not Path(f"/proc/{pid}/status").read_text().count("State:\tZ")
    except (ProcessLookupError, FileNotFoundError):
        return False


def test_sigkill_and_restart_leaves_nothing(corrald_factory):
    d = corrald_factory()
    with d.client() as c:
        boxes = [c.create(**SMALL) for _ in range(3)]
        for sb in boxes:
            sb.exec("sleep 1000 > /dev/null 2>&1 &")
        inits = [sb.inspect()["container"]["init_pid"] for sb in boxes]
    d.kill()
    # Its sandboxes die with it (their init had its spawner as parent) ...
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in inits) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(_alive(p) for p in inits)
    # ... but their cgroups remain until a corrald reconciles them.
    assert d.leftovers()
    # A process someone parked in a leftover cgroup is killed by the reconcile too.
    procs = next(Path("/sys/fs/cgroup/pids").glob(f"{d.cgroup_parent}/s*/cgroup.procs"))
    sleeper = os.fork()
    if sleeper == 0:
        procs.write_text("0")
        os.execv("/bin/sleep", ["sleep", "1000"])
    time.sleep(0.1)
    d.start()
    assert re.search(r"reconcile: removed \d+ leftover", d.log(this_run=True))
    os.waitpid(sleeper, 0)  # killed by the reconcile
    assert d.live_sandboxes() == []
    # and it works as before
    with d.client() as c, c.create(**SMALL) as sb:
        assert sb.exec("echo again").stdout == b"again\n"
    d.shutdown_and_check()  # nothing left: no cgroup, mount or process


def test_sigterm_destroys_everything(corrald_factory):
    d = corrald_factory()
    with d.client() as c:
        boxes = [c.create(**SMALL) for _ in range(3)]
        inits = [sb.inspect()["container"]["init_pid"] for sb in boxes]
    d.shutdown_and_check()
    assert not any(_alive(p) for p in inits)
    assert "destroyed reason=shutdown" in d.log()


def test_ttl_and_idle_ttl(corrald_factory):
    d = corrald_factory(["--tombstone-s", "60"])
    with d.client() as c:
        ttl = c.create(ttl_s=1, **SMALL)
        idle = c.create(idle_ttl_s=1, **SMALL)
        busy = c.create(idle_ttl_s=1, **SMALL)
        for _ in range(8):  # 1.6 s of activity keeps `busy` alive
            busy.exec("true")
            time.sleep(0.2)
        assert ttl.inspect()["state"] == "destroyed"
        assert ttl.inspect()["end_reason"] == "ttl"
        assert idle.inspect()["end_reason"] == "idle_ttl"
        assert busy.inspect()["state"] == "ready"
        # final usage stays readable after the end, for accounting
        assert ttl.inspect()["usage"]["memory_peak_bytes"] > 0
        busy.destroy()


def test_failed_create_leaves_nothing(corrald_factory):
    """A create that fails in the middle (a cwd for the image that cannot be
    made: the init's mount fails) removes its cgroup and answers an error."""
    d = corrald_factory(["--spawner", "/bin/false"]) if False else corrald_factory()
    with d.client() as c:
        before = d.leftovers()
        try:
            c.create(image="busybox", disk_mb=0)
        except Exception as e:  # noqa: BLE001 - any refusal is right here
            assert getattr(e, "status", 400) == 400
        assert d.live_sandboxes() == []
        assert d.leftovers() == before
