"""The filesystem API (docs/api.md, Filesystem) on every backend: stat,
list to a depth, mkdir, move, remove, ranged reads and watch events in
order, without a command run for each; paths that try to leave the
sandbox through '..' or symlinks; the refusals that name what is wrong;
a watch storm that reports its overflow; and the steps a trajectory
records."""

import asyncio
import threading
import time

import pytest

import corral
from conftest import BACKENDS, BUILD, MICROVM_READY, SMALL, VM_READY, sized, wait_for


def fs_sandbox(client, backend):
    if backend == "function":
        return client.create(backend="function", runtime="shell", **SMALL)
    return client.create(**sized(backend, image="debian"))


@pytest.fixture(params=[*BACKENDS, "function"])
def fsb(request, client):
    if request.param in ("microvm", "vm") and not MICROVM_READY:
        pytest.skip("no microvm guest: `make microvm-guest` builds it")
    if request.param == "vm" and not VM_READY:
        pytest.skip("no debian-vm image: `make images` builds it")
    with fs_sandbox(client, request.param) as sb:
        # a function's files API is rooted at its scratch dir, its commands' cwd
        fn = request.param == "function"
        sb.root, sb.sh_root = ("", ".") if fn else ("/tmp", "/tmp")
        yield sb


def test_operations_on_each_backend(fsb):
    f, root = fsb.files, fsb.root
    d = f.make_dir(f"{root}/w/a/b", parents=True)
    assert d["type"] == "dir" and d["path"] == f"{root}/w/a/b" and d["mode"] == "0755"
    f.write(f"{root}/w/a/data", b"0123456789")
    st = f.stat(f"{root}/w/a/data")
    assert (st["type"], st["size"], st["name"]) == ("file", 10, "data") and st["mtime"].endswith("Z")
    assert f.read(f"{root}/w/a/data", offset=2, length=3) == b"234"
    assert f.read(f"{root}/w/a/data", offset=7) == b"789"
    assert [e["path"] for e in f.list(f"{root}/w")] == [f"{root}/w/a"]
    deep = sorted(e["path"] for e in f.list(f"{root}/w", depth=3))
    assert deep == [f"{root}/w/a", f"{root}/w/a/b", f"{root}/w/a/data"]
    moved = f.move(f"{root}/w/a/data", f"{root}/w/b.txt")
    assert moved["path"] == f"{root}/w/b.txt" and not f.exists(f"{root}/w/a/data")
    f.write(f"{root}/w/c.txt", b"c")
    with pytest.raises(corral.InvalidSpec, match="exists \\(overwrite: true replaces it\\)"):
        f.move(f"{root}/w/c.txt", f"{root}/w/b.txt")
    f.move(f"{root}/w/c.txt", f"{root}/w/b.txt", overwrite=True)
    assert f.read(f"{root}/w/b.txt") == b"c"
    with pytest.raises(corral.InvalidSpec, match="not empty \\(recursive: true removes it all\\)"):
        f.remove(f"{root}/w")
    assert f.remove(f"{root}/w", recursive=True) == 4
    assert not f.exists(f"{root}/w")
    with pytest.raises(corral.NotFound, match="No such file"):
        f.stat(f"{root}/w")


def test_watch_events_come_in_order_on_each_backend(fsb):
    f, root = fsb.files, fsb.root
    f.make_dir(f"{root}/watched")
    events, ready = [], threading.Event()

    def on_event(ev):
        if ev["type"] == "ready":
            ready.set()
            return True
        events.append((ev["type"], ev["path"], ev.get("from")))
        return len(events) < 6

    t = threading.Thread(target=f.watch, args=(f"{root}/watched", on_event),
                         kwargs={"recursive": True, "timeout": 60})
    t.start()
    assert ready.wait(30), "the watch never got ready"
    w = f"{root}/watched"
    # A directory made in a recursive watch is watched once its create is
    # seen: wait for that before making things in it.
    fsb.exec(["mkdir", f"{fsb.sh_root}/watched/sub"])
    wait_for(lambda: events, 30, "the create of sub")
    fsb.exec(["sh", "-c", f"cd {fsb.sh_root}/watched && echo x > sub/f && mv sub/f g && "
              "chmod 600 g && rm g"])
    t.join(30)
    assert not t.is_alive()
    assert events == [("create", f"{w}/sub", None), ("create", f"{w}/sub/f", None),
                      ("write", f"{w}/sub/f", None), ("rename", f"{w}/g", f"{w}/sub/f"),
                      ("chmod", f"{w}/g", None), ("remove", f"{w}/g", None)]


