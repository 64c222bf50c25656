"""The function backend against the sandbox contract (test_sdk.py's, for
containers), for both runtimes where the behaviour is defined for it.

A function sandbox is a keeper (a fork of the runtime's zygote, PID 1 of
namespaces of the sandbox's own, whose root is a tmpfs of disk_mb), a
cgroup and an unprivileged uid of its own; each exec is a jailed fork of
the keeper: `shell` runs argv (a string cmd is /bin/sh -c), `python` runs a
string cmd as Python source in a fresh __main__.  The host sees the
sandbox's files under ``/proc/<keeper>/root`` (``host_path``).  Where it differs from a container by
design, the difference is asserted: never root (`user` is ignored), the
working directory is always the scratch dir (which is also HOME, TMPDIR
and the root of the files API), no sessions, single files only.
"""

import glob
import io
import tarfile
import threading
import time
from pathlib import Path

import pytest

import corral
from conftest import SMALL

RUNTIMES = ["shell", "python"]

# Per-runtime spellings of the same program.
CODE = {
    "shell": {
        "exit": "exit {}",
        "out_err": "echo out; echo err >&2",
        "cat_stdin": ["cat"],
        "env": "echo $A $B $C",
        "tree_sleeps": "sleep 100 & sleep 100; wait",
        "flood": "head -c 100000 /dev/zero | tr '\\0' a; echo err >&2",
        "flood_err": "head -c 100000 /dev/zero | tr '\\0' e >&2; echo out",
        "unicode": "printf 'été ✓ 日本\\n'",
        "write_file": "printf made-inside > out.txt",
        "read_file": "cat data.bin",
        "cwd_home_tmp": "pwd; echo $HOME; echo $TMPDIR",
        "uid": "id -u",
        "kill_self": "kill -9 $$",
        "sleep": "sleep 30",
    },
    "python": {
        "exit": "import sys; sys.exit({})",
        "out_err": "import sys\nprint('out')\nsys.stderr.write('err\\n')",
        "cat_stdin": "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())",
        "env": "import os; print(*(os.environ[k] for k in 'ABC' if k in os.environ))",
        "tree_sleeps": ("import subprocess, time\n"
                        "subprocess.Popen(['sleep', '100'])\n"
                        "subprocess.Popen(['sh', '-c', 'sleep 100 & sleep 100'])\n"
                        "time.sleep(100)"),
        "flood": "import sys\nsys.stdout.write('a' * 100000)\nsys.stderr.write('err\\n')",
        "flood_err": "import sys\nsys.stderr.write('e' * 100000)\nprint('out')",
        "unicode": "print('été ✓ 日本')",
        "write_file": "open('out.txt', 'w').write('made-inside')",
        "read_file": "import sys; sys.stdout.buffer.write(open('data.bin', 'rb').read())",
        "cwd_home_tmp": "import os; print(os.getcwd(), os.environ['HOME'], "
                        "os.environ['TMPDIR'], sep='\\n')",
        "uid": "import os; print(os.getuid())",
        "kill_self": "import os; os.kill(os.getpid(), 9)",
        "sleep": "import time; time.sleep(30)",
    },
}


def create_fn(client, runtime="shell", **kw):
    """A function sandbox, small (as conftest's SMALL) unless told otherwise."""
    return client.create(backend="function", runtime=runtime, **{**SMALL, **kw})


@pytest.fixture(params=RUNTIMES)
def runtime(request):
    return request.param


@pytest.fixture
def fn(client, runtime):
    with create_fn(client, runtime) as sb:
        yield sb


def code(runtime, what, *args):
    c = CODE[runtime][what]
    return c.format(*args) if args else c


def host_path(sb, path=""):
    """Where the host sees ``path`` of the sandbox's scratch dir (its
    keeper's root, as ``info["function"]["root"]`` says)."""
    fn = sb.info["function"]
    return Path(fn["root"] + fn["scratch"]) / path


