"""Background processes (docs/api.md, Processes) against a real corrald:
started, listed, found again from a second client with their earlier
output, fed stdin as a stream, signalled (the process, its group, its
tree), waited for, forgotten; a terminal of the sandbox's own that follows
resizes and delivers Ctrl-C; an attach that drops leaves the process
running; and the CLI (corral sh on a terminal, exec -t, ps, attach, kill)
driven through a pseudo-terminal as a user types."""

import asyncio
import fcntl
import os
import pty
import select
import signal
import socket
import struct
import termios
import time

import pytest

import corral
from conftest import BUILD, SMALL, sized, wait_for

CORRAL = BUILD / "corral"


@pytest.fixture
def deb(client):
    """A sandbox of the debian image: bash, stty, ps."""
    with client.create(image="debian", **SMALL) as sb:
        yield sb


def read_until(p, needle, offset=0, timeout=10):
    """The process's output from ``offset`` once it holds ``needle``."""
    seen = wait_for(lambda: (lambda o: o if needle in o.stdout else None)(p.output(offset)),
                    timeout, f"{needle!r} in the output of process {p.pid}")
    return seen


def sandbox_pids(sb, name):
    """The pids of processes called ``name`` in the sandbox (by /proc)."""
    r = sb.exec(["sh", "-c", f"grep -l '^Name:.{name}$' /proc/[0-9]*/status || true"])
    return sorted(int(line.split("/")[2]) for line in r.stdout.decode().split())


# ---- started, listed, found again, fed, waited for ----

def test_a_background_process_runs_on_and_a_second_client_finds_it(corrald, deb):
    p = deb.process.start("echo started; while read l; do echo \"got $l\"; done; "
                          "echo bye >&2; exit 3", tag="reader")
    assert p.pid > 1 and p.running and p.info["tag"] == "reader" and not p.info["tty"]
    assert p.info["started_at"].endswith("Z") and p.info["stdin_open"]
    listed = deb.process.list()
    assert [(x.pid, x.info["tag"], x.info["state"]) for x in listed] == [(p.pid, "reader",
                                                                         "running")]
    read_until(p, b"started\n")

    # A second client, which knows only the sandbox and the pid.
    with corrald.client() as other:
        q = other.get(deb.id).process.get(p.pid)
        assert q.info["cmd"] == p.info["cmd"]
        assert q.output().stdout == b"started\n"  # the output from before it came
        assert q.send_stdin("one\n") == 4
        q.send_stdin(b"two\n", eof=True)
        res = q.wait(timeout=10)
    assert (res.reason, res.exit_code) == ("exited", 3)
    out = p.output()
    assert out.stdout == b"started\ngot one\ngot two\n" and out.stderr == b"bye\n"
    assert [k for k, _ in out.chunks][-1] == "stderr" and out.state == "exited"
    assert out.result.exit_code == 3 and out.next_offset == 8 + 8 + 8 + 4 and out.lost == 0
    # From an offset: the rest only.
    tail = p.output(offset=8)
    assert tail.stdout == b"got one\ngot two\n" and tail.offset == 8
    with pytest.raises(corral.InvalidSpec, match="past the end of the output"):
        p.output(offset=10**6)
    assert deb.process.list(state="running") == []
    assert [x.pid for x in deb.process.list(state="exited")] == [p.pid]


def test_output_is_followed_as_it_comes_and_binary_stays_exact(deb):
    p = deb.process.start("printf 'a\\377\\000b'; sleep 0.3; echo later; sleep 0.3")
    pieces = []
    out = p.output(follow=True, on_stdout=pieces.append)
    assert out.stdout == b"a\xff\x00blater\n" and b"".join(pieces) == out.stdout
    assert out.result is not None and out.result.exit_code == 0 and not p.running


def test_the_ring_keeps_the_newest_output_and_says_what_it_lost(deb):
    p = deb.process.start("head -c 5000 /dev/zero | tr '\\0' x; printf END",
                          output_buffer_bytes=1000)
    p.wait(timeout=10)
    out = p.output()
    assert out.next_offset == 5003 and out.lost == 4003 and out.stdout == b"x" * 997 + b"END"
    assert p.refresh()["output"] == {"start": 4003, "end": 5003, "buffer_bytes": 1000}


