"""Pause and resume: POST /v1/sandboxes/{id}/pause and /resume.

A pause freezes every process of a sandbox (its cgroup: v1 freezer or v2
cgroup.freeze) and gives back what memory the kernel can take (v1
memory.force_empty, v2 memory.reclaim); the answer says how much.  Any
later call (exec, files, sessions) resumes it transparently.  Its ttl keeps
running while paused; its idle time does not.

A container's progress is watched from the host, without a call that would
resume it: a background counter writes /tmp/counter, read through
/proc/<its init>/root.  A function sandbox's call writes a counter in its
scratch dir, which the host sees through /proc/<its keeper>/root.
"""

import threading
import time
from pathlib import Path

import pytest

import corral
from conftest import SMALL, wait_for
from test_function import host_path

UNIFIED = Path("/sys/fs/cgroup/unified")
COUNTER = ("sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.02; done' "
           ">/dev/null 2>&1 </dev/null &")


def _is_cgroup2(path):
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, fs = line.partition(" - ")
        if fields.split()[4] == str(path) and fs.split()[0] == "cgroup2":
            return True
    return False


def post(d, sb_id, action):
    return d.request("POST", f"/v1/sandboxes/{sb_id}/{action}")


def container_counter(sb):
    """A function reading the container's counter from the host."""
    path = Path(f"/proc/{sb.inspect()['container']['init_pid']}/root/tmp/counter")

    def read():
        try:
            return int(path.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0
    return read


def assert_stopped(read, gap=0.4):
    a = read()
    time.sleep(gap)
    b = read()
    assert a == b, f"the counter went on while paused: {a} -> {b}"
    return b


def assert_advancing(read, since):
    wait_for(lambda: read() > since, what="the counter to advance")


def cgroup_dir(d, sb):
    """The sandbox's cgroup: in the freezer hierarchy on v1."""
    info = sb.inspect()
    cg = info[info["backend"]]["cgroup"]
    v1 = Path(f"/sys/fs/cgroup/freezer/{d.cgroup_parent}/{cg}")
    return v1 if v1.exists() else UNIFIED / d.cgroup_parent / cg


def freezer_state(d, sb):
    """FROZEN or THAWED, as v1's freezer.state says it (v2: cgroup.events)."""
    cg = cgroup_dir(d, sb)
    if (cg / "freezer.state").exists():
        return (cg / "freezer.state").read_text().strip()
    return "FROZEN" if "frozen 1" in (cg / "cgroup.events").read_text() else "THAWED"


def cgroup_pids(d, sb):
    cg = cgroup_dir(d, sb)
    return [int(p) for sub in [cg, *cg.rglob("*")] if sub.is_dir()
            for p in (sub / "cgroup.procs").read_text().split()]


def pause_resume_container(d, c):
    with c.create(**SMALL) as sb:
        sb.files.write("/root/kept", b"still here")
        assert sb.exec(COUNTER).exit_code == 0
        read = container_counter(sb)
        assert_advancing(read, 0)
        r = post(d, sb.id, "pause")
        assert r.status == 200, r
        info = r.json()
        assert info["state"] == "paused"
        assert info["memory_released_bytes"] >= 0
        assert info["memory_before_bytes"] >= info["memory_released_bytes"]
        assert info["container"]["last_pause"]["memory_release"] in (
            "memory.force_empty", "memory.reclaim", "none")
        assert sb.inspect()["state"] == "paused"
        assert freezer_state(d, sb) == "FROZEN"
        stopped_at = assert_stopped(read)
        # pausing a paused sandbox: the same answer, nothing more released
        r = post(d, sb.id, "pause")
        assert r.status == 200 and r.json()["state"] == "paused", r
        assert r.json()["memory_released_bytes"] == 0
        assert_stopped(read)
        r = post(d, sb.id, "resume")
        assert r.status == 200 and r.json()["state"] == "ready", r
        assert freezer_state(d, sb) == "THAWED"
        assert_advancing(read, stopped_at)
        assert sb.files.read("/root/kept") == b"still here"


def test_pause_freezes_and_resume_thaws(corrald, client):
    pause_resume_container(corrald, client)


def test_a_call_resumes_a_paused_sandbox(corrald, sandbox):
    assert sandbox.exec(COUNTER).exit_code == 0
    read = container_counter(sandbox)
    assert_advancing(read, 0)
    # an exec
    sandbox.pause()
    stopped_at = assert_stopped(read)
    r = sandbox.exec("echo works")
    assert (r.exit_code, r.stdout) == (0, b"works\n")
    assert sandbox.inspect()["state"] == "ready"
    assert_advancing(read, stopped_at)
    # a file read
    sandbox.pause()
    assert sandbox.files.read("/tmp/counter").strip().isdigit()
    assert sandbox.inspect()["state"] == "ready"
    # a session
    sandbox.pause()
    with sandbox.session() as s:
        assert s.run("echo in-session").stdout == b"in-session\n"
    assert sandbox.inspect()["state"] == "ready"


def test_pause_states(corrald, client):
    r = post(corrald, "sb-nope-000000000000", "pause")
    assert r.status == 404, r
    sb = client.create(**SMALL)
    # resume of a ready sandbox leaves it as it is
    r = post(corrald, sb.id, "resume")
    assert r.status == 200 and r.json()["state"] == "ready", r
    # a paused sandbox is destroyed at once, its frozen processes with it
    sb.exec(COUNTER)
    pids = wait_for(lambda: len(cgroup_pids(corrald, sb)) >= 3 and cgroup_pids(corrald, sb),
                    what="init, the loop and its sleep")
    sb.pause()
    started = time.monotonic()
    sb.destroy()
    assert sb.info["state"] == "destroyed"
    assert time.monotonic() - started < 5
    assert not [p for p in pids if Path(f"/proc/{p}").exists()]
    for action in ("pause", "resume"):
        r = post(corrald, sb.id, action)
        assert r.status == 409, r
        assert r.error["code"] == "conflict" and "destroyed" in r.error["message"]


def test_ttl_runs_while_paused_and_idle_time_does_not(corrald, client):
    idle = client.create(**SMALL, idle_ttl_s=1)
    ttl = client.create(**SMALL, ttl_s=2)
    try:
        idle.pause()
        ttl.pause()
        time.sleep(2.5)
        assert idle.inspect()["state"] == "paused"  # idle time does not count
        # the ttl does: a paused sandbox is destroyed at its end
        info = wait_for(lambda: ttl.inspect()["state"] == "destroyed" and ttl.info, 5,
                        "the ttl to end the paused sandbox")
        assert info["end_reason"] == "ttl"
        # resumed, its idle time starts afresh
        idle.resume()
        info = wait_for(lambda: idle.inspect()["state"] == "destroyed" and idle.info, 5,
                        "the idle ttl after a resume")
        assert info["end_reason"] == "idle_ttl"
    finally:
        idle.destroy()
        ttl.destroy()


FN_COUNTER = "i=0; while [ $i -lt 150 ]; do i=$((i+1)); echo $i > c; sleep 0.02; done; echo done"


def pause_resume_function(d):
    with d.client() as c, c.create(backend="function", runtime="shell") as sb:
        scratch = host_path(sb)

        def read():
            try:
                return int((scratch / "c").read_text().strip() or 0)
            except (OSError, ValueError):
                return 0

        # between calls nothing runs: the pause has nothing to stop
        r = post(d, sb.id, "pause")
        assert r.status == 200 and r.json()["state"] == "paused", r
        assert r.json()["function"]["last_pause"]["memory_release"] in (
            "memory.force_empty", "memory.reclaim", "none")
        assert sb.exec("echo hi").stdout == b"hi\n"  # a call resumes it
        assert sb.inspect()["state"] == "ready"
        # a call under way stops, and goes on once resumed
        result = {}

        def call():
            with d.client() as c2:
                result["r"] = c2.get(sb.id).exec(FN_COUNTER, timeout=60)

        t = threading.Thread(target=call)
        t.start()
        try:
            wait_for(lambda: read() > 0, what="the call's counter")
            r = post(d, sb.id, "pause")
            assert r.status == 200 and r.json()["state"] == "paused", r
            assert freezer_state(d, sb) == "FROZEN"
            stopped_at = assert_stopped(read)
            assert t.is_alive()
            r = post(d, sb.id, "resume")
            assert r.status == 200 and r.json()["state"] == "ready", r
            assert_advancing(read, stopped_at)
        finally:
            post(d, sb.id, "resume")
            t.join(30)
        assert result["r"].exit_code == 0 and result["r"].stdout == b"done\n"
        assert read() == 150


def test_function_pause(corrald):
    pause_resume_function(corrald)


@pytest.fixture
def v2(corrald_factory):
    if not _is_cgroup2(UNIFIED):
        pytest.skip(f"no cgroup2 hierarchy mounted at {UNIFIED}")
    return corrald_factory(["--cgroup", "v2", "--cgroup-root", str(UNIFIED),
                            "--cgroup-no-limits"])


def test_v2_pause_container(v2):
    with v2.client() as c:
        pause_resume_container(v2, c)


def test_v2_pause_function(v2):
    pause_resume_function(v2)


def test_v2_destroy_paused(v2):
    with v2.client() as c:
        sb = c.create(**SMALL)
        sb.exec(COUNTER)
        read = container_counter(sb)
        assert_advancing(read, 0)
        pids = cgroup_pids(v2, sb)
        sb.pause()
        assert_stopped(read)
        sb.destroy()
        assert sb.info["state"] == "destroyed"
        assert not [p for p in pids if Path(f"/proc/{p}").exists()]
        with pytest.raises(corral.errors.Conflict):
            sb.resume()
