"""The SDK's exceptions: a class for every error code of the API.

First without a daemon: the codes of lib/util/err.c's table, the SDK's
mapping (corral.errors.BY_CODE) and the class column of docs/errors.md are
one and the same, and every class of today still catches what it caught.
Then against a real corrald, each code the API sends is provoked through the
SDK and must raise its class.  A request no method of the SDK makes (a wrong
method, a body that is not JSON, a wrong content type) goes through the
SDK's own transport, which is where the mapping happens.
"""

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

import corral
from conftest import BUILD, REPO, SMALL

ERR_C = REPO / "lib" / "util" / "err.c"
ERRORS_MD = REPO / "docs" / "errors.md"

# Codes corrald does not send today (docs/errors.md says why): the mapping
# test covers them.
NOT_SENT = {"timeout"}

# The classes each code raised before there was one for every code: a class
# may have become more precise (a subclass), never another one.
BEFORE = {
    "invalid_json": corral.InvalidSpec,
    "invalid_argument": corral.InvalidSpec,
    "unauthorized": corral.Unauthorized,
    "forbidden": corral.Forbidden,
    "not_found": corral.NotFound,
    "method_not_allowed": corral.MethodNotAllowed,
    "conflict": corral.Conflict,
    "payload_too_large": corral.PayloadTooLarge,
    "unsupported_media_type": corral.Error,
    "internal": corral.InternalError,
    "not_implemented": corral.Unsupported,
    "capacity_exceeded": corral.CapacityError,
    "unavailable": corral.Unavailable,
    "timeout": corral.Error,
    "no_space": corral.NoSpace,
}


def api_codes():
    """{code: HTTP status} of err.c's table, without "ok"."""
    rows = re.findall(r'\[(CRL_\w+)\] = \{"(\w+)", (\d+)\}', ERR_C.read_text())
    assert len(rows) == len(set(rows)) and ("CRL_OK", "ok", "200") in rows, rows
    return {code: int(status) for _, code, status in rows if code != "ok"}


def doc_classes():
    """{code: SDK class name} of docs/errors.md's table of codes."""
    rows = re.findall(r"^\| `CRL_\w+` \| \d+ \| `(\w+)` \| `(\w+)` \|", ERRORS_MD.read_text(),
                      re.M)
    return dict(rows)


def body(code, message="why"):
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def test_every_code_of_the_api_has_its_class():
    codes = api_codes()
    assert set(corral.errors.BY_CODE) == set(codes), "err.c's codes and the SDK's"
    assert set(BEFORE) == set(codes), "a new code: say here what it raised before"
    classes = {corral.errors.BY_CODE[code] for code in codes}
    assert len(classes) == len(codes), "a class of its own for each code"
    for code, status in codes.items():
        cls = corral.errors.BY_CODE[code]
        assert getattr(corral, cls.__name__) is cls and cls.__name__ in corral.__all__, cls
        assert issubclass(cls, BEFORE[code]), f"{code}: {cls} no longer a {BEFORE[code]}"
        e = corral.errors.from_response(status, {}, body(code))
        assert type(e) is cls and (e.code, e.message, e.status) == (code, "why", status), e
        # an answer without a code (a proxy's) gets a class for its status
        e = corral.errors.from_response(status, {}, b"Service Unavailable")
        assert type(e) in {corral.errors.BY_CODE[c] for c, s in codes.items() if s == status}, e
    assert doc_classes() == {code: cls.__name__ for code, cls in corral.errors.BY_CODE.items()}
    assert issubclass(corral.InvalidJSON, corral.InvalidSpec)
    e = corral.errors.from_response(503, {"retry-after": "3"}, body("capacity_exceeded"))
    assert type(e) is corral.CapacityError and e.retry_after == 3
    e = corral.errors.from_response(418, {}, body("a_code_of_the_future"))
    assert type(e) is corral.Error and e.code == "a_code_of_the_future"


def raw(client, method, target, data=b"", content_type=None):
    """A request no method of the SDK makes, through the SDK's transport."""
    return client._call(corral._api.Call(method, target, data, content_type))


def conflict(client):
    sb = client.create(**SMALL)
    sb.destroy()
    sb.exec("true")


