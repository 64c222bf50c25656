"""The Python SDK against a real corrald: what a user of corral relies on."""

import asyncio
import gzip
import io
import os
import socket
import tarfile
import threading
import time
import uuid

import pytest

import corral
from conftest import SMALL, sized

# The contract every backend keeps: what takes `sandbox` or `backend` here
# runs on each one (conftest.BACKENDS).


@pytest.fixture
def sandbox(any_sandbox):
    return any_sandbox


def test_readme_example(corrald, monkeypatch):
    monkeypatch.setenv("CORRAL_URL", corrald.url)
    client = corral.Client()
    with client.create(backend="container", image="busybox", memory_mb=256) as sb:
        r = sb.exec("echo hi; exit 3")
        assert r.stdout == b"hi\n" and r.exit_code == 3 and r.reason == "exited"
        sb.exec(["cat"], stdin=b"x", timeout=5, env={"A": "1"}, cwd="/tmp", on_stdout=print)
        sb.files.write("/tmp/a.txt", b"data"); assert sb.files.read("/tmp/a.txt") == b"data"
        sh = sb.session(); sh.run("cd /tmp && export X=1"); assert sh.run("pwd; echo $X").stdout == b"/tmp\n1\n"
    assert client.get(sb.id).info["state"] == "destroyed"


def test_default_client_from_environment(corrald, monkeypatch):
    monkeypatch.setenv("CORRAL_URL", corrald.tcp_url)
    monkeypatch.setenv("CORRAL_TOKEN", corrald.token)
    monkeypatch.setattr(corral.client, "_default", None)
    with corral.Sandbox.create(**SMALL) as sb:
        assert sb.exec("echo tcp").stdout == b"tcp\n"
    assert corral.client._default.url == corrald.tcp_url
    # an explicit url wins over the environment
    assert corral.Client(corrald.url).health()["status"] == "ok"


def test_create_maps_keywords_into_the_spec(client, backend):
    want = sized(backend, image="busybox", memory_mb=96, cpus=0.5, pids=64,
                 disk_mb=1024 if backend == "vm" else 32)
    with client.create(**want, ttl_s=600, idle_ttl_s=300, labels={"k": "v"}, env={"E": "e"},
                       cwd="/tmp", network="none") as sb:
        spec = sb.info["spec"]
        assert spec["resources"] == {k: want[k] for k in ("memory_mb", "cpus", "pids", "disk_mb")}
        assert (spec["ttl_s"], spec["idle_ttl_s"], spec["network"]) == (600, 300, {"mode": "none"})
        assert sb.info["labels"] == {"k": "v"} and sb.info["state"] == "ready"
        assert sb.exec("echo $E; pwd").stdout == b"e\n/tmp\n"
    # a microvm's kernel needs 96; a full system is of one shape (conftest.VM_SHAPE)
    mem = {"container": 64, "microvm": 112}.get(backend) or sized(backend)["memory_mb"]
    with client.create(backend=backend, image=sized(backend, image="busybox")["image"],
                       spec={"resources": {"memory_mb": mem, "pids": 32}}, cpus=0.25) as sb:
        assert sb.info["spec"]["resources"]["memory_mb"] == mem
        assert sb.info["spec"]["resources"]["pids"] == 32
        assert sb.info["spec"]["resources"]["cpus"] == 0.25


def test_list_with_label_filter(client, backend):
    tag = uuid.uuid4().hex[:12]
    with client.create(labels={"suite": tag, "role": "a"}, **sized(backend)) as a, \
            client.create(labels={"suite": tag, "role": "b"}, **sized(backend)) as b:
        assert {s.id for s in client.list(labels={"suite": tag})} == {a.id, b.id}
        assert [s.id for s in client.list(labels={"suite": tag, "role": "a"})] == [a.id]
        assert client.list(labels={"suite": tag, "role": "c"}) == []
        assert {a.id, b.id} <= {s.id for s in client.list()}
    states = {s.id: s.info["state"] for s in client.list(labels={"suite": tag})}
    assert states == {a.id: "destroyed", b.id: "destroyed"}


