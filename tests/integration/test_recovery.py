"""Faults of corrald itself: SIGKILL and restart, clean shutdown, lifetimes."""

import glob
import http.client
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import corral

from conftest import SMALL, alive, docker_archive, import_to_store, wait_for, wait_gone


def test_sigkill_and_restart_leaves_nothing(corrald_factory):
    """A corrald killed with -9: its container sandboxes run on and the next
    one adopts them (tests/integration/test_adoption.py has the details);
    what it cannot adopt (function sandboxes) is reported lost, and nothing
    else of the run before is left."""
    d = corrald_factory()
    with d.client() as c:
        boxes = [c.create(**SMALL) for _ in range(2)]
        for sb in boxes:
            sb.exec("sleep 1000 > /dev/null 2>&1 &")
        inits = [sb.inspect()["container"]["init_pid"] for sb in boxes]
        fns = [c.create(backend="function", runtime="shell", **SMALL) for _ in range(2)]
    d.kill()
    # Its container sandboxes outlive it, in their cgroups ...
    assert wait_gone(inits, 1) == inits
    assert d.leftovers()
    # ... and a cgroup of its that no record names goes at the next start,
    # with the process someone parked there.
    stray = Path(f"/sys/fs/cgroup/pids/{d.cgroup_parent}/s999")
    stray.mkdir()
    procs = stray / "cgroup.procs"
    sleeper = subprocess.Popen(["sh", "-c", f"echo $$ > {procs} && exec sleep 1000"])
    deadline = time.monotonic() + 5
    while str(sleeper.pid) not in procs.read_text().split() and time.monotonic() < deadline:
        assert sleeper.poll() is None
        time.sleep(0.01)
    try:
        d.start()
        assert re.search(r"reconcile: removed \d+ leftover", d.log(this_run=True))
        assert sleeper.wait(timeout=5) == -9  # killed by the reconcile
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    assert not stray.exists()
    assert sorted(s["id"] for s in d.live_sandboxes()) == sorted(sb.id for sb in boxes)
    with d.client() as c:
        for sb in boxes:
            assert b"sleep 1000" in c.get(sb.id).exec("ps").stdout  # adopted, as it ran
    # Nothing forgotten: each id the clients hold says lost, and why.
    for sb in fns:
        r = d.request("GET", f"/v1/sandboxes/{sb.id}")
        info = json.loads(r.body)
        assert r.status == 200 and info["state"] == "lost", r.body
        assert "restarted" in info["message"] and info["end_reason"] == "corrald_restarted"
        assert info["lost_reason"] == "backend_not_adoptable"
        assert info["spec"]["resources"]["memory_mb"] == SMALL["memory_mb"]  # as it was
        r = d.request("POST", f"/v1/sandboxes/{sb.id}/exec", {"cmd": ["true"]})
        assert r.status == 409 and "lost" in json.loads(r.body)["error"]["message"], r.body
    listed = json.loads(d.request("GET", "/v1/sandboxes?state=lost").body)["sandboxes"]
    assert sorted(s["id"] for s in listed) == sorted(sb.id for sb in fns)
    # and it works as before
    with d.client() as c, c.create(**SMALL) as sb:
        assert sb.exec("echo again").stdout == b"again\n"
    d.shutdown_and_check()  # nothing left: no cgroup, mount or process
    assert wait_gone(inits, 5) == []


def test_sigterm_destroys_everything(corrald_factory):
    d = corrald_factory()
    with d.client() as c:
        boxes = [c.create(**SMALL) for _ in range(3)]
        inits = [sb.inspect()["container"]["init_pid"] for sb in boxes]
    d.shutdown_and_check()
    assert not any(alive(p) for p in inits)
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


