"""Errors of the v1 API (docs/api.md): exact statuses and bodies over raw
HTTP, and the corral exceptions the SDK raises for them."""

import asyncio
import json
import os
import threading
import uuid

import pytest

import corral
from conftest import SMALL, wait_for


def check(resp, status, code, *words):
    """An error answer: status, JSON error code, and a message naming ``words``."""
    assert resp.status == status, resp
    assert resp.headers["content-type"] == "application/json"
    err = resp.error
    assert err["code"] == code, resp
    for w in words:
        assert w in err["message"], resp
    return err


def check_exc(excinfo, cls, status, code, *words):
    e = excinfo.value
    assert type(e) is cls and (e.status, e.code) == (status, code), e
    for w in words:
        assert w in e.message, e


@pytest.fixture(scope="module")
def tag():
    return uuid.uuid4().hex[:12]


@pytest.fixture(autouse=True, scope="module")
def nothing_half_created(corrald, tag):
    """Every failed create of this module carries the label probe=<tag>: none
    may be left in the list, and the host's reservations are unchanged."""
    with corrald.client() as c:
        used = c.host()["used"]
        yield
        assert corrald.sandboxes(probe=tag) == []
        assert c.host()["used"] == used


BAD_SPECS = [
    (b"{", 400, "invalid_json", []),
    (b"[1]", 400, "invalid_json", ["object"]),
    (b"", 400, "invalid_json", ["empty"]),
    ({"bogus": 1}, 400, "invalid_argument", ["bogus"]),
    ({"resources": {"bogus": 1}}, 400, "invalid_argument", ["resources.bogus"]),
    ({"resources": {"memory_mb": "x"}}, 400, "invalid_argument", ["resources.memory_mb"]),
    ({"resources": {"memory_mb": 8}}, 400, "invalid_argument", ["resources.memory_mb", "8"]),
    ({"resources": {"memory_mb": 1.5}}, 400, "invalid_argument", ["resources.memory_mb"]),
    ({"resources": {"cpus": 0}}, 400, "invalid_argument", ["resources.cpus"]),
    ({"resources": {"pids": 4}}, 400, "invalid_argument", ["resources.pids"]),
    ({"resources": {"disk_mb": 0}}, 400, "invalid_argument", ["resources.disk_mb"]),
    ({"resources": []}, 400, "invalid_argument", ["resources"]),
    ({"ttl_s": -1}, 400, "invalid_argument", ["ttl_s"]),
    ({"idle_ttl_s": 2592001}, 400, "invalid_argument", ["idle_ttl_s"]),
    ({"labels": {"a": 1}}, 400, "invalid_argument", ["labels.a"]),
    ({"labels": {"bad key": "v"}}, 400, "invalid_argument", ["labels", "bad key"]),
    ({"env": "x"}, 400, "invalid_argument", ["env"]),
    ({"image": 5}, 400, "invalid_argument", ["image"]),
    ({"cwd": "relative"}, 400, "invalid_argument", ["cwd"]),
    ({"backend": "zzz"}, 400, "invalid_argument", ["backend", "zzz"]),
    ({"network": {"mode": "zzz"}}, 400, "invalid_argument", ["network.mode"]),
    ({"image": "no-such-image"}, 404, "not_found", ["no-such-image"]),
    ({"backend": "function", "runtime": "ruby"}, 400, "invalid_argument", ["runtime", "ruby"]),
    ({"runtime": "python"}, 400, "invalid_argument", ["runtime", "function"]),
    # (a network that works is test_network.py's, in its lab: not on this host)
    ({"backend": "function", "runtime": "shell", "network": {"mode": "full"}}, 501,
     "not_implemented", ["network.mode", "function"]),

    ({"network": {"mode": "allow", "allow": ["a.*.example"]}}, 400, "invalid_argument",
     ["network.allow[0]", "a.*.example"]),
    ({"network": {"mode": "full", "deny": ["10.1.2.3/24"]}}, 400, "invalid_argument",
     ["network.deny[0]", "10.1.2.3/24", "host bits"]),
    ({"trajectory": {"id": "../t"}}, 400, "invalid_argument", ["trajectory.id"]),
    ({"trajectory": {"id": "t", "checkpoint": "x"}}, 400, "invalid_argument",
     ["trajectory.checkpoint"]),
]
EXC = {400: corral.InvalidSpec, 404: corral.NotFound, 501: corral.Unsupported}


@pytest.mark.parametrize("body,status,code,words", BAD_SPECS,
                         ids=[str(b)[:60] for b, *_ in BAD_SPECS])
def test_bad_create(corrald, client, tag, body, status, code, words):
    if isinstance(body, dict) and "labels" not in body:
        body = dict(body, labels={"probe": tag})
    check(corrald.request("POST", "/v1/sandboxes", body), status, code, *words)
    if isinstance(body, dict):
        with pytest.raises(corral.Error) as e:
            client.create(spec=body)
        check_exc(e, EXC[status], status, code, *words)


