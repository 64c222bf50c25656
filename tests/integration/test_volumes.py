"""Named volumes (docs/api.md, Volumes): made, listed and removed through
the SDK (sync and asyncio) and the CLI; mounted at create, read-write by
one sandbox at a time or read-only by many (409 otherwise); files and
their owners kept across sandboxes of different uid ranges; a size the
kernel enforces; paths and names refused with errors that name them;
nothing left of a failed create; and a volume's files intact and its file
system consistent after corrald is killed with -9 and started again.
MicroVM guests mount volumes with their own kernel: read-write by one
guest or read-only by many, never while a sandbox on the host has it,
written back at destroy, replayed whole after a guest died mid-write."""

import asyncio
import glob
import json
import os
import subprocess
import time

import pytest

import corral
from conftest import BUILD, MICROVM, MICROVM_READY, SMALL, need_debian, wait_for

pytestmark = need_debian


need_microvm = pytest.mark.skipif(
    not MICROVM_READY, reason=f"no microvm guest in {MICROVM}: `make microvm-guest` builds it")


def holders_of(path):
    """The processes with `path` open."""
    pids = []
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            if os.readlink(fd) == str(path):
                pids.append(int(fd.split("/")[2]))
        except OSError:
            pass
    return pids


def loops_backed_by(path):
    """The loop devices whose backing file is `path`."""
    found = []
    for f in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            if open(f).read().strip() == str(path):
                found.append(f.split("/")[3])
        except OSError:
            pass
    return found


class Ran:
    """An exec's result with its output as text."""

    def __init__(self, r):
        self.exit_code = r.exit_code
        self.stdout = r.stdout.decode()
        self.stderr = r.stderr.decode()


def sh(sb, cmd, background=False):
    if background:
        return sb.exec(["sh", "-c", cmd], background=True)
    return Ran(sb.exec(["sh", "-c", cmd]))


@pytest.fixture
def volume(client, request):
    name = "v-" + request.node.name.replace("_", "-")[-40:].strip("-").lower()
    info = client.create_volume(name, size_mb=32, labels={"test": "volumes"})
    yield info
    try:
        client.remove_volume(name)
    except corral.NotFound:
        pass


def test_a_volume_outlives_its_sandboxes_and_keeps_owners(client, corrald, volume):
    name = volume["name"]
    assert volume["size_mb"] == 32 and volume["mounts"] == [] and volume["labels"] == {
        "test": "volumes"}
    with client.create(image="debian", volumes=[{"name": name, "path": "/data"}], **SMALL) as a:
        r = sh(a, "echo kept > /data/f && mkdir /data/d && chown 1000:1000 /data/d && "
                  "touch /data/d/g && chown 1000:1000 /data/d/g && df -k /data | tail -1")
        assert r.exit_code == 0, r.stderr
        assert client.volume(name)["mounts"] == [{"sandbox": a.id, "path": "/data",
                                                  "read_only": False}]
    assert client.volume(name)["mounts"] == []
    # another sandbox, another slot (another host uid range): the same files and owners
    with client.create(image="debian", volumes=[{"name": name, "path": "/srv/in"}],
                       **SMALL) as b:
        r = sh(b, "cat /srv/in/f; stat -c '%u:%g %n' /srv/in/d /srv/in/d/g; "
                  "su -s /bin/sh nobody -c true; id -u")
        assert r.stdout.splitlines()[:3] == ["kept", "1000:1000 /srv/in/d", "1000:1000 /srv/in/d/g"]
    # the file system is the volume's: its size, not the sandbox's disk
    assert client.volume(name)["used_bytes"] > 0


