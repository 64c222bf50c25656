"""Registered functions (docs/api.md, "Functions") against a real corrald:
definitions dropped into STATE/functions, called through the SDK, the raw
API and the CLI, each call a function sandbox made, used and destroyed."""

import asyncio
import json
import os
import subprocess
import time

import pytest

import corral
from conftest import BUILD, start_corrald

FUNCTIONS = {
    "add": ({"runtime": "python", "entry": "tools.py:add", "description": "a + b",
             "limits": {"timeout_s": 20},
             "schema": {"type": "object", "required": ["a", "b"],
                        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                        "additionalProperties": False}}),
    "noisy": {"entry": "tools.py:noisy"},
    "pairs": {"entry": "tools.py:pairs"},
    "boom": {"entry": "tools.py:boom"},
    "forever": {"entry": "tools.py:forever", "limits": {"timeout_s": 1}},
    "sleepy": {"entry": "tools.py:sleepy", "limits": {"timeout_s": 60}},
    "flood": {"entry": "tools.py:flood", "limits": {"timeout_s": 30, "max_output_bytes": 10000}},
    "huge": {"entry": "tools.py:huge", "limits": {"max_output_bytes": 10000}},
    "peek": {"entry": "tools.py:peek"},
    "echo": {"runtime": "shell", "entry": {"exec": ["/bin/cat"]}, "description": "its arguments"},
    "words": {"entry": {"exec": ["/bin/sh", "-c", "echo not json"]}},
}

TOOLS = '''
import os, sys, time

def add(a, b):
    return {"sum": a + b}

def noisy(**kw):
    print("hello from a tool")
    sys.stdout.write("more noise\\n")
    return {"quiet": True, "got": kw}

def pairs(args):
    return [[x, x] for x in args]

def boom():
    return 1 / 0

def forever():
    while True:
        pass

def sleepy():
    time.sleep(50)

def flood():
    while True:
        print("x" * 1000)

def huge():
    return "y" * 100000

def peek(path):
    with open(path) as f:
        return f.read()
'''


def write_function(d, name, definition, files=None):
    """Drop a definition (and the files it names) into d's functions dir,
    as an operator would: written beside, renamed into place."""
    fdir = d.state_dir / "functions"
    fdir.mkdir(exist_ok=True)
    for fname, text in (files or {}).items():
        (fdir / fname).write_text(text)
    tmp = fdir / f".{name}.tmp"
    tmp.write_text(definition if isinstance(definition, str) else json.dumps(definition))
    tmp.rename(fdir / f"{name}.json")


@pytest.fixture(scope="module")
def fd(tmp_path_factory):
    """A corrald of this module's, with FUNCTIONS registered."""
    d = start_corrald(tmp_path_factory.mktemp("functions"))
    write_function(d, "add", FUNCTIONS["add"], {"tools.py": TOOLS})
    for name, definition in FUNCTIONS.items():
        write_function(d, name, definition)
    yield d
    d.teardown()


@pytest.fixture(scope="module")
def fc(fd):
    with fd.client() as c:
        yield c


def call_raw(d, name, body):
    r = d.request("POST", f"/v1/functions/{name}/call", body=body, timeout=60)
    return r


def function_sandboxes(d):
    return [s for s in d.sandboxes() if "corral.function" in s.get("labels", {})
            and s["state"] not in ("destroyed", "failed")]


def wait_until(cond, timeout=10):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---- calls ----

def test_python_function_computes(fd, fc):
    assert fc.call("add", {"a": 2, "b": 40}) == {"sum": 42}
    r = call_raw(fd, "add", {"a": 1, "b": 2})
    assert r.status == 200, r
    answer = r.json()
    assert answer["ok"] is True and answer["result"] == {"sum": 3}
    assert answer["duration_s"] > 0 and answer["stderr"] == ""


def test_each_call_gets_its_own_sandbox_and_destroys_it(fd, fc):
    before = {s["id"] for s in fd.sandboxes()}
    fc.call("add", {"a": 1, "b": 1})
    fc.call("add", {"a": 1, "b": 1})
    made = [s for s in fd.sandboxes() if s["id"] not in before]
    assert len(made) == 2, made
    for s in made:
        assert s["backend"] == "function" and s["spec"]["runtime"] == "python"
        assert s["labels"] == {"corral.function": "add"}
        assert s["state"] == "destroyed"
    assert not function_sandboxes(fd)


def test_prints_go_to_stderr_not_into_the_result(fd):
    answer = call_raw(fd, "noisy", {"k": "v"}).json()
    assert answer["ok"] is True, answer
    assert answer["result"] == {"quiet": True, "got": {"k": "v"}}
    assert "hello from a tool" in answer["stderr"] and "more noise" in answer["stderr"]


def test_arguments_that_are_not_an_object_are_passed_as_one(fc):
    assert fc.call("pairs", [1, "a"]) == [[1, 1], ["a", "a"]]