def test_failed_create_leaves_nothing(corrald_factory, tmp_path):
    """A create that fails half-way, in the sandbox's init after its cgroups,
    namespaces and mounts were made, answers an error naming the step and
    leaves none of them behind."""
    images = tmp_path / "images"
    import_to_store(images, docker_archive({
        "bin/busybox": Path("/bin/busybox").read_bytes(),
        "dev": b"a file where /dev must be a directory"}), "broken")
    d = corrald_factory(["--images-from", str(images)])
    with d.client() as c:
        with pytest.raises(corral.Error) as e:
            c.create(image="broken", **SMALL)
        assert e.value.status == 500 and "/dev" in e.value.message
        assert d.live_sandboxes() == []
        assert not glob.glob(f"/sys/fs/cgroup/*/{d.cgroup_parent}/s*")
        with c.create(**SMALL) as sb:  # and the host is fine
            assert sb.exec("echo ok").stdout == b"ok\n"


def test_client_hangup_kills_its_command(corrald, sandbox):
    """A client that goes away mid-command takes its command with it, for a
    buffered exec, a streamed one and a session command alike."""
    session = sandbox.session()
    targets = [f"/v1/sandboxes/{sandbox.id}/exec", f"/v1/sandboxes/{sandbox.id}/exec",
               f"/v1/sandboxes/{sandbox.id}/sessions/{session.session_id}/run"]
    bodies = [{"cmd": ["sleep", "101"]}, {"cmd": ["sleep", "102"], "stream": True},
              {"cmd": "sleep 103"}]
    for target, body in zip(targets, bodies):
        s = corrald.send("POST", target, body)
        word = str(body["cmd"][1] if isinstance(body["cmd"], list) else body["cmd"]).split()[-1]
        deadline = time.monotonic() + 5  # hang up only once the command runs
        while (f"sleep {word}".encode() not in sandbox.exec(["ps", "-o", "args"]).stdout
               and time.monotonic() < deadline):
            time.sleep(0.02)
        s.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        ps = sandbox.exec(["ps", "-o", "args"]).stdout
        if b"sleep 10" not in ps:
            break
        time.sleep(0.05)
    assert b"sleep 10" not in ps, ps
    # the session survives and is free for the next command
    assert session.run("echo free").stdout == b"free\n"


def test_tombstones_are_bounded(corrald_factory):
    """Ended sandboxes stay readable for accounting, but only so many: the
    oldest are forgotten first."""
    d = corrald_factory(["--max-tombstones", "2"])
    with d.client() as c:
        ids = []
        for _ in range(3):
            sb = c.create(**SMALL)
            ids.append(sb.id)
            sb.destroy()
        assert d.request("GET", f"/v1/sandboxes/{ids[0]}").status == 404
        for sid in ids[1:]:
            r = d.request("GET", f"/v1/sandboxes/{sid}")
            assert r.status == 200 and r.json()["state"] == "destroyed"
        assert sorted(s["id"] for s in d.sandboxes()) == sorted(ids[1:])


