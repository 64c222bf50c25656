"""The corral CLI (build/corral) against the shared corrald: exit codes,
cleanup on signals and closed pipes, cp in both directions, sessions, the
debug trace and the output cap.  Each test drives the real binary with
CORRAL_URL pointing at the daemon."""

import os
import signal
import stat
import subprocess
import time
import uuid

import pytest

from conftest import BUILD, wait_for

CORRAL = BUILD / "corral"
MIB = 1 << 20


def env_for(corrald, tcp=False, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["CORRAL_URL"] = corrald.tcp_url if tcp else corrald.url
    if tcp:
        env["CORRAL_TOKEN"] = corrald.token
    env.update(extra)
    return env


def corral(corrald, *args, input=None, stdin=None, stdout=subprocess.PIPE, timeout=60, tcp=False,
           **extra_env):
    """Run build/corral to its end: a CompletedProcess with bytes output."""
    return subprocess.run([str(CORRAL), *args], input=input, stdin=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, env=env_for(corrald, tcp, **extra_env),
                          timeout=timeout)


def spawn(corrald, *args, **kw):
    return subprocess.Popen([str(CORRAL), *args], env=env_for(corrald), **kw)


def sessions(corrald, sb):
    return corrald.request("GET", f"/v1/sandboxes/{sb.id}/sessions").json()["sessions"]


def sh_in(sb, cmd):
    r = sb.exec(cmd)
    assert r.exit_code == 0, r
    return r.stdout


# ---- exit codes and messages ----


def test_the_command_status_passes_through(corrald, sandbox):
    assert corral(corrald, "exec", sandbox.id, "--", "true").returncode == 0
    r = corral(corrald, "exec", sandbox.id, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (r.returncode, r.stdout, r.stderr) == (7, b"out\n", b"err\n")
    assert corral(corrald, "exec", sandbox.id, "--", "sh", "-c", "kill -TERM $$").returncode == 143
    r = corral(corrald, "exec", "--timeout", "0.3", sandbox.id, "--", "sleep", "5")
    assert r.returncode == 124 and b"timed out" in r.stderr


@pytest.mark.parametrize("args, code, words", [
    (["frobnicate"], 2, [b"unknown command 'frobnicate'"]),
    (["exec", "--bogus", "sb-x", "--", "true"], 2, [b"unknown option '--bogus'"]),
    (["run", "--memory-mb", "8", "--", "true"], 2, [b"--memory-mb", b"8"]),
    (["run", "--timeout", "soon", "--", "true"], 2, [b"--timeout", b"soon"]),
    (["exec", "sb-nope-000000", "--", "true"], 1, [b"sb-nope-000000", b"not found"]),
    (["inspect", "sb-nope-000000"], 1, [b"sb-nope-000000", b"not found"]),
    (["rm", "sb-nope-000000"], 1, [b"sb-nope-000000", b"not found"]),
    (["cp", "sb-nope-000000:/etc/passwd", "-"], 1, [b"sb-nope-000000", b"not found"]),
    (["cp", "a", "b"], 2, [b"ID:/path"]),
])
def test_errors_exit_nonzero_and_name_the_problem(corrald, args, code, words):
    r = corral(corrald, *args)
    assert r.returncode == code, r
    assert r.stderr.startswith(b"corral: ") and r.stderr.count(b"\n") == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert r.stdout == b""


def test_a_missing_executable_names_it(corrald, sandbox):
    r = corral(corrald, "exec", sandbox.id, "--", "/no/such/program")
    assert r.returncode == 1 and b"/no/such/program" in r.stderr


# ---- run always destroys its sandbox ----


def run_sandboxes(corrald, tag):
    return corrald.sandboxes(cli=tag)


def assert_all_destroyed(corrald, tag, expect=1):
    found = run_sandboxes(corrald, tag)
    assert len(found) == expect, found
    assert all(s["state"] == "destroyed" for s in found), found


def test_run_destroys_its_sandbox(corrald):
    tag = uuid.uuid4().hex[:12]
    r = corral(corrald, "run", "--memory-mb", "128", "--label", f"cli={tag}", "--",
               "sh", "-c", "echo hi; exit 3")
    assert (r.returncode, r.stdout) == (3, b"hi\n")
    assert_all_destroyed(corrald, tag)


def test_run_with_a_closed_stdout_leaves_no_sandbox(corrald):
    # corral run ... | head -c1: our reader takes one byte and goes away
    # while the command keeps writing.  SIGPIPE must not kill corral before
    # it destroys the sandbox.
    tag = uuid.uuid4().hex[:12]
    p = spawn(corrald, "run", "--memory-mb", "128", "--label", f"cli={tag}", "--", "yes",
              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.read(1) == b"y"
    p.stdout.close()
    rc = p.wait(timeout=30)
    err = p.stderr.read()
    assert rc == 128 + signal.SIGPIPE, (rc, err)
    assert err == b""
    assert_all_destroyed(corrald, tag)


def test_run_destroys_its_sandbox_on_sigterm_while_stdout_is_stuck(corrald):
    # A reader that stops reading blocks our writes; SIGTERM must still get
    # through to the destroy.
    tag = uuid.uuid4().hex[:12]
    r, w = os.pipe()
    try:
        p = spawn(corrald, "run", "--memory-mb", "128", "--label", f"cli={tag}", "--", "yes",
                  stdout=w, stderr=subprocess.PIPE)
        os.close(w)
        wait_for(lambda: [s for s in run_sandboxes(corrald, tag) if s["state"] == "ready"], 15)
        time.sleep(0.5)  # long enough to fill the pipe
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=15) == 128 + signal.SIGTERM
    finally:
        os.close(r)
    assert_all_destroyed(corrald, tag)


def test_run_destroys_its_sandbox_on_sigint(corrald):
    tag = uuid.uuid4().hex[:12]
    p = spawn(corrald, "run", "--memory-mb", "128", "--label", f"cli={tag}", "--", "sleep", "60",
              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(lambda: [s for s in run_sandboxes(corrald, tag) if s["state"] == "ready"], 15)
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=15) == 128 + signal.SIGINT
    assert_all_destroyed(corrald, tag)


# ---- cp ----


def make_tree(root):
    root.mkdir()
    (root / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "secret").write_bytes(os.urandom(70000))
    (root / "secret").chmod(0o600)
    (root / "empty").write_bytes(b"")
    (root / "empty").chmod(0o640)
    (root / "sub").mkdir()
    (root / "sub").chmod(0o750)
    (root / "sub" / "deep.txt").write_bytes(b"deep\n" * 1000)
    (root / "sub" / "deep.txt").chmod(0o444)
    (root / "link").symlink_to("sub/deep.txt")


def tree(root):
    """{relative path: (kind, mode, content or link target)} of a tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", None, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), None)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), open(p, "rb").read())
    return out


def test_cp_round_trip_of_a_directory(corrald, sandbox, tmp_path):
    src = tmp_path / "src"
    make_tree(src)
    assert corral(corrald, "cp", str(src), f"{sandbox.id}:/work/tree").returncode == 0
    assert sh_in(sandbox, "stat -c '%a %n' /work/tree/run.sh /work/tree/secret /work/tree/sub") \
        == b"755 /work/tree/run.sh\n600 /work/tree/secret\n750 /work/tree/sub\n"
    back = tmp_path / "back"
    r = corral(corrald, "cp", f"{sandbox.id}:/work/tree", str(back))
    assert r.returncode == 0, r.stderr
    assert tree(back) == tree(src)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_cp_round_trip_of_a_file(corrald, sandbox, tmp_path):
    data = os.urandom(300000)
    f = tmp_path / "tool"
    f.write_bytes(data)
    f.chmod(0o750)
    assert corral(corrald, "cp", str(f), f"{sandbox.id}:/opt/").returncode == 0
    assert sh_in(sandbox, "stat -c '%a %s' /opt/tool") == b"750 300000\n"
    # like cp(1): a new file gets the sandbox file's mode less the umask,
    # one that is replaced keeps its mode.
    back = tmp_path / "back"
    assert corral(corrald, "cp", f"{sandbox.id}:/opt/tool", str(back)).returncode == 0
    assert back.read_bytes() == data
    assert stat.S_IMODE(back.stat().st_mode) == 0o750 & ~_umask()
    old = tmp_path / "old"
    old.write_bytes(b"old")
    old.chmod(0o750)
    assert corral(corrald, "cp", f"{sandbox.id}:/opt/tool", str(old)).returncode == 0
    assert old.read_bytes() == data and stat.S_IMODE(old.stat().st_mode) == 0o750
    # into a directory, by the sandbox file's name; to stdout
    d = tmp_path / "d"
    d.mkdir()
    assert corral(corrald, "cp", f"{sandbox.id}:/opt/tool", str(d)).returncode == 0
    assert (d / "tool").read_bytes() == data
    assert corral(corrald, "cp", f"{sandbox.id}:/opt/tool", "-").stdout == data


def test_cp_out_drops_setuid_setgid_and_sticky(corrald, sandbox, tmp_path):
    sh_in(sandbox, "mkdir -p /tmp/s/sticky && echo x > /tmp/s/suid && echo y > /tmp/s/sgid && "
                   "chmod 4755 /tmp/s/suid && chmod 2755 /tmp/s/sgid && chmod 1777 /tmp/s/sticky && "
                   "stat -c %a /tmp/s/suid /tmp/s/sgid /tmp/s/sticky")
    assert sh_in(sandbox, "stat -c %a /tmp/s/suid /tmp/s/sgid /tmp/s/sticky") \
        == b"4755\n2755\n1777\n"
    out = tmp_path / "out"
    assert corral(corrald, "cp", f"{sandbox.id}:/tmp/s", str(out)).returncode == 0
    modes = {n: stat.S_IMODE((out / n).stat().st_mode) for n in ("suid", "sgid", "sticky")}
    assert modes == {"suid": 0o755, "sgid": 0o755, "sticky": 0o777}
    assert (out / "suid").read_bytes() == b"x\n"
    one = tmp_path / "one"
    assert corral(corrald, "cp", f"{sandbox.id}:/tmp/s/suid", str(one)).returncode == 0
    assert stat.S_IMODE(one.stat().st_mode) == 0o755 & ~_umask()


def test_a_failed_file_download_leaves_the_old_file_alone(corrald, sandbox, tmp_path):
    # A 1 MiB tmpfs cannot take the 3 MiB file: the write fails half-way.
    sh_in(sandbox, "head -c 3000000 /dev/urandom > /tmp/big")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        old = small / "big"
        old.write_bytes(b"precious")
        r = corral(corrald, "cp", f"{sandbox.id}:/tmp/big", str(old))
        assert r.returncode == 1 and b"No space left" in r.stderr, r.stderr
        assert old.read_bytes() == b"precious"
        assert os.listdir(small) == ["big"]  # no temporary file left
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_cp_from_stdin_at_an_offset_and_from_a_pipe(corrald, sandbox, tmp_path):
    data = os.urandom(200000)
    f = tmp_path / "in"
    f.write_bytes(data)
    with open(f, "rb") as stdin:
        stdin.seek(1000)  # a shell's `read` before us leaves stdin like this
        r = corral(corrald, "cp", "-", f"{sandbox.id}:/tmp/from-offset", stdin=stdin, timeout=30)
    assert r.returncode == 0, r.stderr
    assert sandbox.files.read("/tmp/from-offset") == data[1000:]
    r = corral(corrald, "cp", "-", f"{sandbox.id}:/tmp/from-pipe", input=data, timeout=30)
    assert r.returncode == 0, r.stderr
    assert sandbox.files.read("/tmp/from-pipe") == data
    r = corral(corrald, "cp", "-", f"{sandbox.id}:/tmp/empty", input=b"", timeout=30)
    assert r.returncode == 0 and sandbox.files.read("/tmp/empty") == b""


# ---- sh ----


def test_sh_runs_lines_from_stdin_in_one_session(corrald, sandbox):
    r = corral(corrald, "sh", sandbox.id,
               input=b"cd /tmp\nexport X=42\necho $X $(pwd)\n\necho err >&2\nexit 3\n")
    assert (r.returncode, r.stdout, r.stderr) == (3, b"42 /tmp\n", b"err\n")
    assert sessions(corrald, sandbox) == []  # closed at the end


def test_sh_after_ctrl_c_runs_the_next_line(corrald, sandbox):
    p = spawn(corrald, "sh", sandbox.id, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
              stderr=subprocess.PIPE)
    p.stdin.write(b"sleep 30\n")
    p.stdin.flush()
    wait_for(lambda: [s for s in sessions(corrald, sandbox) if s["busy"]], 15)
    # The next line is waiting before corrald has finished killing sleep.
    p.stdin.write(b"echo after\n")
    p.stdin.flush()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert (p.returncode, out) == (0, b"after\n"), err
    assert b"running a command" not in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sh_ends_its_session_on_sigterm_and_sighup(corrald, sandbox, sig):
    p = spawn(corrald, "sh", sandbox.id, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
              stderr=subprocess.PIPE)
    try:
        wait_for(lambda: sessions(corrald, sandbox), 15)
        p.send_signal(sig)  # at the prompt: stdin is open and idle
        assert p.wait(timeout=10) == 128 + sig
    finally:
        p.kill()
        p.communicate()
    assert sessions(corrald, sandbox) == []


# ---- CORRAL_DEBUG ----


def test_debug_trace_redacts_the_token(corrald):
    r = corral(corrald, "ls", tcp=True, CORRAL_DEBUG="1")
    assert r.returncode == 0, r.stderr
    assert b"> GET /v1/sandboxes" in r.stderr  # the trace is there
    assert b"Authorization: <redacted>" in r.stderr
    assert corrald.token.encode() not in r.stderr
    assert corrald.token.encode() not in r.stdout


# ---- output cap and stdin size ----


def test_output_up_to_64_mib_comes_through(corrald, sandbox):
    r = corral(corrald, "exec", sandbox.id, "--", "sh", "-c", "yes | head -c 3000000")
    assert r.returncode == 0 and len(r.stdout) == 3000000 and r.stderr == b""


def test_truncated_output_is_a_failure(corrald, sandbox, tmp_path):
    with open(tmp_path / "out", "wb") as out:
        r = corral(corrald, "exec", sandbox.id, "--", "sh", "-c", "yes | head -c 70000000",
                   stdout=out, timeout=120)
    assert r.returncode == 1
    assert b"64 MiB" in r.stderr and b"stdout" in r.stderr, r.stderr
    assert (tmp_path / "out").stat().st_size == 64 * MIB
    # a failing status is kept
    r = corral(corrald, "exec", sandbox.id, "--", "sh", "-c", "yes | head -c 70000000; exit 3",
               stdout=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 3 and b"64 MiB" in r.stderr


def test_stdin_is_sized_as_the_request_carries_it(corrald, sandbox):
    # Control characters are valid text but six bytes each in JSON; base64
    # carries them in 4/3: 3 MB of them must fit.
    r = corral(corrald, "exec", "-i", sandbox.id, "--", "wc", "-c", input=b"\x01" * 3000000)
    assert (r.returncode, r.stdout.split()) == (0, [b"3000000"]), r.stderr
    r = corral(corrald, "exec", "-i", sandbox.id, "--", "wc", "-c", input=b"a" * 15000000)
    assert (r.returncode, r.stdout.split()) == (0, [b"15000000"]), r.stderr
    # 13 MB of binary is over 16 MiB as base64: refused before sending,
    # naming -i and the limit.
    r = corral(corrald, "exec", "-i", sandbox.id, "--", "wc", "-c", input=os.urandom(13000000))
    assert r.returncode == 1 and r.stdout == b""
    assert b"-i" in r.stderr and b"16 MiB" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["run", "exec", "sh"])
def test_help_says_the_default_user_is_the_images(corrald, cmd):
    """An exec or session with no --user runs as the image's user (docs/cli.md,
    and test_images_import.py's image with a User): every --help says so too."""
    r = corral(corrald, cmd, "--help")
    assert r.returncode == 0, r
    line = next(ln for ln in r.stdout.decode().splitlines() if "--user" in ln)
    assert "default: the image's user" in line, line