def test_exec_function_echoes_its_arguments(fc):
    args = {"x": [1, 2.5, None, True], "s": "é \u2603 \\n", "nested": {"a": {}}}
    assert fc.call("echo", args) == args
    assert fc.call("echo", 7) == 7
    assert fc.call("echo", "text") == "text"
    assert fc.call("echo") == {}


def test_output_that_is_not_json_fails_the_call(fc):
    with pytest.raises(corral.FunctionError) as e:
        fc.call("words")
    assert e.value.reason == "exited" and e.value.exit_code == 0
    assert "not one JSON value" in e.value.message
    assert e.value.stdout == "not json\n"


def test_a_function_cannot_read_the_state_dir(fd, fc):
    """The jail keeps corrald's state (and the function's own code) out of reach."""
    with pytest.raises(corral.FunctionError) as e:
        fc.call("peek", str(fd.state_dir / "functions" / "tools.py"))
    assert e.value.reason == "exited" and e.value.exit_code == 1
    assert "PermissionError" in e.value.stderr or "Errno" in e.value.stderr, e.value.stderr


# ---- refusals ----

def test_schema_refusals_name_the_path(fd, fc):
    with pytest.raises(corral.InvalidSpec) as e:
        fc.call("add", {"a": "2", "b": 3})
    assert e.value.status == 400 and e.value.code == "invalid_argument"
    assert "args.a" in e.value.message and "integer" in e.value.message
    with pytest.raises(corral.InvalidSpec) as e:
        fc.call("add", {"a": 2})
    assert "'b'" in e.value.message
    with pytest.raises(corral.InvalidSpec) as e:
        fc.call("add", {"a": 2, "b": 3, "c": 4})
    assert "c" in e.value.message
    r = call_raw(fd, "add", b'{"a": ')
    assert r.status == 400 and r.error["code"] == "invalid_json", r
    assert not function_sandboxes(fd)


def test_unknown_function_is_404_naming_the_known_ones(fc):
    with pytest.raises(corral.NotFound) as e:
        fc.call("nope", {})
    assert "nope" in e.value.message and "add" in e.value.message and "echo" in e.value.message
    with pytest.raises(corral.NotFound):
        fc.function("nope")


def test_oversized_arguments_are_413(fd, fc):
    big = {"blob": "z" * (1 << 20)}
    r = call_raw(fd, "echo", big)
    assert r.status == 413 and r.error["code"] == "payload_too_large", r
    with pytest.raises(corral.PayloadTooLarge):
        fc.call("echo", big)
    # just under the limit is fine
    ok = {"blob": "z" * ((1 << 20) - 100)}
    r = call_raw(fd, "echo", ok)
    assert r.status == 200 and r.json()["ok"] is True and r.json()["result"] == ok, r


def test_methods(fd):
    r = fd.request("GET", "/v1/functions/add/call")
    assert r.status == 405 and r.headers["allow"] == "POST"
    r = fd.request("POST", "/v1/functions", body={})
    assert r.status == 405


# ---- failures ----

def test_exception_is_not_ok_with_the_traceback(fd, fc):
    answer = call_raw(fd, "boom", {}).json()
    assert answer["ok"] is False and answer["reason"] == "exited" and answer["exit_code"] == 1
    assert "Traceback" in answer["stderr"] and "ZeroDivisionError" in answer["stderr"]
    assert "ZeroDivisionError" in answer["error"]
    with pytest.raises(corral.FunctionError) as e:
        fc.call("boom")
    assert isinstance(e.value, corral.Error) and e.value.reason == "exited"
    assert e.value.exit_code == 1 and "ZeroDivisionError" in e.value.stderr


def test_endless_loop_times_out(fc):
    t0 = time.monotonic()
    with pytest.raises(corral.FunctionError) as e:
        fc.call("forever")
    took = time.monotonic() - t0
    assert e.value.reason == "timeout", e.value.answer
    assert 0.9 < took < 10, took


def test_output_flood_is_killed(fd, fc):
    t0 = time.monotonic()
    with pytest.raises(corral.FunctionError) as e:
        fc.call("flood")
    assert e.value.reason == "output_limit", e.value.answer
    assert time.monotonic() - t0 < 10  # killed at the limit, not at its timeout
    assert len(e.value.stderr) <= 10000
    with pytest.raises(corral.FunctionError) as e:
        fc.call("huge")
    assert e.value.reason == "output_limit" and len(e.value.stdout) <= 4096
    assert wait_until(lambda: not function_sandboxes(fd))


def test_client_that_hangs_up_kills_the_call(fd):
    s = fd.send("POST", "/v1/functions/sleepy/call", {})
    assert wait_until(lambda: function_sandboxes(fd)), "the call never started"
    s.close()
    assert wait_until(lambda: not function_sandboxes(fd)), function_sandboxes(fd)
    assert "the client went away" in fd.log(this_run=True) or \
        "client hung up" in fd.log(this_run=True)


def test_client_timeout_abandons_the_call(fd, fc):
    with pytest.raises(corral.Timeout):
        fc.call("sleepy", timeout=1)
    assert wait_until(lambda: not function_sandboxes(fd))