def live_processes(uid, corrald):
    """The host's processes of a function sandbox (its ``uid``, in a cgroup
    of this ``corrald``'s) that are not zombies, as ``[(pid, cmdline)]``.
    (An orphan of a killed call is reparented to the host's init, and stays
    a zombie until that reaps it: dead, not running.)"""
    found = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            status = Path(d, "status").read_text()
            cgroups = Path(d, "cgroup").read_text()
            cmdline = Path(d, "cmdline").read_bytes()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if (int(fields["Uid"].split()[0]) == uid and f"/{corrald.cgroup_parent}/" in cgroups
                and not fields["State"].strip().startswith("Z")):
            found.append((int(d[6:]), cmdline))
    return found


def wait_no_processes(uid, corrald, timeout=3):
    """SIGKILL is asynchronous: give the killed a moment to be gone."""
    deadline = time.monotonic() + timeout
    while (procs := live_processes(uid, corrald)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return procs


# ---- the spec ----

def test_create_and_inspect(client):
    with create_fn(client, "python") as sb:
        info = sb.inspect()
        assert info["backend"] == "function" and info["state"] == "ready", info
        assert info["spec"]["runtime"] == "python"
        fn_info = info["function"]
        assert fn_info["runtime"] == "python" and fn_info["uid"] > 0
        assert fn_info["scratch"] == "/scratch" and fn_info["pid"] > 0, fn_info
        scratch = host_path(sb)
        assert scratch.is_dir(), fn_info
        assert scratch.stat().st_uid == fn_info["uid"]
        assert {"cpu_s", "memory_bytes", "pids", "oom_kills", "disk_bytes",
                "disk_limit_bytes"} <= set(info["usage"])
    # the scratch dir goes with the sandbox, and its keeper
    assert not scratch.exists()
    assert not Path(f"/proc/{fn_info['pid']}").exists()
    with client.create(backend="function", **SMALL) as sb:
        assert sb.info["spec"]["runtime"] == "shell", "shell is the default runtime"


def test_bad_runtime_is_a_400(client):
    with pytest.raises(corral.InvalidSpec) as e:
        client.create(backend="function", runtime="ruby")
    assert e.value.status == 400 and "ruby" in e.value.message
    for backend in ("container", None):  # explicit, and the default backend
        kw = {"backend": backend} if backend else {}
        with pytest.raises(corral.InvalidSpec) as e:
            client.create(runtime="python", **kw)
        assert e.value.status == 400 and "runtime" in e.value.message, e.value


# ---- exec ----

def test_exit_codes(fn, runtime):
    for n in (0, 1, 42, 255):
        r = fn.exec(code(runtime, "exit", n))
        assert (r.exit_code, r.signal, r.reason) == (n, None, "exited"), (n, r)


def test_stdout_and_stderr(fn, runtime):
    r = fn.exec(code(runtime, "out_err"))
    assert (r.stdout, r.stderr, r.exit_code) == (b"out\n", b"err\n", 0), r


def test_unicode_output(fn, runtime):
    r = fn.exec(code(runtime, "unicode"))
    assert r.stdout == "été ✓ 日本\n".encode(), r


def test_streaming_callbacks(fn, runtime):
    out, err = [], []
    r = fn.exec(code(runtime, "out_err"), on_stdout=out.append, on_stderr=err.append)
    assert b"".join(out) == b"out\n" == r.stdout and b"".join(err) == b"err\n" == r.stderr


def test_stdin(fn, runtime):
    data = bytes(range(256)) * 64
    r = fn.exec(code(runtime, "cat_stdin"), stdin=data)
    assert r.stdout == data, (len(r.stdout), r.stderr)
    r = fn.exec(code(runtime, "cat_stdin"), timeout=5)  # no stdin: at EOF at once
    assert (r.reason, r.stdout) == ("exited", b""), r


def test_env_of_spec_and_exec(client, runtime):
    with create_fn(client, runtime, env={"A": "spec", "B": "spec"}) as sb:
        r = sb.exec(code(runtime, "env"), env={"B": "exec", "C": "exec"})
        assert r.stdout == b"spec exec exec\n", r
        assert sb.exec(code(runtime, "env")).stdout == b"spec spec\n"


def test_signals(fn, runtime):
    r = fn.exec(code(runtime, "kill_self"))
    assert (r.reason, r.signal, r.signal_name, r.exit_code) == ("signaled", 9, "SIGKILL", None), r


def test_timeout_kills_the_whole_process_group(fn, runtime, corrald):
    t0 = time.monotonic()
    r = fn.exec(code(runtime, "tree_sleeps"), timeout=1)
    assert r.reason == "timeout", r
    assert 1 <= r.duration_s < 5 and time.monotonic() - t0 < 5, r
    left = wait_no_processes(fn.info["function"]["uid"], corrald)
    assert not left, f"processes of the sandbox outlived the timeout: {left}"


def test_nothing_an_exec_starts_outlives_it(fn, runtime, corrald):
    """docs/api.md: unlike a container's, a function sandbox's background
    processes end with the exec that started them, a new session's too."""
    src = {"shell": "sleep 30 > /dev/null 2>&1 < /dev/null &\n"
                    "setsid sleep 31 > /dev/null 2>&1 < /dev/null &\necho started",
           "python": "import subprocess\nfor new in (False, True):\n"
                     "    subprocess.Popen(['sleep', '30'], stdin=subprocess.DEVNULL,"
                     " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,"
                     " start_new_session=new)\nprint('started')"}[runtime]
    r = fn.exec(src)
    assert (r.exit_code, r.stdout) == (0, b"started\n"), r
    left = wait_no_processes(fn.info["function"]["uid"], corrald)
    assert not left, f"processes outlived the exec that started them: {left}"


def test_disk_mb_caps_one_big_file(client, runtime):
    with create_fn(client, runtime, disk_mb=1) as sb:
        src = {"shell": "head -c 2000000 /dev/zero > big",
               "python": "open('big', 'wb').write(bytes(2000000))"}[runtime]
        r = sb.exec(src)
        assert r.exit_code != 0 and b"No space left on device" in r.stderr, r
        assert host_path(sb, "big").stat().st_size <= 1 << 20
        assert sb.exec(code(runtime, "out_err")).exit_code == 0, "the sandbox goes on"


def test_output_caps(fn, runtime):
    r = fn.exec(code(runtime, "flood"), max_output_bytes=1000)
    assert r.stdout == b"a" * 1000, len(r.stdout)
    assert r.stdout_truncated and r.truncated and not r.stderr_truncated, r
    assert r.stderr == b"err\n"
    r = fn.exec(code(runtime, "flood_err"), max_output_bytes=1000)
    assert r.stderr == b"e" * 1000 and r.stderr_truncated and not r.stdout_truncated, r
    r = fn.exec(code(runtime, "out_err"), max_output_bytes=1000)
    assert not r.truncated and not r.stdout_truncated and not r.stderr_truncated


def test_concurrent_execs_in_one_sandbox(fn, runtime):
    results = {}

    def work(i):
        results[i] = fn.exec(code(runtime, "exit", i)).exit_code

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: i for i in range(6)}