def test_inspect_usage(client, backend):
    disk_mb = 1024 if backend == "vm" else 64  # a full system's template is of its disk's size
    with client.create(**sized(backend, disk_mb=disk_mb)) as sb:
        info = sb.inspect()
        assert info["id"] == sb.id and info["state"] == "ready"
        assert info["ready_at"] and info["expires_at"] and info["ended_at"] is None
        usage = info["usage"]
        assert usage["disk_limit_bytes"] == disk_mb << 20
        assert usage["pids"] >= 1 and usage["oom_kills"] == 0
        sb.exec("dd if=/dev/zero of=/tmp/blob bs=1M count=4 2>/dev/null; sleep 5 & "
                "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
        usage = sb.inspect()["usage"]
        assert usage["disk_bytes"] >= 4 << 20
        assert usage["memory_bytes"] >= 4 << 20  # the writable layer is memory
        assert usage["memory_peak_bytes"] >= usage["memory_bytes"]
        assert usage["pids"] >= 2 and usage["cpu_s"] > 0
        sb.destroy()
        final = sb.info
        assert final["state"] == "destroyed" and final["end_reason"] == "destroyed"
        assert final["ended_at"] and final["usage"]["memory_peak_bytes"] >= 4 << 20
        assert sb.inspect()["usage"] == final["usage"]  # frozen once ended


def test_destroy_is_idempotent(client, corrald, backend):
    sb = client.create(**sized(backend))
    sb.destroy()
    assert sb.info["state"] == "destroyed"
    again = corrald.request("DELETE", f"/v1/sandboxes/{sb.id}")  # the API itself, not the SDK
    assert again.status == 200 and again.json()["state"] == "destroyed"
    sb.destroy()
    with sb:
        pass  # the context manager destroys again: still fine
    assert sb.inspect()["state"] == "destroyed"
    with pytest.raises(corral.Conflict):
        sb.exec("true")


def test_exec_argv_and_shell_string(sandbox):
    r = sandbox.exec(["echo", "a  b", "$HOME", ";", "|"])
    assert r.stdout == b"a  b $HOME ; |\n"  # argv: no shell in between
    r = sandbox.exec("echo $((1 + 2)) | tr 3 x; echo $HOME")
    assert r.stdout == b"x\n/root\n"
    assert sandbox.exec(("printf", "%s-", "t", "u")).stdout == b"t-u-"


def test_stdin(sandbox):
    data = bytes(range(256)) * 64
    assert sandbox.exec(["cat"], stdin=data).stdout == data
    assert sandbox.exec("tr a-z A-Z", stdin="text").stdout == b"TEXT"
    r = sandbox.exec(["cat"], timeout=5)  # no stdin: at EOF at once, not hanging
    assert (r.reason, r.stdout) == ("exited", b"")


def test_env(client, backend):
    with client.create(env={"A": "sandbox", "B": "sandbox"}, **sized(backend)) as sb:
        r = sb.exec("echo $A $B $C; echo $PATH", env={"B": "exec", "C": "exec"})
        a_b_c, path = r.stdout.decode().splitlines()
        assert a_b_c == "sandbox exec exec"
        assert "/bin" in path.split(":")  # the image's PATH is kept
        assert sb.exec(["sh", "-c", "echo $B"]).stdout == b"sandbox\n"


def test_cwd(client, backend):
    with client.create(cwd="/tmp", **sized(backend)) as sb:
        assert sb.exec("pwd").stdout == b"/tmp\n"
        assert sb.exec("pwd", cwd="/etc").stdout == b"/etc\n"
        assert sb.exec(["pwd"], cwd="/").stdout == b"/\n"


def test_user(sandbox):
    assert sandbox.exec("id -u; id -g", user="1000:1000").stdout == b"1000\n1000\n"
    assert sandbox.exec(["id", "-u"], user="1234").stdout == b"1234\n"
    assert sandbox.exec(["id", "-u"]).stdout == b"0\n"
    r = sandbox.exec("touch /root/x", user="1000:1000")
    assert r.exit_code != 0 and b"denied" in r.stderr


def test_exit_codes(sandbox):
    for code in (0, 1, 42, 255):
        r = sandbox.exec(f"exit {code}")
        assert (r.exit_code, r.signal, r.reason) == (code, None, "exited")
    assert sandbox.exec(["false"]).exit_code == 1


def test_signals(sandbox):
    r = sandbox.exec("kill -9 $$")
    assert (r.reason, r.signal, r.signal_name, r.exit_code) == ("signaled", 9, "SIGKILL", None)
    r = sandbox.exec("kill -TERM $$")
    assert (r.reason, r.signal) == ("signaled", 15)


def test_timeout_kills_the_whole_process_tree(sandbox):
    t0 = time.monotonic()
    r = sandbox.exec("sleep 100 & sleep 100", timeout=0.5)
    assert r.reason == "timeout"
    assert 0.5 <= r.duration_s < 5 and time.monotonic() - t0 < 5
    assert b"sleep" not in sandbox.exec("ps -o args").stdout


def test_timeout_kills_what_left_its_session_too(sandbox):
    r = sandbox.exec("setsid sleep 300 >/dev/null 2>&1 </dev/null & sleep 100", timeout=0.5)
    assert r.reason == "timeout"
    ps = sandbox.exec("ps -o args").stdout
    assert b"sleep" not in ps, ps


def test_background_children_outlive_the_command(sandbox):
    t0 = time.monotonic()
    r = sandbox.exec("sleep 60 >/dev/null 2>&1 & echo started")
    assert r.stdout == b"started\n" and time.monotonic() - t0 < 5
    assert b"sleep 60" in sandbox.exec("ps -o args").stdout


def test_output_truncation(sandbox):
    r = sandbox.exec("head -c 100000 /dev/zero | tr '\\0' a; echo err >&2", max_output_bytes=1000)
    assert r.stdout == b"a" * 1000
    assert r.stdout_truncated and r.truncated
    assert r.stderr == b"err\n" and not r.stderr_truncated
    r = sandbox.exec("echo short", max_output_bytes=1000)
    assert not r.truncated and not r.stdout_truncated


def test_binary_output_is_exact(sandbox):
    data = bytes(range(256)) * 16 + b"\xff\xfe\x00"
    sandbox.files.write("/tmp/bin", data)
    r = sandbox.exec("cat /tmp/bin; echo text >&2")
    assert r.stdout == data and r.stderr == b"text\n"
    r = sandbox.exec("echo text; cat /tmp/bin >&2")
    assert r.stdout == b"text\n" and r.stderr == data
    assert sandbox.exec("printf '\\303\\251t\\303\\251'").stdout == "été".encode()


def test_streaming_callbacks(sandbox):
    out, err = [], []
    r = sandbox.exec("for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done; exit 4",
                     on_stdout=out.append, on_stderr=err.append)
    assert all(isinstance(c, bytes) for c in out + err)
    assert b"".join(out) == b"out1\nout2\nout3\n" and len(out) >= 2
    assert b"".join(err) == b"err1\nerr2\nerr3\n"
    assert (r.stdout, r.stderr, r.exit_code, r.reason) == (
        b"out1\nout2\nout3\n", b"err1\nerr2\nerr3\n", 4, "exited")

    chunks = []
    r = sandbox.exec("printf '\\377\\000'; sleep 0.05; echo text", on_stdout=chunks.append)
    assert b"".join(chunks) == b"\xff\x00text\n" == r.stdout


def test_streaming_delivers_output_as_it_comes(sandbox):
    arrivals = []
    t0 = time.monotonic()
    r = sandbox.exec("echo first; sleep 0.6; echo second",
                     on_stdout=lambda c: arrivals.append((time.monotonic() - t0, c)))
    total = time.monotonic() - t0
    assert r.stdout == b"first\nsecond\n"
    assert arrivals[0][1] == b"first\n" and arrivals[0][0] < total - 0.4


def test_streaming_callback_error_reaches_the_caller(sandbox):
    def boom(chunk):
        raise ValueError("callback failed")

    with pytest.raises(ValueError, match="callback failed"):
        sandbox.exec("echo x; sleep 10", on_stdout=boom, timeout=20)
    assert sandbox.exec("echo still usable").stdout == b"still usable\n"


def test_files_round_trip(sandbox):
    sandbox.files.write("/tmp/t.txt", "text é")
    assert sandbox.files.read("/tmp/t.txt") == "text é".encode()
    binary = bytes(range(256)) * 4
    sandbox.files.write("/tmp/deep/er/b.bin", binary)  # parents are created
    assert sandbox.files.read("/tmp/deep/er/b.bin") == binary
    big = os.urandom(5 << 20)
    assert sandbox.files.write("/tmp/big", big) == {"path": "/tmp/big", "bytes": 5 << 20}
    assert sandbox.files.read("/tmp/big") == big
    assert sandbox.exec("wc -c < /tmp/big").stdout.strip() == str(5 << 20).encode()
    sandbox.files.write("/tmp/empty", b"")
    assert sandbox.files.read("/tmp/empty") == b""
    sandbox.files.write("/tmp/run.sh", b"#!/bin/sh\necho ran\n", mode=0o750, user="1000:1000")
    assert sandbox.exec("stat -c '%a %u %g' /tmp/run.sh; /tmp/run.sh").stdout == \
        b"750 1000 1000\nran\n"


def _local_tree(root):
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "sub" / "b.bin").write_bytes(bytes(range(256)))
    (root / "sub" / "deeper" / "c").write_bytes(b"c" * 100000)
    (root / "link").symlink_to("sub/b.bin")


