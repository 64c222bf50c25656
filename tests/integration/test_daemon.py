"""corrald's command line: listeners, refusal of unsafe settings, logs."""

import json
import subprocess
import tempfile
from pathlib import Path

from conftest import BUILD, SMALL


def _run_corrald(args, timeout=10):
    """Run corrald expecting it to refuse to start: (exit status, output)."""
    d = Path(tempfile.mkdtemp(prefix="corral-it-refuse-", dir="/tmp"))
    d.chmod(0o711)
    try:
        p = subprocess.run([str(BUILD / "corrald"), "--state", str(d / "state"),
                            "--socket", str(d / "sock"), "--cgroup-parent",
                            f"corral-it-refuse-{d.name[-6:]}", *args],
                           capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    finally:
        subprocess.run(["rm", "-rf", str(d)], check=False)


def test_refuses_a_remote_listener_without_allow_remote(tmp_path):
    token = tmp_path / "token"
    token.write_text("a-token-of-enough-length\n")
    rc, out = _run_corrald(["--listen", "0.0.0.0:0", "--token-file", str(token)])
    assert rc != 0 and "not a loopback address" in out and "--allow-remote" in out


def test_refuses_tcp_without_a_token():
    rc, out = _run_corrald(["--listen", "127.0.0.1:0"])
    assert rc == 2 and "--token-file" in out


def test_refuses_a_short_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("short\n")
    rc, out = _run_corrald(["--listen", "127.0.0.1:0", "--token-file", str(token)])
    assert rc == 2 and "shorter than 16" in out


def test_refuses_bad_flags():
    for args, words in ((["--overcommit", "x"], "--overcommit"),
                        (["--cgroup", "v3"], "--cgroup"),
                        (["--cgroup-parent", "../x"], "--cgroup-parent"),
                        (["--bogus"], "usage")):
        rc, out = _run_corrald(args)
        assert rc == 2 and words in out, (args, out)


def test_one_daemon_per_state_dir_and_cgroup_parent(corrald):
    rc, out = _run_corrald(["--cgroup-parent", corrald.cgroup_parent])
    assert rc != 0 and "owns the cgroup parent" in out
    p = subprocess.run([str(BUILD / "corrald"), "--state", str(corrald.state_dir),
                        "--socket", "/tmp/corral-it-second.sock", "--cgroup-parent",
                        "corral-it-second"], capture_output=True, text=True, timeout=10)
    assert p.returncode != 0 and "using the state dir" in p.stderr
    # the first daemon was not disturbed
    assert corrald.request("GET", "/healthz").status == 200


def test_json_logs_name_the_sandbox(corrald_factory):
    d = corrald_factory(["--log-format", "json"])
    with d.client() as c, c.create(**SMALL) as sb:
        sid = sb.id
    lines = [json.loads(line) for line in d.log().splitlines() if line.startswith("{")]
    assert lines and all({"ts", "level", "component", "msg"} <= set(line) for line in lines)
    events = [line["msg"].split()[0] for line in lines if line.get("sandbox") == sid]
    assert events[0] == "creating" and "ready" in events and events[-1] == "destroyed", events