def test_memory_limit(client):
    with create_fn(client, "python", memory_mb=64) as sb:
        r = sb.exec("b = bytearray(400 << 20)\n"
                    "for i in range(0, len(b), 4096):\n    b[i] = 1\n"
                    "print('survived')", timeout=30)
        assert r.reason in ("oom", "killed") and r.signal == 9, r
        assert b"survived" not in r.stdout
        if r.reason == "oom":
            assert sb.inspect()["usage"]["oom_kills"] >= 1
        assert sb.exec("print('alive')").stdout == b"alive\n", "the sandbox survives its OOM"


def test_fork_bomb_is_contained(client, corrald):
    with create_fn(client, "shell", pids=32) as bomb, create_fn(client, "shell") as bystander:
        # exec: the shell becomes the sleep, with no fork of its own to lose
        # to the bomb (a fork that failed ended it before its timeout)
        r = bomb.exec("f() { f | f & }; f; exec sleep 30", timeout=2)
        assert r.reason == "timeout", r
        assert b"fork" in r.stderr.lower(), "the bomb should have hit the limit"
        usage = bomb.inspect()["usage"]
        assert usage["pids"] <= 32, usage
        left = wait_no_processes(bomb.info["function"]["uid"], corrald)
        assert not left, f"the bomb outlived its timeout: {len(left)} processes"
        assert bomb.exec("echo ok").stdout == b"ok\n"
        assert bystander.exec("echo ok").stdout == b"ok\n"