def test_paths_cannot_leave_the_sandbox(client):
    # A function sandbox's operations run in corrald itself, beneath its
    # scratch dir: a symlink to / or to the host's files resolves inside.
    with fs_sandbox(client, "function") as sb:
        sb.exec("ln -s / up; ln -s /etc/passwd pw; ln -s ../../../.. dots; mkdir keep; "
                "echo precious > keep/file; mkdir victim; ln -s ../keep victim/link")
        assert sb.files.stat("/pw")["symlink_target"] == "/etc/passwd"  # the link itself
        with pytest.raises(corral.NotFound):
            sb.files.list("/pw")  # followed inside: no /etc/passwd in the sandbox
        inside = sorted(e["name"] for e in sb.files.list("/up"))
        assert inside == sorted(e["name"] for e in sb.files.list("/")) and "keep" in inside
        assert sorted(e["name"] for e in sb.files.list("/dots")) == inside
        # A recursive remove never goes through a symlink.
        sb.files.remove("/victim", recursive=True)
        assert sb.files.read("/keep/file") == b"precious\n"
    with client.create(image="debian", **SMALL) as sb:
        sb.exec("ln -s /proc/1/root/etc /tmp/p1; ln -s ../../../../../.. /tmp/dots")
        names = {e["name"] for e in sb.files.list("/tmp/dots")}
        assert names == {e["name"] for e in sb.files.list("/")}
        with pytest.raises((corral.NotFound, corral.InvalidSpec, corral.Forbidden)):
            sb.files.list("/tmp/p1")  # a magic link is not followed


def test_bad_requests_name_what_is_wrong(corrald, client):
    with client.create(image="debian", **SMALL) as sb:
        base = f"/v1/sandboxes/{sb.id}/fs"
        cases = [
            ("GET", f"{base}/stat?path=/etc/../root", None, 400, "must not contain '..'"),
            ("GET", f"{base}/stat?path=etc", None, 400, "must be absolute"),
            ("GET", f"{base}/stat", None, 400, "path is required"),
            ("GET", f"{base}/list?path=/&depth=0", None, 400, "depth must be 1-64"),
            ("GET", f"{base}/stat?path=/&depth=2", None, 400, "depth must be 1-64 (a list's)"),
            ("GET", f"{base}/list?path=/etc/hostname", None, 400, "Not a directory"),
            ("POST", f"{base}/mkdir", {"path": "/x", "mode": 99999}, 400, "mode must be"),
            ("POST", f"{base}/mkdir", {"path": "/x", "color": 1}, 400, "unknown field 'color'"),
            ("POST", f"{base}/move", {"from": "/etc/hostname"}, 400, "to is required"),
            ("POST", f"{base}/remove", {"path": "/"}, 400, "/ cannot be removed"),
            ("POST", f"{base}/remove", {"path": "/tmp", "recursive": "yes"}, 400,
             "recursive must be true or false"),
            ("POST", f"{base}/mkdir", b"{", 400, "not valid JSON"),
            ("GET", f"{base}/watch?path=/nope", None, 404, "No such file"),
            ("GET", f"{base}/watch?path=/tmp&recursive=maybe", None, 400,
             "recursive must be true or false"),
            ("GET", f"{base}/stat?path=/x&user=nobody!", None, 400, "user"),
        ]
        for method, target, body, status, msg in cases:
            r = corrald.request(method, target, body)
            assert r.status == status and msg in r.json()["error"]["message"], \
                (method, target, r.status, r.body[:300])
        r = corrald.request("GET", f"/v1/sandboxes/{sb.id}/files?path=/etc/hostname",
                            headers={"Range": "bytes=999-"})
        assert r.status == 400 and "starts past the end" in r.json()["error"]["message"]
        r = corrald.request("GET", f"/v1/sandboxes/{sb.id}/files?path=/etc/hostname",
                            headers={"Range": "bytes=0-1,3-4"})
        assert r.status == 400 and "one range" in r.json()["error"]["message"]
        # a user who may not: 403, and nothing made
        with pytest.raises(corral.Forbidden):
            sb.files.make_dir("/root/not-yours", user="1000")
        assert not sb.files.exists("/root/not-yours")