def test_read_only_by_many_read_write_by_one(client, volume):
    name = volume["name"]
    rw = {"name": name, "path": "/data"}
    ro = {"name": name, "path": "/data", "read_only": True}
    with client.create(image="debian", volumes=[rw], **SMALL) as writer:
        assert sh(writer, "echo one > /data/f").exit_code == 0
        for second in (rw, ro):
            with pytest.raises(corral.Conflict, match=f"mounted read-write by sandbox {writer.id}"):
                client.create(image="debian", volumes=[second], **SMALL)
        with pytest.raises(corral.Conflict, match=f"mounted by sandbox {writer.id}"):
            client.remove_volume(name)
        # a fork mounts what its parent's spec names: the writer's volume is taken
        with pytest.raises(corral.Conflict, match=f"mounted read-write by sandbox {writer.id}"):
            writer.fork()
    readers = [client.create(image="debian", volumes=[ro], **SMALL) for _ in range(2)]
    try:
        for r in readers:
            assert sh(r, "cat /data/f").stdout == "one\n"
            w = sh(r, "touch /data/new")
            assert w.exit_code != 0 and "Read-only file system" in w.stderr
        with pytest.raises(corral.Conflict, match="mounted read-only by sandbox"):
            client.create(image="debian", volumes=[rw], **SMALL)
        mounts = client.volume(name)["mounts"]
        assert sorted(m["sandbox"] for m in mounts) == sorted(r.id for r in readers)
    finally:
        for r in readers:
            r.destroy()
    # free again: a writer is welcome
    with client.create(image="debian", volumes=[rw], **SMALL) as again:
        assert sh(again, "cat /data/f").stdout == "one\n"


def test_a_function_sandbox_shares_a_volume_with_containers(client, volume):
    name = volume["name"]
    with client.create(image="debian", volumes=[{"name": name, "path": "/data"}], **SMALL) as c:
        assert sh(c, "echo from-container > /data/c").exit_code == 0
    with client.create(backend="function", runtime="python",
                       volumes=[{"name": name, "path": "/data"}], **SMALL) as f:
        r = f.exec("import os\n"
                   "print(open('/data/c').read().strip())\n"
                   "open('/data/f', 'w').write('from-function')\n"
                   "print(os.stat('/data/f').st_uid == os.getuid())")
        assert r.stdout.decode().split() == ["from-container", "True"], r.stderr
    with client.create(backend="function", volumes=[{"name": name, "path": "/scratch/ro",
                                                     "read_only": True}], **SMALL) as f:
        r = sh(f, "cat /scratch/ro/f; touch /scratch/ro/x")
        assert r.stdout == "from-function" and "Read-only file system" in r.stderr
    # what the function wrote is the sandbox root's in a container (owner 0 on disk)
    with client.create(image="debian", volumes=[{"name": name, "path": "/data"}], **SMALL) as c:
        assert sh(c, "stat -c %u:%g /data/f").stdout == "0:0\n"


def test_the_kernel_enforces_the_size(client, volume):
    with client.create(image="debian", volumes=[{"name": volume["name"], "path": "/v"}],
                       memory_mb=256) as sb:
        r = sh(sb, "dd if=/dev/zero of=/v/big bs=1M count=64")
        assert r.exit_code != 0 and "No space left on device" in r.stderr
        # the sandbox's own disk is untouched by it
        assert sh(sb, "rm /v/big && dd if=/dev/zero of=/tmp/x bs=1M count=40").exit_code == 0


