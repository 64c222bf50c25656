"""Isolation of the container backend, checked from inside with corral-probe.

The probe (tests/probe/probe.c, static) attempts one thing and exits with
the errno it got, so each test asserts the exact refusal.  The host side is
checked from outside: files, processes and uids a sandbox must not reach.
"""

import errno
import os
import re
import time
import uuid
from pathlib import Path

import pytest

import corral
from conftest import BUILD, SMALL

PROBE = "/usr/local/bin/corral-probe"
# Docker's default capability set: what root keeps inside a sandbox.
DEFAULT_CAPS = 0x00000000A80425FB


@pytest.fixture
def probe_sb(client):
    with client.create(**SMALL) as sb:
        sb.files.write(PROBE, (BUILD / "corral-probe").read_bytes(), mode=0o755)
        yield sb


def probe(sb, *args, user=None):
    return sb.exec([PROBE, *args], user=user)


def init_pid(sb):
    return sb.inspect()["container"]["init_pid"]


def test_host_files_are_invisible(probe_sb, corrald, tmp_path):
    secret = Path("/tmp") / f"corral-it-secret-{uuid.uuid4().hex}"
    secret.write_text("host secret")
    try:
        for path in (str(secret), str(corrald.state_dir), str(corrald.token_file), "/root/.bashrc",
                     str(BUILD / "corrald")):
            r = probe(probe_sb, "open", path)
            assert r.exit_code == errno.ENOENT, (path, r)
    finally:
        secret.unlink()


def test_host_processes_are_invisible(probe_sb, corrald):
    assert probe(probe_sb, "kill", str(corrald.pid)).exit_code == errno.ESRCH
    assert probe(probe_sb, "kill", str(os.getpid())).exit_code == errno.ESRCH
    pids = [int(p) for p in probe_sb.exec("ls /proc").stdout.split() if p.isdigit()]
    # init, ls, and the sh that runs it at most
    assert 1 in pids and len(pids) <= 3, pids
    ps = probe_sb.exec(["ps", "-o", "pid,user,comm"]).stdout.decode()
    assert "corrald" not in ps and "python" not in ps


def test_root_inside_is_not_root_outside(probe_sb):
    assert probe_sb.exec("id -u; id -g").stdout == b"0\n0\n"
    info = probe_sb.inspect()["container"]
    uid_base = info["uid_base"]
    assert uid_base >= 1 << 30
    maps = probe_sb.exec("cat /proc/self/uid_map /proc/self/gid_map").stdout.split()
    assert maps == [b"0", str(uid_base).encode(), b"65536"] * 2
    # The init and a file root made inside belong to the unprivileged range outside.
    status = Path(f"/proc/{info['init_pid']}/status").read_text()
    assert re.search(rf"^Uid:\s+{uid_base}\s", status, re.M), status
    probe_sb.exec("echo x > /tmp/made-inside")
    st = os.stat(f"/proc/{info['init_pid']}/root/tmp/made-inside")
    assert (st.st_uid, st.st_gid) == (uid_base, uid_base)
    # Image files are root-owned inside, without a chown of the image.
    assert probe_sb.exec("stat -c %u:%g /bin/busybox /etc/passwd").stdout == b"0:0\n0:0\n"


def test_two_sandboxes_get_different_uid_ranges(client):
    with client.create(**SMALL) as a, client.create(**SMALL) as b:
        assert a.inspect()["container"]["uid_base"] != b.inspect()["container"]["uid_base"]


def test_capabilities(probe_sb):
    caps = int(probe(probe_sb, "caps").stdout, 16)
    assert caps == DEFAULT_CAPS
    assert int(probe(probe_sb, "caps", user="1000").stdout, 16) == 0
    assert probe(probe_sb, "nnp").stdout.strip() == b"1"
    assert probe(probe_sb, "seccomp").stdout.strip() == b"2"


@pytest.mark.parametrize("check", [
    "mount", "unshare-user", "unshare-net", "clone-newns", "setns", "bpf", "keyctl",
    "userfaultfd", "perf", "kexec", "init-module", "io-uring", "reboot", "swapon", "settime",
])
def test_seccomp_denies(probe_sb, check):
    r = probe(probe_sb, check)
    assert r.exit_code == errno.EPERM, r


def test_devices_and_other_trees(probe_sb):
    # no device nodes in a user namespace, and init is not traceable
    assert probe(probe_sb, "mknod").exit_code == errno.EPERM
    assert probe(probe_sb, "ptrace", "1").exit_code == errno.EPERM
    # the harmless devices are there and work
    r = probe_sb.exec("head -c 4 /dev/zero | od -An -tx1; echo x > /dev/null && echo ok")
    assert r.stdout.split() == [b"00", b"00", b"00", b"00", b"ok"]


