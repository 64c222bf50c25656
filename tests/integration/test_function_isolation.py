"""Isolation of the function backend, checked from inside and from the host.

Inside, the same attempts are made twice: with corral-probe
(tests/probe/probe.c, static) in the shell runtime, whose exit code is the
errno its one attempt got, and with Python code in the python runtime.  The
jail is the kernel's per-process controls (lib/backend/function/jail.h):
Landlock refuses files outside the runtime's system dirs and the scratch
dir with EACCES, seccomp refuses sockets but AF_UNIX with EAFNOSUPPORT and
ptrace, mount, namespaces, bpf, keyctl... with EPERM, and the sandbox's
unprivileged uid (and Landlock's signal scope) keep other processes out of
reach (EPERM).  From the host, /proc shows what a running call holds.
"""

import ctypes
import errno
import json
import os
import shutil
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import BUILD
from test_function import create_fn, live_processes

PROBE = "./corral-probe"  # in the scratch dir, the call's cwd

# What the python runtime runs for each check, with its arguments in A.
PY_CHECKS = {
    "open": "os.close(os.open(A[0], os.O_RDONLY))",
    "write": "os.close(os.open(A[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))",
    "kill": "os.kill(int(A[0]), 0)",
    "ptrace": "libc('ptrace', 16, int(A[0]), 0, 0)",  # PTRACE_ATTACH
    "mount": "libc('mount', b'none', b'/tmp', b'tmpfs', 0, None)",
    "unshare-user": "libc('unshare', 0x10000000)",  # CLONE_NEWUSER
    "unshare-net": "libc('unshare', 0x40000000)",  # CLONE_NEWNET
    "socket-inet": "socket.socket(socket.AF_INET, socket.SOCK_STREAM)",
    "tcp-connect": "socket.create_connection(('127.0.0.1', int(A[0])), timeout=2)",
    "socketpair": "socket.socketpair()",
    "unix-connect": "socket.socket(socket.AF_UNIX).connect(A[0])",
    "abstract-connect": "socket.socket(socket.AF_UNIX).connect('\\0' + A[0])",
}
# Runs [[code, args], ...] from $CHECKS; prints the errno each got (0: it worked).
PY_RUNNER = """\
import json, os, socket

def libc(name, *args):
    import ctypes
    f = getattr(ctypes.CDLL(None, use_errno=True), name)
    if f(*args) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))

got = []
for code, A in json.loads(os.environ['CHECKS']):
    try:
        exec(code)
        got.append(0)
    except OSError as e:
        got.append(e.errno)
print(json.dumps(got))
"""


class Inside:
    """Attempts made from inside one function sandbox, as the probe's checks."""

    def __init__(self, sb, runtime):
        self.sb, self.runtime = sb, runtime

    def errnos(self, checks):
        """The errno each ``(check, *args)`` got inside (0: it worked)."""
        checks = [(c[0], [str(a) for a in c[1:]]) for c in checks]
        if self.runtime == "shell":
            got = []
            for check, args in checks:
                r = self.sb.exec([PROBE, check, *args])
                assert r.reason == "exited" and r.exit_code != 100, (check, args, r)
                got.append(r.exit_code)
            return got
        r = self.sb.exec(PY_RUNNER, env={"CHECKS": json.dumps(
            [(PY_CHECKS[check], args) for check, args in checks])})
        assert r.exit_code == 0, (checks, r)
        return json.loads(r.stdout)

    def errno(self, check, *args):
        return self.errnos([(check, *args)])[0]

    def report(self, what):
        """What the probe's reporting checks print, computed the same way in Python."""
        if self.runtime == "shell":
            r = self.sb.exec([PROBE, what])
            assert r.exit_code == 0, (what, r)
            return r.stdout.decode().split()
        src = {
            "ids": "print(os.getuid(), os.geteuid(), os.getgid(), os.getegid())",
            "prctl-nnp": "import ctypes\n"  # PR_GET_NO_NEW_PRIVS
                         "print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))",
            "prctl-seccomp": "import ctypes\n"  # PR_GET_SECCOMP
                             "print(ctypes.CDLL(None).prctl(21, 0, 0, 0, 0))",
            "open-fds": "for fd in range(65536):\n    try:\n        os.fstat(fd)\n"
                        "    except OSError:\n        continue\n    print(fd)",
        }[what]
        r = self.sb.exec("import os\n" + src)
        assert r.exit_code == 0, (what, r)
        return r.stdout.decode().split()


