"""What the sync and async clients share: where corrald is, how each call
is spelled on the wire (docs/api.md), and how its answers are read."""

import base64
import dataclasses
import io
import json
import math
import os
import tarfile
import tempfile
import urllib.parse
from contextlib import ExitStack
from typing import IO, Any, Mapping, Sequence, cast

from .errors import Error, FunctionError, InvalidSpec

# What the API takes and gives as JSON: objects are dicts of str.
JSONObject = dict[str, Any]
JSONList = list[JSONObject]
# A command: a string for /bin/sh -c, or an argv.
Command = str | Sequence[str]
# A binary file object, read to its end: an upload's body.
BinaryFile = IO[bytes]
# A path on this machine.
LocalPath = str | os.PathLike[str]

DEFAULT_URL = "unix:///run/corral/corrald.sock"
DEFAULT_TIMEOUT = 60.0  # seconds to wait for any answer but an exec's
EXEC_GRACE = 30.0  # beyond an exec's own timeout, for corrald to kill and report
SERVER_EXEC_TIMEOUT = 300.0  # corrald's default timeout_s


class Response:
    """A whole answer: status, headers (lower-case names) and body."""

    status: int
    headers: dict[str, str]
    body: bytes

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def parse_url(url: str | None) -> tuple[str, Any]:
    """("unix", path) for unix:///path, ("tcp", (host, port)) for http://host:port."""
    url = url or os.environ.get("CORRAL_URL") or DEFAULT_URL
    if url.startswith("unix://"):
        path = url[len("unix://"):]
        if not path.startswith("/"):
            raise ValueError(f"{url!r}: a unix URL is unix:///absolute/path")
        return "unix", path
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or not u.hostname:
        raise ValueError(f"{url!r}: corrald URLs are unix:///path or http://host:port")
    return "tcp", (u.hostname, u.port or 80)


def resolve_token(token: str | None) -> str | None:
    return token if token is not None else os.environ.get("CORRAL_TOKEN")


@dataclasses.dataclass
class Call:
    """One HTTP request.  ``timeout`` is how long to wait for its answer:
    None for the client's timeout, math.inf for as long as it takes."""

    method: str
    target: str
    body: bytes | BinaryFile = b""  # a binary file object is streamed
    content_type: str | None = None
    timeout: float | None = None
    length: int | None = None  # of a file object body; None: sent chunked, to its end
    range: str | None = None  # a Range header's value
    idempotency_key: str | None = None  # a create's Idempotency-Key header

    def waiting(self, client_timeout: float | None) -> "Call":
        """This call with its timeout resolved for a transport (None: no limit)."""
        t = client_timeout if self.timeout is None else self.timeout
        return dataclasses.replace(self, timeout=None if t == math.inf else t)


def q(s: object) -> str:
    return urllib.parse.quote(str(s), safe="")


def json_call(method: str, target: str, obj: Any = None, timeout: float | None = None) -> Call:
    body = b"" if obj is None else json.dumps(obj).encode()
    return Call(method, target, body, "application/json" if obj is not None else None, timeout)


def create_call(spec: Mapping[str, Any] | None, idempotency_key: str | None,
                fields: Mapping[str, Any]) -> Call:
    """POST /v1/sandboxes; with a key, corrald answers a retry with the
    sandbox the first made (docs/api.md, Idempotency-Key)."""
    call = json_call("POST", "/v1/sandboxes", build_spec(spec, **fields))
    call.idempotency_key = idempotency_key
    return call


def build_spec(spec: Mapping[str, Any] | None = None, *, backend: str | None = None,
               runtime: str | None = None, image: str | None = None,
               memory_mb: int | None = None, cpus: float | None = None,
               pids: int | None = None, disk_mb: int | None = None,
               ttl_s: int | None = None, idle_ttl_s: int | None = None,
               on_ttl: str | None = None,
               labels: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
               cwd: str | None = None, network: str | Mapping[str, Any] | None = None,
               services: Sequence[Mapping[str, Any]] | None = None,
               trajectory: str | Mapping[str, Any] | None = None,
               volumes: Sequence[Mapping[str, Any]] | None = None) -> JSONObject:
    """The sandbox spec of docs/api.md: ``spec`` with the keyword fields over it."""
    out: JSONObject = json.loads(json.dumps(spec or {}))  # a deep copy
    value: Any
    for key, value in (("backend", backend), ("runtime", runtime), ("image", image),
                       ("ttl_s", ttl_s), ("idle_ttl_s", idle_ttl_s), ("on_ttl", on_ttl),
                       ("labels", labels),
                       ("env", env), ("cwd", cwd), ("trajectory", trajectory),
                       ("services", services), ("volumes", volumes)):
        if value is not None:
            out[key] = value
    for key, value in (("memory_mb", memory_mb), ("cpus", cpus), ("pids", pids),
                       ("disk_mb", disk_mb)):
        if value is not None:
            out.setdefault("resources", {})[key] = value
    if network is not None:
        out["network"] = {"mode": network} if isinstance(network, str) else network
    return out


