"""Trajectories through the Python SDK: ``step`` and ``replayed`` on every
kind of answer, snapshot / fork / pause / resume, and Client.trajectory()
and trajectories() (docs/api.md, "Trajectories").  What the server
guarantees beyond its answers (durability, crash recovery, what a
checkpoint holds) is test_trajectory.py's."""

import asyncio
import base64
import uuid

import pytest

import corral
from conftest import SMALL


def new_id(prefix="sdk"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ---- step and replayed ----


def test_every_kind_of_call_is_a_numbered_step(client):
    t = new_id()
    with client.create(trajectory=t, **SMALL) as sb:
        assert sb.info["spec"]["trajectory"] == {"id": t, "checkpoint": "every-step"}
        r = sb.exec("echo hi")
        assert (r.stdout, r.step, r.replayed) == (b"hi\n", 1, False)
        w = sb.files.write("/data/f", b"data", mode=0o640)
        assert (w["bytes"], w["step"], w["replayed"]) == (4, 2, False)
        d = sb.files.read("/data/f")
        assert isinstance(d, corral.FileBytes) and isinstance(d, bytes)
        assert d == b"data" and (d.step, d.replayed, d.mode) == (3, False, 0o640)
        sh = sb.session()
        assert (sh.info["step"], sh.info["replayed"]) == (4, False)
        r = sh.run("echo $((1 + 2))")
        assert (r.stdout, r.step, r.replayed) == (b"3\n", 5, False)
        chunks = []
        r = sb.exec("echo streamed", on_stdout=chunks.append)
        assert b"".join(chunks) == r.stdout == b"streamed\n"
        assert (r.step, r.replayed) == (6, False)
        snap = sb.snapshot(name="s")
        assert (snap["step"], snap["replayed"], snap["name"]) == (7, False, "s")
        sh.close()
    info = client.trajectory(t).info()
    assert info["n_steps"] == 8 and info["heads"] == [8]
    assert [s["kind"] for s in info["steps"]] == [
        "exec", "file_write", "file_read", "session_open", "session_run", "exec", "snapshot",
        "session_close"]
    client.trajectory(t).remove()


def test_a_sandbox_without_a_trajectory_has_no_steps(sandbox):
    r = sandbox.exec("echo hi")
    assert (r.step, r.replayed) == (None, None)
    sandbox.files.write("/tmp/f", b"x")
    d = sandbox.files.read("/tmp/f")
    assert d == b"x" and (d.step, d.replayed) == (None, None) and d.mode == 0o644


def test_a_resumed_trajectory_is_answered_from_the_log(client):
    t = new_id()
    with client.create(trajectory=t, **SMALL) as sb:
        first = sb.exec("cat /proc/sys/kernel/random/uuid")
        sb.files.write("/data/f", b"one")
        read = sb.files.read("/data/f")
    with client.create(trajectory=t, **SMALL) as sb:
        again = sb.exec("cat /proc/sys/kernel/random/uuid")
        assert (again.stdout, again.step, again.replayed) == (first.stdout, 1, True)
        assert sb.files.write("/data/f", b"one")["replayed"] is True
        d = sb.files.read("/data/f")
        assert (d, d.step, d.replayed) == (read, 3, True)
        live = sb.exec("cat /data/f")  # past the end of the log: live, on step 3's state
        assert (live.stdout, live.step, live.replayed) == (b"one", 4, False)
    client.trajectory(t).remove()


# ---- snapshot, fork, pause, resume ----


def test_snapshot_and_fork_from_a_checkpoint_or_from_now(client):
    with client.create(**SMALL) as sb:
        sb.files.write("/data/f", b"one")
        snap = sb.snapshot(name="v1")
        assert snap["sandbox"] == sb.id and snap["name"] == "v1"
        assert snap["checkpoint"].startswith("sha256:")
        assert set(snap["stats"]) >= {"entries", "changed", "removed", "bytes_stored", "seconds"}
        assert "step" not in snap  # no trajectory
        assert sb.snapshot().get("name") is None  # left out when not given
        sb.files.write("/data/f", b"two")
        with sb.fork(checkpoint=snap["checkpoint"]) as f:
            assert isinstance(f, corral.Sandbox) and f.id != sb.id
            assert f.info["state"] == "ready"
            assert f.info["forked_from"] == {"sandbox": sb.id, "step": None,
                                             "checkpoint": snap["checkpoint"]}
            assert f.files.read("/data/f") == b"one"
        with sb.fork() as f:
            assert f.info["forked_from"]["sandbox"] == sb.id
            assert f.files.read("/data/f") == b"two"
        with pytest.raises(corral.InvalidSpec):  # refused before anything is sent
            sb.fork(step=1, checkpoint=snap["checkpoint"])
        with pytest.raises(corral.InvalidSpec):  # no trajectory to take a step of
            sb.fork(step=1)
        with pytest.raises(corral.NotFound):
            sb.fork(checkpoint="sha256:" + "0" * 64)


def test_fork_from_a_step_into_a_new_trajectory(client):
    t, t2 = new_id(), new_id()
    with client.create(trajectory=t, **SMALL) as sb:
        sb.files.write("/data/f", b"a")
        sb.files.write("/data/f", b"b")
        with sb.fork(step=1, trajectory=t2) as f:
            assert f.info["forked_from"]["step"] == 1
            assert f.info["spec"]["trajectory"]["id"] == t2
            d = f.files.read("/data/f")
            assert (d, d.step, d.replayed) == (b"a", 1, False)
        with pytest.raises(corral.NotFound):
            sb.fork(step=99)
    for x in (t, t2):
        client.trajectory(x).remove()


def test_pause_and_resume(client):
    with client.create(**SMALL) as sb:
        info = sb.pause()
        assert info["id"] == sb.id and info["state"] == "paused" and sb.info is info
        assert sb.resume()["state"] == "ready"
        sb.pause()
        assert sb.exec("echo back").stdout == b"back\n"  # any call resumes it
        assert sb.inspect()["state"] == "ready"


# ---- Client.trajectory() ----


def test_trajectory_info_steps_and_remove(client):
    t = new_id()
    blob = b"\x00\x01binary\xff"
    with client.create(trajectory=t, **SMALL) as sb:
        sb.exec("echo one")
        sb.files.write("/data/f", blob)
        sb.files.read("/data/f")
        with pytest.raises(corral.Conflict):
            client.create(trajectory=t, **SMALL)  # one sandbox at a time
        with pytest.raises(corral.Conflict):
            client.trajectory(t).remove()
        info = client.trajectory(t).info()
        assert info["id"] == t and info["live_sandbox"] == sb.id
        assert (info["n_steps"], info["heads"]) == (3, [3])
        assert "stdout" not in info["steps"][0]["response"]
        assert client.trajectory(t).info(outputs=True)["steps"][0]["response"]["stdout"] == "one\n"
        listed = {x["id"]: x for x in client.trajectories()}
        assert listed[t]["n_steps"] == 3 and listed[t]["live_sandbox"] == sb.id
    steps = client.trajectory(t).steps()
    assert [(s["n"], s["parent"], s["kind"]) for s in steps] == [
        (1, 0, "exec"), (2, 1, "file_write"), (3, 2, "file_read")]
    assert all(s["hash"].startswith("sha256:") and s["status"] == 200 for s in steps)
    assert steps[0]["request"]["body"]["cmd"] == "echo one"
    assert steps[0]["response"]["stdout"] == "one\n"
    assert steps[1]["request"]["query"]["path"] == "/data/f"
    assert base64.b64decode(steps[1]["request"]["body_base64"]) == blob
    assert base64.b64decode(steps[2]["content_base64"]) == blob
    assert client.trajectory(t).info()["live_sandbox"] is None
    removed = client.trajectory(t).remove()  # what was removed, as it was
    assert removed["id"] == t and removed["n_steps"] == 3 and "steps" not in removed
    for call in (lambda: client.trajectory(t).info(), lambda: client.trajectory(t).steps(),
                 lambda: client.trajectory(t).remove()):
        with pytest.raises(corral.NotFound):
            call()
    assert t not in {x["id"] for x in client.trajectories()}


@pytest.mark.parametrize("bad", ["-starts-badly", "blobs", "a/b", "x" * 129, 7,
                                 {"id": "ok", "checkpoint": "sometimes"}, {"checkpoint": "none"}])
def test_bad_trajectories_are_invalid_specs(client, bad):
    with pytest.raises(corral.InvalidSpec):
        client.create(trajectory=bad, **SMALL)


def test_checkpoint_mode_is_in_the_spec(client):
    t = new_id()
    with client.create(trajectory={"id": t, "checkpoint": "on-request"}, **SMALL) as sb:
        assert sb.info["spec"]["trajectory"] == {"id": t, "checkpoint": "on-request"}
        assert sb.exec("true").step == 1
    client.trajectory(t).remove()


# ---- asyncio ----


def test_the_async_client_has_the_same_methods(corrald):
    t = new_id("aio")

    async def main():
        async with corrald.async_client() as client:
            async with await client.create(trajectory=t, **SMALL) as sb:
                r = await sb.exec("echo hi")
                assert (r.step, r.replayed) == (1, False)
                await sb.files.write("/data/f", b"x")
                d = await sb.files.read("/data/f")
                assert (d, d.step, d.replayed) == (b"x", 3, False)
                sh = await sb.session()
                assert sh.info["step"] == 4
                await sh.close()
                snap = await sb.snapshot(name="n")
                assert snap["checkpoint"].startswith("sha256:") and snap["step"] == 6
                async with await sb.fork(checkpoint=snap["checkpoint"]) as f:
                    assert isinstance(f, corral.AsyncSandbox)
                    assert await f.files.read("/data/f") == b"x"
            traj = client.trajectory(t)
            assert isinstance(traj, corral.AsyncTrajectory)
            assert [s["n"] for s in await traj.steps()] == [1, 2, 3, 4, 5, 6]
            assert (await traj.info())["n_steps"] == 6
            assert t in {x["id"] for x in await client.trajectories()}
            assert (await traj.remove())["n_steps"] == 6
            with pytest.raises(corral.NotFound):
                await traj.info()
            async with await client.create(**SMALL) as sb:
                assert (await sb.pause())["state"] == "paused"
                assert (await sb.resume())["state"] == "ready"

    asyncio.run(main())
