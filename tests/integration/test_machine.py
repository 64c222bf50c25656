"""A container sandbox behaves like a normal Linux machine, whatever its image:
the files every machine has (/etc/hosts, /etc/hostname, /etc/resolv.conf),
names that resolve, inode numbers that agree, and a `df /` that adds up.

Each test runs in the busybox image, the debian image (`make images`) or an
imported one, as it needs; the debian ones are skipped without that image.
"""

import io
from pathlib import Path

import pytest

from conftest import BUILD, SMALL, docker_archive

DEBIAN = (BUILD / "images" / "tags" / "debian:latest").is_file()
need_debian = pytest.mark.skipif(not DEBIAN, reason="no debian image: `make images` builds it")
RESOLV_MARK = b'# Network mode "none"'


@pytest.fixture(scope="module")
def imported(corrald):
    """An imported image that brings its build host's /etc files, as images
    made by `docker build` do; busybox as its only program."""
    archive = docker_archive({
        "bin/busybox": Path("/bin/busybox").read_bytes(),
        "etc/hostname": b"buildhost\n",
        "etc/hosts": b"10.0.0.9\tbuildhost\n",
        "etc/resolv.conf": b"nameserver 10.9.9.9\n"})
    with corrald.client() as c:
        image = c.import_image(io.BytesIO(archive), name="corral-test/etc-files:1")
        yield image["name"]
        c.remove_image(image["name"])


def sh(sb, line, image):
    """Run a shell line; the imported image has busybox but no /bin/sh."""
    argv = ["/bin/busybox", "sh", "-c", line] if image.startswith("corral-test/") else line
    r = sb.exec(argv)
    assert r.exit_code == 0, r
    return r.stdout


def expected_hosts(sandbox_id):
    return (b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            b"127.0.1.1\t" + sandbox_id.encode() + b"\n")


# ---- /etc/hosts, /etc/hostname, /etc/resolv.conf ----

@pytest.mark.parametrize("which", ["busybox", "debian", "imported"])
def test_etc_files_are_the_sandboxs_own(client, which, request):
    if which == "debian" and not DEBIAN:
        pytest.skip("no debian image")
    image = request.getfixturevalue("imported") if which == "imported" else which
    with client.create(image=image, **SMALL) as sb:
        out = sh(sb, "cat /etc/hostname; echo --; cat /etc/hosts; echo --; cat /etc/resolv.conf; "
                     "echo --; hostname; stat -c '%F %a %u:%g' /etc/hosts /etc/hostname "
                     "/etc/resolv.conf; grep -c ' /etc' /proc/self/mountinfo || true", image)
        hostname, hosts, resolv, rest = out.split(b"--\n")
        assert hostname == sb.id.encode() + b"\n"
        assert hosts == expected_hosts(sb.id)
        assert resolv.startswith(RESOLV_MARK), resolv  # the image's is not seen
        assert not [line for line in resolv.split(b"\n") if line.startswith(b"nameserver")]
        # plain files of the root, not mounts: the user may replace them
        assert rest.split(b"\n") == [sb.id.encode()] + [b"regular file 644 0:0"] * 3 + [b"0", b""]


@need_debian
def test_names_resolve_as_on_a_machine(client):
    """localhost and the sandbox's own name resolve through every path a
    program takes (getent, gethostbyname, getaddrinfo, a TCP connect to
    localhost); other names fail at once instead of waiting on a resolver."""
    script = r"""
import socket, subprocess, time
host = socket.gethostname()
print(subprocess.run(["getent", "hosts", "localhost"], capture_output=True).stdout.split()[0])
print(subprocess.run(["getent", "hosts", host], capture_output=True).stdout.split())
print(socket.gethostbyname("localhost"), socket.gethostbyname(host))
print(sorted({a[4][0] for a in socket.getaddrinfo("localhost", 80)}))
srv = socket.create_server(("127.0.0.1", 0))
with socket.create_connection(("localhost", srv.getsockname()[1]), timeout=5) as c:
    peer, _ = srv.accept()
    c.sendall(b"ping")
    print(peer.recv(4))
t = time.monotonic()
r = subprocess.run(["getent", "hosts", "example.com"])
print(r.returncode, time.monotonic() - t)
t = time.monotonic()
try:
    socket.getaddrinfo("example.com", 80)
except socket.gaierror as e:
    print(e.errno, time.monotonic() - t)
"""
    with client.create(image="debian", **SMALL) as sb:
        r = sb.exec(["python3", "-c", script])
        assert r.exit_code == 0, r
        lines = r.stdout.decode().splitlines()
        assert lines[:5] == ["b'::1'", f"[b'127.0.1.1', b'{sb.id}']", "127.0.0.1 127.0.1.1",
                             "['127.0.0.1', '::1']", "b'ping'"], lines
        getent_rc, getent_s = lines[5].split()
        gai_errno, gai_s = lines[6].split()
        assert getent_rc == "2" and float(getent_s) < 0.5, lines  # 2: not found
        assert gai_errno in ("-2", "-3") and float(gai_s) < 0.5, lines