def test_python_fork_hits_the_pids_limit(client):
    with create_fn(client, "python", pids=16) as sb:
        r = sb.exec("import os, time\nn = 0\ntry:\n"
                    "    while n < 100:\n"
                    "        if os.fork() == 0:\n"
                    "            time.sleep(30)\n"
                    "            os._exit(0)\n"
                    "        n += 1\n"
                    "except BlockingIOError:\n    print(n)", timeout=20)
        assert r.exit_code == 0 and r.stdout.strip().isdigit(), r
        assert int(r.stdout) < 16, r


def test_destroy_kills_a_running_exec(client, runtime, corrald):
    sb = create_fn(client, runtime)
    uid = sb.info["function"]["uid"]
    result = {}

    def run():
        try:
            result["r"] = sb.exec(code(runtime, "tree_sleeps"), timeout=60)
        except corral.Error as e:
            result["e"] = e

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 5
    while (not any(b"sleep" in c for _, c in live_processes(uid, corrald))
           and time.monotonic() < deadline):
        time.sleep(0.02)
    assert live_processes(uid, corrald), "the exec never started"
    t0 = time.monotonic()
    sb.destroy()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 5
    assert "r" in result and result["r"].reason == "killed", result
    assert sb.info["state"] == "destroyed"
    assert not wait_no_processes(uid, corrald), "processes outlived their sandbox's destroy"


# ---- differences from a container, by design ----

def test_never_root_and_user_is_ignored(fn, runtime):
    uid = fn.info["function"]["uid"]
    assert uid != 0
    assert fn.exec(code(runtime, "uid")).stdout == f"{uid}\n".encode()
    for user in ("root", "0", "0:0", "1000:1000"):
        r = fn.exec(code(runtime, "uid"), user=user)
        assert r.stdout == f"{uid}\n".encode(), (user, r)


def test_cwd_home_and_tmpdir_are_the_scratch_dir(client, runtime):
    with create_fn(client, runtime, cwd="/tmp") as sb:
        scratch = sb.info["function"]["scratch"]
        want = f"{scratch}\n{scratch}\n{scratch}\n".encode()
        assert sb.exec(code(runtime, "cwd_home_tmp")).stdout == want, "cwd of the spec is ignored"
        r = sb.exec(code(runtime, "cwd_home_tmp"), cwd="/etc")
        assert r.stdout == want, "cwd of the exec is ignored"
        r = sb.exec(code(runtime, "cwd_home_tmp"), env={"HOME": "/root", "TMPDIR": "/tmp"})
        assert r.stdout == want, "HOME and TMPDIR are the scratch dir's, whatever env says"


def test_sessions_are_refused(fn):
    with pytest.raises(corral.Unsupported) as e:
        fn.session()
    assert e.value.status == 501 and "session" in e.value.message, e.value
    assert fn.exec(CODE[fn.info["function"]["runtime"]]["out_err"]).exit_code == 0