def upload_probe(sb):
    """The probe, through an exec's stdin rather than the files API, so that
    these checks depend on exec alone."""
    r = sb.exec("cat > corral-probe && chmod 755 corral-probe",
                stdin=(BUILD / "corral-probe").read_bytes())
    assert r.exit_code == 0, r


@pytest.fixture(params=["shell", "python"])
def inside(request, client):
    with create_fn(client, request.param, cpus=1) as sb:  # a whole CPU: many checks, quickly
        if request.param == "shell":
            upload_probe(sb)
        yield Inside(sb, request.param)


@pytest.fixture
def other(client, corrald):
    """Another function sandbox, with a call running and a file of its own."""
    sb = create_fn(client, "shell")
    t = threading.Thread(target=lambda: sb.exec(["sleep", "60"], timeout=60))
    try:
        uid = sb.info["function"]["uid"]
        sb.scratch = Path(sb.info["function"]["scratch"])
        secret = sb.scratch / "secret"
        secret.write_text("the other sandbox's")
        os.chown(secret, uid, uid)
        secret.chmod(0o644)
        t.start()
        deadline = time.monotonic() + 5
        while not (procs := live_processes(uid, corrald)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procs, "the other sandbox's call did not start"
        sb.sleeper = procs[0][0]
        yield sb
    finally:
        sb.destroy()
        if t.is_alive():
            t.join(10)


def landlock_abi():
    libc = ctypes.CDLL(None, use_errno=True)
    r = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(VERSION): 444 everywhere
    return max(r, 0)


# ---- files ----

def test_host_files_are_unreadable(inside, corrald, other):
    secret = Path("/tmp") / f"corral-it-secret-{uuid.uuid4().hex}"
    secret.write_text("host secret")
    secret.chmod(0o644)  # readable by anyone: only the jail stands in the way
    state = corrald.state_dir
    try:
        paths = [secret, "/etc/hostname", "/etc/passwd", "/root", "/home", state,
                 state / "sandboxes", state / "run", state / "run" / "functions",
                 corrald.token_file, other.scratch, other.scratch / "secret",
                 f"/proc/{corrald.pid}/environ", "/proc/1/environ", "/proc/self/environ"]
        got = dict(zip(map(str, paths), map(errno.errorcode.get,
                                             inside.errnos([("open", p) for p in paths]))))
        assert got == dict.fromkeys(got, "EACCES"), got
        # and what a runtime needs stays readable, as does its own scratch dir
        readable = ["/usr/bin/env", "/etc/ld.so.cache", inside.sb.info["function"]["scratch"]]
        assert inside.errnos([("open", p) for p in readable]) == [0] * 3
    finally:
        secret.unlink()


def test_writes_outside_the_scratch_dir_are_denied(inside, corrald, other):
    name = f"corral-it-{uuid.uuid4().hex}"
    targets = [Path("/tmp") / name, Path("/var/tmp") / name, Path("/dev/shm") / name,
               corrald.state_dir / name, other.scratch / name, Path("/usr/local") / name,
               Path("/etc") / name]
    try:
        got = dict(zip(map(str, targets), map(errno.errorcode.get,
                                               inside.errnos([("write", p) for p in targets]))))
        assert got == dict.fromkeys(got, "EACCES"), got
        assert not [p for p in targets if p.exists()]
        assert inside.errnos([("write", "/dev/null"), ("write", "mine")]) == [0, 0]
        assert (Path(inside.sb.info["function"]["scratch"]) / "mine").exists()
    finally:
        for p in targets:
            if p.exists():
                p.unlink()


# ---- processes ----

def test_other_processes_cannot_be_signalled(inside, corrald, other):
    zygote = inside.sb.info["function"]["zygote_pid"]
    targets = {"corrald": corrald.pid, "the zygote": zygote, "pytest": os.getpid(), "init": 1,
               "another sandbox's process": other.sleeper}
    got = dict(zip(targets, map(errno.errorcode.get,
                                inside.errnos([("kill", pid) for pid in targets.values()]))))
    assert got == dict.fromkeys(targets, "EPERM"), got


def test_another_sandboxs_process_survives_a_sigkill(client, corrald, other):
    with create_fn(client, "python") as sb:
        r = sb.exec(f"import os\ntry:\n    os.kill({other.sleeper}, 9)\n"
                    "except PermissionError:\n    print('EPERM')")
        assert r.stdout == b"EPERM\n", r
    assert Path(f"/proc/{other.sleeper}").exists(), "the other sandbox's process was killed"


def test_ptrace_is_refused(inside, corrald, other):
    assert inside.errnos([("ptrace", corrald.pid), ("ptrace", other.sleeper)]) == [errno.EPERM] * 2


@pytest.mark.parametrize("check", [
    "mount", "unshare-user", "unshare-net", "clone-newns", "setns", "bpf", "keyctl",
    "userfaultfd", "perf", "kexec", "init-module", "io-uring", "reboot", "swapon", "settime",
])
def test_seccomp_denies(client, check):
    with create_fn(client, "shell") as sb:
        upload_probe(sb)
        r = sb.exec([PROBE, check])
        assert r.exit_code == errno.EPERM, (check, errno.errorcode.get(r.exit_code), r)


@pytest.mark.parametrize("check", ["mount", "unshare-user", "unshare-net"])
def test_seccomp_denies_python(client, check):
    with create_fn(client, "python") as sb:
        assert Inside(sb, "python").errno(check) == errno.EPERM


def test_pids_limit(client):
    with create_fn(client, "shell", pids=16) as sb:
        upload_probe(sb)
        r = sb.exec([PROBE, "forks", "100"])
        assert r.exit_code == errno.EAGAIN, r
        assert int(r.stdout) < 16, r


# ---- network ----

def test_no_network_but_unix_socketpairs(inside, corrald):
    """No socket(2) at all (seccomp: EACCES), so no network and no host unix
    socket; socketpair(AF_UNIX) for talking to its own children."""
    got = inside.errnos([("socket-inet",), ("tcp-connect", corrald.tcp_port), ("socketpair",),
                         ("unix-connect", corrald.socket_path)])
    assert got == [errno.EACCES, errno.EACCES, 0, errno.EACCES], \
        "AF_INET, corrald's TCP port, a socketpair, corrald's unix socket: " + \
        str([errno.errorcode.get(e, e) for e in got])


def test_host_abstract_unix_sockets_are_out_of_reach(inside):
    if landlock_abi() < 6:
        pytest.skip(f"Landlock ABI {landlock_abi()} has no abstract-unix scope (6 has)")
    name = f"corral-it-{uuid.uuid4().hex}"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind("\0" + name)
    srv.listen()
    try:
        assert inside.errno("abstract-connect", name) in (errno.EPERM, errno.EACCES), \
            "seccomp refuses socket(2) (EACCES); Landlock's scope would refuse connect (EPERM)"
    finally:
        srv.close()


def test_host_unix_sockets_are_out_of_reach(inside):
    """A host service on a unix socket anyone may connect to (syslog's
    /dev/log, D-Bus's system bus) is the host's, as its TCP ports are."""
    path = Path("/tmp") / f"corral-it-{uuid.uuid4().hex[:12]}.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    path.chmod(0o777)
    srv.listen()
    try:
        got = inside.errno("unix-connect", path)
        assert got != 0, f"a call connected to the host's {path}"
    finally:
        srv.close()
        path.unlink()


# ---- what a call holds ----

def test_no_descriptor_of_corrald_leaks_in(inside):
    assert inside.report("open-fds") == ["0", "1", "2"]


def test_no_environment_of_corrald_leaks_in(client, runtime_env_cmd):
    runtime, cmd = runtime_env_cmd
    with create_fn(client, runtime) as sb:
        scratch = sb.info["function"]["scratch"]
        env = parse_env(sb.exec(cmd).stdout)
        assert set(env) == {"HOME", "TMPDIR", "PATH"}, env
        assert env["HOME"] == env["TMPDIR"] == scratch
    with create_fn(client, runtime, env={"SPEC": "s"}) as sb:
        env = parse_env(sb.exec(cmd, env={"EXEC": "e"}).stdout)
        assert set(env) == {"HOME", "TMPDIR", "PATH", "SPEC", "EXEC"}, env


@pytest.fixture(params=["shell", "python"])
def runtime_env_cmd(request):
    return request.param, (["env"] if request.param == "shell" else
                           "import os\nfor k, v in os.environ.items():\n    print(f'{k}={v}')")


def parse_env(out):
    return dict(line.split("=", 1) for line in out.decode().splitlines())


def test_unprivileged_and_a_uid_per_sandbox(inside, other):
    uid = inside.sb.info["function"]["uid"]
    assert uid != 0 and uid != other.info["function"]["uid"]
    assert inside.report("ids") == [str(uid)] * 4


def test_no_new_privs_and_seccomp(inside):
    assert inside.report("prctl-nnp") == ["1"]
    assert inside.report("prctl-seccomp") == ["2"]  # filter mode


def test_setuid_binaries_do_not_elevate(client):
    with create_fn(client, "shell") as sb:
        scratch = Path(sb.info["function"]["scratch"])
        if os.statvfs(scratch).f_flag & os.ST_NOSUID:
            pytest.skip(f"{scratch} is on a nosuid mount: setuid bits mean nothing there")
        # A root-owned setuid program in reach of the call, as on any host.
        suid = scratch / "suid-probe"
        shutil.copyfile(BUILD / "corral-probe", suid)
        os.chown(suid, 0, 0)
        suid.chmod(0o4755)
        uid = sb.info["function"]["uid"]
        r = sb.exec(["./suid-probe", "ids"])
        assert r.stdout.split() == [str(uid).encode()] * 4, r


def test_host_view_of_a_running_call(client, corrald, runtime_sleep):
    runtime, cmd = runtime_sleep
    sb = create_fn(client, runtime)
    uid = sb.info["function"]["uid"]
    scratch = sb.info["function"]["scratch"]
    t = threading.Thread(target=lambda: sb.exec(cmd, timeout=60))
    t.start()
    try:
        deadline = time.monotonic() + 5
        while not (procs := live_processes(uid, corrald)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(procs) == 1, procs
        pid = procs[0][0]
        while True:  # its uid is the sandbox's a moment before its jail is whole,
            # and it holds its status pipe until it has started the call
            status = dict(line.split(":", 1) for line in
                          Path(f"/proc/{pid}/status").read_text().splitlines())
            started = "1000" not in os.listdir(f"/proc/{pid}/fd")
            if (status["Seccomp"].strip() == "2" and started) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        facts = {k: status[k].split() for k in
                 ("Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "CapEff", "CapPrm", "CapAmb")}
        assert facts == {"Uid": [str(uid)] * 4, "Gid": [str(uid)] * 4, "Groups": [],
                         "NoNewPrivs": ["1"], "Seccomp": ["2"], "CapEff": ["0" * 16],
                         "CapPrm": ["0" * 16], "CapAmb": ["0" * 16]}, facts
        # (a dynamic linker opens and closes its libraries just after exec:
        # what stays open is what counts)
        deadline = time.monotonic() + 5
        while (fds := sorted(os.listdir(f"/proc/{pid}/fd"), key=int)) != ["0", "1", "2"] and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        assert fds == ["0", "1", "2"], fds
        # (the python runtime's call shows its zygote's: it changes os.environ, not this)
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert {e.split(b"=")[0] for e in env if e} <= {b"HOME", b"TMPDIR", b"PATH"}, env
        assert os.readlink(f"/proc/{pid}/cwd") == scratch
        assert os.getsid(pid) == pid, "each call leads a session of its own"
    finally:
        sb.destroy()
        t.join(10)


@pytest.fixture(params=["shell", "python"])
def runtime_sleep(request):
    return request.param, (["sleep", "30"] if request.param == "shell" else
                           "import time; time.sleep(30)")
