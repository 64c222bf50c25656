"""Isolation of the function backend, checked from inside and from the host.

Inside, the same attempts are made twice: with corral-probe
(tests/probe/probe.c, static) in the shell runtime, whose exit code is the
errno its one attempt got, and with Python code in the python runtime.  A
function sandbox's namespaces (mount, pid, ipc, uts, net, cgroup, time:
lib/backend/function/keeper.h) leave the host's files, processes, IPC
objects and network out of the sandbox altogether (ENOENT, ESRCH,
ECONNREFUSED); within them, the jail (jail.h) adds Landlock (EACCES outside
the system dirs, /etc, /proc, /dev/shm and the scratch dir), seccomp
(ptrace, mount, namespaces, bpf, keyctl... EPERM; socket families but
local, IP and netlink EAFNOSUPPORT), and the sandbox's unprivileged uid
(EPERM against its keeper).  From the host, /proc shows what a running call
holds.
"""

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
from test_function import create_fn, host_path, live_processes

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
    "socket-family": "socket.socket(int(A[0]), socket.SOCK_STREAM)",
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
        sb.scratch = host_path(sb)
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


# ---- files ----

def test_host_files_are_out_of_reach(inside, corrald, other):
    """Nothing of the host's tree, nor of its processes, is in the sandbox's
    mount and pid namespaces (ENOENT); its PID 1, the keeper, is root's and
    fenced (EACCES)."""
    secret = Path("/tmp") / f"corral-it-secret-{uuid.uuid4().hex}"
    secret.write_text("host secret")
    secret.chmod(0o644)  # readable by anyone: only the sandbox's walls stand in the way
    state = corrald.state_dir
    try:
        paths = [secret, "/root", "/home", "/sys", "/run", state, state / "sandboxes",
                 state / "run", corrald.token_file, other.scratch, other.scratch / "secret",
                 f"/proc/{corrald.pid}/environ", f"/proc/{other.sleeper}/environ",
                 "/proc/1/environ", "/etc/shadow", "/usr/../etc/shadow"]
        got = dict(zip(map(str, paths), map(errno.errorcode.get,
                                             inside.errnos([("open", p) for p in paths]))))
        assert got.pop("/proc/1/environ") == "EACCES", "the keeper (its PID 1) is not the sandbox's"
        assert set(got.values()) == {"ENOENT"}, got
        # and what a runtime needs stays readable, as does its own scratch dir
        readable = ["/usr/bin/env", "/etc/ld.so.cache", "/etc/hosts", "/proc/self/status",
                    inside.sb.info["function"]["scratch"]]
        assert inside.errnos([("open", p) for p in readable]) == [0] * len(readable)
    finally:
        secret.unlink()


def test_etc_is_the_sandboxs(client):
    """/etc holds what a program needs of the host's (the dynamic linker's
    cache, the time zone) and files made for the sandbox: its hostname,
    hosts, resolv.conf, passwd and group; none of the host's own."""
    with create_fn(client, "python") as sb:
        r = sb.exec("import os, pwd, socket\n"
                    "print(sorted(os.listdir('/etc')))\n"
                    "print(open('/etc/hostname').read().strip(), socket.gethostname())\n"
                    "print(pwd.getpwuid(os.getuid()).pw_name, os.path.expanduser('~'))")
        assert r.exit_code == 0, r
        listing, names, user = r.stdout.decode().splitlines()
        assert eval(listing) == sorted(["alternatives", "group", "hostname", "hosts",  # noqa: S307
                                        "ld.so.cache", "localtime", "nsswitch.conf", "passwd",
                                        "resolv.conf"]), listing
        assert names.split() == [sb.id, sb.id]
        assert user.split() == ["sandbox", "/scratch"]


def test_writes_outside_the_scratch_dir_are_denied(inside, corrald, other):
    name = f"corral-it-{uuid.uuid4().hex}"
    targets = [Path("/tmp") / name, Path("/var/tmp") / name, corrald.state_dir / name,
               other.scratch / name, Path("/usr/local") / name, Path("/etc") / name,
               Path("/") / name, Path("/proc") / name]
    try:
        got = dict(zip(map(str, targets), map(errno.errorcode.get,
                                               inside.errnos([("write", p) for p in targets]))))
        assert set(got.values()) <= {"EACCES", "ENOENT", "EROFS"}, got
        assert not [p for p in targets if p.exists()]
        assert inside.errnos([("write", "/dev/null"), ("write", "mine")]) == [0, 0]
        assert host_path(inside.sb, "mine").exists()
    finally:
        for p in targets:
            if p.exists():
                p.unlink()