def test_stdin_given_at_the_start_comes_first(deb):
    p = deb.process.start("cat", stdin="first\n")
    p.send_stdin("second\n", eof=True)
    p.wait(timeout=10)
    assert p.output().stdout == b"first\nsecond\n"


def test_a_large_stdin_stream_arrives_whole(deb):
    data = bytes(range(256)) * 8192  # 2 MiB: more than corrald queues at once
    p = deb.process.start("sha256sum")
    assert p.send_stdin(data, eof=True) == len(data)
    p.wait(timeout=30)
    import hashlib
    assert p.output().stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    # stdin given at the start is queued whole too, past the queue's bound
    first = data[: 1 << 20]
    q = deb.process.start("sha256sum", stdin=first)
    q.close_stdin()
    q.wait(timeout=30)
    assert q.output().stdout.split()[0].decode() == hashlib.sha256(first).hexdigest()


def test_stdin_to_a_process_that_ended_or_closed_it_is_refused(deb):
    p = deb.process.start("true")
    p.wait(timeout=10)
    with pytest.raises(corral.Conflict, match="stdin of process .* is closed: it has ended"):
        p.send_stdin("late\n")
    q = deb.process.start("sleep 30")
    q.close_stdin()
    with pytest.raises(corral.Conflict, match="is closed"):
        q.send_stdin("x")
    q.kill()


def test_bad_handles_and_requests_name_what_is_wrong(corrald, deb):
    with pytest.raises(corral.NotFound, match="no background process 4242"):
        deb.process.get(4242)
    r = corrald.request("GET", f"/v1/sandboxes/{deb.id}/processes/abc")
    assert r.status == 400 and "not a process id" in r.json()["error"]["message"]
    r = corrald.request("POST", f"/v1/sandboxes/{deb.id}/processes", {"cmd": "x", "stream": True})
    assert r.status == 400 and "unknown field 'stream'" in r.json()["error"]["message"]
    r = corrald.request("GET", f"/v1/sandboxes/{deb.id}/processes?state=zombie")
    assert r.status == 400 and "one of running, exited" in r.json()["error"]["message"]
    with pytest.raises(corral.NotFound, match="executable not found"):
        deb.process.start(["/no/such/binary"])
    assert deb.process.list() == []  # a failed start leaves no record


# ---- signals ----

def test_a_signal_reaches_the_process_and_one_to_an_ended_one_is_refused(deb):
    p = deb.process.start("trap 'echo caught; exit 7' INT; echo ready; "
                          "while :; do sleep 0.05; done")
    read_until(p, b"ready\n")
    p.signal("INT")
    assert p.wait(timeout=10).exit_code == 7
    assert b"caught" in p.output().stdout
    with pytest.raises(corral.Conflict, match="has ended"):
        p.signal("TERM")
    q = deb.process.start("sleep 30")
    with pytest.raises(corral.InvalidSpec, match="signal must be a name"):
        q.signal("NOPE")
    with pytest.raises(corral.InvalidSpec, match="scope"):
        q.signal(15, scope="everyone")
    q.signal(9)
    assert q.wait(timeout=10).signal == 9


def test_group_and_tree_signals_reach_what_the_process_started(deb):
    # Its group: a child in it dies too; a child that made a session of its
    # own (setsid) is out of the group but still in the tree.
    p = deb.process.start("sleep 1001 & setsid sleep 1002 & echo up; wait")
    read_until(p, b"up\n")
    wait_for(lambda: len(sandbox_pids(deb, "sleep")) == 2, what="two sleeps")
    p.signal("TERM", scope="group")
    assert p.wait(timeout=10).reason == "signaled"
    assert len(sandbox_pids(deb, "sleep")) == 1  # the detached one
    q = deb.process.start("setsid sleep 1003 & setsid sleep 1004 & echo up; wait")
    read_until(q, b"up\n")
    wait_for(lambda: len(sandbox_pids(deb, "sleep")) == 3, what="three sleeps")
    q.signal("KILL", scope="tree")
    q.wait(timeout=10)
    wait_for(lambda: len(sandbox_pids(deb, "sleep")) == 1, what="the tree killed")