def no_space(client):
    with client.create(disk_mb=1, **SMALL) as small:
        small.files.write("/tmp/big", b"x" * (2 << 20))


# code -> how to get it through the SDK from the shared daemon: f(corrald, client, sandbox)
SHARED = {
    "invalid_argument": lambda d, c, sb: c.create(memory_mb=8),
    "invalid_json": lambda d, c, sb: raw(c, "POST", "/v1/sandboxes", b"{", "application/json"),
    "unauthorized": lambda d, c, sb: corral.Client(d.tcp_url, token="wrong-0123456789").list(),
    "forbidden": lambda d, c, sb: sb.files.write("/proc/sys/kernel/hostname", b"x"),
    "not_found": lambda d, c, sb: c.get("sb-nope"),
    "method_not_allowed": lambda d, c, sb: raw(c, "PATCH", "/v1/sandboxes"),
    "conflict": lambda d, c, sb: conflict(c),
    "payload_too_large": lambda d, c, sb: c.create(env={"X": "a" * (17 << 20)}),
    "unsupported_media_type": lambda d, c, sb: raw(c, "POST", "/v1/images", b"x", "text/plain"),
    "not_implemented": lambda d, c, sb: c.create(backend="function", runtime="shell",
                                                 network={"mode": "full"}),
    "no_space": lambda d, c, sb: no_space(c),
}
# Provoked on a daemon of the test's own (test_a_host_in_trouble).
OWN = {"capacity_exceeded", "internal", "unavailable"}


def test_the_cases_below_cover_every_code_sent():
    assert set(SHARED) | OWN | NOT_SENT == set(api_codes())
    assert not set(SHARED) & OWN and not (set(SHARED) | OWN) & NOT_SENT


def check(code, call):
    with pytest.raises(corral.Error) as e:
        call()
    cls = corral.errors.BY_CODE[code]
    assert type(e.value) is cls and e.value.code == code, e.value
    assert e.value.status == api_codes()[code], e.value
    return e.value


@pytest.mark.parametrize("code", sorted(SHARED))
def test_the_sdk_raises_the_class_of_each_code(corrald, client, sandbox, code):
    check(code, lambda: SHARED[code](corrald, client, sandbox))


def _children_running(pid, exe):
    found = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            if os.readlink(f"/proc/{child}/exe") == str(exe):
                found.append(int(child))
        except OSError:
            pass  # gone meanwhile
    return found


def test_a_host_in_trouble(corrald_factory, tmp_path):
    """capacity_exceeded (the host is full), internal (a trajectory whose log
    cannot be read) and unavailable (the container backend's spawner died
    and cannot start again) on a daemon of the test's own, whose spawner is
    a copy the test can break."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    spawner = bindir / "corral-spawner"
    for name in ("corral-spawner", "corral-init"):  # the spawner runs the init beside it
        shutil.copy2(BUILD / name, bindir / name)
    d = corrald_factory(["--max-sandboxes", "1", "--spawner", str(spawner), "--spawners", "1"])
    with d.client() as c:
        with c.create(backend="function", runtime="shell", memory_mb=64):
            e = check("capacity_exceeded", lambda: c.create(backend="function", memory_mb=64))
            assert e.retry_after and e.retry_after >= 1, e

        log = d.state_dir / "trajectories" / "unreadable" / "log"
        log.parent.mkdir(parents=True)
        log.write_bytes(b"not a trajectory log" * 4)
        check("internal", lambda: c.trajectory("unreadable").info())
        shutil.rmtree(log.parent)

        running = _children_running(d.pid, spawner)
        assert running, "the spawner runs"
        broken = bindir / "broken"
        broken.write_text("#!/bin/sh\nexit 1\n")
        broken.chmod(0o755)
        os.replace(broken, spawner)  # so that its restarts fail
        for pid in running:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{pid}").exists() for pid in running):  # until corrald reaps it
            assert time.monotonic() < deadline, "corrald did not notice its spawner died"
            time.sleep(0.02)
        check("unavailable", lambda: c.create(**SMALL))
        os.unlink(spawner)
        shutil.copy2(BUILD / "corral-spawner", spawner)
