"""corral traj (ls, show, export, rm, replay, gc) and corral snapshot,
fork, pause and resume, driving build/corral against the shared corrald
(gc against a corrald of its own).  Trajectories are recorded through the
SDK."""

import json
import re
import uuid
from pathlib import Path

from conftest import DEBIAN, SMALL
from test_cli import corral as cli

# coreutils' date has nanoseconds; busybox's prints "%N" as it is.
IMAGE = "debian" if DEBIAN else "busybox"
NONDET = "date +%s%N" if DEBIAN else "cat /proc/sys/kernel/random/uuid"


def new_id():
    return f"cli-{uuid.uuid4().hex[:12]}"


def record(client, t, nondeterministic=True):
    """A trajectory of every kind of step (8 of them; the second one's
    output differs on every run when ``nondeterministic``)."""
    with client.create(image=IMAGE, trajectory=t, **SMALL) as sb:
        assert sb.exec("echo hi").stdout == b"hi\n"
        sb.exec(NONDET if nondeterministic else "echo same")
        sb.files.write("/data/f", b"x\n")
        sb.files.read("/data/f")
        with sb.session() as sh:
            assert sh.run("cd /data && cat f").stdout == b"x\n"
            sb.snapshot(name="s")


def ok(r):
    assert r.returncode == 0, r
    return r.stdout.decode()


def test_ls_show_and_export(corrald, client):
    t = new_id()
    record(client, t)
    rows = [line.split() for line in ok(cli(corrald, "traj", "ls")).splitlines()]
    assert rows[0][:3] == ["ID", "STEPS", "HEADS"]
    assert [t, "8", "8", "-", IMAGE] in [row[:5] for row in rows]
    listed = json.loads(ok(cli(corrald, "traj", "ls", "--json")))["trajectories"]
    assert any(x["id"] == t and x["n_steps"] == 8 for x in listed)

    out = ok(cli(corrald, "traj", "show", t))
    assert f"id:        {t}" in out and "heads:     8" in out
    table = out.split("\n\n", 1)[1].splitlines()
    assert table[0].split() == ["N", "PARENT", "KIND", "STATUS", "WHAT", "CHECKPOINT"]
    steps = [line.split(None, 4) for line in table[1:]]
    assert [(s[0], s[1], s[2], s[3]) for s in steps] == [
        ("1", "0", "exec", "200"), ("2", "1", "exec", "200"), ("3", "2", "file_write", "200"),
        ("4", "3", "file_read", "200"), ("5", "4", "session_open", "201"),
        ("6", "5", "session_run", "200"), ("7", "6", "snapshot", "200"),
        ("8", "7", "session_close", "200")]
    assert steps[0][4].startswith("echo hi ") and steps[1][4].startswith(NONDET + " ")
    assert steps[2][4].startswith("/data/f ") and re.match(r"ss-\w+: cd /data", steps[5][4])
    assert "1| hi" not in out
    assert "1| hi" in ok(cli(corrald, "traj", "show", "--outputs", t))
    assert json.loads(ok(cli(corrald, "traj", "show", "--json", t)))["n_steps"] == 8

    exported = cli(corrald, "traj", "export", t)
    assert exported.returncode == 0, exported
    assert exported.stdout == corrald.request("GET", f"/v1/trajectories/{t}/steps").body
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [x["n"] for x in lines] == list(range(1, 9))
    assert lines[0]["response"]["stdout"] == "hi\n"
    assert ok(cli(corrald, "traj", "rm", t)) == f"{t}\n"


def test_replay_reports_the_nondeterministic_step_and_only_it(corrald, client):
    t = new_id()
    record(client, t)
    r = cli(corrald, "traj", "replay", t, timeout=120)
    out = r.stdout.decode()
    assert r.returncode == 1, r
    assert f"step 2 (exec: {NONDET}) differs:" in out
    assert "stdout differs at line 1" in out
    assert re.search(r"^step [13-8] ", out, re.M) is None, out
    assert out.splitlines()[-1] == "7 steps, 1 differ, 1 skipped"  # the snapshot
    # the replay's sandbox is gone
    replayed = corrald.sandboxes(**{"corral.replay": t})
    assert replayed and all(s["state"] == "destroyed" for s in replayed)
    # a path that stops before the nondeterministic step
    r = cli(corrald, "traj", "replay", "--head", "1", t)
    assert (r.returncode, r.stdout) == (0, b"1 steps, 0 differ\n"), r
    cli(corrald, "traj", "rm", t)


def test_replay_of_a_deterministic_trajectory_exits_0(corrald, client):
    t = new_id()
    record(client, t, nondeterministic=False)
    r = cli(corrald, "traj", "replay", t, timeout=120)
    assert (r.returncode, r.stdout) == (0, b"7 steps, 0 differ, 1 skipped\n"), r
    cli(corrald, "traj", "rm", t)