def test_each_exec_starts_fresh(fn, runtime):
    if runtime == "shell":
        fn.exec("export LEFT=behind; cd /")
        assert fn.exec("echo ${LEFT-unset}; pwd").stdout == \
            f"unset\n{fn.info['function']['scratch']}\n".encode()
        return
    r = fn.exec("import xml.dom.minidom, sys\nX = 1\nsys.modules['json'].MARK = 1\nprint('set')")
    assert r.stdout == b"set\n", r
    r = fn.exec("import sys\n"
                "print('X' in globals(), 'xml.dom.minidom' in sys.modules,"
                " hasattr(sys.modules['json'], 'MARK'))\n"
                "import xml.dom.minidom\nprint(xml.dom.minidom.parseString('<a/>').documentElement"
                ".tagName)")
    assert r.stdout == b"False False False\na\n", r


# ---- the python runtime ----

def test_python_syntax_error_is_the_runtimes_error(client):
    with create_fn(client, "python") as sb:
        r = sb.exec("def broken(:\n    pass")
        assert r.reason == "exited" and r.exit_code == 1, r
        assert b"SyntaxError" in r.stderr and r.stdout == b"", r


def test_python_exception_gives_a_traceback(client):
    with create_fn(client, "python") as sb:
        r = sb.exec("print('before')\ndef f():\n    raise ValueError('boom')\nf()")
        assert r.exit_code == 1 and r.stdout == b"before\n", r
        err = r.stderr.decode()
        assert err.startswith("Traceback (most recent call last):"), err
        assert "line 4" in err and "line 3, in f" in err and err.endswith("ValueError: boom\n")


def test_python_system_exit(client):
    with create_fn(client, "python") as sb:
        cases = [("exit(3)", 3, b""), ("import sys; sys.exit('msg')", 1, b"msg\n"),
                 ("import sys; sys.exit()", 0, b""), ("raise SystemExit(7)", 7, b""),
                 ("print('x'); quit(5)", 5, b"")]
        for src, want, stderr in cases:
            r = sb.exec(src)
            assert (r.exit_code, r.stderr, r.reason) == (want, stderr, "exited"), (src, r)


def test_python_buffered_output_is_flushed(client):
    with create_fn(client, "python") as sb:
        r = sb.exec("import sys\nprint('no newline', end='')\nsys.stderr.write('e')")
        assert (r.stdout, r.stderr) == (b"no newline", b"e"), r
        r = sb.exec("print('then', end=' ')\nimport sys; sys.exit(4)")
        assert (r.stdout, r.exit_code) == (b"then ", 4), r
        r = sb.exec("print('then', end=' ')\nraise RuntimeError('x')")
        assert r.stdout == b"then " and b"RuntimeError: x" in r.stderr, r
        big = sb.exec("print('x' * 200000)")
        assert big.stdout == b"x" * 200000 + b"\n"


def test_python_main_module(client):
    with create_fn(client, "python") as sb:
        r = sb.exec("import sys\nprint(__name__, sys.argv)")
        assert r.stdout == b"__main__ ['']\n", r


def test_python_module_in_the_scratch_dir_is_importable(client):
    """As with `python3 -c`, whose sys.path starts with the cwd: a module
    written into the scratch dir (its cwd) is importable, in later execs too."""
    with create_fn(client, "python") as sb:
        sb.exec("open('helper.py', 'w').write('VALUE = 42\\n')")
        r = sb.exec("import helper; print(helper.VALUE)")
        assert (r.exit_code, r.stdout) == (0, b"42\n"), r


def test_python_array_cmd_is_a_clear_error(client):
    with create_fn(client, "python") as sb:
        with pytest.raises(corral.InvalidSpec) as e:
            sb.exec(["print(1)"])
        assert e.value.status == 400 and "string" in str(e.value), e.value


# ---- the shell runtime ----