def test_a_watch_storm_reports_its_overflow_and_corrald_stays_bounded(corrald, client):
    def rss_kb():
        return int([x for x in open(f"/proc/{corrald.pid}/status")
                    if x.startswith("VmRSS")][0].split()[1])

    with client.create(image="debian", memory_mb=256) as sb:
        before = rss_kb()
        sb.files.make_dir("/storm")
        seen = {"overflow": 0, "events": 0}
        ready = threading.Event()

        def on_event(ev):
            if ev["type"] == "ready":
                ready.set()
                time.sleep(4)  # a slow reader: corrald holds, the kernel's queue fills
                return True
            seen["overflow" if ev["type"] == "overflow" else "events"] += 1
            return seen["overflow"] == 0

        t = threading.Thread(target=sb.files.watch, args=("/storm", on_event),
                             kwargs={"timeout": 120})
        t.start()
        assert ready.wait(30)
        r = sb.exec("cd /storm && i=0; while [ $i -lt 30000 ]; do : > f$i; i=$((i+1)); done",
                    timeout=300)
        assert r.exit_code == 0
        t.join(120)
        assert not t.is_alive() and seen["overflow"] == 1, seen
        # 30,000 events of ~60 bytes went by; corrald held at most its bound
        # (the sanitizer build keeps freed memory in quarantine: not there)
        grown = rss_kb() - before
        assert grown < 32 * 1024 or BUILD.name == "build-san", f"corrald grew by {grown} kB"



def test_trajectory_sandboxes_record_filesystem_steps(client):
    tid = f"t-fs-{time.monotonic_ns()}"
    with client.create(image="debian", trajectory=tid, **SMALL) as sb:
        sb.files.make_dir("/tmp/rec")
        assert sb.files.stat("/tmp/rec")["type"] == "dir"
        sb.files.list("/tmp")
    kinds = [s["kind"] for s in client.trajectory(tid).steps()]
    assert kinds[-3:] == ["fs_mkdir", "fs_stat", "fs_list"], kinds
    client.trajectory(tid).remove()


def test_the_asyncio_client_has_the_filesystem_api(corrald, client):
    with client.create(image="debian", **SMALL) as sb:
        async def main():
            async with corrald.async_client() as c:
                a = await c.get(sb.id)
                await a.files.make_dir("/tmp/aio/x")
                await a.files.write("/tmp/aio/x/f", b"abcdef")
                got = await a.files.read("/tmp/aio/x/f", offset=1, length=2)
                names = [e["name"] for e in await a.files.list("/tmp/aio", depth=2)]
                moved = await a.files.move("/tmp/aio/x/f", "/tmp/aio/g")
                n = await a.files.remove("/tmp/aio", recursive=True)
                return got, names, moved["path"], n, await a.files.exists("/tmp/aio")

        got, names, moved, n, exists = asyncio.run(main())
        assert got == b"bc" and sorted(names) == ["f", "x"] and moved == "/tmp/aio/g"
        assert n == 3 and not exists