def test_errors_and_rm(corrald, client):
    t = new_id()
    r = cli(corrald, "traj", "show", t)
    assert r.returncode == 1 and b"not found" in r.stderr, r
    r = cli(corrald, "traj", "replay", t)
    assert r.returncode == 2 and b"not found" in r.stderr, r
    r = cli(corrald, "traj", "show", "bad/id")
    assert r.returncode == 2 and b"not a trajectory id" in r.stderr, r
    r = cli(corrald, "traj", "frobnicate")
    assert r.returncode == 2 and b"unknown command" in r.stderr, r
    with client.create(trajectory=t, **SMALL) as sb:
        sb.exec("true")
        r = cli(corrald, "traj", "rm", t)
        assert r.returncode == 1 and sb.id.encode() in r.stderr, r  # live: refused
        r = cli(corrald, "traj", "replay", "--head", "2", t)
        assert r.returncode == 2 and b"has 1 steps" in r.stderr, r
    assert ok(cli(corrald, "traj", "rm", t)) == f"{t}\n"
    assert cli(corrald, "traj", "show", t).returncode == 1
    assert cli(corrald, "traj", "rm", t).returncode == 1


def test_snapshot_fork_pause_resume(corrald, client, sandbox):
    sandbox.files.write("/data/f", b"1")
    ck = ok(cli(corrald, "snapshot", "--name", "a", sandbox.id)).strip()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", ck)
    snap = json.loads(ok(cli(corrald, "snapshot", "--json", sandbox.id)))
    assert snap["sandbox"] == sandbox.id and "stats" in snap
    sandbox.files.write("/data/f", b"2")
    forked = json.loads(ok(cli(corrald, "fork", "--json", "--checkpoint", ck, sandbox.id)))
    assert forked["forked_from"] == {"sandbox": sandbox.id, "step": None, "checkpoint": ck}
    for new, want in ((forked["id"], b"1"), (ok(cli(corrald, "fork", sandbox.id)).strip(), b"2")):
        with client.get(new) as f:
            assert f.files.read("/data/f") == want
    r = cli(corrald, "fork", "--step", "1", sandbox.id)  # it records no trajectory
    assert r.returncode == 1 and b"no trajectory" in r.stderr, r
    r = cli(corrald, "fork", "--step", "1", "--checkpoint", ck, sandbox.id)
    assert r.returncode == 2, r
    assert ok(cli(corrald, "pause", sandbox.id)) == f"{sandbox.id}\n"
    assert sandbox.inspect()["state"] == "paused"
    assert json.loads(ok(cli(corrald, "resume", "--json", sandbox.id)))["state"] == "ready"
    r = cli(corrald, "pause", "sb-nonexistent")
    assert r.returncode == 1 and b"not found" in r.stderr, r


def test_gc(corrald_factory):
    """A removed trajectory's checkpoints go once past the grace, and then
    nothing is left to remove; an unreadable log stops it.  A corrald of
    its own: a grace of 0 on the shared one would sweep under other tests."""
    d = corrald_factory(["--checkpoint-gc-s", "0"])
    t = new_id()
    with d.client() as c:
        record(c, t, nondeterministic=False)
    ok(cli(d, "traj", "rm", t))
    # the default grace (an hour) keeps them: they are young
    out = ok(cli(d, "traj", "gc"))
    m = re.fullmatch(r"removed 0 blobs, freed 0 B; kept 0 in use and (\d+) younger than 3600 s\n",
                     out)
    assert m and int(m[1]) > 0, out
    out = ok(cli(d, "traj", "gc", "--grace-s", "0"))
    m = re.match(r"removed (\d+) blobs, freed [\d.]+ [KM]?i?B; kept 0 in use and 0 younger than 0 s",
                 out)
    assert m and int(m[1]) > 0, out
    again = json.loads(ok(cli(d, "traj", "gc", "--grace-s", "0", "--json")))
    assert again["blobs_removed"] == 0 and again["bytes_removed"] == 0, again
    assert again["trajectories"] == 0 and again["grace_s"] == 0, again

    for bad in (["--grace-s", "-1"], ["--grace-s", "soon"], ["extra"]):
        r = cli(d, "traj", "gc", *bad)
        assert r.returncode == 2, r
    broken = Path(d.state_dir) / "trajectories" / "broken"
    broken.mkdir()
    (broken / "log").write_bytes(b"not a log at all" * 4)
    r = cli(d, "traj", "gc", "--grace-s", "0")
    assert r.returncode == 1 and b"trajectory broken cannot be read" in r.stderr, r