def test_forget_kills_its_tree_and_drops_the_record(deb):
    p = deb.process.start("sleep 1005 & wait")
    wait_for(lambda: sandbox_pids(deb, "sleep"), what="the sleep")
    p.forget()
    with pytest.raises(corral.NotFound):
        deb.process.get(p.pid)
    wait_for(lambda: not sandbox_pids(deb, "sleep"), what="its tree gone")


# ---- terminals ----

def test_a_terminal_follows_resizes_and_delivers_ctrl_c(deb):
    t = deb.process.start(["bash", "-i"], tty=(20, 70), env={"PS1": "$ "})
    assert t.info["tty"]
    t.send_stdin("stty size; tty\n")
    out = read_until(t, b"20 70")
    assert b"/dev/pts/" in read_until(t, b"/dev/pts/").stdout
    assert "\r\n" in out.stdout.decode()  # a terminal's line discipline
    t.resize(50, 132)
    start = t.output().next_offset
    t.send_stdin("stty size\n")
    read_until(t, b"50 132", offset=start)
    start = t.output().next_offset
    t.send_stdin("sleep 100\n")
    time.sleep(0.3)
    t.send_stdin(b"\x03")  # Ctrl-C: the line discipline signals the foreground
    t.send_stdin("echo rc=$?\n")
    read_until(t, b"rc=130", offset=start)
    with pytest.raises(corral.InvalidSpec, match="rows must be between 1 and 4096"):
        t.resize(0, 80)
    with pytest.raises(corral.InvalidSpec, match="cols must be between 1 and 4096"):
        t.resize(24, 100000)
    t.send_stdin("exit 4\n")
    assert t.wait(timeout=10).exit_code == 4
    p = deb.process.start("sleep 30")
    with pytest.raises(corral.Conflict, match="has no terminal"):
        p.resize(30, 80)
    p.kill()


def test_a_terminal_is_the_sandbox_users_own(deb):
    t = deb.process.start("stat -c '%u %g %a' $(tty)", tty=True, user="1000:1000")
    t.wait(timeout=10)
    assert t.output().stdout.split() == [b"1000", b"5", b"620"]  # its user's, group tty


# ---- attach ----