def list_target(labels: Mapping[str, str] | None, collection: str = "/v1/sandboxes",
                state: str | None = None) -> str:
    pairs = [("label", f"{k}={v}") for k, v in (labels or {}).items()]
    if state is not None:
        pairs.append(("state", state))
    query = urllib.parse.urlencode(pairs)
    return collection + ("?" + query if query else "")


def timeout_arg(timeout_s: float | None, timeout: float | None) -> float | None:
    """``timeout_s``, the API's name for a command's time limit in seconds;
    ``timeout`` is the same, by the SDK's older name."""
    if timeout_s is not None and timeout is not None and timeout_s != timeout:
        raise TypeError("give timeout_s or timeout (its older name), not both")
    return timeout_s if timeout_s is not None else timeout


def exec_wait(timeout: float | None) -> float:
    """How long the client waits for a command that may run ``timeout`` seconds."""
    if timeout == 0:
        return math.inf
    return (SERVER_EXEC_TIMEOUT if timeout is None else timeout) + EXEC_GRACE


def exec_call(target: str, cmd: Command, *, stdin: bytes | str | None = None,
              env: Mapping[str, str] | None = None, cwd: str | None = None,
              user: str | None = None, timeout: float | None = None,
              max_output_bytes: int | None = None, stream: bool = False) -> Call:
    """POST .../exec or .../sessions/{sid}/run (where env, cwd, user, stdin are None)."""
    body: JSONObject = {"cmd": cmd if isinstance(cmd, str) else list(cmd)}
    if isinstance(stdin, str):
        body["stdin"] = stdin
    elif stdin is not None:
        body["stdin_b64"] = base64.b64encode(stdin).decode()
    value: Any
    for key, value in (("env", env), ("cwd", cwd), ("user", user), ("timeout_s", timeout),
                       ("max_output_bytes", max_output_bytes)):
        if value is not None:
            body[key] = value
    if stream:
        body["stream"] = True
    return json_call("POST", target, body, exec_wait(timeout))


def file_call(sandbox_id: str, method: str, path: str, body: bytes = b"",
              content_type: str | None = None, **params: str | None) -> Call:
    query = urllib.parse.urlencode(
        [("path", path)] + [(k, v) for k, v in params.items() if v is not None])
    return Call(method, f"/v1/sandboxes/{q(sandbox_id)}/files?{query}", body, content_type)


def read_call(sandbox_id: str, path: str, offset: int | None, length: int | None) -> Call:
    """GET .../files, with a Range for ``offset`` and ``length`` (to the
    end when None)."""
    call = file_call(sandbox_id, "GET", path)
    if offset is None and length is None:
        return call
    start = int(offset or 0)
    if start < 0 or (length is not None and int(length) < 1):
        raise ValueError("offset must be 0 or more and length 1 or more")
    call.range = f"bytes={start}-" + ("" if length is None else str(start + int(length) - 1))
    return call


def fs_target(sandbox_id: str, op: str, **query: Any) -> str:
    q_ = urllib.parse.urlencode([(k, v) for k, v in query.items() if v is not None])
    return f"/v1/sandboxes/{q(sandbox_id)}/fs/{op}" + ("?" + q_ if q_ else "")


def fs_body(**fields: Any) -> JSONObject:
    return {k: v for k, v in fields.items() if v is not None}


def write_call(sandbox_id: str, path: str, data: bytes | bytearray | memoryview | str,
               mode: int | str | None = None, user: str | None = None) -> Call:
    if isinstance(data, str):
        data = data.encode()
    if isinstance(mode, int):
        mode = format(mode, "o")
    return file_call(sandbox_id, "PUT", path, bytes(data), "application/octet-stream",
                     mode=mode, user=user)