def test_pid1_forks_every_command_and_is_out_of_reach(probe_sb):
    """The sandbox's PID 1 holds its identity and forks each command; nothing
    in the sandbox can signal it, trace it, take its descriptors (its
    socket to the spawner is fd 3), read its memory or replace it."""
    host_pid = init_pid(probe_sb)
    # every command is a child of PID 1, with the identity PID 1 holds
    assert probe_sb.exec("echo $PPID").stdout == b"1\n"
    status = Path(f"/proc/{host_pid}/status").read_text()
    for key, want in (("Seccomp", "2"), ("NoNewPrivs", "1"), ("CapBnd", f"{DEFAULT_CAPS:016x}")):
        assert re.search(rf"^{key}:\s+{want}$", status, re.M), (key, status)
    # root in the sandbox sends them and the kernel drops them: KILL, STOP,
    # TERM, INT, HUP, USR1, CHLD
    for sig in (9, 19, 15, 2, 1, 10, 17):
        assert probe(probe_sb, "signal", "1", str(sig)).exit_code == 0, sig
    assert probe(probe_sb, "ptrace", "1").exit_code == errno.EPERM
    assert probe(probe_sb, "pidfd-getfd", "1", "3").exit_code == errno.EPERM
    for path in ("/proc/1/fd/3", "/proc/1/mem", "/proc/1/environ", "/proc/1/exe"):
        assert probe(probe_sb, "open", path).exit_code == errno.EACCES, path
    assert probe(probe_sb, "write", "/proc/1/exe").exit_code == errno.EACCES
    # the same PID 1, not stopped (T) nor traced (t), and serving
    assert init_pid(probe_sb) == host_pid
    state = re.search(r"^State:\s+(\S)", Path(f"/proc/{host_pid}/status").read_text(), re.M)[1]
    assert state in "RS", state
    r = probe_sb.exec("echo alive; exit 3")
    assert (r.exit_code, r.stdout) == (3, b"alive\n")
    # an end the command chooses is reported as the kernel saw it
    r = probe_sb.exec("kill -9 $$")
    assert (r.signal, r.exit_code, r.reason) == (9, None, "signaled"), r


def test_a_command_that_cannot_start_says_why_and_leaves_nothing(probe_sb):
    r = probe_sb.exec("ls /proc").stdout.split()
    before = sorted(p for p in r if p.isdigit())
    with pytest.raises(corral.NotFound, match="no-such-command"):
        probe_sb.exec(["no-such-command"])
    with pytest.raises(corral.Error, match="/no/such/dir"):
        probe_sb.exec(["true"], cwd="/no/such/dir")
    probe_sb.files.write("/tmp/not-executable", b"#!/bin/sh\n", mode=0o644)
    with pytest.raises(corral.Error, match="/tmp/not-executable"):
        probe_sb.exec(["/tmp/not-executable"])
    # no child of PID 1 is left over from the failed starts
    r = probe_sb.exec("ls /proc").stdout.split()
    assert len([p for p in r if p.isdigit()]) <= len(before) + 1, (before, r)


MASKED_FILES = ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                "/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup",
                "/proc/latency_stats", "/proc/kmsg", "/proc/config.gz"]


def test_proc_and_sys_are_masked(probe_sb):
    present = [p for p in MASKED_FILES if os.path.exists(p)]
    assert present, "this kernel has none of the files to mask"
    for path in present:  # /dev/null is bound over each
        r = probe_sb.exec(f"wc -c < {path}")
        assert (r.exit_code, r.stdout.strip()) == (0, b"0"), (path, r)
    for path in ("/proc/acpi", "/proc/scsi"):
        if os.path.isdir(path):
            assert probe_sb.exec(f"ls -A {path}").stdout == b"", path
    if os.path.exists("/proc/sysrq-trigger"):
        assert probe(probe_sb, "sysrq").exit_code == errno.EROFS
    r = probe_sb.exec("echo x > /proc/sys/kernel/hostname")
    assert r.exit_code != 0 and b"Read-only" in r.stderr
    assert probe_sb.exec("ls -A /sys").stdout == b""
    assert probe_sb.exec("touch /sys/x").exit_code != 0


def test_network_is_loopback_only(probe_sb):
    ifaces = [line.split(b":")[0].strip() for line in
              probe_sb.exec("cat /proc/net/dev").stdout.splitlines()[2:]]
    assert ifaces == [b"lo"]
    assert probe(probe_sb, "net-connect").exit_code == errno.ENETUNREACH
    # loopback works: a server and a client inside the sandbox
    r = probe_sb.exec("nc -l -p 7777 > /tmp/got & sleep 0.2; echo ping | nc 127.0.0.1 7777; "
                      "sleep 0.2; cat /tmp/got", timeout=10)
    assert r.stdout == b"ping\n"


def test_nothing_of_corrald_leaks_in(probe_sb):
    assert probe(probe_sb, "fds").stdout.split() == [b"0", b"1", b"2"]
    env = dict(line.split("=", 1) for line in probe_sb.exec(["env"]).stdout.decode().splitlines())
    assert set(env) == {"PATH", "HOME"}, env
    r = probe_sb.exec(["env"], env={"ONLY_MINE": "1"})
    assert b"ONLY_MINE=1" in r.stdout and b"CORRAL" not in r.stdout


