"""Trajectories: steps recorded durably, fast-forward after a destroy or a
crash of corrald, divergence, fork from a step, checkpoints, bad input.
Fast-forward, fork and snapshots run on each backend that takes
checkpoints (the `backend` fixture); the rest on containers.

Every call here goes through raw HTTP, so what is asserted is the API
itself: a replayed answer is the logged one ("replayed": true) and nothing
runs; a live one runs on the state the trajectory had."""

import base64
import json
import os
import time
import uuid
from pathlib import Path

import pytest

from conftest import SMALL, sized


def tid():
    return "t-" + uuid.uuid4().hex[:12]


def create(d, traj, checkpoint=None, backend="container", **extra):
    size = sized(backend)
    spec = {"backend": backend, "image": size["image"] if "image" in size else "busybox",
            "resources": {"memory_mb": size["memory_mb"], "cpus": size["cpus"]}, **extra}
    spec["trajectory"] = {"id": traj, "checkpoint": checkpoint} if checkpoint else traj
    r = d.request("POST", "/v1/sandboxes", spec)
    assert r.status == 201, r
    return r.json()["id"]


def destroy(d, sid):
    r = d.request("DELETE", f"/v1/sandboxes/{sid}")
    assert r.status == 200, r


def exec_(d, sid, cmd, **kw):
    r = d.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd, **kw})
    assert r.status == 200, r
    return r.json()