def test_put_dir_get_dir_round_trip(sandbox, tmp_path):
    local = tmp_path / "tree"
    _local_tree(local)
    sandbox.files.put_dir(str(local), "/work/tree")
    r = sandbox.exec("cat a.txt; readlink link; wc -c < sub/deeper/c; ls -d empty",
                     cwd="/work/tree")
    assert r.stdout == b"alpha\nsub/b.bin\n100000\nempty\n"

    with tarfile.open(fileobj=io.BytesIO(sandbox.files.get_dir("/work/tree"))) as tar:
        members = {m.name.lstrip("./").rstrip("/"): m for m in tar.getmembers()}
        assert {"a.txt", "sub", "sub/b.bin", "sub/deeper", "sub/deeper/c", "empty",
                "link"} <= set(members)
        assert tar.extractfile(members["sub/b.bin"]).read() == bytes(range(256))
        assert tar.extractfile(members["a.txt"]).read() == b"alpha\n"
        assert members["link"].issym() and members["link"].linkname == "sub/b.bin"
        assert members["empty"].isdir()

    buf = io.BytesIO()  # a tar given as bytes, compressed
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("from-tar.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"tar"))
    assert gzip.decompress(buf.getvalue())  # it is gzip indeed
    sandbox.files.put_dir(buf.getvalue(), "/work/t2")
    assert sandbox.files.read("/work/t2/from-tar.txt") == b"tar"
    with pytest.raises(corral.InvalidSpec):
        sandbox.files.get_dir("/work/t2/from-tar.txt")


def test_session_keeps_cwd_and_env(sandbox):
    with sandbox.session() as sh:
        assert sh.alive
        sh.run("cd /tmp && export X=1 && Y=2")
        r = sh.run("pwd; echo $X $Y")
        assert r.stdout == b"/tmp\n1 2\n" and r.session_alive
        sh.run("cd /etc; unset X")
        assert sh.run("pwd; echo \"[$X]\"").stdout == b"/etc\n[]\n"
    with sandbox.session(env={"S": "s"}, cwd="/var", user="1000:1000") as sh:
        assert sh.run("echo $S; pwd; id -u").stdout == b"s\n/var\n1000\n"


def test_session_survives_syntax_error(sandbox):
    sh = sandbox.session()
    sh.run("export KEEP=yes")
    r = sh.run("if then fi")
    assert r.exit_code == 2 and r.stderr and r.session_alive and sh.alive
    assert sh.run("echo $KEEP").stdout == b"yes\n"
    sh.close()


def test_session_timeout_keeps_the_session(sandbox):
    sh = sandbox.session()
    sh.run("export KEEP=yes; cd /tmp")
    r = sh.run("sleep 100 & sleep 100", timeout=0.5)
    assert r.reason == "timeout" and r.session_alive
    assert sh.run("echo $KEEP; pwd").stdout == b"yes\n/tmp\n"
    assert b"sleep" not in sandbox.exec("ps -o args").stdout
    sh.close()


def test_session_exit_ends_it(sandbox):
    sh = sandbox.session()
    r = sh.run("echo bye; exit 3")
    assert r.session_alive is False and sh.alive is False and r.stdout == b"bye\n"
    with pytest.raises(corral.Conflict):
        sh.run("echo again")
    sh.close()
    sh.close()  # closing an ended session is fine


def test_session_streaming(sandbox):
    with sandbox.session() as sh:
        chunks = []
        r = sh.run("echo a; sleep 0.05; echo b", on_stdout=chunks.append)
        assert b"".join(chunks) == b"a\nb\n" == r.stdout and r.session_alive


def test_session_busy_is_a_conflict(corrald, sandbox):
    with sandbox.session() as sh:
        t = threading.Thread(target=sh.run, args=("sleep 0.5",))
        t.start()
        try:
            deadline = time.monotonic() + 5
            while not corrald.request("GET", f"/v1/sandboxes/{sandbox.id}/sessions").json()[
                    "sessions"][0]["busy"] and time.monotonic() < deadline:
                time.sleep(0.01)
            with pytest.raises(corral.Conflict):
                sh.run("echo no")
        finally:
            t.join()
        assert sh.run("echo yes").stdout == b"yes\n"


def test_ttl_and_idle_ttl(client, backend):
    a = client.create(ttl_s=1, **sized(backend))
    b = client.create(idle_ttl_s=1, **sized(backend))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if a.inspect()["state"] == b.inspect()["state"] == "destroyed":
            break
        time.sleep(0.1)
    assert (a.info["state"], a.info["end_reason"]) == ("destroyed", "ttl")
    assert (b.info["state"], b.info["end_reason"]) == ("destroyed", "idle_ttl")


def test_client_timeout(tmp_path):
    path = tmp_path / "silent.sock"  # a server that accepts and never answers
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen()
    try:
        c = corral.Client(f"unix://{path}", timeout=0.3)
        t0 = time.monotonic()
        with pytest.raises(corral.Timeout) as e:
            c.health()
        assert time.monotonic() - t0 < 3 and e.value.code == "timeout"
    finally:
        srv.close()


def test_exec_waits_past_the_client_timeout(corrald, sandbox):
    with corrald.client(timeout=0.2) as impatient:
        r = impatient.get(sandbox.id).exec("sleep 0.5; echo done", timeout=5)
        assert r.stdout == b"done\n"


def test_unreachable_daemon(tmp_path):
    with pytest.raises(corral.Unavailable):
        corral.Client(f"unix://{tmp_path}/nothing.sock").health()


def test_client_survives_a_daemon_restart(corrald_factory):
    d = corrald_factory()
    c = d.client()
    assert c.health()["status"] == "ok"  # leaves a kept-alive connection
    assert d.stop() == 0
    d.start()
    assert c.health()["status"] == "ok"  # the stale connection is replaced

    async def main():
        async with d.async_client() as ac:
            await ac.health()
            assert d.stop() == 0
            d.start()
            return await ac.health()

    assert asyncio.run(main())["status"] == "ok"


def test_oom_is_a_result_and_harms_no_other_sandbox(corrald_factory):
    d = corrald_factory()  # its own daemon: an OOM here must not disturb other tests
    with d.client() as c, c.create(memory_mb=128, cpus=0.25) as bystander:
        with c.create(memory_mb=32, cpus=0.25) as hog:
            r = hog.exec(["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"])
            assert (r.reason, r.signal) == ("oom", 9)
            assert hog.inspect()["usage"]["oom_kills"] >= 1
            assert hog.exec("echo recovered").stdout == b"recovered\n"
        # Filling the in-memory writable layer: killing the writer frees nothing.
        with c.create(memory_mb=32, cpus=0.25) as hog:
            hog.exec("dd if=/dev/zero of=/tmp/fill bs=1M count=100")
            try:
                usable = hog.exec("true").exit_code == 0
            except corral.Error:
                usable = False
            facts = {"hog usable, or marked failed": usable or hog.inspect()["state"] == "failed"}
        facts["bystander still ready"] = bystander.inspect()["state"] == "ready"
        try:
            facts["bystander runs commands"] = bystander.exec("echo ok").stdout == b"ok\n"
        except corral.Error as e:
            facts["bystander runs commands"] = repr(e)
        assert facts == dict.fromkeys(facts, True)


def test_files_written_count_against_memory(sandbox):
    """docs/api.md: memory_mb is the memory limit, writable layer included."""
    before = sandbox.inspect()["usage"]["memory_bytes"]
    sandbox.files.write("/tmp/blob", b"\1" * (8 << 20))
    usage = sandbox.inspect()["usage"]
    assert usage["disk_bytes"] >= 8 << 20
    # the 8 MiB is charged to the sandbox (its own page cache may shrink meanwhile)
    assert usage["memory_bytes"] >= 8 << 20, (before, usage)


def test_threads_share_a_client(client, sandbox):
    results = {}

    def work(i):
        results[i] = sandbox.exec(f"echo {i}").stdout

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: f"{i}\n".encode() for i in range(8)}