def test_bad_names_paths_and_backends_are_refused(client, corrald, volume):
    name = volume["name"]
    for vols, msg in (
            ([{"name": "a/b", "path": "/x"}], "volumes[0].name 'a/b' is not a volume name"),
            ([{"name": name, "path": "/proc"}], "may not be mounted over or under /proc"),
            ([{"name": name, "path": "/proc/sys/x"}], "over or under /proc"),
            ([{"name": name, "path": "/sys"}], "over or under /sys"),
            ([{"name": name, "path": "/dev/shm"}], "over or under /dev"),
            ([{"name": name, "path": "/"}], "may not hide the sandbox's root"),
            ([{"name": name, "path": "/a/../proc"}], "'..'"),
            ([{"name": name, "path": "data"}], "volumes[0].path 'data' is a relative path"),
            ([{"name": name}], "volumes[0].path is required"),
            ([{"name": name, "path": "/a", "read_only": "yes"}], "read_only must be true or false"),
            ([{"name": name, "path": "/a"}, {"name": name, "path": "/b"}], "mounted twice"),
            ([{"name": name, "path": "/a", "x": 1}], "unknown field"),
            ([{"name": "nope", "path": "/a"}], "no volume 'nope'"),
    ):
        r = corrald.request("POST", "/v1/sandboxes", {"image": "debian", "volumes": vols})
        assert r.status in (400, 404) and msg in r.json()["error"]["message"], (vols, r.json())
    r = corrald.request("POST", "/v1/sandboxes", {"backend": "function",
                                                  "volumes": [{"name": name, "path": "/usr/d"}]})
    assert r.status == 400 and "system dirs are the host's" in r.json()["error"]["message"]
    for body, status, msg in (({"name": "UPPER"}, 400, "is not a volume name"),
                              ({"name": "a/b"}, 400, "is not a volume name"),
                              ({"name": "x", "size_mb": 1}, 400, "size_mb"),
                              ({"name": "x", "size_mb": 1 << 40}, 400, "size_mb"),
                              ({"name": name}, 409, f"volume '{name}' exists"),
                              ({"size_mb": 16}, 400, "name is required")):
        r = corrald.request("POST", "/v1/volumes", body)
        assert r.status == status and msg in r.json()["error"]["message"], (body, r.json())
    assert corrald.request("GET", "/v1/volumes/nope").status == 404
    assert corrald.request("DELETE", "/v1/volumes/nope").status == 404
    # a refused create took nothing: the volume is free
    assert client.volume(name)["mounts"] == []


def test_a_mount_that_fails_in_the_sandbox_leaves_nothing(client, volume):
    # /etc/hostname is a file in every sandbox: a volume cannot go over it
    with pytest.raises(corral.Error, match="mount a volume"):
        client.create(image="debian", volumes=[{"name": volume["name"], "path": "/etc/hostname"}],
                      **SMALL)
    assert client.volume(volume["name"])["mounts"] == []
    with client.create(image="debian", volumes=[{"name": volume["name"], "path": "/ok"}],
                       **SMALL) as sb:
        assert sh(sb, "test -d /ok").exit_code == 0


def test_the_cli_makes_lists_mounts_and_removes(corrald):
    env = dict(os.environ, CORRAL_URL=corrald.url)

    def cli(*args, check=True):
        r = subprocess.run([str(BUILD / "corral"), *args], env=env, capture_output=True,
                           text=True, timeout=60)
        assert not check or r.returncode == 0, r.stderr
        return r

    assert cli("volume", "create", "cli-vol", "--size-mb", "16", "--label", "k=v").stdout == \
        "cli-vol\n"
    listed = json.loads(cli("volume", "ls", "--label", "k=v", "--json").stdout)["volumes"]
    assert [v["name"] for v in listed] == ["cli-vol"]
    assert json.loads(cli("volume", "ls", "--label", "k=other", "--json").stdout)["volumes"] == []
    sid = cli("create", "--image", "debian", "--memory-mb", "128", "--volume",
              "cli-vol:/mnt/v:ro").stdout.strip()
    try:
        assert "cli-vol" in cli("volume", "ls").stdout and f"{sid}:/mnt/v:ro" in cli(
            "volume", "ls").stdout
        r = cli("exec", sid, "touch", "/mnt/v/x", check=False)
        assert r.returncode != 0 and "Read-only" in r.stderr
        r = cli("volume", "rm", "cli-vol", check=False)
        assert r.returncode != 0 and "mounted by sandbox" in r.stderr
    finally:
        cli("rm", sid)
    cli("volume", "rm", "cli-vol")
    r = cli("create", "--volume", "nopath", check=False)
    assert r.returncode == 2 and "NAME:PATH[:ro]" in r.stderr


