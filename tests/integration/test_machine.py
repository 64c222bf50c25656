"""A container sandbox behaves like a normal Linux machine, whatever its image:
the files every machine has (/etc/hosts, /etc/hostname, /etc/resolv.conf),
names that resolve, inode numbers that agree, a `df /` that adds up, and
clocks of its own (a time namespace started with the sandbox).

Each test runs in the busybox image, the debian image (`make images`) or an
imported one, as it needs; the debian ones are skipped without that image.
"""

import io
import os
import time
from pathlib import Path

import pytest

from conftest import BUILD, DEBIAN, SMALL, docker_archive, need_debian

PROBE = "/usr/local/bin/corral-probe"
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


# ---- clocks ----

def _host_pids_of(corrald, sb):
    """Host pids of every process in the sandbox's cgroup, helpers outside
    its pid namespace included."""
    cg = f"/{corrald.cgroup_parent}/{sb.inspect()['container']['cgroup']}"
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            paths = [line.split(":", 2)[2] for line in (d / "cgroup").read_text().splitlines()]
        except OSError:
            continue
        if any(p == cg or p.startswith(cg + "/") for p in paths):
            pids.append(int(d.name))
    return pids


def _uptime(sb):
    return float(sb.exec("cat /proc/uptime").stdout.split()[0])


def test_the_sandbox_has_its_own_uptime(client):
    """/proc/uptime, CLOCK_MONOTONIC and CLOCK_BOOTTIME start near 0 when the
    sandbox is created and run with the host's; /proc/stat's boot time is
    its creation."""
    wall0, t0 = time.time(), time.monotonic()
    with client.create(**SMALL) as sb:
        t1 = time.monotonic()
        sb.files.write(PROBE, (BUILD / "corral-probe").read_bytes(), mode=0o755)

        def clocks():
            return map(float, sb.exec([PROBE, "clocks"]).stdout.split())

        up = _uptime(sb)  # centiseconds, truncated
        assert 0 <= up <= time.monotonic() - t0, up
        h0 = time.monotonic()
        mono, boot = clocks()
        h1 = time.monotonic()
        assert 0 < mono <= h1 - t0 and 0 < boot <= h1 - t0, (mono, boot, h1 - t0)
        again, _ = clocks()
        assert 0 < again - mono <= time.monotonic() - h0  # at the host's pace
        btime = int(next(line for line in sb.exec("cat /proc/stat").stdout.split(b"\n")
                         if line.startswith(b"btime")).split()[1])
        assert int(wall0) - 1 <= btime <= int(wall0 + (t1 - t0)) + 1, (btime, wall0)


def test_every_process_sees_the_same_clocks(client, corrald):
    """PID 1, execs, a session's shell and a file-stream helper all carry
    the sandbox's clock offsets (execs in time namespaces of their own, as a
    CLONE_VM exec cannot join PID 1's; the helper in PID 1's)."""
    with client.create(disk_mb=8, **SMALL) as sb:
        session = sb.session()
        session.run("sleep 600 &")
        sb.exec("sleep 600 > /dev/null 2>&1 &")
        init = sb.inspect()["container"]["init_pid"]
        # an upload whose body never ends keeps its helper running
        s = corrald.send("PUT", f"/v1/sandboxes/{sb.id}/files?path=/tmp/slow", b"x" * 1000,
                         content_type="application/octet-stream", length=1 << 20)
        try:
            init_pidns = os.readlink(f"/proc/{init}/ns/pid")
            init_timens = os.readlink(f"/proc/{init}/ns/time")
            deadline = time.monotonic() + 10
            while True:
                pids = _host_pids_of(corrald, sb)
                helpers = [p for p in pids if os.readlink(f"/proc/{p}/ns/pid") != init_pidns]
                # (a helper is forked first and joins the namespaces a moment later)
                joined = all(os.readlink(f"/proc/{h}/ns/time") == init_timens for h in helpers)
                if (helpers and joined) or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            assert helpers, "the upload's helper never ran"
            offsets = {p: Path(f"/proc/{p}/timens_offsets").read_text() for p in pids}
            assert len(pids) >= 5 and len(set(offsets.values())) == 1, offsets
            assert offsets[init] != Path("/proc/self/timens_offsets").read_text()
            host_ns = os.readlink("/proc/self/ns/time")
            spaces = {p: os.readlink(f"/proc/{p}/ns/time") for p in pids}
            assert host_ns not in spaces.values(), spaces
            assert all(spaces[h] == spaces[init] for h in helpers), spaces
        finally:
            s.close()
        session.close()


def test_ptrace_of_its_own_processes_works(client):
    """Debuggers and strace work inside: a process may trace its child."""
    with client.create(**SMALL) as sb:
        sb.files.write(PROBE, (BUILD / "corral-probe").read_bytes(), mode=0o755)
        r = sb.exec([PROBE, "ptrace-child"])
        assert (r.exit_code, r.stdout) == (0, b"traced\n"), r
        r = sb.exec([PROBE, "ptrace-child"], user="1000")
        assert (r.exit_code, r.stdout) == (0, b"traced\n"), r