def snapshot_body(name: str | None) -> JSONObject:
    return {} if name is None else {"name": name}


def port_url(base: str, sandbox_id: str, port: int, path: str) -> str:
    """The port proxy's URL of a sandbox's port (docs/api.md)."""
    if not 0 < int(port) < 65536:
        raise ValueError(f"port {port!r} is not 1-65535")
    if not path.startswith("/"):
        raise ValueError(f"path {path!r} does not start with /")
    return f"{base}/v1/sandboxes/{sandbox_id}/ports/{int(port)}{path}"


def network_body(mode: str, allow: Sequence[str] | None = None,
                 deny: Sequence[str] | None = None) -> JSONObject:
    """A network object (docs/api.md, Network): mode and its rules."""
    body: JSONObject = {"mode": mode}
    if allow is not None:
        body["allow"] = list(allow)
    if deny is not None:
        body["deny"] = list(deny)
    return body


def fork_body(step: int | None = None, checkpoint: str | None = None,
              trajectory: str | Mapping[str, Any] | None = None) -> JSONObject:
    """POST .../fork: from step N of the sandbox's trajectory, a checkpoint
    id, or (neither) the sandbox's state now; ``trajectory`` (an id or
    ``{"id", "checkpoint"}``) for the new sandbox to record."""
    if step is not None and checkpoint is not None:
        raise InvalidSpec("invalid_argument", "fork from a step or a checkpoint, not both")
    body: JSONObject = {}
    value: Any
    for key, value in (("step", step), ("checkpoint", checkpoint), ("trajectory", trajectory)):
        if value is not None:
            body[key] = value
    return body


def trajectory_target(trajectory_id: str, tail: str = "") -> str:
    return f"/v1/trajectories/{q(trajectory_id)}{tail}"


def ndjson(body: bytes) -> list[JSONObject]:
    """The objects of an NDJSON body, one a line."""
    return [json.loads(line) for line in body.split(b"\n") if line.strip()]


def hosts_target(state: str | None) -> str:
    """/v1/hosts, only those in ``state`` if given."""
    return "/v1/hosts" + ("?state=" + urllib.parse.quote(state, safe="") if state else "")


def drain_target(host_id: str) -> str:
    """/v1/hosts/{id}/drain."""
    return "/v1/hosts/" + urllib.parse.quote(str(host_id), safe="") + "/drain"


def image_target(name: str) -> str:
    """/v1/images/{name}: the name as it is, '/' and ':' included."""
    return "/v1/images/" + urllib.parse.quote(str(name), safe="/:@")