def test_abandoned_create_is_destroyed(corrald_factory):
    """A client that hangs up before its create answers never learns the id:
    the sandbox is destroyed, not left running for its ttl."""
    d = corrald_factory(["--spawners", "1"])
    [spawner] = _spawners(d.pid)
    os.kill(spawner, signal.SIGSTOP)  # the create waits for it: hang up meanwhile
    try:
        s = d.send("POST", "/v1/sandboxes", {"image": "busybox", "resources": {"memory_mb": 64}})
        deadline = time.monotonic() + 10
        while not d.sandboxes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [b["state"] for b in d.sandboxes()] == ["creating"]
        s.close()
        while "the client hung up" not in d.log() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.kill(spawner, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        boxes = d.sandboxes()
        if boxes and all(b["state"] == "destroyed" for b in boxes):
            break
        time.sleep(0.02)
    assert [(b["state"], b["end_reason"]) for b in boxes] == [("destroyed", "client_gone")]
    d.shutdown_and_check()


def test_slow_reader_holds_the_command_back(corrald, sandbox):
    """Streamed output waits for its reader: a client that stops reading
    pauses the command instead of growing corrald's memory, and loses
    nothing when it reads again."""
    def rss():
        status = Path(f"/proc/{corrald.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) << 10

    total = 64 << 20  # the most an exec may return
    before = rss()
    s = corrald.send("POST", f"/v1/sandboxes/{sandbox.id}/exec",
                     {"cmd": f"head -c {total} /dev/zero | tr '\\0' a; echo done >/tmp/w",
                      "stream": True, "max_output_bytes": total})
    try:
        time.sleep(1.5)  # not reading: the writer must be held back
        assert sandbox.exec("cat /tmp/w 2>/dev/null").stdout == b""
        assert rss() - before < 24 << 20, (before, rss())
        resp = http.client.HTTPResponse(s)
        resp.begin()
        assert resp.status == 200
        got, result = 0, None
        for line in resp:
            ev = json.loads(line)
            got += len(ev.get("stdout", ""))
            result = ev.get("result", result)
    finally:
        s.close()
    assert result["exit_code"] == 0 and result["reason"] == "exited"
    assert got == total
    assert sandbox.exec("cat /tmp/w").stdout == b"done\n"


def _spawners(corrald_pid):
    kids = Path(f"/proc/{corrald_pid}/task/{corrald_pid}/children").read_text().split()
    return [int(p) for p in kids if Path(f"/proc/{p}/comm").read_text().strip() == "corral-spawner"]


def test_a_dead_spawner_is_replaced(corrald_factory):
    """A spawner killed from outside leaves its sandboxes running: the one
    corrald starts anew (without blocking) takes them over, the same PID 1
    with its files; a command that ran through the dead one is killed and
    answers so; a session's shell, whose pipes never went through it, runs
    on; and the host keeps working."""
    import threading
    d = corrald_factory(["--spawners", "1"])
    with d.client() as c:
        sb = c.create(**SMALL)
        sb.files.write("/root/kept", b"still here")
        session = sb.session()
        session.run("cd /tmp")
        pid1_start = sb.exec("cut -d' ' -f22 /proc/1/stat").stdout
        inflight = {}
        t = threading.Thread(target=lambda: inflight.update(r=sb.exec(["sleep", "60"])))
        t.start()
        wait_for(lambda: b"sleep 60\n" in sb.exec(["ps", "-o", "args"]).stdout, what="the exec")
        [old] = _spawners(d.pid)
        os.kill(old, 9)
        wait_for(lambda: "taken over by spawner" in d.log(this_run=True), timeout=10,
                 what="the new spawner to take the sandbox over")
        [new] = _spawners(d.pid)
        assert new != old
        t.join(10)
        assert not t.is_alive() and inflight["r"].exit_code != 0, inflight  # killed, not lost
        assert sb.inspect()["state"] == "ready"
        assert sb.exec("cat /root/kept").stdout == b"still here"
        assert sb.exec("cut -d' ' -f22 /proc/1/stat").stdout == pid1_start  # the same PID 1
        assert b"sleep 60\n" not in sb.exec(["ps", "-o", "args"]).stdout
        assert session.run("pwd").stdout == b"/tmp\n"
        session.run("exit 3")  # its end is heard without the spawner that started it
        wait_for(lambda: not session_alive(d, sb, session), what="the session to end")
        with c.create(**SMALL) as again:
            assert again.exec("echo fine").stdout == b"fine\n"
        sb.destroy()
    d.shutdown_and_check()


def _fd_links(pid):
    """What a process's descriptors point at (one it closes meanwhile, as
    corrald does those its keepers send, is skipped)."""
    links = []
    for p in glob.glob(f"/proc/{pid}/fd/*"):
        try:
            links.append(os.readlink(p))
        except FileNotFoundError:
            pass
    return links


def test_inherited_descriptors_stay_with_corrald(corrald_factory, tmp_path):
    """A descriptor corrald's parent left open reaches neither a spawner nor
    a sandbox."""
    d = corrald_factory()
    d.stop()
    secret = tmp_path / "inherited"
    secret.write_text("not for sandboxes")
    fd = os.open(secret, os.O_RDONLY)
    try:
        d.pass_fds = (fd,)
        d.start()
    finally:
        os.close(fd)
    assert str(secret) in _fd_links(d.pid)  # corrald has it ...
    for sp in _spawners(d.pid):  # ... its spawners do not
        assert str(secret) not in _fd_links(sp)
    with d.client() as c, c.create(**SMALL) as sb:
        init = sb.inspect()["container"]["init_pid"]
        assert str(secret) not in _fd_links(init)
    d.shutdown_and_check()


def _no_upload_temps(sb, directory):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        names = sb.exec(["ls", "-A", directory]).stdout.split()
        if not any(n.startswith(b".corral-upload") for n in names):
            return names
        time.sleep(0.05)
    raise AssertionError(f"an upload's temporary file stayed in {directory}: {names}")


def test_a_file_upload_is_whole_or_not_at_all(client, corrald):
    """A file upload replaces its file only when all of it arrived: a client
    that hangs up half-way, or a full disk, leaves the old file as it was
    and no temporary file behind."""
    with client.create(disk_mb=8, **SMALL) as sb:
        sb.files.write("/tmp/keep", b"original")
        # 1. the client goes away after a tenth of its declared body
        s = corrald.send("PUT", f"/v1/sandboxes/{sb.id}/files?path=/tmp/keep", b"x" * 100000,
                         content_type="application/octet-stream", length=1000000)
        time.sleep(0.3)
        s.close()
        assert _no_upload_temps(sb, "/tmp") == [b"keep"]
        assert sb.files.read("/tmp/keep") == b"original"
        # 2. the disk fills half-way
        with pytest.raises(corral.NoSpace):
            sb.files.write("/tmp/keep", b"y" * (16 << 20))
        assert _no_upload_temps(sb, "/tmp") == [b"keep"]
        assert sb.files.read("/tmp/keep") == b"original"
        # 3. a whole upload replaces it, with the mode and owner asked for
        sb.files.write("/tmp/keep", b"new", mode=0o600)
        assert sb.files.read("/tmp/keep") == b"new"
        assert sb.exec("stat -c '%a %u' /tmp/keep").stdout == b"600 0\n"
        sb.exec("mkdir -m 777 /tmp/u")
        sb.files.write("/tmp/u/f", b"old", user="1000:1000")
        sb.files.write("/tmp/u/f", b"mine", mode=0o640, user="1000:1000")
        assert sb.exec("cat /tmp/u/f; stat -c ' %a %u %g' /tmp/u/f").stdout == b"mine 640 1000 1000\n"
        # a user may not replace another's file where it could not write it
        with pytest.raises(corral.Forbidden):
            sb.files.write("/tmp/keep", b"theirs", user="1000:1000")
        assert sb.files.read("/tmp/keep") == b"new"
        assert _no_upload_temps(sb, "/tmp") == [b"keep", b"u"]
        # a file the user may write in a directory it may not is written in place
        sb.exec("echo old > /etc/shared; chmod 666 /etc/shared")
        sb.files.write("/etc/shared", b"by 1000", user="1000:1000")
        assert sb.exec("cat /etc/shared; stat -c ' %a %u' /etc/shared").stdout == b"by 1000 666 0\n"
        # a directory in the way is refused before the bytes are read
        sb.exec("mkdir /tmp/d")
        with pytest.raises(corral.InvalidSpec):
            sb.files.write("/tmp/d", b"z")


def test_a_cancelled_builtin_loop_ends_its_session(corrald, sandbox):
    """A session command the shell runs itself survives the kill of what it
    started when its client hangs up; the shell goes after a grace, so the
    session does not stay busy for ever."""
    session = sandbox.session()
    target = f"/v1/sandboxes/{sandbox.id}/sessions/{session.session_id}/run"
    s = corrald.send("POST", target, {"cmd": "while :; do :; done"})
    listing = f"/v1/sandboxes/{sandbox.id}/sessions"
    deadline = time.monotonic() + 5
    while not corrald.request("GET", listing).json()["sessions"][0]["busy"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    s.close()
    deadline = time.monotonic() + 10
    while True:
        [state] = corrald.request("GET", listing).json()["sessions"]
        if not state["alive"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (state["alive"], state["busy"]) == (False, False)
    assert "the cancelled command runs in the shell itself" in corrald.log()
    session.close()


def session_alive(d, sb, session):
    """Does corrald say the session's shell is alive?"""
    listing = d.request("GET", f"/v1/sandboxes/{sb.id}/sessions").json()["sessions"]
    return [x["alive"] for x in listing if x["session_id"] == session.session_id] == [True]