# ---- the directory ----

def test_list_and_inspect(fc):
    listed = {f["name"]: f for f in fc.functions()}
    assert set(FUNCTIONS) <= set(listed)
    assert listed["add"] == {"name": "add", "runtime": "python", "description": "a + b",
                             "schema": FUNCTIONS["add"]["schema"]}
    assert listed["echo"]["runtime"] == "shell" and listed["echo"]["schema"] is None
    one = fc.function("flood")
    assert one["limits"]["max_output_bytes"] == 10000 and one["limits"]["timeout_s"] == 30
    assert one["entry"] == "tools.py:flood"


def test_malformed_definition_is_listed_and_others_still_work(fd, fc):
    write_function(fd, "broken", "{oops")
    write_function(fd, "badentry", {"entry": "../etc/passwd.py:x"})
    write_function(fd, "Upper", {"entry": {"exec": ["/bin/cat"]}})
    listed = {f["name"]: f for f in fc.functions()}
    assert set(listed["broken"]) == {"name", "error"}
    assert "not valid JSON" in listed["broken"]["error"]
    assert "file name" in listed["badentry"]["error"]
    assert "name" in listed["Upper"]["error"]
    assert fc.call("add", {"a": 1, "b": 1}) == {"sum": 2}
    with pytest.raises(corral.Conflict) as e:
        fc.call("broken")
    assert "not valid JSON" in e.value.message
    assert "broken.json" in fd.log(this_run=True)
    for name in ("broken", "badentry", "Upper"):
        (fd.state_dir / "functions" / f"{name}.json").unlink()
    assert "broken" not in {f["name"] for f in fc.functions()}


def test_function_added_at_runtime_is_picked_up(fd, fc):
    with pytest.raises(corral.NotFound):
        fc.call("late", {})
    write_function(fd, "late", {"entry": "late.py:f"},
                   {"late.py": "def f(x=1):\n    return x * 3\n"})
    assert fc.call("late", {"x": 5}) == 15
    # its code changed in place: the next call runs the new code
    (fd.state_dir / "functions" / "late.py").write_text("def f(x=1):\n    return x * 4\n")
    os.utime(fd.state_dir / "functions" / "late.py", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert fc.call("late", {"x": 5}) == 20
    (fd.state_dir / "functions" / "late.json").unlink()
    with pytest.raises(corral.NotFound):
        fc.call("late", {})


def test_no_functions_dir_is_no_functions(corrald_factory):
    d = corrald_factory()
    with d.client() as c:
        assert c.functions() == []
        with pytest.raises(corral.NotFound) as e:
            c.call("add")
        assert "known: none" in e.value.message


# ---- async SDK and CLI ----

def test_async_call(fd):
    async def main():
        async with fd.async_client() as c:
            results = await asyncio.gather(*(c.call("add", {"a": i, "b": 1}) for i in range(4)))
            assert results == [{"sum": i + 1} for i in range(4)]
            with pytest.raises(corral.FunctionError) as e:
                await c.call("boom")
            assert e.value.reason == "exited"
            assert "add" in {f["name"] for f in await c.functions()}
    asyncio.run(main())


def corral_cli(d, *args, stdin=None):
    env = dict(os.environ, CORRAL_URL=d.url)
    return subprocess.run([str(BUILD / "corral"), *args], input=stdin, capture_output=True,
                          env=env, timeout=60)


def test_cli_call(fd):
    r = corral_cli(fd, "call", "add", '{"a": 20, "b": 22}')
    assert r.returncode == 0, r
    assert json.loads(r.stdout) == {"sum": 42}
    r = corral_cli(fd, "call", "echo", "-", stdin=b'[1, "two"]')
    assert r.returncode == 0 and json.loads(r.stdout) == [1, "two"], r
    r = corral_cli(fd, "call", "noisy")
    assert r.returncode == 0 and b"hello from a tool" in r.stderr, r
    assert json.loads(r.stdout)["quiet"] is True
    r = corral_cli(fd, "call", "boom")
    assert r.returncode == 1 and b"ZeroDivisionError" in r.stderr, r
    assert b"corral: call boom failed (exited)" in r.stderr
    r = corral_cli(fd, "call", "add", '{"a": ')
    assert r.returncode == 2 and b"not JSON" in r.stderr, r
    r = corral_cli(fd, "call", "add", '{"a": "x", "b": 1}')
    assert r.returncode == 1 and b"args.a" in r.stderr, r
    r = corral_cli(fd, "call", "--json", "add", '{"a": 1, "b": 1}')
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True, r


def test_cli_functions(fd):
    r = corral_cli(fd, "functions")
    assert r.returncode == 0, r
    lines = r.stdout.decode().splitlines()
    assert lines[0].split() == ["NAME", "RUNTIME", "DESCRIPTION"]
    assert any(line.split()[:2] == ["add", "python"] for line in lines)
    r = corral_cli(fd, "functions", "--json")
    assert "add" in {f["name"] for f in json.loads(r.stdout)["functions"]}