def import_source(path_or_fileobj: LocalPath | BinaryFile,
                  stack: ExitStack) -> tuple[BinaryFile, int | None]:
    """(file object, length or None) of an image to upload: a file is sent as
    it is read; a directory (an OCI image layout) is first made into a tar in a
    temporary file; a file object is read to its end, chunked.  ``stack`` (an
    ExitStack) closes what is opened here."""
    if hasattr(path_or_fileobj, "read"):
        return cast(BinaryFile, path_or_fileobj), None
    path = os.fspath(path_or_fileobj)
    if os.path.isdir(path):
        if not (os.path.isfile(os.path.join(path, "oci-layout"))
                and os.path.isfile(os.path.join(path, "index.json"))):
            raise InvalidSpec("invalid_argument",
                              f"{path} is not an OCI image layout (no oci-layout, index.json)")
        tmp = stack.enter_context(tempfile.TemporaryFile())
        with tarfile.open(fileobj=tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(os.listdir(path)):
                tar.add(os.path.join(path, name), arcname=name)
        length = tmp.tell()
        tmp.seek(0)
        return tmp, length
    f = stack.enter_context(open(path, "rb"))
    return f, os.fstat(f.fileno()).st_size


def import_call(fileobj: BinaryFile, length: int | None, name: str | None = None,
                timeout: float | None = None, ref: str | None = None) -> Call:
    """POST /v1/images[?name=][&ref=]: an upload may take long, so no limit by
    default."""
    query = {k: v for k, v in (("name", name), ("ref", ref)) if v}
    target = "/v1/images" + ("?" + urllib.parse.urlencode(query) if query else "")
    return Call("POST", target, fileobj, "application/x-tar",
                math.inf if timeout is None else timeout, length)


def function_call(name: str, args: Any = None, timeout: float | None = None) -> Call:
    """POST /v1/functions/{name}/call with ``args`` (any JSON value; None:
    ``{}``) as the body.  The function's own time limit (limits.timeout_s)
    bounds the call, so by default the client waits as long as it takes."""
    body = json.dumps({} if args is None else args).encode()
    return Call("POST", f"/v1/functions/{q(name)}/call", body, "application/json",
                math.inf if timeout is None else timeout)


def function_result(name: str, answer: JSONObject) -> Any:
    """A call's ``result``, or its FunctionError."""
    if answer.get("ok"):
        return answer.get("result")
    raise FunctionError(name, answer)


def volume_target(name: str) -> str:
    return "/v1/volumes/" + urllib.parse.quote(str(name), safe="")


def volume_body(name: str, size_mb: int | None,
                labels: Mapping[str, str] | None) -> JSONObject:
    """POST /v1/volumes's body."""
    body: JSONObject = {"name": name}
    if size_mb is not None:
        body["size_mb"] = size_mb
    if labels:
        body["labels"] = dict(labels)
    return body


def pool_target(name: str) -> str:
    return "/v1/pools/" + urllib.parse.quote(str(name), safe="")


def pool_body(min: int, max: int, template: Mapping[str, Any] | None,
              fields: Mapping[str, Any]) -> JSONObject:
    """PUT /v1/pools/{name}'s body: the template is a create's spec."""
    return {"min": min, "max": max, "template": build_spec(template, **fields)}


def tag_body(source: str, target: str) -> JSONObject:
    return {"source": source, "target": target}


def body_rewind(call: Call) -> int | None:
    """Where a file object body starts, to send it again on a new connection
    (None: it cannot be: not a file, or not seekable)."""
    body = call.body
    if hasattr(body, "read") and getattr(body, "seekable", lambda: False)():
        return cast(BinaryFile, body).tell()
    return None


def dir_tar(path: str, response: Response) -> bytes:
    """The tar of a directory read with GET .../files; a file is refused."""
    if response.headers.get("x-corral-kind") != "directory":
        raise InvalidSpec("invalid_argument", f"{path} is not a directory")
    return response.body


def tar_of(local_dir_or_tar: LocalPath | bytes | bytearray | memoryview) -> bytes:
    """A tar archive's bytes: given as bytes, or made of a local directory's contents."""
    if isinstance(local_dir_or_tar, (bytes, bytearray, memoryview)):
        return bytes(local_dir_or_tar)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(os.listdir(local_dir_or_tar)):
            tar.add(os.path.join(local_dir_or_tar, name), arcname=name)
    return buf.getvalue()


@dataclasses.dataclass
class ExecResult:
    """How a command ended and what it wrote.

    ``reason`` is ``exited`` (``exit_code`` set), ``signaled`` (``signal``
    set), ``timeout``, ``oom`` or ``killed``.  ``truncated`` says output
    beyond ``max_output_bytes`` was dropped.  ``session_alive`` is set for
    session commands only.  On a sandbox that records a trajectory,
    ``step`` is the step's number and ``replayed`` whether the result came
    from the log without running anything (both None otherwise).
    """

    stdout: bytes
    stderr: bytes
    exit_code: int | None
    signal: int | None
    reason: str
    duration_s: float | None
    truncated: bool
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    cpu_s: float = 0.0
    peak_memory_bytes: int = 0
    signal_name: str | None = None
    session_alive: bool | None = None
    step: int | None = None
    replayed: bool | None = None

    @classmethod
    def from_json(cls, d: JSONObject, stdout: bytes | None = None,
                  stderr: bytes | None = None) -> "ExecResult":
        """From a result object; ``stdout``/``stderr`` given when it was streamed."""
        if stdout is None:
            def decode(text: str) -> bytes:
                return base64.b64decode(text) if d.get("encoding") == "base64" else text.encode()

            stdout, stderr = decode(d.get("stdout", "")), decode(d.get("stderr", ""))
        return cls(stdout=stdout, stderr=cast(bytes, stderr), exit_code=d.get("exit_code"),
                   signal=d.get("signal"), reason=d["reason"], duration_s=d.get("duration_s"),
                   truncated=d.get("truncated", False),
                   stdout_truncated=d.get("stdout_truncated", False),
                   stderr_truncated=d.get("stderr_truncated", False),
                   cpu_s=d.get("cpu_s", 0.0), peak_memory_bytes=d.get("peak_memory_bytes", 0),
                   signal_name=d.get("signal_name"), session_alive=d.get("session_alive"),
                   step=d.get("step"), replayed=d.get("replayed"))


class FileBytes(bytes):
    """A file's bytes, as ``files.read()`` returns them: ``bytes`` in every
    way, plus what corrald said of the file.  ``mode`` is its permission
    bits (an int, or None); on a sandbox that records a trajectory,
    ``step`` is the read's step number and ``replayed`` whether the bytes
    came from the log (both None otherwise)."""

    mode: int | None = None
    step: int | None = None
    replayed: bool | None = None

    @classmethod
    def from_response(cls, response: Response) -> "FileBytes":
        data = cls(response.body)
        h = response.headers
        mode, step, replayed = (h.get("x-corral-mode"), h.get("x-corral-step"),
                                h.get("x-corral-replayed"))
        if mode:
            try:
                data.mode = int(mode, 8)
            except ValueError:
                pass
        if step and step.isdigit():
            data.step = int(step)
        if replayed in ("true", "false"):
            data.replayed = replayed == "true"
        return data


class NDJSONDecoder:
    """An NDJSON answer fed in pieces as they arrive: its complete lines."""

    def __init__(self) -> None:
        self._partial = b""

    def lines(self, data: bytes) -> list[JSONObject]:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        return [json.loads(line) for line in lines if line.strip()]


def output_of(msg: JSONObject) -> list[tuple[str, bytes]]:
    """The ("stdout"|"stderr", bytes) a line of output carries (base64 decoded)."""
    return [(key, base64.b64decode(msg[key]) if msg.get("encoding") == "base64"
             else msg[key].encode()) for key in ("stdout", "stderr") if key in msg]


class StreamDecoder(NDJSONDecoder):
    """Turns an NDJSON exec stream, fed in pieces as they arrive, into
    ("stdout"|"stderr", bytes) events and, at its end, an ExecResult."""

    def __init__(self) -> None:
        super().__init__()
        self._out: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self._result: JSONObject | None = None

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        events: list[tuple[str, bytes]] = []
        for msg in self.lines(data):
            if "result" in msg:
                self._result = msg["result"]
                continue
            for key, chunk in output_of(msg):
                self._out[key].append(chunk)
                events.append((key, chunk))
        return events

    def result(self) -> ExecResult:
        if self._result is None:
            raise Error("incomplete", "the exec stream ended without a result")
        return ExecResult.from_json(self._result, b"".join(self._out["stdout"]),
                                    b"".join(self._out["stderr"]))


# ---- background processes (docs/api.md, Processes) ----

def process_body(cmd: Command | None, *, stdin: bytes | str | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 user: str | None = None, timeout: float | None = None,
                 tty: bool | tuple[int, int] | Mapping[str, int] = False,
                 tag: str | None = None,
                 output_buffer_bytes: int | None = None) -> JSONObject:
    """POST .../processes's body.  ``tty``: True (24x80), (rows, cols), or
    ``{"rows", "cols"}``."""
    body: JSONObject = {}
    if cmd is not None:
        body["cmd"] = cmd if isinstance(cmd, str) else list(cmd)
    if isinstance(stdin, str):
        body["stdin"] = stdin
    elif stdin is not None:
        body["stdin_b64"] = base64.b64encode(stdin).decode()
    if tty is True:
        body["tty"] = True
    elif isinstance(tty, tuple):
        body["tty"] = {"rows": tty[0], "cols": tty[1]}
    elif tty:
        body["tty"] = dict(tty)
    value: Any
    for key, value in (("env", env), ("cwd", cwd), ("user", user), ("timeout_s", timeout),
                       ("tag", tag), ("output_buffer_bytes", output_buffer_bytes)):
        if value is not None:
            body[key] = value
    return body


def process_target(sandbox_id: str, pid: int | None = None, tail: str = "") -> str:
    base = f"/v1/sandboxes/{q(sandbox_id)}/processes"
    return base if pid is None else f"{base}/{int(pid)}{tail}"


def signal_body(signal: int | str, scope: str) -> JSONObject:
    if scope not in ("process", "group", "tree"):
        raise InvalidSpec("invalid_argument", f"scope {scope!r} is not process, group or tree")
    return {"signal": signal, "scope": scope}


def stdin_call(sandbox_id: str, pid: int, data: bytes | str, eof: bool) -> Call:
    body = data.encode() if isinstance(data, str) else bytes(data)
    tail = "/stdin?eof=true" if eof else "/stdin"
    return Call("POST", process_target(sandbox_id, pid, tail), body, "application/octet-stream")


def output_call(sandbox_id: str, pid: int, offset: int, follow: bool) -> Call:
    query = urllib.parse.urlencode({"offset": int(offset), "follow": "true" if follow else "false"})
    return Call("GET", process_target(sandbox_id, pid, "/output?" + query),
                timeout=math.inf if follow else None)


@dataclasses.dataclass
class ProcessOutput:
    """What a read of a process's output gave: its bytes from ``offset``
    (stdout and stderr apart, and in order as ``chunks``), how many bytes
    before them corrald no longer kept (``lost``), the offset to read from
    next, its state then, and its ExecResult once it has ended."""

    stdout: bytes
    stderr: bytes
    chunks: list[tuple[str, bytes]]
    offset: int
    next_offset: int
    lost: int
    state: str
    result: ExecResult | None


class OutputDecoder(NDJSONDecoder):
    """Turns a process's NDJSON output, fed in pieces, into
    ("stdout"|"stderr", bytes) events and, at its end, a ProcessOutput."""

    def __init__(self, offset: int) -> None:
        super().__init__()
        self._offset = offset
        self._chunks: list[tuple[str, bytes]] = []
        self._lost = 0
        self._end: JSONObject | None = None

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        events: list[tuple[str, bytes]] = []
        for msg in self.lines(data):
            if "next_offset" in msg:
                self._end = msg
            elif "lost" in msg:
                self._lost += int(msg["lost"])
            events += output_of(msg)
        self._chunks += events
        return events

    def output(self) -> ProcessOutput:
        if self._end is None:
            raise Error("incomplete", "the output stream ended without its end")
        res = self._end.get("result")
        return ProcessOutput(
            stdout=b"".join(c for k, c in self._chunks if k == "stdout"),
            stderr=b"".join(c for k, c in self._chunks if k == "stderr"),
            chunks=self._chunks, offset=self._offset, next_offset=int(self._end["next_offset"]),
            lost=self._lost, state=self._end.get("state", ""),
            result=ExecResult.from_json(res, b"", b"") if res else None)


class WatchDecoder(NDJSONDecoder):
    """A watch's NDJSON, fed in pieces: its events, and its end once it came."""

    def __init__(self) -> None:
        super().__init__()
        self.end: JSONObject | None = None

    def feed(self, data: bytes) -> list[JSONObject]:
        events = self.lines(data)
        for ev in events:
            if ev.get("type") == "end":
                self.end = ev
        return [ev for ev in events if ev.get("type") != "end"]


class StopWatch(Exception):
    """Raised in a watch's callback to end it (the connection closes)."""


# ---- code contexts (docs/api.md, Code) ----

@dataclasses.dataclass
class Execution:
    """A cell's run in a code context: its ``results`` (dicts with ``main``
    and what the value gave: ``text``, ``png`` (base64), ``jpeg``, ``svg``,
    ``html``, ``markdown``, ``latex``, ``json``), its ``stdout`` and
    ``stderr``, its ``error`` (``{"name", "value", "traceback"}`` or None),
    its context and execution count."""

    results: list[JSONObject]
    stdout: str
    stderr: str
    error: JSONObject | None
    context: str
    execution_count: int

    @property
    def text(self) -> str | None:
        """The main result's text (the last expression's repr), if any."""
        for r in self.results:
            if r.get("main"):
                return cast(str | None, r.get("text"))
        return None

    @property
    def pngs(self) -> list[bytes]:
        return [base64.b64decode(r["png"]) for r in self.results if "png" in r]

    @classmethod
    def from_json(cls, d: JSONObject) -> "Execution":
        return cls(results=d.get("results", []), stdout=d.get("stdout", ""),
                   stderr=d.get("stderr", ""), error=d.get("error"),
                   context=d.get("context", ""), execution_count=d.get("execution_count", 0))


def code_body(code: str, context: str | None, timeout: float | None) -> JSONObject:
    return fs_body(code=code, context=context, timeout_s=timeout)