def attach(corrald, sb, pid, offset=None):
    """A raw attach connection (Upgrade: corral-attach) past its 101."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(corrald.socket_path))
    q = f"?offset={offset}" if offset is not None else ""
    s.sendall(f"GET /v1/sandboxes/{sb.id}/processes/{pid}/attach{q} HTTP/1.1\r\nHost: x\r\n"
              "Connection: Upgrade\r\nUpgrade: corral-attach\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    s.settimeout(10)
    return s


def recv_until(s, needle):
    got = b""
    while needle not in got:
        piece = s.recv(4096)
        assert piece, f"the attach closed before {needle!r}: {got!r}"
        got += piece
    return got


def test_an_attach_that_drops_leaves_the_process_running_and_one_comes_back(corrald, deb):
    p = deb.process.start("while read l; do echo \"echo:$l\"; done")
    s = attach(corrald, deb, p.pid)
    s.sendall(b"first\n")
    assert recv_until(s, b"echo:first\n") == b"echo:first\n"
    s.close()  # the client goes mid-attach
    time.sleep(0.2)
    assert p.refresh()["state"] == "running"
    s = attach(corrald, deb, p.pid, offset=0)  # again, with the earlier output
    assert recv_until(s, b"echo:first\n") == b"echo:first\n"
    s.sendall(b"second\n")
    recv_until(s, b"echo:second\n")
    p.close_stdin()
    assert s.recv(4096) == b""  # it ended: the attach closes once all is sent
    s.close()
    assert p.wait(timeout=10).exit_code == 0


def test_attach_needs_the_upgrade(corrald, deb):
    p = deb.process.start("sleep 30")
    r = corrald.request("GET", f"/v1/sandboxes/{deb.id}/processes/{p.pid}/attach")
    assert r.status == 400 and "Upgrade: corral-attach" in r.json()["error"]["message"]
    p.kill()


# ---- lifetimes and backends ----

def test_the_process_api_on_each_backend(client, backend):
    """What an agent framework uses, the same on a container and a microVM:
    start, list, find, feed, follow, signal the process and its group, a
    terminal that follows a resize."""
    with client.create(**sized(backend, image="debian")) as sb:
        p = sb.process.start("echo up; while read l; do echo \"got:$l\"; done; exit 9",
                             tag="loop")
        assert p.pid > 1 and [x.pid for x in sb.process.list()] == [p.pid]
        read_until(p, b"up\n", timeout=30)
        q = sb.process.get(p.pid)
        q.send_stdin("a\n", eof=True)
        assert q.wait(timeout=30).exit_code == 9
        assert p.output().stdout == b"up\ngot:a\n"
        g = sb.process.start("trap 'echo int; exit 3' INT; echo ready; while :; do sleep 0.05; done")
        read_until(g, b"ready", timeout=30)
        g.signal("INT", scope="group")
        assert g.wait(timeout=30).exit_code == 3
        t = sb.process.start(["bash", "--norc", "-i"], tty=(20, 70))
        t.send_stdin("stty size\n")
        read_until(t, b"20 70", timeout=30)
        t.resize(31, 91)
        start = t.output().next_offset
        t.send_stdin("stty size; exit 5\n")
        read_until(t, b"31 91", offset=start, timeout=30)
        assert t.wait(timeout=30).exit_code == 5
        k = sb.process.start("sleep 1000")
        k.kill()
        assert k.wait(timeout=30).signal == 9


def test_background_processes_end_with_their_sandbox(client):
    sb = client.create(image="debian", **SMALL)
    p = sb.process.start("sleep 1000")
    sb.destroy()
    with pytest.raises((corral.NotFound, corral.Conflict)):
        p.refresh()


def test_a_trajectory_sandbox_refuses_background_processes(client):
    with client.create(image="debian", trajectory=f"t-proc-{os.getpid()}", **SMALL) as sb:
        with pytest.raises(corral.Unsupported, match="no step that can be replayed"):
            sb.process.start("sleep 1")
    client.trajectory(f"t-proc-{os.getpid()}").remove()


def test_the_function_backend_runs_background_processes_and_terminals(client):
    with client.create(backend="function", runtime="shell", **SMALL) as sb:
        p = sb.process.start("read x; echo \"fn:$x\"")
        p.send_stdin("hi\n")
        assert p.wait(timeout=10).exit_code == 0 and p.output().stdout == b"fn:hi\n"
        # A function sandbox has no devpts of its own: its terminal is one of
        # the host's, which it can use but not name.
        t = sb.process.start("stty size; read x; stty size; echo \"got:$x\"", tty=(21, 77))
        read_until(t, b"21 77")
        t.resize(22, 78)
        t.send_stdin("typed\n")
        t.wait(timeout=10)
        out = t.output().stdout
        assert b"22 78" in out and b"got:typed" in out and b"\r\n" in out


# ---- asyncio ----

def test_the_asyncio_client_has_the_same_process_api(corrald, deb):
    async def main():
        async with corrald.async_client() as c:
            sb = await c.get(deb.id)
            p = await sb.exec("read a; echo \"a=$a\"; read b; echo \"b=$b\" >&2", background=True)
            await p.send_stdin("1\n")
            seen = []

            async def on_out(chunk):
                seen.append(chunk)

            follow = asyncio.ensure_future(p.output(follow=True, on_stdout=on_out))
            await asyncio.sleep(0.2)
            await p.send_stdin("2\n", eof=True)
            out = await follow
            res = await p.wait(timeout=10)
            listed = await sb.process.list(state="exited")
            return out, res, seen, [x.pid for x in listed], p.pid

    out, res, seen, listed, pid = asyncio.run(main())
    assert out.stdout == b"a=1\n" and out.stderr == b"b=2\n" and b"".join(seen) == b"a=1\n"
    assert res.exit_code == 0 and listed == [pid]


# ---- the CLI, as a user at a terminal ----

class Terminal:
    """build/corral on a pseudo-terminal of ours, rows x cols."""

    def __init__(self, corrald, args, rows=33, cols=111):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
            env.update(CORRAL_URL=corrald.url, TERM="xterm")
            os.execve(str(CORRAL), [str(CORRAL), *args], env)
        self.out = b""
        self.size(rows, cols)

    def size(self, rows, cols):
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, text):
        os.write(self.fd, text.encode() if isinstance(text, str) else text)

    def expect(self, needle, timeout=10):
        needle = needle.encode() if isinstance(needle, str) else needle
        deadline = time.monotonic() + timeout
        while needle not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, f"no {needle!r} on the terminal: {self.out[-500:]!r}"
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    self.out += os.read(self.fd, 4096)
                except OSError:
                    break
        assert needle in self.out, f"no {needle!r} on the terminal: {self.out[-500:]!r}"
        return self.out

    def status(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                # what it wrote last is still in the terminal: read to its end
                while select.select([self.fd], [], [], 0)[0]:
                    try:
                        data = os.read(self.fd, 4096)
                    except OSError:
                        break
                    if not data:
                        break
                    self.out += data
                os.close(self.fd)
                return os.waitstatus_to_exitcode(st)
            try:
                r, _, _ = select.select([self.fd], [], [], 0.1)
                if r:
                    self.out += os.read(self.fd, 4096)
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"corral did not end: {self.out[-500:]!r}")


def test_corral_sh_is_a_real_terminal(corrald, deb):
    t = Terminal(corrald, ["sh", deb.id])
    t.type("PS1='$ '; stty size; echo TERM=$TERM\r")
    t.expect("33 111")
    t.expect("TERM=xterm")
    t.size(40, 120)
    os.kill(t.pid, signal.SIGWINCH)  # as a terminal emulator does
    time.sleep(0.3)
    t.type("stty size\r")
    t.expect("40 120")
    # Interactive programs read the terminal themselves: `read` without a
    # newline from the shell, and Ctrl-C and Ctrl-Z reach the foreground job.
    t.type("sleep 100\r")
    time.sleep(0.3)
    t.type(b"\x03")
    t.type("echo rc=$?\r")
    t.expect("rc=130")
    t.type("sleep 100\r")
    time.sleep(0.3)
    t.type(b"\x1a")
    t.expect("Stopped")
    t.type("fg\r")
    time.sleep(0.3)
    t.type(b"\x03")
    t.type("exit 6\r")
    assert t.status() == 6


def test_corral_exec_t_ps_attach_and_kill(corrald, deb):
    t = Terminal(corrald, ["exec", "-it", deb.id, "--", "bash", "--norc", "-i"])
    t.type("echo in-the-$((6*7))\r")
    t.expect("in-the-42")  # its output, not our terminal's echo of what we typed
    # corral goes (a closed terminal); the shell runs on, listed by ps
    os.kill(t.pid, signal.SIGHUP)
    assert t.status() == 0
    assert b"detached from process" in t.out, t.out
    from test_cli import corral as run
    ps = run(corrald, "ps", "--all", deb.id)
    assert ps.returncode == 0, ps.stderr
    line = [x for x in ps.stdout.decode().splitlines() if "bash --norc -i" in x]
    assert line and line[0].split()[1] == "running" and line[0].split()[2] == "yes"
    pid = line[0].split()[0]
    # attach again: the earlier output first, then our keys
    a = Terminal(corrald, ["attach", deb.id, pid])
    a.expect("in-the-42")
    a.type("echo back-$((2+3))\r")
    a.expect("back-5")
    r = run(corrald, "kill", deb.id, pid, "-KILL")
    assert r.returncode == 0, r.stderr
    assert a.status() == 128 + 9
    r = run(corrald, "kill", deb.id, pid, "-KILL")
    assert r.returncode == 1 and b"has ended" in r.stderr
    r = run(corrald, "kill", deb.id, pid, "-NOPE")
    assert r.returncode == 2 and b"not a signal" in r.stderr
    r = run(corrald, "exec", "-t", deb.id, "--", "true", input=b"")
    assert r.returncode == 2 and b"-t needs a terminal" in r.stderr
