"""A corrald killed with -9 and started again adopts the container
sandboxes its predecessor left running: same PID 1, files, limits and TTL,
and sessions, whose shells PID 1 kept their pipes for.  What ran through
the dead daemon's own pipes (an exec in flight, a background process) is
ended; what a finished command left running (a nohup'ed daemon) lives on.  What cannot be adopted is reported lost,
with a reason, and nothing of it is left (docs/architecture.md)."""

import errno
import hashlib
import json
import os
import re
import signal
import threading
import time
from pathlib import Path

from conftest import BUILD, SMALL, alive, wait_for

PROBE = "/usr/local/bin/corral-probe"


def cgroup_file(d, sb, controller, name):
    return Path(f"/sys/fs/cgroup/{controller}/{d.cgroup_parent}/{sb['container']['cgroup']}/{name}")


def sandbox_cmdlines(sb):
    """Each process's command line in the sandbox, as one string."""
    r = sb.exec(["sh", "-c", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"])
    return r.stdout.decode()


def test_kill9_restart_adopts(corrald_factory):
    d = corrald_factory()
    data = os.urandom(256 << 10)
    with d.client() as c:
        a = c.create(memory_mb=64, pids=64, disk_mb=64, ttl_s=3600, labels={"who": "a"})
        a.files.write("/root/data", data)
        a.files.write(PROBE, (BUILD / "corral-probe").read_bytes(), mode=0o755)
        a.exec("sleep 1001 >/dev/null 2>&1 &")
        p = a.process.start("sleep 1002")
        s = a.session()
        s.run("cd /tmp && export X=1")
        inflight = {}
        t = threading.Thread(target=lambda: inflight.update(r=_try(lambda: a.exec("sleep 1003"))))
        t.start()
        wait_for(lambda: "sleep 1003" in sandbox_cmdlines(a), 10, "the exec in flight")
        f = c.create(backend="function", runtime="shell", **SMALL)
        before = a.inspect()
        assert "sleep 1001" in sandbox_cmdlines(a)
    pid1 = before["container"]["init_pid"]
    limit = cgroup_file(d, before, "memory", "memory.limit_in_bytes")
    assert int(limit.read_text()) == 64 << 20

    d.kill()
    t.join(30)
    assert not t.is_alive()
    time.sleep(0.5)
    assert alive(pid1), "the sandbox's PID 1 outlives corrald"
    assert int(limit.read_text()) == 64 << 20

    d.start()
    log = d.log(this_run=True)
    assert "1 adopted, 1 lost" in log, log[-3000:]
    with d.client() as c:
        a = c.get(a.id)
        info = a.inspect()
        assert info["state"] == "ready" and info["container"]["init_pid"] == pid1, info
        assert info["labels"] == {"who": "a"} and info["spec"]["resources"]["memory_mb"] == 64
        # its ttl runs on from where it was, not from now
        assert info["expires_at"] == before["expires_at"], (info, before)
        assert hashlib.sha256(a.files.read("/root/data")).digest() == hashlib.sha256(data).digest()
        a.files.write("/root/new", b"after")
        assert a.exec("cat /root/new").stdout == b"after"
        # the limits still hold
        assert int(limit.read_text()) == 64 << 20
        r = a.exec([PROBE, "alloc-mb", "200"])
        assert r.reason == "oom", r
        r = a.exec([PROBE, "forks", "200"])
        assert r.exit_code == errno.EAGAIN and int(r.stdout) < 64, r
        # what a finished command left runs on; what talked to the dead daemon is gone
        seen = wait_for(lambda: (lambda s: s if "sleep 1002" not in s and "sleep 1003" not in s
                                 else None)(sandbox_cmdlines(a)), 10, "the old commands to end")
        assert "sleep 1001" in seen, seen
        # ended by corrald, from the list PID 1 gave (the exec, the process); the
        # session's shell was taken back
        m = wait_for(lambda: re.search(r"taken over: (\d+) command\(s\) .*; (\d+) ended.*; "
                                       r"(\d+) session", d.log(this_run=True)), 5,
                     "the takeover's log line")
        assert (int(m[1]), int(m[2]), int(m[3])) == (3, 2, 1), m[0]
        # the session goes on where it was, its cwd and environment kept
        r = s.run("pwd; echo X=$X")
        assert (r.exit_code, r.stdout) == (0, b"/tmp\nX=1\n"), r
        base = f"/v1/sandboxes/{a.id}"
        sessions = d.request("GET", f"{base}/sessions").json()["sessions"]
        assert [(x["session_id"], x["alive"]) for x in sessions] == [(s.session_id, True)]
        # the process is lost, not forgotten
        r = d.request("GET", f"{base}/processes/{p.pid}")
        assert r.status == 409 and "lost" in r.error["message"], r
        # new commands, sessions and processes work, under ids of their own
        q = a.process.start("sleep 5")
        assert q.pid > 0
        s2 = a.session()
        assert s2.session_id != s.session_id
        assert s2.run("echo $((6*7))").stdout.strip() == b"42"
        # the function sandbox could not outlive its corrald: lost, with why
        r = d.request("GET", f"/v1/sandboxes/{f.id}")
        lost = json.loads(r.body)
        assert lost["state"] == "lost" and lost["lost_reason"] == "backend_not_adoptable", lost
        listed = json.loads(d.request("GET", "/v1/sandboxes").body)["sandboxes"]
        assert {x["id"]: x["state"] for x in listed} == {a.id: "ready", f.id: "lost"}
        a.destroy()
    assert not alive(pid1)
    d.shutdown_and_check()


def _try(fn):
    try:
        return fn()
    except Exception as e:  # the connection drops with corrald
        return e


def test_a_sandbox_that_changed_is_not_adopted(corrald_factory):
    """A record whose PID 1 is not the process that has its pid (here, a
    start time that differs) is lost, and its cgroup and processes go."""
    d = corrald_factory()
    with d.client() as c:
        sb = c.create(**SMALL)
        pid1 = sb.inspect()["container"]["init_pid"]
    d.kill()
    log = d.records_log()
    lines = log.read_text().splitlines()
    edited = []
    for line in lines:
        if line.startswith("+"):
            rec = json.loads(line[1:])
            rec["adopt"]["backend"]["init_start"] += 1
            line = "+" + json.dumps(rec)
        edited.append(line)
    log.write_text("\n".join(edited) + "\n")
    d.start()
    info = json.loads(d.request("GET", f"/v1/sandboxes/{sb.id}").body)
    assert info["state"] == "lost" and info["lost_reason"] == "init_mismatch", info
    assert not alive(pid1) or wait_for(lambda: not alive(pid1), 5, "its PID 1 to be killed")
    d.shutdown_and_check()


def test_a_handover_leaves_the_sandboxes_to_the_next_corrald(corrald_factory):
    """SIGUSR2 (an upgrade): corrald exits 0 leaving every sandbox it can
    hand over running, and the next one adopts them; what cannot be adopted
    (a function sandbox) is destroyed as at a shutdown.  Nothing else of the
    old daemon is left."""
    d = corrald_factory()
    with d.client() as c:
        a = c.create(ttl_s=600, **SMALL)
        a.files.write("/root/kept", b"across the upgrade")
        s = a.session()
        s.run("cd /tmp")
        f = c.create(backend="function", runtime="shell", **SMALL)
        pid1 = a.inspect()["container"]["init_pid"]
    assert d.stop(signal.SIGUSR2) == 0
    log = d.log(this_run=True)
    assert "handover: 1 sandbox(es) run on" in log, log[-2000:]
    assert f"{f.id} handover: destroyed" in log
    assert alive(pid1)
    d.start()
    with d.client() as c:
        a = c.get(a.id)
        assert a.inspect()["state"] == "ready"
        assert a.files.read("/root/kept") == b"across the upgrade"
        assert s.run("pwd").stdout == b"/tmp\n"
        assert d.request("GET", f"/v1/sandboxes/{f.id}").status == 404  # destroyed, as at a stop
        a.destroy()
    d.shutdown_and_check()


def test_a_paused_sandbox_is_adopted_paused(corrald_factory):
    """Its freezer says it is paused: so it stays, until a call wakes it."""
    d = corrald_factory()
    with d.client() as c:
        sb = c.create(**SMALL)
        sb.files.write("/root/f", b"frozen")
        s = sb.session()
        s.run("cd /root")
        sb.pause()
    d.kill()
    d.start()
    assert d.request("GET", f"/v1/sandboxes/{sb.id}").json()["state"] == "paused"
    with d.client() as c:
        sb = c.get(sb.id)
        assert sb.exec("cat /root/f").stdout == b"frozen"  # an exec resumes it
        assert sb.inspect()["state"] == "ready"
        # its session, frozen with it, comes back once its shell runs again
        run = f"/v1/sandboxes/{sb.id}/sessions/{s.session_id}/run"
        r = wait_for(lambda: (lambda r: r if r.status == 200 else None)(
            d.request("POST", run, {"cmd": "pwd"})), 10, "the session to take commands")
        assert r.json()["stdout"] == "/root\n", r.json()
        sb.destroy()
    d.shutdown_and_check()


def test_sessions_come_back_at_a_command_boundary(corrald_factory):
    """A session whose command ran when corrald died is busy until that
    command ends (its result is lost with its client: a command sent
    meanwhile waits 2 s for it, then is refused), then takes commands
    again, in the shell it had; one whose shell ended while corrald was
    away is lost, with why; a session taken back survives a second restart
    and closes as any other."""
    d = corrald_factory()
    with d.client() as c:
        sb = c.create(**SMALL)
        busy, gone, calm = sb.session(), sb.session(), sb.session()
        busy.run("export WHO=busy")
        calm.run("cd /etc")
        gone.run("true")
        t = threading.Thread(target=lambda: _try(lambda: busy.run("sleep 8; echo late")))
        t.start()
        wait_for(lambda: "sleep 8" in sandbox_cmdlines(sb), 10, "the command in flight")
    d.kill()
    t.join(30)
    # the shell of one session ends while no corrald runs
    rec = None
    for line in d.records_log().read_text().splitlines():
        if line.startswith("+") and json.loads(line[1:])["id"] == sb.id:
            rec = json.loads(line[1:])
    shells = rec["adopt"]["backend"]["children"]["session"]
    os.kill(shells[gone.session_id]["proc"]["pid"], signal.SIGKILL)
    d.start()
    base = f"/v1/sandboxes/{sb.id}"
    r = d.request("POST", f"{base}/sessions/{busy.session_id}/run", {"cmd": "true"})
    assert r.status == 409 and "finishing what it ran when corrald restarted" in \
        r.error["message"], r
    listed = {x["session_id"]: x for x in d.request("GET", f"{base}/sessions").json()["sessions"]}
    assert listed[busy.session_id]["busy"] and listed[busy.session_id]["alive"], listed
    assert listed[gone.session_id]["state"] == "lost", listed
    assert "ended while corrald was away" in listed[gone.session_id]["reason"], listed
    r = d.request("POST", f"{base}/sessions/{gone.session_id}/run", {"cmd": "true"})
    assert r.status == 409 and "ended while corrald was away" in r.error["message"], r
    assert calm.run("pwd").stdout == b"/etc\n"
    # the old command's end, then the session is the same shell, its output its own
    out = wait_for(lambda: (lambda r: r if r.status == 200 else None)(
        d.request("POST", f"{base}/sessions/{busy.session_id}/run", {"cmd": "echo $WHO"})),
        15, "the session to finish the command from before")
    assert out.json()["stdout"] == "busy\n", out.json()
    # a second restart takes them back again; a close ends the shell and its leaf
    d.kill()
    d.start()
    assert calm.run("pwd").stdout == b"/etc\n"
    with d.client() as c:
        sb = c.get(sb.id)
        before = sandbox_cmdlines(sb).count("\n")
        assert d.request("DELETE", f"{base}/sessions/{calm.session_id}").status in (200, 204)
        wait_for(lambda: sandbox_cmdlines(sb).count("\n") < before, 10, "its shell to end")
        sb.destroy()
    d.shutdown_and_check()


def test_sessions_past_what_pid1_keeps_are_lost_with_why(corrald_factory):
    """A sandbox's PID 1 keeps the pipes of 64 sessions' shells at once
    (spawn_proto.h); a 65th works, but is lost at a restart, saying why."""
    d = corrald_factory()
    with d.client() as c:
        sb = c.create(**SMALL)
        sessions = [sb.session() for _ in range(65)]
        sessions[-1].run("true")
    d.kill()
    d.start()
    base = f"/v1/sandboxes/{sb.id}"
    listed = {x["session_id"]: x for x in d.request("GET", f"{base}/sessions").json()["sessions"]}
    assert sum(1 for x in listed.values() if x.get("state") != "lost") == 64, listed
    last = listed[sessions[-1].session_id]
    assert last["state"] == "lost" and "did not keep it" in last["reason"], last
    assert sessions[0].run("echo first").stdout == b"first\n"
    with d.client() as c:
        c.get(sb.id).destroy()
    d.shutdown_and_check()