# ---- asyncio ----

def test_async_fifty_sandboxes_from_one_loop(corrald):
    n, tag = 50, uuid.uuid4().hex[:12]

    async def one(client, barrier, i):
        async with await client.create(memory_mb=32, cpus=0.05,
                                       labels={"batch": tag}) as sb:
            await barrier.wait()  # all n exist at once
            t0 = time.monotonic()
            r = await sb.exec(f"sleep 0.5; echo {i}; exit {i % 7}")
            assert (r.stdout, r.exit_code, r.reason) == (f"{i}\n".encode(), i % 7, "exited")
            # n execs of 0.5 s each in flight together, not one after another
            assert time.monotonic() - t0 < 10
            await sb.files.write(f"/tmp/{i}", str(i) * 3)
            assert await sb.files.read(f"/tmp/{i}") == (str(i) * 3).encode()
            return sb.id

    async def main():
        barrier = asyncio.Barrier(n)
        async with corrald.async_client() as client:
            ids = await asyncio.wait_for(
                asyncio.gather(*(one(client, barrier, i) for i in range(n))), 120)
            listed = await client.list(labels={"batch": tag})
            return ids, listed

    ids, listed = asyncio.run(main())
    assert len(set(ids)) == n
    assert {s.id: s.info["state"] for s in listed} == {i: "destroyed" for i in ids}