def test_etc_files_follow_the_sandbox_through_checkpoints(client):
    """The files live in no checkpoint until the user changes them: a fork
    names itself, and a fork of a sandbox whose user edited /etc/hosts (by a
    rename over it, which a bind mount would refuse) keeps the edit."""
    with client.create(**SMALL) as sb:
        snap = sb.snapshot()["checkpoint"]
        sb.exec("cp /etc/hosts /tmp/h && echo '10.0.0.7 db' >> /tmp/h && mv /tmp/h /etc/hosts")
        for checkpoint, edited in ((snap, False), (None, True)):
            fork = sb.fork(checkpoint=checkpoint)
            with fork:
                out = fork.exec("cat /etc/hostname; hostname; cat /etc/hosts").stdout
                hostname, kernel_name, hosts = out.split(b"\n", 2)
                assert hostname == kernel_name == fork.id.encode()
                if edited:  # the user's file, as they left it
                    assert hosts == expected_hosts(sb.id) + b"10.0.0.7 db\n"
                else:
                    assert hosts == expected_hosts(fork.id)


# ---- inode numbers ----

@need_debian
def test_readdir_inodes_agree_with_stat(client):
    """d_ino from readdir is st_ino from stat, for directories too, in image
    layers and in what the user made; one st_dev; a copy-up keeps st_ino."""
    script = r"""
import os
os.makedirs("/made/sub"); open("/made/file", "w").close()
bad, dev = [], os.stat("/").st_dev
for d in ("/", "/usr", "/etc", "/made"):
    for e in os.scandir(d):
        st = os.stat(e.path, follow_symlinks=False)
        if st.st_dev != dev:
            continue  # a mount point (/proc, /dev, /sys), as on any machine
        if e.inode() != st.st_ino:
            bad.append((e.path, e.inode(), st.st_ino))
print(bad)
before = os.stat("/etc/passwd").st_ino, os.stat("/usr/share").st_ino
open("/etc/passwd", "a").close()  # copies the file up
os.mkdir("/usr/share/new")        # and its directory
print(before == (os.stat("/etc/passwd").st_ino, os.stat("/usr/share").st_ino))
print(len({os.stat(p).st_dev for p in ("/", "/usr/bin/python3", "/etc/hosts", "/made/file")}))
"""
    with client.create(image="debian", **SMALL) as sb:
        r = sb.exec(["python3", "-c", script])
        assert r.exit_code == 0, r
        assert r.stdout.decode().splitlines() == ["[]", "True", "1"], r.stdout


# ---- df ----

def test_df_reports_the_writable_layer(client):
    """statfs of / is the writable layer: its size is disk_mb, what the
    sandbox wrote is used, and the rest is free."""
    with client.create(disk_mb=64, **SMALL) as sb:
        def statfs():
            size, blocks, free, avail = map(int, sb.exec("stat -f -c '%S %b %f %a' /").stdout.split())
            return blocks * size, (blocks - free) * size, avail * size
        total, used, free = statfs()
        assert total == 64 << 20
        assert used > 0 and total == used + free  # the run-time files are on it
        sb.exec("head -c 4194304 /dev/zero > /tmp/four")
        total2, used2, free2 = statfs()
        assert total2 == total
        assert abs(used2 - used - (4 << 20)) <= 64 << 10, (used, used2)
        assert abs(free - free2 - (4 << 20)) <= 64 << 10, (free, free2)
        assert sb.exec("df -k / | tail -1").stdout.split()[1] == b"65536"


@need_debian
def test_shutil_disk_usage(client):
    """What CPython's test_shutil.test_disk_usage asserts, and more."""
    script = r"""
import shutil
a = shutil.disk_usage("/")
open("/root/four", "wb").write(b"x" * (4 << 20))
b = shutil.disk_usage("/")
print(a.total, a.used > 0, a.total >= a.used, b.used - a.used, a.free - b.free)
"""
    with client.create(image="debian", disk_mb=64, **SMALL) as sb:
        r = sb.exec(["python3", "-c", script])
        assert r.exit_code == 0, r
        total, positive, fits, grew, shrank = r.stdout.split()
        assert (int(total), positive, fits) == (64 << 20, b"True", b"True")
        assert abs(int(grew) - (4 << 20)) <= 64 << 10 and abs(int(shrank) - (4 << 20)) <= 64 << 10