def test_memory_limit_kills_with_oom(client):
    with client.create(memory_mb=64) as sb:
        sb.files.write(PROBE, (BUILD / "corral-probe").read_bytes(), mode=0o755)
        r = probe(sb, "alloc-mb", "200")
        assert r.reason == "oom", r
        assert sb.inspect()["usage"]["oom_kills"] >= 1
        # the sandbox survives its OOM
        assert sb.exec("echo alive").stdout == b"alive\n"


def test_pids_limit(client):
    with client.create(pids=32, **SMALL) as sb:
        sb.files.write(PROBE, (BUILD / "corral-probe").read_bytes(), mode=0o755)
        r = probe(sb, "forks", "200")
        assert r.exit_code == errno.EAGAIN
        assert int(r.stdout) < 32


def test_disk_limit(client):
    with client.create(disk_mb=8, **SMALL) as sb:
        r = sb.exec("dd if=/dev/zero of=/tmp/big bs=1M count=20")
        assert r.exit_code != 0 and b"No space left" in r.stderr
        with pytest.raises(corral.Error) as e:
            sb.files.write("/root/big", b"x" * (16 << 20))
        assert e.value.status == 507
        usage = sb.inspect()["usage"]
        assert usage["disk_limit_bytes"] == 8 << 20 and usage["disk_bytes"] > 7 << 20


def test_cpu_limit(client):
    with client.create(memory_mb=128, cpus=0.2) as sb:
        r = sb.exec("timeout 1 sh -c 'while :; do :; done'", timeout=10)
        # a 0.2-CPU quota gets about 0.2 s of CPU in 1 s of spinning (and
        # the spinning is counted: cpu_s covers the command's children)
        assert 0.1 < r.cpu_s < 0.45, r.cpu_s


def test_daemonised_process_dies_with_sandbox(client, corrald):
    with client.create(**SMALL) as sb:
        cgroup = sb.inspect()["container"]["cgroup"]
        r = sb.exec("setsid sh -c 'sleep 1000 & sleep 1000' > /dev/null 2>&1 < /dev/null & "
                    "echo started")
        assert r.stdout == b"started\n" and r.reason == "exited"
        # the sandbox's processes, as the host sees them
        procs = Path(f"/sys/fs/cgroup/pids/{corrald.cgroup_parent}/{cgroup}/cgroup.procs")
        if not procs.exists():
            procs = Path(f"/sys/fs/cgroup/{corrald.cgroup_parent}/{cgroup}/cgroup.procs")
        deadline = time.monotonic() + 5
        while True:
            pids = [int(p) for p in procs.read_text().split()]
            sleeps = [p for p in pids
                      if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"sleep\0")]
            if len(sleeps) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert len(sleeps) == 2, pids
    assert not [p for p in sleeps if Path(f"/proc/{p}").exists()]


def test_init_reaps_orphans(probe_sb):
    for _ in range(5):
        probe_sb.exec("(sleep 0.05 &); true")
    deadline = time.monotonic() + 5
    while True:  # the orphans end after 50 ms; init must reap them
        ps = probe_sb.exec(["ps", "-o", "stat,args"]).stdout
        if b"sleep" not in ps or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    states = [line.split()[0] for line in ps.splitlines()[1:]]
    assert b"sleep" not in ps and not any(b"Z" in s for s in states), ps


def test_files_api_cannot_escape_through_symlinks(probe_sb, tmp_path):
    host = Path("/tmp") / f"corral-it-target-{uuid.uuid4().hex}"
    host.write_text("untouched")
    try:
        probe_sb.exec(f"ln -s {host} /tmp/abs; ln -s ../../../../../..{host} /tmp/rel; "
                      "ln -s /proc/1/root/etc/passwd /tmp/magic")
        for link in ("/tmp/abs", "/tmp/rel"):
            with pytest.raises(corral.NotFound):
                probe_sb.files.read(link)
        for link in ("/tmp/abs", "/tmp/rel"):
            # a write through the link lands inside the sandbox
            probe_sb.files.write(link, b"written")
        assert host.read_text() == "untouched"
        assert probe_sb.exec(f"cat {host}").stdout == b"written"
        with pytest.raises(corral.Error) as e:
            probe_sb.files.read("/tmp/magic")
        assert e.value.status in (400, 403, 404)  # refused, whichever check comes first
    finally:
        host.unlink()


def test_init_death_marks_sandbox_failed(client):
    sb = client.create(**SMALL)
    pid = init_pid(sb)
    os.kill(pid, 9)
    deadline = time.monotonic() + 5
    while sb.inspect()["state"] != "failed" and time.monotonic() < deadline:
        time.sleep(0.02)
    info = sb.inspect()
    assert info["state"] == "failed" and info["end_reason"] == "init_exited", info
    assert "died" in info["message"]
    with pytest.raises(corral.Conflict):
        sb.exec("true")
    sb.destroy()
    assert sb.inspect()["state"] == "destroyed"