def write(d, sid, path, data):
    r = d.request("PUT", f"/v1/sandboxes/{sid}/files?path={path}", data,
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    return r.json()


def read(d, sid, path):
    r = d.request("GET", f"/v1/sandboxes/{sid}/files?path={path}")
    assert r.status == 200, r
    return r


# The trajectory: non-idempotent commands, file writes, the clock.
def twenty_calls():
    calls = []
    for i in range(20):
        if i % 4 == 0:
            calls.append(("exec", "echo $RANDOM >> /tmp/log; wc -l /tmp/log"))
        elif i % 4 == 1:
            calls.append(("write", f"/tmp/f{i}", os.urandom(64)))
        elif i % 4 == 2:
            calls.append(("exec", "date +%s%N"))
        else:
            calls.append(("read", f"/tmp/f{i - 2}"))
    return calls


APPENDS = sum(1 for c in twenty_calls() if c[0] == "exec" and ">>" in c[1])


def run(d, sid, call):
    """One call; what a client would compare, and the step's marks."""
    if call[0] == "exec":
        j = exec_(d, sid, call[1])
        return (j["exit_code"], j["stdout"], j["stderr"]), j["step"], j["replayed"]
    if call[0] == "write":
        j = write(d, sid, call[1], call[2])
        return (j["path"], j["bytes"]), j["step"], j["replayed"]
    r = read(d, sid, call[1])
    return (r.body,), int(r.headers["x-corral-step"]), r.headers["x-corral-replayed"] == "true"


def record(d, traj, calls, backend="container"):
    sid = create(d, traj, backend=backend)
    results = []
    for n, call in enumerate(calls, 1):
        res, step, replayed = run(d, sid, call)
        assert (step, replayed) == (n, False)
        results.append(res)
    return sid, results


def fast_forward(d, traj, calls, results, backend="container"):
    sid = create(d, traj, backend=backend)
    for n, (call, want) in enumerate(zip(calls, results), 1):
        res, step, replayed = run(d, sid, call)
        assert (step, replayed) == (n, True), call
        assert res == want, f"step {n} ({call[0]}) answered differently on fast-forward"
    return sid


def test_resume_after_destroy_runs_nothing_twice(corrald, backend):
    d, traj, calls = corrald, tid(), twenty_calls()
    sid, results = record(d, traj, calls, backend)
    destroy(d, sid)
    sid = fast_forward(d, traj, calls, results, backend)
    # The 21st call runs live on the restored state: 5 appends, not 10.
    j = exec_(d, sid, "wc -l < /tmp/log; cat /tmp/f1 | od -An -tx1 | tr -d ' \\n'")
    assert j["replayed"] is False and j["step"] == 21
    lines, f1 = j["stdout"].split("\n", 1)
    assert int(lines) == APPENDS
    assert f1.strip() == calls[1][2].hex()
    info = d.request("GET", f"/v1/trajectories/{traj}").json()
    assert info["n_steps"] == 21 and info["live_sandbox"] == sid
    assert [e["event"] for e in info["events"]][-2:] == ["attach", "live"]
    destroy(d, sid)


def test_corrald_sigkill_adopts_the_recording_sandbox(corrald_factory):
    """A corrald killed with -9 while a sandbox records: the next one adopts
    the sandbox, which records on from the step it stood at, live (nothing
    replayed, nothing run twice), and the log says so.  Its checkpoints go
    on (a fork from the new step has every file), and the trajectory is
    still one sandbox's: a create naming it is refused."""
    d, traj, calls = corrald_factory(), tid(), twenty_calls()
    sid, results = record(d, traj, calls)
    d.kill()
    d.start()
    j = exec_(d, sid, "echo after >> /tmp/log; wc -l < /tmp/log")
    assert (j["replayed"], j["step"], int(j["stdout"])) == (False, 21, APPENDS + 1)
    info = d.request("GET", f"/v1/trajectories/{traj}").json()
    assert info["n_steps"] == 21 and info["live_sandbox"] == sid
    assert "adopt" in [e["event"] for e in info["events"]]
    r = d.request("POST", f"/v1/sandboxes/{sid}/fork", {"step": 21})
    assert r.status == 201, r
    fork = r.json()["id"]
    j = exec_(d, fork, "wc -l < /tmp/log; ls /tmp | grep -c '^f'")
    assert j["stdout"].split() == [str(APPENDS + 1), "5"]
    destroy(d, fork)
    r = d.request("POST", "/v1/sandboxes", {"image": "busybox", "trajectory": traj})
    assert r.status == 409 and sid in r.error["message"], r
    destroy(d, sid)
    # Its steps replay as they were, the one after the restart too.
    calls.append(("exec", "echo after >> /tmp/log; wc -l < /tmp/log"))
    results.append((0, f"{APPENDS + 1}\n", ""))
    sid = fast_forward(d, traj, calls, results)
    destroy(d, sid)


def test_a_sandbox_killed_while_fast_forwarding_resumes_anew(corrald_factory):
    """One that was fast-forwarding when corrald died is lost, saying so,
    and a create naming the trajectory fast-forwards again: nothing run
    twice."""
    d, traj, calls = corrald_factory(), tid(), twenty_calls()
    sid, results = record(d, traj, calls)
    destroy(d, sid)
    half = create(d, traj)
    for call in calls[:5]:
        assert run(d, half, call)[2] is True  # replayed
    d.kill()
    d.start()
    lost = d.request("GET", f"/v1/sandboxes/{half}").json()
    assert lost["state"] == "lost" and lost["lost_reason"] == "trajectory_resumes", lost
    sid = fast_forward(d, traj, calls, results)
    j = exec_(d, sid, "wc -l < /tmp/log")
    assert (j["replayed"], int(j["stdout"])) == (False, APPENDS)
    destroy(d, sid)


def test_divergence_continues_from_the_state_before(corrald):
    d, traj, calls = corrald, tid(), twenty_calls()
    sid, results = record(d, traj, calls)
    destroy(d, sid)
    sid = create(d, traj)
    for call in calls[:9]:
        assert run(d, sid, call)[2] is True
    # Step 10 differs: it runs live on the state after step 9.
    j = exec_(d, sid, "wc -l < /tmp/log; ls /tmp | grep -c '^f'")
    appends_9 = sum(1 for c in calls[:9] if c[0] == "exec" and ">>" in c[1])
    writes_9 = sum(1 for c in calls[:9] if c[0] == "write")
    assert j["replayed"] is False and j["step"] == 21
    assert [int(x) for x in j["stdout"].split()] == [appends_9, writes_9]
    # The trajectory is a tree now: step 21 continues step 9.
    steps = d.request("GET", f"/v1/trajectories/{traj}").json()["steps"]
    assert steps[20]["parent"] == 9
    assert sorted(d.request("GET", f"/v1/trajectories/{traj}").json()["heads"]) == [20, 21]
    destroy(d, sid)
    # A third run follows the newest branch.
    sid = create(d, traj)
    for call in calls[:9]:
        assert run(d, sid, call)[2] is True
    j2 = exec_(d, sid, "wc -l < /tmp/log; ls /tmp | grep -c '^f'")
    assert (j2["replayed"], j2["step"], j2["stdout"]) == (True, 21, j["stdout"])
    destroy(d, sid)


def test_fork_from_a_step(corrald, backend):
    d, traj, calls = corrald, tid(), twenty_calls()
    sid, _ = record(d, traj, calls, backend)
    r = d.request("POST", f"/v1/sandboxes/{sid}/fork", {"step": 5})
    assert r.status == 201, r
    fork = r.json()
    assert fork["forked_from"]["step"] == 5 and fork["forked_from"]["sandbox"] == sid
    j = exec_(d, fork["id"], "wc -l < /tmp/log; ls /tmp | grep '^f'")
    assert j["stdout"].split() == ["2", "f1"]
    assert "step" not in j  # the fork records no trajectory of its own
    # and its state is its own
    exec_(d, fork["id"], "echo x >> /tmp/log")
    assert exec_(d, sid, "wc -l < /tmp/log")["stdout"].strip() == str(APPENDS)
    destroy(d, fork["id"])
    r = d.request("POST", f"/v1/sandboxes/{sid}/fork", {"step": 99})
    assert r.status == 404 and "step 99 does not exist" in r.error["message"], r
    destroy(d, sid)


def test_fork_now_and_from_a_snapshot(corrald, client, backend):
    d = corrald
    with client.create(**sized(backend)) as sb:
        exec_(d, sb.id, "echo one > /tmp/a; mkdir -p /tmp/d/e; echo deep > /tmp/d/e/f; "
                        "ln -s /tmp/a /tmp/link; rm /bin/true")
        snap = d.request("POST", f"/v1/sandboxes/{sb.id}/snapshot", {"name": "first"}).json()
        assert snap["checkpoint"].startswith("sha256:") and snap["name"] == "first"
        again = d.request("POST", f"/v1/sandboxes/{sb.id}/snapshot", {}).json()
        assert again["checkpoint"] == snap["checkpoint"], "nothing changed: the same checkpoint"
        exec_(d, sb.id, "echo two > /tmp/a")
        for body, want in (({}, "two"), ({"checkpoint": snap["checkpoint"]}, "one")):
            r = d.request("POST", f"/v1/sandboxes/{sb.id}/fork", body)
            assert r.status == 201, r
            fid = r.json()["id"]
            j = exec_(d, fid, "cat /tmp/a /tmp/d/e/f; readlink /tmp/link; "
                              "test -e /bin/true && echo true-is-back")
            assert j["stdout"].split() == [want, "deep", "/tmp/a"]
            destroy(d, fid)
    r = d.request("POST", f"/v1/sandboxes/{sb.id}/fork", {"checkpoint": "sha256:" + "0" * 64})
    assert r.status == 404, r


def test_sessions_are_steps_and_reopen_when_live(corrald):
    d, traj = corrald, tid()
    sid = create(d, traj)
    s = d.request("POST", f"/v1/sandboxes/{sid}/sessions", {"cwd": "/tmp"}).json()
    assert s["replayed"] is False
    out = d.request("POST", f"/v1/sandboxes/{sid}/sessions/{s['session_id']}/run",
                    {"cmd": "echo $RANDOM > r; cat r"}).json()
    destroy(d, sid)
    sid = create(d, traj)
    s2 = d.request("POST", f"/v1/sandboxes/{sid}/sessions", {"cwd": "/tmp"}).json()
    assert (s2["session_id"], s2["replayed"]) == (s["session_id"], True)
    out2 = d.request("POST", f"/v1/sandboxes/{sid}/sessions/{s['session_id']}/run",
                     {"cmd": "echo $RANDOM > r; cat r"}).json()
    assert (out2["stdout"], out2["replayed"]) == (out["stdout"], True)
    # Live now: the session exists again, under its id, at its opening cwd.
    live = d.request("POST", f"/v1/sandboxes/{sid}/sessions/{s['session_id']}/run",
                     {"cmd": "pwd; cat r"}).json()
    assert live["replayed"] is False
    assert live["stdout"].split() == ["/tmp", out["stdout"].strip()]
    destroy(d, sid)


def test_streamed_exec_is_recorded_and_replayed(corrald):
    d, traj = corrald, tid()
    sid = create(d, traj)

    def stream():
        r = d.request("POST", f"/v1/sandboxes/{sid}/exec",
                      {"cmd": "echo out; echo err >&2; exit 3", "stream": True})
        assert r.status == 200, r
        return [json.loads(line) for line in r.body.splitlines()]

    first = stream()
    destroy(d, sid)
    sid = create(d, traj)
    second = stream()
    assert [k for line in first for k in line] == ["stdout", "stderr", "result"]
    assert first[:2] == second[:2] == [{"stdout": "out\n"}, {"stderr": "err\n"}]
    assert first[2]["result"]["exit_code"] == second[2]["result"]["exit_code"] == 3
    assert (first[2]["result"]["replayed"], second[2]["result"]["replayed"]) == (False, True)
    destroy(d, sid)


def test_one_holder_and_calls_in_turn(corrald):
    """A trajectory is held by one sandbox; its calls are steps one at a
    time: a call made while another runs waits its turn."""
    d, traj = corrald, tid()
    sid = create(d, traj)
    r = d.request("POST", "/v1/sandboxes", {"trajectory": traj, "resources": {"memory_mb": 128}})
    assert r.status == 409 and sid in r.error["message"], r
    slow = d.send("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "sleep 1; echo slow >> /tmp/o"})
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        j = exec_(d, sid, "echo fast >> /tmp/o; cat /tmp/o")
        assert time.monotonic() - t0 > 0.4, "it waited for the step in progress"
        assert (j["step"], j["stdout"]) == (2, "slow\nfast\n")
        first = json.loads(slow.recv(65536).split(b"\r\n\r\n", 1)[1])
        assert first["step"] == 1
    finally:
        slow.close()
    # A client that leaves while waiting takes nothing with it.
    slow = d.send("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "sleep 1"})
    time.sleep(0.2)
    gone = d.send("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo never"})
    time.sleep(0.2)
    gone.close()
    slow.recv(65536)
    slow.close()
    assert exec_(d, sid, "echo after")["step"] == 4
    steps = d.request("GET", f"/v1/trajectories/{traj}").json()["steps"]
    assert [s["request"]["body"]["cmd"] for s in steps][-2:] == ["sleep 1", "echo after"]
    destroy(d, sid)


def test_checkpoint_modes(corrald):
    d = corrald
    for mode, known in (("none", False), ("on-request", False), ("every-step", True)):
        traj = tid()
        sid = create(d, traj, checkpoint=mode)
        exec_(d, sid, "echo a > /tmp/a")
        steps = d.request("GET", f"/v1/trajectories/{traj}").json()["steps"]
        assert steps[0]["known"] is known, mode
        assert (steps[0]["checkpoint"] is not None) is known, mode
        r = d.request("POST", f"/v1/sandboxes/{sid}/fork", {"step": 1})
        assert r.status == (201 if known else 409), (mode, r)
        if known:
            destroy(d, r.json()["id"])
        destroy(d, sid)


def test_go_live_on_the_image(corrald):
    """Checkpoint "none": a resume goes live on the image (the only state
    known), and says so in the trajectory's events."""
    d, traj = corrald, tid()
    sid = create(d, traj, checkpoint="none")
    exec_(d, sid, "echo a > /tmp/a")
    destroy(d, sid)
    sid = create(d, traj)
    assert exec_(d, sid, "echo a > /tmp/a")["replayed"] is True
    j = exec_(d, sid, "cat /tmp/a || echo missing")
    assert (j["replayed"], j["stdout"].split()[-1]) == (False, "missing")
    live = [e for e in d.request("GET", f"/v1/trajectories/{traj}").json()["events"]
            if e["event"] == "live"]
    assert live[-1]["restored_from_step"] == 0 and live[-1]["at"] == 1
    r = d.request("POST", f"/v1/sandboxes/{sid}/fork", {"step": 0})
    assert r.status == 201, r
    fid = r.json()["id"]
    assert exec_(d, fid, "ls /tmp")["stdout"] == ""
    destroy(d, fid)
    destroy(d, sid)


def test_bad_input(corrald):
    d = corrald
    r = d.request("GET", "/v1/trajectories/no-such-trajectory")
    assert r.status == 404 and "no-such-trajectory" in r.error["message"], r
    r = d.request("POST", "/v1/sandboxes", {"trajectory": "../x"})
    assert r.status == 400 and "trajectory.id" in r.error["message"], r
    # A failed create leaves no trajectory behind.
    traj = tid()
    r = d.request("POST", "/v1/sandboxes", {"trajectory": traj, "image": "no-such-image"})
    assert r.status == 404, r
    assert not (Path(d.state_dir) / "trajectories" / traj).exists()
    assert d.request("GET", f"/v1/trajectories/{traj}").status == 404
    # Recorded on one image, resumed on another: refused.
    sid = create(d, traj)
    destroy(d, sid)
    r = d.request("POST", "/v1/sandboxes", {"trajectory": traj, "backend": "function"})
    assert r.status == 409 and "recorded with backend" in r.error["message"], r
    # Removed: gone for good.
    assert d.request("DELETE", f"/v1/trajectories/{traj}").status == 200
    assert d.request("GET", f"/v1/trajectories/{traj}").status == 404


def test_corrupt_log_is_named_and_nothing_else_breaks(corrald):
    d, traj, other = corrald, tid(), tid()
    sid = create(d, traj)
    for i in range(3):
        exec_(d, sid, f"echo {i}")
    destroy(d, sid)
    sid2 = create(d, other)
    exec_(d, sid2, "echo fine")
    log = Path(d.state_dir) / "trajectories" / traj / "log"
    data = bytearray(log.read_bytes())
    at = data.index(b'"echo 1"')
    data[at + 2] ^= 0xFF  # a byte inside step 2's record: not a torn tail
    log.write_bytes(bytes(data))
    r = d.request("POST", "/v1/sandboxes", {"trajectory": traj})
    assert r.status == 500, r
    assert str(log) in r.error["message"] and "offset" in r.error["message"], r
    r = d.request("GET", f"/v1/trajectories/{traj}")
    assert r.status == 500 and str(log) in r.error["message"], r
    # The other trajectory, and the sandbox on it, are untouched.
    assert exec_(d, sid2, "echo still")["step"] == 2
    destroy(d, sid2)
    assert not d.live_sandboxes()


def test_torn_tail_is_dropped(corrald):
    d, traj = corrald, tid()
    sid = create(d, traj)
    exec_(d, sid, "echo one")
    exec_(d, sid, "echo two")
    destroy(d, sid)
    log = Path(d.state_dir) / "trajectories" / traj / "log"
    data = log.read_bytes()
    log.write_bytes(data[:-7])  # the detach record, cut: a crash while writing it
    sid = create(d, traj)
    assert exec_(d, sid, "echo one")["replayed"] is True
    assert exec_(d, sid, "echo two")["replayed"] is True
    destroy(d, sid)


def test_export_and_function_backend(corrald):
    d, traj = corrald, tid()
    r = d.request("POST", "/v1/sandboxes", {"backend": "function", "runtime": "python",
                                            "trajectory": traj})
    assert r.status == 201, r
    sid = r.json()["id"]
    a = exec_(d, sid, "import random\nopen('n','a').write(str(random.random())+'\\n')\n"
                      "print(len(open('n').read().split()))")
    assert a["stdout"] == "1\n"
    write(d, sid, "/data.bin", b"\x00\x01binary")
    destroy(d, sid)
    r = d.request("POST", "/v1/sandboxes", {"backend": "function", "runtime": "python",
                                            "trajectory": traj})
    sid = r.json()["id"]
    again = exec_(d, sid, "import random\nopen('n','a').write(str(random.random())+'\\n')\n"
                          "print(len(open('n').read().split()))")
    assert (again["replayed"], again["stdout"]) == (True, "1\n")
    assert write(d, sid, "/data.bin", b"\x00\x01binary")["replayed"] is True
    live = exec_(d, sid, "print(len(open('n').read().split()), open('data.bin','rb').read())")
    assert live["stdout"] == "1 b'\\x00\\x01binary'\n"
    destroy(d, sid)
    lines = d.request("GET", f"/v1/trajectories/{traj}/steps").body.splitlines()
    steps = [json.loads(x) for x in lines]
    assert [s["kind"] for s in steps] == ["exec", "file_write", "exec"]
    assert base64.b64decode(steps[1]["request"]["body_base64"]) == b"\x00\x01binary"


def test_checkpoint_gc(corrald_factory):
    """What no trajectory and no sandbox refers to goes; the rest still
    restores.  A log that cannot be read stops the sweep."""
    d = corrald_factory(["--checkpoint-gc-s", "0"])
    blobs = Path(d.state_dir) / "trajectories" / "blobs" / "sha256"
    keep, drop = tid(), tid()
    for traj in (keep, drop):
        sid = create(d, traj)
        exec_(d, sid, f"echo {traj} > /tmp/{traj}; head -c 100000 /dev/urandom > /tmp/r")
        destroy(d, sid)
    plain = d.request("POST", "/v1/sandboxes", {"resources": {"memory_mb": 128}}).json()["id"]
    exec_(d, plain, "echo plain > /tmp/p")
    d.request("POST", f"/v1/sandboxes/{plain}/snapshot", {})
    assert d.request("DELETE", f"/v1/trajectories/{drop}").status == 200
    before = len(list(blobs.iterdir()))
    r = d.request("POST", "/v1/trajectories/gc", {"grace_s": 0})
    assert r.status == 200, r
    gc = r.json()
    assert gc["blobs_removed"] >= 3 and gc["bytes_removed"] > 100000, gc
    assert len(list(blobs.iterdir())) == before - gc["blobs_removed"]
    # Nothing removable is left: a second collection removes nothing.
    assert d.request("POST", "/v1/trajectories/gc", {"grace_s": 0}).json()["blobs_removed"] == 0
    # The kept trajectory still resumes exactly; the plain sandbox still forks.
    sid = create(d, keep)
    exec_(d, sid, f"echo {keep} > /tmp/{keep}; head -c 100000 /dev/urandom > /tmp/r")
    j = exec_(d, sid, f"cat /tmp/{keep}; wc -c < /tmp/r")
    assert j["stdout"].split() == [keep, "100000"]
    destroy(d, sid)
    fork = d.request("POST", f"/v1/sandboxes/{plain}/fork", {})
    assert fork.status == 201, fork
    assert exec_(d, fork.json()["id"], "cat /tmp/p")["stdout"] == "plain\n"
    destroy(d, fork.json()["id"])
    destroy(d, plain)
    # Their sandboxes gone, their checkpoints go too.
    assert d.request("POST", "/v1/trajectories/gc", {"grace_s": 0}).json()["blobs_removed"] > 0
    # An unreadable log stops it, naming the trajectory.
    (Path(d.state_dir) / "trajectories" / "broken").mkdir()
    (Path(d.state_dir) / "trajectories" / "broken" / "log").write_bytes(b"not a log at all" * 4)
    r = d.request("POST", "/v1/trajectories/gc", {"grace_s": 0})
    assert r.status == 500 and "broken" in r.error["message"], r
    assert "nothing was removed" in r.error["message"]
    r = d.request("POST", "/v1/trajectories/gc", {"grace_s": -1})
    assert r.status == 400, r