def test_dev_shm_is_the_sandboxs(inside, other):
    """/dev/shm (POSIX shared memory and semaphores) is the sandbox's own,
    on its tmpfs: not the host's, nor another sandbox's."""
    name = f"corral-it-{uuid.uuid4().hex}"
    assert inside.errno("write", f"/dev/shm/{name}") == 0
    assert not (Path("/dev/shm") / name).exists(), "written to the host's /dev/shm"
    assert not (Path(other.info["function"]["root"]) / "dev/shm" / name).exists()
    assert (Path(inside.sb.info["function"]["root"]) / "dev/shm" / name).exists()


# ---- processes ----

def test_other_processes_cannot_be_signalled(inside, corrald, other):
    """The host's processes and other sandboxes' are not in the sandbox's
    pid namespace (ESRCH); its PID 1, the keeper, is root's (EPERM)."""
    zygote = inside.sb.info["function"]["zygote_pid"]
    targets = {"corrald": corrald.pid, "the zygote": zygote, "pytest": os.getpid(), "init": 1,
               "another sandbox's process": other.sleeper}
    got = dict(zip(targets, map(errno.errorcode.get,
                                inside.errnos([("kill", pid) for pid in targets.values()]))))
    assert got.pop("init") == "EPERM", got
    assert set(got.values()) == {"ESRCH"}, got
    for pid in (corrald.pid, zygote, other.sleeper, inside.sb.info["function"]["pid"]):
        assert Path(f"/proc/{pid}").exists()


def test_another_sandboxs_process_survives_a_sigkill(client, corrald, other):
    with create_fn(client, "python") as sb:
        r = sb.exec(f"import errno, os\ntry:\n    os.kill({other.sleeper}, 9)\n"
                    "except OSError as e:\n    print(errno.errorcode[e.errno])")
        assert r.stdout == b"ESRCH\n", r  # not in its pid namespace
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

def test_loopback_only(inside, corrald):
    """The sandbox's own network namespace, with loopback only: sockets
    work, and nothing of the host's is there: not corrald's TCP port, nor
    its unix socket (not in the mount namespace either)."""
    got = inside.errnos([("socket-inet",), ("tcp-connect", corrald.tcp_port), ("socketpair",),
                         ("unix-connect", corrald.socket_path)])
    assert got == [0, errno.ECONNREFUSED, 0, errno.ENOENT], \
        "AF_INET, corrald's TCP port, a socketpair, corrald's unix socket: " + \
        str([errno.errorcode.get(e, e) for e in got])


def test_loopback_serves_within_a_call(client):
    with create_fn(client, "python") as sb:
        r = sb.exec("import socket, threading\n"
                    "srv = socket.create_server(('127.0.0.1', 0))\n"
                    "port = srv.getsockname()[1]\n"
                    "threading.Thread(target=lambda: srv.accept()[0].sendall(b'hi')).start()\n"
                    "with socket.create_connection(('localhost', port), timeout=5) as c:\n"
                    "    print(c.recv(2).decode())\n"
                    "print(socket.gethostbyname(socket.gethostname()))")
        assert r.exit_code == 0 and r.stdout == b"hi\n127.0.1.1\n", r


@pytest.mark.parametrize("family", [40, 38, 17])  # AF_VSOCK, AF_ALG, AF_PACKET
def test_socket_families_outside_local_and_ip_are_refused(client, family):
    with create_fn(client, "python") as sb:
        assert Inside(sb, "python").errno("socket-family", family) == errno.EAFNOSUPPORT


def test_host_abstract_unix_sockets_are_out_of_reach(inside):
    """Abstract unix sockets belong to a network namespace: the host's are
    not in the sandbox's (ECONNREFUSED), and Landlock's scope (ABI 6)
    would refuse one out of the call's domain (EPERM)."""
    name = f"corral-it-{uuid.uuid4().hex}"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind("\0" + name)
    srv.listen()
    try:
        assert inside.errno("abstract-connect", name) in (errno.ECONNREFUSED, errno.EPERM)
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
        scratch = host_path(sb)
        assert os.statvfs(scratch).f_flag & os.ST_NOSUID, "the sandbox's tmpfs is nosuid"
        # A root-owned setuid program in reach of the call: neither the mount
        # nor no_new_privs lets it run as root.
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