def test_async_streaming(corrald):
    async def main():
        async with corrald.async_client() as client:
            async with await client.create(**SMALL) as sb:
                out, err = [], []

                async def on_out(chunk):
                    await asyncio.sleep(0)
                    out.append(chunk)

                r = await sb.exec("for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.05; "
                                  "done; printf '\\377'", on_stdout=on_out, on_stderr=err.append)
                return out, err, r

    out, err, r = asyncio.run(main())
    assert b"".join(out) == b"o1\no2\no3\n\xff" == r.stdout and len(out) >= 2
    assert b"".join(err) == b"e1\ne2\ne3\n" == r.stderr
    assert (r.exit_code, r.reason) == (0, "exited")


def test_async_sandbox_api(corrald, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"file")

    async def main():
        async with corrald.async_client() as client:
            assert (await client.health())["status"] == "ok"
            assert "busybox:latest" in [i["name"] for i in await client.images()]
            assert (await client.host())["capacity"]["max_sandboxes"] >= 1
            sb = await client.create(labels={"async": "yes"}, **SMALL)
            async with sb:
                assert (await client.get(sb.id)).id == sb.id
                assert (await sb.inspect())["state"] == "ready"
                r = await sb.exec(["cat"], stdin=b"\x00in", env={"A": "1"}, cwd="/tmp",
                                  user="1000:1000", timeout=5)
                assert r.stdout == b"\x00in"
                big = os.urandom(5 << 20)
                await sb.files.write("/tmp/big", big)
                assert await sb.files.read("/tmp/big") == big
                await sb.files.put_dir(str(tmp_path / "d"), "/tmp/d")
                with tarfile.open(fileobj=io.BytesIO(await sb.files.get_dir("/tmp/d"))) as tar:
                    assert tar.extractfile(
                        [m for m in tar.getmembers() if m.name.endswith("f")][0]).read() == b"file"
                with pytest.raises(corral.NotFound):
                    await sb.files.read("/tmp/missing")
                async with await sb.session() as sh:
                    await sh.run("cd /tmp; export X=2")
                    assert (await sh.run("pwd; echo $X")).stdout == b"/tmp\n2\n"
                    r = await sh.run("sleep 10", timeout=0.3)
                    assert r.reason == "timeout" and sh.alive
                    await sh.run("exit")
                    assert not sh.alive
                r = await sb.exec("sleep 10", timeout=0.3)
                assert r.reason == "timeout"
            await sb.destroy()  # again: idempotent
            assert sb.info["state"] == "destroyed"
            with pytest.raises(corral.NotFound):
                await client.get("sb-does-not-exist")

    asyncio.run(main())


def test_async_client_timeout(tmp_path):
    path = tmp_path / "silent.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen()

    async def main():
        async with corral.AsyncClient(f"unix://{path}", timeout=0.3) as c:
            await c.health()

    try:
        with pytest.raises(corral.Timeout):
            asyncio.run(main())
    finally:
        srv.close()


def test_session_timeout_in_the_shell_itself_ends_the_session(sandbox):
    """A timed-out command the shell runs itself (a builtin loop) survives
    the kill of what it started; the shell goes after a grace, and with it
    the session, rather than the session staying busy for ever."""
    sh = sandbox.session()
    t0 = time.monotonic()
    r = sh.run("while :; do :; done", timeout=0.5)
    assert r.reason == "timeout" and r.session_alive is False and not sh.alive
    assert time.monotonic() - t0 < 10
    with pytest.raises(corral.Conflict):
        sh.run("echo again")
    sh.close()