def test_shell_argv_and_string(client):
    with create_fn(client, "shell") as sb:
        r = sb.exec(["echo", "a  b", "$HOME", ";", "|"])
        assert r.stdout == b"a  b $HOME ; |\n", "argv: no shell in between"
        assert sb.exec(("printf", "%s-", "t", "u")).stdout == b"t-u-"
        assert sb.exec("echo $((1 + 2)) | tr 3 x").stdout == b"x\n"


def test_shell_missing_executable_is_a_404(client):
    """docs/api.md: an executable missing inside the sandbox is 404 not_found."""
    with create_fn(client, "shell") as sb:
        with pytest.raises(corral.NotFound):
            sb.exec(["corral-no-such-command"])


# ---- files: single files in the scratch dir ----

@pytest.fixture
def files_client(corrald_factory):
    """A daemon of the test's own: a fault in the files path fails the test
    that found it, not every test after it on the shared daemon."""
    d = corrald_factory()
    with d.client() as c:
        yield c
    if d.proc.poll() is not None:
        d.start()  # it died: start it again to clean up after itself, then stop it


@pytest.fixture
def files_fn(files_client, runtime):
    sb = create_fn(files_client, runtime)
    yield sb
    try:
        sb.destroy()
    except corral.Unavailable:
        pass  # corrald died under the test, which failed for it; its restart cleans up


def test_files_round_trip_and_persistence(files_fn, runtime):
    fn = files_fn
    data = bytes(range(256)) * 16 + "é".encode()
    assert fn.files.write("/data.bin", data) == {"path": "/data.bin", "bytes": len(data)}
    assert fn.files.read("/data.bin") == data
    assert fn.exec(code(runtime, "read_file")).stdout == data, "the exec sees the file"
    assert fn.exec(code(runtime, "write_file")).exit_code == 0
    assert fn.files.read("/out.txt") == b"made-inside", "the files API sees what an exec made"
    assert fn.exec(code(runtime, "read_file")).stdout == data, "files persist across execs"
    assert host_path(fn, "data.bin").read_bytes() == data
    uid = fn.info["function"]["uid"]
    assert host_path(fn, "data.bin").stat().st_uid == uid, "written files belong to the sandbox"
    fn.files.write("/empty", b"")
    assert fn.files.read("/empty") == b""
    with pytest.raises(corral.NotFound):
        fn.files.read("/missing")


def test_files_write_mode_and_execute(files_client):
    with create_fn(files_client, "shell") as sb:
        sb.files.write("/run.sh", b"#!/bin/sh\necho ran\n", mode=0o750)
        assert sb.exec("stat -c %a run.sh; ./run.sh").stdout == b"750\nran\n"


def test_files_directories_are_refused_cleanly(files_client):
    """Single files only: a directory is a clear 4xx/501, not a crash."""
    with create_fn(files_client, "shell") as sb:
        sb.exec("mkdir sub && echo x > sub/f")
        assert sb.files.read("/sub/f") == b"x\n"
        with pytest.raises(corral.Error) as e:
            sb.files.read("/sub")
        assert e.value.status in (400, 501), e.value
        tar = io.BytesIO()
        with tarfile.open(fileobj=tar, mode="w") as t:
            info = tarfile.TarInfo("f.txt")
            info.size = 1
            t.addfile(info, io.BytesIO(b"x"))
        with pytest.raises(corral.Error) as e:
            sb.files.put_dir(tar.getvalue(), "/tree")
        assert e.value.status in (400, 415, 501), e.value
    assert files_client.health()["status"] == "ok", "corrald died"


def test_files_stay_in_the_scratch_dir(files_client):
    with create_fn(files_client, "shell") as sb:
        sb.exec("ln -s /etc/hostname link; ln -s ../../../../../../etc/hostname rel")
        for path in ("/link", "/rel"):
            with pytest.raises(corral.Error) as e:
                sb.files.read(path)
            assert e.value.status in (400, 403, 404), (path, e.value)
        with pytest.raises(corral.InvalidSpec):
            sb.files.read("/../../etc/hostname")