def test_the_asyncio_client_manages_volumes(corrald):
    async def main():
        async with corrald.async_client() as c:
            v = await c.create_volume("aio-vol", size_mb=16)
            listed = [x["name"] for x in await c.volumes()]
            sb = await c.create(image="debian", volumes=[{"name": "aio-vol", "path": "/a"}],
                                **SMALL)
            try:
                mounts = (await c.volume("aio-vol"))["mounts"]
            finally:
                await sb.destroy()
            await c.remove_volume("aio-vol")
            return v, listed, mounts

    v, listed, mounts = asyncio.run(main())
    assert v["name"] == "aio-vol" and "aio-vol" in listed and mounts[0]["path"] == "/a"


def test_a_volume_survives_corrald_killed_and_is_consistent(corrald_factory):
    """corrald killed with -9 while a sandbox writes to its volume: the next
    one adopts the sandbox, which holds its volume again (nobody else may
    write it, and the old mount is never mounted beside it); once it is
    destroyed the file system is consistent and a new sandbox has the data."""
    d = corrald_factory()
    with d.client() as c:
        c.create_volume("kept", size_mb=32)
        sb = c.create(image="debian", volumes=[{"name": "kept", "path": "/k"}], **SMALL)
        r = sh(sb, "for i in $(seq 1 200); do echo line$i >> /k/log; done; "
                   "dd if=/dev/urandom of=/k/blob bs=64k count=16 2>/dev/null; "
                   "sync; md5sum /k/blob")
        digest = r.stdout.split()[0]
        # still writing when corrald dies
        sh(sb, "while true; do echo more >> /k/tail; done", background=True)
    disk = d.state_dir / "volumes" / "kept" / "disk.ext4"
    d.kill()
    d.start()
    with d.client() as c:
        sb = c.get(sb.id)
        assert sb.inspect()["state"] == "ready"
        assert c.volume("kept")["mounts"] == [{"sandbox": sb.id, "path": "/k",
                                               "read_only": False}]
        r = sh(sb, "wc -l < /k/log; md5sum /k/blob; echo after > /k/after")
        assert r.stdout.split()[:2] == ["200", digest]
        with pytest.raises(corral.Conflict, match="read-write by sandbox"):
            c.create(image="debian", volumes=[{"name": "kept", "path": "/k"}], **SMALL)
        with pytest.raises(corral.Conflict):
            c.remove_volume("kept")
        sb.destroy()
    wait_for(lambda: not loops_backed_by(disk), timeout=20, what="the old mount to go")
    fsck = subprocess.run(["e2fsck", "-fn", str(disk)], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    with d.client() as c:
        assert [v["name"] for v in c.volumes()] == ["kept"]
        with c.create(image="debian", volumes=[{"name": "kept", "path": "/k"}], **SMALL) as sb:
            r = sh(sb, "wc -l < /k/log; md5sum /k/blob; cat /k/after")
            assert r.stdout.split() == ["200", digest, "/k/blob", "after"], r.stdout
        c.remove_volume("kept")
    wait_for(lambda: not loops_backed_by(disk), timeout=10, what="the loop device to go")
    assert not disk.exists()


@need_microvm
def test_a_microvm_guest_mounts_a_volume_with_its_own_kernel(client, corrald, volume):
    name = volume["name"]
    disk = corrald.state_dir / "volumes" / name / "disk.ext4"
    size = disk.stat().st_size
    ro = [{"name": name, "path": "/d", "read_only": True}]
    vm = client.create(backend="microvm", image="debian",
                       volumes=[{"name": name, "path": "/srv/data"}], **SMALL)
    try:
        r = sh(vm, "findmnt -no FSTYPE,OPTIONS /srv/data; echo kept > /srv/data/f && "
                   "mkdir /srv/data/d && chown 1000:1000 /srv/data/d")
        assert r.exit_code == 0 and r.stdout.startswith("ext4") and "rw," in r.stdout, r.stderr
        assert client.volume(name)["mounts"] == [{"sandbox": vm.id, "path": "/srv/data",
                                                  "read_only": False}]
        # the guest's kernel has the file system: no other may mount it
        with pytest.raises(corral.Conflict, match=f"mounted by the guest of sandbox {vm.id}"):
            client.create(image="debian", volumes=ro, **SMALL)
        with pytest.raises(corral.Conflict, match="mounted read-write by sandbox"):
            client.create(backend="microvm", image="debian", volumes=ro, **SMALL)
        # the volume's size binds the guest: ENOSPC in the file system, and
        # a write past the end of the device does not grow the file
        r = sh(vm, "dd if=/dev/zero of=/srv/data/big bs=1M count=64; rm -f /srv/data/big; "
                   "dd if=/dev/zero of=$(findmnt -no SOURCE /srv/data) bs=1M seek=100 count=1 "
                   "oflag=direct")
        assert "No space left on device" in r.stderr and r.exit_code != 0
        assert disk.stat().st_size == size
    finally:
        vm.destroy()  # nothing above synced: the destroy writes the guest's cache back
    with client.create(image="debian", volumes=ro, **SMALL) as ct:
        r = sh(ct, "cat /d/f; stat -c %u:%g /d/d")
        assert r.stdout.split() == ["kept", "1000:1000"], r.stderr
        with pytest.raises(corral.Conflict, match=f"mounted by the host for sandbox {ct.id}"):
            client.create(backend="microvm", image="debian", volumes=ro, **SMALL)
    guests = [client.create(backend="microvm", image="debian", volumes=ro, **SMALL)
              for _ in range(2)]
    try:
        for g in guests:
            r = sh(g, "cat /d/f; touch /d/x")
            assert r.stdout == "kept\n" and "Read-only file system" in r.stderr
        assert len(client.volume(name)["mounts"]) == 2
    finally:
        for g in guests:
            g.destroy()
    fsck = subprocess.run(["e2fsck", "-fn", str(disk)], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


@need_microvm
def test_a_mount_that_fails_in_a_guest_leaves_the_volume_free(client, volume):
    # The failed restore is followed by a cold boot, which under TCG at
    # SMALL's quarter of a CPU ran past its 90 s deadline in CI: a whole one.
    with pytest.raises(corral.Error, match="mount volume 0 .* on /etc/hostname: Not a directory"):
        client.create(backend="microvm", image="debian",
                      volumes=[{"name": volume["name"], "path": "/etc/hostname"}],
                      **{**SMALL, "cpus": 1})
    assert client.volume(volume["name"])["mounts"] == []


@need_microvm
def test_a_guest_killed_mid_write_leaves_its_volume_whole(corrald_factory):
    d = corrald_factory()
    with d.client() as c:
        c.create_volume("guest-kept", size_mb=32)
        vm = c.create(backend="microvm", image="debian",
                      volumes=[{"name": "guest-kept", "path": "/k"}], **SMALL)
        r = sh(vm, "dd if=/dev/urandom of=/k/blob bs=64k count=16 2>/dev/null; sync; "
                   "md5sum /k/blob")
        digest = r.stdout.split()[0]
        sh(vm, "while true; do echo more >> /k/tail; done", background=True)
        wait_for(lambda: sh(vm, "test -s /k/tail").exit_code == 0, timeout=20,
                 what="the guest to write")
    disk = d.state_dir / "volumes" / "guest-kept" / "disk.ext4"
    d.kill()  # its QEMU dies with it, the journal unreplayed
    wait_for(lambda: not holders_of(disk), timeout=20, what="the old QEMU to go")
    d.start()
    with d.client() as c:
        ro = [{"name": "guest-kept", "path": "/k", "read_only": True}]
        with c.create(backend="microvm", image="debian", volumes=ro, **SMALL) as g:
            r = sh(g, "md5sum /k/blob")
            assert r.stdout.split()[:1] == [digest], r.stderr
        assert "journal replayed on the host" in d.log(this_run=True)
        fsck = subprocess.run(["e2fsck", "-fn", str(disk)], capture_output=True, text=True)
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr
        c.remove_volume("guest-kept")
    assert not disk.exists()