BAD_EXECS = [
    ({"cmd": 5}, ["cmd"]),
    ({"cmd": []}, ["cmd"]),
    ({"cmd": "true", "bogus": 1}, ["bogus"]),
    ({"cmd": "true", "timeout_s": -1}, ["timeout_s"]),
    ({"cmd": "true", "timeout_s": "1"}, ["timeout_s"]),
    ({"cmd": "true", "max_output_bytes": 67108865}, ["max_output_bytes"]),
    ({"cmd": "true", "user": "bob"}, ["user"]),
    ({"cmd": "true", "cwd": "rel"}, ["cwd"]),
    ({"cmd": "true", "env": {"A": 1}}, ["env"]),
    ({"cmd": "true", "stream": "yes"}, ["stream"]),
    ({"cmd": "true", "stdin_b64": "%%%"}, ["stdin_b64"]),
    ({"cmd": ["/etc/passwd"]}, ["/etc/passwd"]),  # exists, cannot be executed
]


def test_bad_exec(corrald, sandbox):
    for body, words in BAD_EXECS:
        check(corrald.request("POST", f"/v1/sandboxes/{sandbox.id}/exec", body),
              400, "invalid_argument", *words)
    for kwargs, field in (({"timeout": -1}, "timeout_s"), ({"user": "bob"}, "user"),
                          ({"max_output_bytes": 1 << 30}, "max_output_bytes")):
        with pytest.raises(corral.InvalidSpec) as e:
            sandbox.exec("true", **kwargs)
        check_exc(e, corral.InvalidSpec, 400, "invalid_argument", field)


def test_oversized_body(corrald, client, tag):
    big = b'{"env": {"X": "' + b"a" * (17 << 20) + b'"}}'
    check(corrald.request("POST", "/v1/sandboxes", big), 413, "payload_too_large")
    # on kept-alive connections too (a few, from threads), again and again
    threads = [threading.Thread(target=client.health) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in range(3):
        with pytest.raises(corral.PayloadTooLarge) as e:
            client.create(spec={"env": {"X": "a" * (17 << 20)}, "labels": {"probe": tag}})
        check_exc(e, corral.PayloadTooLarge, 413, "payload_too_large")
    assert client.health()["status"] == "ok"  # and the client goes on

    async def via_asyncio():
        async with corrald.async_client() as ac:
            with pytest.raises(corral.PayloadTooLarge):
                await ac.create(spec={"env": {"X": "a" * (17 << 20)}, "labels": {"probe": tag}})
            return await ac.health()

    assert asyncio.run(via_asyncio())["status"] == "ok"


def test_unknown_sandbox(corrald, client):
    for method, target in (("GET", ""), ("DELETE", ""), ("POST", "/exec"),
                           ("GET", "/files?path=/x"), ("PUT", "/files?path=/x"),
                           ("GET", "/sessions"), ("POST", "/sessions"), ("POST", "/pause")):
        body = {"cmd": "true"} if target == "/exec" else b"x" if method == "PUT" else None
        check(corrald.request(method, "/v1/sandboxes/sb-nope" + target, body),
              404, "not_found", "sb-nope")
    with pytest.raises(corral.NotFound) as e:
        client.get("sb-nope")
    check_exc(e, corral.NotFound, 404, "not_found", "sb-nope")


def test_not_found_inside_the_sandbox(corrald, sandbox):
    base = f"/v1/sandboxes/{sandbox.id}"
    check(corrald.request("POST", base + "/exec", {"cmd": ["no-such-binary"]}),
          404, "not_found", "no-such-binary")
    check(corrald.request("POST", base + "/exec", {"cmd": "pwd", "cwd": "/no/such/dir"}),
          404, "not_found", "/no/such/dir")
    check(corrald.request("GET", base + "/files?path=/no/such/file"),
          404, "not_found", "/no/such/file")
    check(corrald.request("POST", base + "/sessions/ss-999/run", {"cmd": "true"}),
          404, "not_found", "ss-999")
    check(corrald.request("GET", "/v1/no-such-endpoint"), 404, "not_found")
    for call, word in ((lambda: sandbox.exec(["no-such-binary"]), "no-such-binary"),
                       (lambda: sandbox.exec("pwd", cwd="/no/such/dir"), "/no/such/dir"),
                       (lambda: sandbox.files.read("/no/such/file"), "/no/such/file")):
        with pytest.raises(corral.NotFound) as e:
            call()
        check_exc(e, corral.NotFound, 404, "not_found", word)


def test_bad_paths(corrald, sandbox):
    base = f"/v1/sandboxes/{sandbox.id}/files"
    for path in ("/tmp/../etc/passwd", "tmp/x", "", "/.."):
        check(corrald.request("GET", f"{base}?path={path}"), 400, "invalid_argument", "path")
        check(corrald.request("PUT", f"{base}?path={path}", b"x"), 400, "invalid_argument", "path")
    check(corrald.request("GET", base), 400, "invalid_argument", "path")
    check(corrald.request("GET", f"{base}?path=/dev/null"), 400, "invalid_argument", "/dev/null")
    for call in (lambda: sandbox.files.read("/tmp/../etc/passwd"),
                 lambda: sandbox.files.read("tmp/x"),
                 lambda: sandbox.files.write("/a/../b", b"x"),
                 lambda: sandbox.files.put_dir(b"", "relative/dir")):
        with pytest.raises(corral.InvalidSpec) as e:
            call()
        check_exc(e, corral.InvalidSpec, 400, "invalid_argument", "path")


def test_bad_tar(corrald, sandbox):
    resp = corrald.request("PUT", f"/v1/sandboxes/{sandbox.id}/files?path=/tmp/x", b"not a tar",
                           {"Content-Type": "application/x-tar"})
    check(resp, 400, "invalid_argument", "tar")
    with pytest.raises(corral.InvalidSpec):
        sandbox.files.put_dir(b"not a tar", "/tmp/y")


def test_forbidden_and_no_space(client, sandbox):
    with pytest.raises(corral.Forbidden) as e:
        sandbox.files.write("/proc/sys/kernel/hostname", b"x")
    check_exc(e, corral.Forbidden, 403, "forbidden", "/proc/sys/kernel/hostname")
    with client.create(disk_mb=1, **SMALL) as small:
        with pytest.raises(corral.NoSpace) as e:
            small.files.write("/tmp/big", b"x" * (2 << 20))
        check_exc(e, corral.NoSpace, 507, "no_space")


def test_method_not_allowed(corrald, sandbox):
    for method, target, allow in (("PATCH", "/v1/sandboxes", "GET, POST"),
                                  ("PUT", "/v1/images", "GET, POST"),
                                  ("DELETE", "/healthz", "GET"),
                                  ("PUT", f"/v1/sandboxes/{sandbox.id}", "GET, DELETE"),
                                  ("GET", f"/v1/sandboxes/{sandbox.id}/exec", "POST"),
                                  ("DELETE", f"/v1/sandboxes/{sandbox.id}/files", "GET, PUT")):
        resp = corrald.request(method, target)
        check(resp, 405, "method_not_allowed", method)
        assert resp.headers["allow"] == allow


def test_conflict(corrald, client):
    sb = client.create(**SMALL)
    sb.destroy()
    check(corrald.request("POST", f"/v1/sandboxes/{sb.id}/exec", {"cmd": "true"}),
          409, "conflict", sb.id)
    with pytest.raises(corral.Conflict) as e:
        sb.files.write("/tmp/x", b"x")
    check_exc(e, corral.Conflict, 409, "conflict")


def test_sandbox_actions_bad_input(corrald, sandbox):
    for action in ("pause", "resume", "snapshot", "fork"):
        check(corrald.request("POST", f"/v1/sandboxes/sb-nope/{action}"), 404, "not_found",
              "sb-nope")
    check(corrald.request("POST", f"/v1/sandboxes/{sandbox.id}/snapshot", {"nam": "x"}),
          400, "invalid_argument", "name")
    check(corrald.request("POST", f"/v1/sandboxes/{sandbox.id}/fork", {"stp": 1}),
          400, "invalid_argument", "stp")
    check(corrald.request("POST", f"/v1/sandboxes/{sandbox.id}/fork", {"step": 1}),
          400, "invalid_argument", "no trajectory")
    check(corrald.request("POST", f"/v1/sandboxes/{sandbox.id}/fork", {"step": 1,
                                                                      "checkpoint": "x"}),
          400, "invalid_argument", "not both")
    check(corrald.request("POST", f"/v1/sandboxes/{sandbox.id}/fork",
                          {"checkpoint": "sha256:zz"}), 400, "invalid_argument", "sha256:zz")


def test_tcp_listener_needs_the_token(corrald, monkeypatch):
    resp = corrald.request("GET", "/healthz", tcp=True)
    check(resp, 401, "unauthorized")
    assert resp.headers["www-authenticate"] == "Bearer"
    for auth in ("Bearer wrong-token-0123456789", f"Basic {corrald.token}", "Bearer ",
                 f"Bearer {corrald.token}x", f"Bearer {corrald.token[:-1]}"):
        check(corrald.request("GET", "/v1/sandboxes", headers={"Authorization": auth}, tcp=True),
              401, "unauthorized")
    resp = corrald.request("GET", "/healthz", tcp=True,
                           headers={"Authorization": f"Bearer {corrald.token}"})
    assert resp.status == 200 and resp.json()["status"] == "ok"

    monkeypatch.delenv("CORRAL_TOKEN", raising=False)
    for token in (None, "wrong-token-0123456789"):
        with pytest.raises(corral.Unauthorized) as e:
            corral.Client(corrald.tcp_url, token=token).list()
        check_exc(e, corral.Unauthorized, 401, "unauthorized")
    with corrald.client(tcp=True) as c, c.create(**SMALL) as sb:
        assert sb.exec("echo over tcp").stdout == b"over tcp\n"
        sb.files.write("/tmp/t", b"tcp")
        assert sb.files.read("/tmp/t") == b"tcp"


def test_unix_socket_is_root_only(corrald):
    assert corrald.socket_path.stat().st_mode & 0o777 == 0o600


def test_capacity(corrald_factory):
    d = corrald_factory(["--max-sandboxes", "1"])
    with d.client() as c:
        first = c.create(**SMALL)
        resp = d.request("POST", "/v1/sandboxes", {"labels": {"second": "1"}})
        check(resp, 503, "capacity_exceeded")
        retry_after = int(resp.headers["retry-after"])
        assert retry_after >= 1
        with pytest.raises(corral.CapacityError) as e:
            c.create(labels={"second": "2"}, **SMALL)
        check_exc(e, corral.CapacityError, 503, "capacity_exceeded")
        assert e.value.retry_after == retry_after
        assert [s["id"] for s in d.sandboxes()] == [first.id]  # nothing half-made
        assert c.host()["used"]["sandboxes"] == 1
        first.destroy()
        with c.create(**SMALL) as again:
            assert again.exec("true").exit_code == 0


def test_error_from_a_body_that_is_not_json():
    e = corral.errors.from_response(502, {}, b"Bad Gateway")
    assert type(e) is corral.Error and e.status == 502 and e.message == "Bad Gateway"
    e = corral.errors.from_response(503, {"retry-after": "7"},
                                    json.dumps({"error": {"code": "capacity_exceeded",
                                                          "message": "full"}}).encode())
    assert type(e) is corral.CapacityError and e.retry_after == 7


def test_default_admission_holds_many_idle_sandboxes(corrald_factory):
    """With default flags, admission goes by the memory the host has
    available, not by the sandboxes' limits: 48 sandboxes of the default
    limits (512 MiB, 1 CPU) fit this host, where reserving their limits
    stopped the 33rd (32 CPUs of quota on 2 CPUs x 16)."""
    d = corrald_factory([])
    with d.client() as c:
        cap = c.host()["capacity"]
        assert cap["admission"] == "measured"
        assert cap["memory_available_mb"] > cap["reserve_mb"] > 0
        made = []
        try:
            for _ in range(48):
                made.append(c.create())
            assert made[-1].exec("true").exit_code == 0
            used = c.host()["used"]
            assert used["sandboxes"] == 48
            assert used["cpus"] == 48  # counted, not reserved
            assert used["files"] > 0
        finally:
            for sb in made:
                sb.destroy()
        assert c.host()["used"]["sandboxes"] == 0  # none runs once its destroy answers
        # what they held is given back just after
        wait_for(lambda: c.host()["used"]["files"] == c.host()["used"]["releasing"] == 0, 10,
                 "the destroyed sandboxes' descriptors to be given back")


def test_measured_admission_refuses_under_memory_pressure(corrald_factory):
    """A host whose available memory is below what it keeps for itself
    refuses a create with a 503 that says so, and makes nothing."""
    with open("/proc/meminfo") as f:
        total_mb = int(f.read().split()[1]) // 1024
    d = corrald_factory(["--reserve-mb", str(total_mb)])
    resp = d.request("POST", "/v1/sandboxes", {"resources": SMALL})
    check(resp, 503, "capacity_exceeded", "under memory pressure", "MiB available",
          f"{total_mb} MiB kept for the host (--reserve-mb)")
    assert int(resp.headers["retry-after"]) >= 1
    assert d.sandboxes() == []


def test_overcommit_flags_mean_reserved_admission(corrald_factory):
    """--cpu-overcommit (or --overcommit) turns on reserved admission: the
    sandboxes' CPU limits must fit the host's CPUs times it."""
    cpus = os.cpu_count()
    d = corrald_factory(["--cpu-overcommit", "1"])
    with d.client() as c:
        assert c.host()["capacity"]["admission"] == "reserved"
        with c.create(memory_mb=64, cpus=cpus):
            resp = d.request("POST", "/v1/sandboxes", {"resources": {"memory_mb": 64, "cpus": 1}})
            check(resp, 503, "capacity_exceeded", "CPUs are reserved")
