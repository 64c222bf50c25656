"""The asyncio client: the blocking client's methods as coroutines, so one
event loop can drive thousands of sandboxes at once.

    async with corral.AsyncClient() as client:
        async with await client.create(image="busybox") as sb:
            r = await sb.exec("echo hi")

``create()`` is a coroutine that returns the ready AsyncSandbox; ``async
with`` on it destroys it on exit.
"""

import asyncio
import contextlib
import inspect
import math
from typing import Any, Callable, List, Mapping, Sequence

from . import _api, errors
from ._aio_http import AsyncTransport
from ._api import (BinaryFile, Command, Execution, ExecResult, FileBytes, JSONList, JSONObject,
                   LocalPath, ProcessOutput, Response, q)

# Called with each piece of a command's output as it arrives: a plain
# function, or a coroutine function (awaited).
AsyncOutputCallback = Callable[[bytes], object]


class AsyncClient:
    """Like Client, from an asyncio event loop.  ``max_connections`` bounds
    the requests in flight at once (each running exec holds one)."""

    url: str
    timeout: float

    def __init__(self, url: str | None = None, token: str | None = None,
                 timeout: float = _api.DEFAULT_TIMEOUT, max_connections: int = 256) -> None:
        self._transport = AsyncTransport(url, token, max_connections)
        self.url = self._transport.url
        self.timeout = timeout

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the idle connections."""
        await self._transport.close()

    async def _call(self, call: _api.Call,
                    on_data: Callable[[bytes], Any] | None = None) -> Response:
        return await self._transport.request(call.waiting(self.timeout), on_data)

    async def _json(self, method: str, target: str, obj: Any = None) -> Any:
        return (await self._call(_api.json_call(method, target, obj))).json()

    async def create(self, spec: Mapping[str, Any] | None = None, *,
                     idempotency_key: str | None = None, **fields: Any) -> "AsyncSandbox":
        """Create a sandbox; see Client.create()."""
        call = _api.create_call(spec, idempotency_key, fields)
        info = (await self._call(call)).json()
        return AsyncSandbox(self, info)

    async def get(self, sandbox_id: str) -> "AsyncSandbox":
        """The sandbox with this id (NotFound if corrald does not know it)."""
        return AsyncSandbox(self, await self._json("GET", f"/v1/sandboxes/{q(sandbox_id)}"))

    async def list(self, labels: Mapping[str, str] | None = None,
                   state: str | None = None) -> List["AsyncSandbox"]:
        """Every sandbox corrald knows, or those with all of ``labels`` and in
        ``state``; see Client.list()."""
        found = (await self._json("GET", _api.list_target(labels, state=state)))["sandboxes"]
        return [AsyncSandbox(self, info) for info in found]

    async def host(self) -> JSONObject:
        """The host's capacity and use: a dict."""
        return await self._json("GET", "/v1/host")

    async def hosts(self, state: str | None = None) -> JSONList:
        """The cluster's hosts; see Client.hosts()."""
        return (await self._json("GET", _api.hosts_target(state)))["hosts"]

    async def drain_host(self, host_id: str, drain: bool = True) -> JSONObject:
        """Drain a cluster's host, or undo it; see Client.drain_host()."""
        return await self._json("POST" if drain else "DELETE", _api.drain_target(host_id))

    async def images(self) -> JSONList:
        """The images sandboxes can be created from: a list of dicts."""
        return (await self._json("GET", "/v1/images"))["images"]

    async def image(self, name: str) -> JSONObject:
        """One image; see Client.image()."""
        return await self._json("GET", _api.image_target(name))

    async def import_image(self, path_or_fileobj: LocalPath | BinaryFile,
                           name: str | None = None, timeout: float | None = None, *,
                           ref: str | None = None) -> JSONObject:
        """Import an image; see Client.import_image().  A directory is tarred
        and files are read in a worker thread, off the event loop."""
        with contextlib.ExitStack() as stack:
            fileobj, length = await asyncio.to_thread(_api.import_source, path_or_fileobj,
                                                      stack)
            call = _api.import_call(fileobj, length, name, timeout, ref)
            image: JSONObject = (await self._call(call)).json()
        return image

    async def pools(self) -> JSONList:
        """The host's warm pools; see Client.pools()."""
        return (await self._json("GET", "/v1/pools"))["pools"]

    async def set_pool(self, name: str, min: int, max: int,
                       template: Mapping[str, Any] | None = None, **fields: Any) -> JSONObject:
        """Make or change a warm pool; see Client.set_pool()."""
        return await self._json("PUT", _api.pool_target(name),
                                _api.pool_body(min, max, template, fields))

    async def remove_pool(self, name: str) -> None:
        """Remove a pool; see Client.remove_pool()."""
        await self._json("DELETE", _api.pool_target(name))

    async def create_volume(self, name: str, size_mb: int | None = None,
                            labels: Mapping[str, str] | None = None) -> JSONObject:
        """Make a named volume; see Client.create_volume()."""
        return await self._json("POST", "/v1/volumes", _api.volume_body(name, size_mb, labels))

    async def volumes(self, labels: Mapping[str, str] | None = None) -> JSONList:
        """The volumes; see Client.volumes()."""
        return (await self._json("GET", _api.list_target(labels, "/v1/volumes")))["volumes"]

    async def volume(self, name: str) -> JSONObject:
        """One volume; see Client.volume()."""
        return await self._json("GET", _api.volume_target(name))

    async def remove_volume(self, name: str) -> JSONObject:
        """Remove a volume; see Client.remove_volume()."""
        return await self._json("DELETE", _api.volume_target(name))

    async def remove_image(self, name: str) -> None:
        """Remove an image's tag; see Client.remove_image()."""
        await self._call(_api.json_call("DELETE", _api.image_target(name)))

    async def tag_image(self, source: str, target: str) -> JSONObject:
        """Tag an image; see Client.tag_image()."""
        return await self._json("POST", "/v1/images/tag", _api.tag_body(source, target))

    async def gc_images(self) -> JSONObject:
        """Remove unreferenced layers; see Client.gc_images()."""
        return await self._json("POST", "/v1/images/gc")

    async def health(self) -> JSONObject:
        """``{"status": "ok", "host_id": ...}`` when corrald is up."""
        return await self._json("GET", "/healthz")

    async def trajectories(self) -> JSONList:
        """Every trajectory corrald has; see Client.trajectories()."""
        return (await self._json("GET", "/v1/trajectories"))["trajectories"]

    def trajectory(self, trajectory_id: str) -> "AsyncTrajectory":
        """The AsyncTrajectory with this id (not a coroutine: nothing is
        asked of corrald yet)."""
        return AsyncTrajectory(self, trajectory_id)

    async def call(self, name: str, args: Any = None, timeout: float | None = None) -> Any:
        """Call a registered function and return its result; see Client.call()."""
        answer = (await self._call(_api.function_call(name, args, timeout))).json()
        return _api.function_result(name, answer)

    async def functions(self) -> JSONList:
        """The registered functions; see Client.functions()."""
        return (await self._json("GET", "/v1/functions"))["functions"]

    async def function(self, name: str) -> JSONObject:
        """One function's definition; see Client.function()."""
        return await self._json("GET", f"/v1/functions/{q(name)}")

    async def _exec(self, call: _api.Call, on_stdout: AsyncOutputCallback | None,
                    on_stderr: AsyncOutputCallback | None) -> ExecResult:
        if on_stdout is None and on_stderr is None:
            return ExecResult.from_json((await self._call(call)).json())
        decoder = _api.StreamDecoder()
        await self._call(call, _dispatch(decoder, on_stdout, on_stderr))
        return decoder.result()


def _dispatch(decoder: Any, on_stdout: AsyncOutputCallback | None,
              on_stderr: AsyncOutputCallback | None) -> Callable[[bytes], Any]:
    """An answer's pieces through `decoder`, its output to the callbacks
    (plain functions or coroutine functions)."""
    callbacks = {"stdout": on_stdout, "stderr": on_stderr}

    async def on_data(piece: bytes) -> None:
        for stream, chunk in decoder.feed(piece):
            callback = callbacks[stream]
            if callback:
                done = callback(chunk)
                if inspect.isawaitable(done):
                    await done

    return on_data


class AsyncSandbox:
    """Like Sandbox, with coroutines; ``async with`` destroys it on exit."""

    client: AsyncClient
    id: str
    info: JSONObject
    files: "AsyncFiles"
    process: "AsyncProcesses"

    def __init__(self, client: AsyncClient, info: JSONObject) -> None:
        self.client = client
        self.id = info["id"]
        self.info = info
        self.files = AsyncFiles(self)
        self.process = AsyncProcesses(self)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.destroy()

    def __repr__(self) -> str:
        return f"<corral.AsyncSandbox {self.id} {self.info.get('state')}>"

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{q(self.id)}"

    async def inspect(self) -> JSONObject:
        """The sandbox as corrald sees it now: a dict."""
        self.info = await self.client._json("GET", self._path)
        return self.info

    async def destroy(self) -> None:
        """Destroy the sandbox and wait until all of it is gone (idempotent)."""
        try:
            self.info = await self.client._json("DELETE", self._path)
        except errors.NotFound:
            pass

    async def exec(self, cmd: Command, stdin: bytes | str | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None,
                   user: str | None = None, timeout_s: float | None = None,
                   timeout: float | None = None,
                   max_output_bytes: int | None = None,
                   on_stdout: AsyncOutputCallback | None = None,
                   on_stderr: AsyncOutputCallback | None = None, background: bool = False,
                   tty: bool | tuple[int, int] = False, tag: str | None = None) -> Any:
        """Run a command; see Sandbox.exec().  ``on_stdout``/``on_stderr`` may
        be plain functions or coroutine functions; ``background=True``
        returns an AsyncProcess at once."""
        timeout = _api.timeout_arg(timeout_s, timeout)
        if background or tty:
            return await self.process.start(cmd, stdin=stdin, env=env, cwd=cwd, user=user,
                                            timeout=timeout, tty=tty, tag=tag)
        call = _api.exec_call(f"{self._path}/exec", cmd, stdin=stdin, env=env, cwd=cwd, user=user,
                              timeout=timeout, max_output_bytes=max_output_bytes,
                              stream=on_stdout is not None or on_stderr is not None)
        return await self.client._exec(call, on_stdout, on_stderr)

    async def session(self, env: Mapping[str, str] | None = None, cwd: str | None = None,
                      shell: str | None = None, user: str | None = None) -> "AsyncSession":
        """Open an AsyncSession; see Sandbox.session()."""
        body = {k: v for k, v in (("env", env), ("cwd", cwd), ("shell", shell), ("user", user))
                if v is not None}
        return AsyncSession(self, await self.client._json("POST", f"{self._path}/sessions", body))

    async def snapshot(self, name: str | None = None) -> JSONObject:
        """Checkpoint the writable filesystem now; see Sandbox.snapshot()."""
        return await self.client._json("POST", f"{self._path}/snapshot",
                                       _api.snapshot_body(name))

    async def fork(self, step: int | None = None, checkpoint: str | None = None,
                   trajectory: str | Mapping[str, Any] | None = None) -> "AsyncSandbox":
        """A new AsyncSandbox from a step, a checkpoint or the state now;
        see Sandbox.fork()."""
        body = _api.fork_body(step, checkpoint, trajectory)
        return AsyncSandbox(self.client, await self.client._json("POST", f"{self._path}/fork",
                                                                 body))

    async def pause(self) -> JSONObject:
        """Freeze the sandbox; see Sandbox.pause()."""
        self.info = await self.client._json("POST", f"{self._path}/pause")
        return self.info

    async def resume(self) -> JSONObject:
        """Thaw a paused sandbox; see Sandbox.resume()."""
        self.info = await self.client._json("POST", f"{self._path}/resume")
        return self.info

    async def run_code(self, code: str, context: str | None = None,
                       timeout_s: float | None = None, timeout: float | None = None) -> Execution:
        """Run python code in a code context; see Sandbox.run_code()."""
        timeout = _api.timeout_arg(timeout_s, timeout)
        wait = math.inf if timeout == 0 else (timeout or 300) + _api.EXEC_GRACE
        answer = (await self.client._call(_api.json_call(
            "POST", f"{self._path}/code", _api.code_body(code, context, timeout), wait))).json()
        return Execution.from_json(answer)

    async def create_code_context(self, cwd: str | None = None) -> JSONObject:
        return await self.client._json("POST", f"{self._path}/code/contexts",
                                       _api.fs_body(cwd=cwd))

    async def code_contexts(self) -> JSONList:
        return (await self.client._json("GET", f"{self._path}/code/contexts"))["contexts"]

    async def restart_code_context(self, context: str = "default") -> JSONObject:
        return await self.client._json("POST",
                                       f"{self._path}/code/contexts/{q(context)}/restart")

    async def remove_code_context(self, context: str) -> None:
        await self.client._json("DELETE", f"{self._path}/code/contexts/{q(context)}")

    async def set_timeout(self, timeout_s: int) -> JSONObject:
        """End the ttl ``timeout_s`` seconds from now; see Sandbox.set_timeout()."""
        self.info = await self.client._json("POST", f"{self._path}/timeout",
                                            {"timeout_s": timeout_s})
        return self.info

    def url(self, port: int, path: str = "/") -> str:
        """Where a request reaches ``port`` of the sandbox through corrald's
        port proxy: ``{client url}/v1/sandboxes/{id}/ports/{port}{path}``.
        Over TCP the request needs the client's token, as every call does.
        The server may listen on the sandbox's loopback."""
        return _api.port_url(self.client.url, self.id, port, path)

    async def set_network(self, mode: str, allow: Sequence[str] | None = None,
                          deny: Sequence[str] | None = None) -> JSONObject:
        """Replace the network policy; see Sandbox.set_network()."""
        self.info = await self.client._json("PATCH", f"{self._path}/network",
                                            _api.network_body(mode, allow, deny))
        return self.info

    async def services(self) -> JSONObject:
        """Its services and their exchanges; see Sandbox.services()."""
        return await self.client._json("GET", f"{self._path}/services")


class AsyncFiles:
    """A sandbox's files; see Files."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def write(self, path: str, data: bytes | bytearray | memoryview | str,
                    mode: int | str | None = None, user: str | None = None) -> JSONObject:
        """Write bytes (or str) to a file; see Files.write()."""
        resp = await self._sb.client._call(_api.write_call(self._sb.id, path, data, mode, user))
        written: JSONObject = resp.json()
        return written

    async def read(self, path: str, offset: int | None = None,
                   length: int | None = None) -> FileBytes:
        """A file's bytes (or a range of them), as a FileBytes; see Files.read()."""
        resp = await self._sb.client._call(_api.read_call(self._sb.id, path, offset, length))
        return FileBytes.from_response(resp)

    async def stat(self, path: str, user: str | None = None) -> JSONObject:
        """What is at ``path``; see Files.stat()."""
        return await self._sb.client._json("GET", _api.fs_target(self._sb.id, "stat", path=path,
                                                                 user=user))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
            return True
        except errors.NotFound:
            return False

    async def list(self, path: str, depth: int = 1, user: str | None = None) -> JSONList:
        """A directory's entries; see Files.list()."""
        answer = await self._sb.client._json("GET", _api.fs_target(
            self._sb.id, "list", path=path, depth=depth, user=user))
        entries: JSONList = answer["entries"]
        return entries

    async def make_dir(self, path: str, parents: bool = True, mode: int | None = None,
                       user: str | None = None) -> JSONObject:
        return await self._sb.client._json("POST", _api.fs_target(self._sb.id, "mkdir"),
                                           _api.fs_body(path=path, parents=parents, mode=mode,
                                                        user=user))

    async def move(self, src: str, dst: str, overwrite: bool = False,
                   user: str | None = None) -> JSONObject:
        return await self._sb.client._json("POST", _api.fs_target(self._sb.id, "move"),
                                           _api.fs_body(**{"from": src, "to": dst,
                                                           "overwrite": overwrite,
                                                           "user": user}))

    async def remove(self, path: str, recursive: bool = False, user: str | None = None) -> int:
        answer = await self._sb.client._json("POST", _api.fs_target(self._sb.id, "remove"),
                                             _api.fs_body(path=path, recursive=recursive,
                                                          user=user))
        return int(answer["removed"])

    async def watch(self, path: str, on_event: Callable[[JSONObject], Any],
                    recursive: bool = False, timeout: float | None = None) -> JSONObject | None:
        """Watch a directory; see Files.watch().  ``on_event`` may be a
        coroutine function."""
        decoder = _api.WatchDecoder()

        async def on_data(piece: bytes) -> None:
            for ev in decoder.feed(piece):
                done = on_event(ev)
                if inspect.isawaitable(done):
                    done = await done
                if done is False:
                    raise _api.StopWatch()

        call = _api.Call("GET", _api.fs_target(self._sb.id, "watch", path=path,
                                               recursive="true" if recursive else None),
                         timeout=math.inf if timeout is None else timeout)
        try:
            await self._sb.client._call(call, on_data)
        except _api.StopWatch:
            return None
        return decoder.end

    async def put_dir(self, local_dir_or_tar: LocalPath | bytes | bytearray | memoryview,
                      path: str) -> JSONObject:
        """Copy a local directory (or tar bytes) into ``path``; see Files.put_dir()."""
        call = _api.file_call(self._sb.id, "PUT", path, _api.tar_of(local_dir_or_tar),
                              "application/x-tar")
        put: JSONObject = (await self._sb.client._call(call)).json()
        return put

    async def get_dir(self, path: str) -> bytes:
        """A directory's tree as tar bytes."""
        resp = await self._sb.client._call(_api.file_call(self._sb.id, "GET", path))
        return _api.dir_tar(path, resp)


class AsyncProcesses:
    """A sandbox's background processes: ``sandbox.process``; see Processes."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def start(self, cmd: Command | None, stdin: bytes | str | None = None,
                    env: Mapping[str, str] | None = None, cwd: str | None = None,
                    user: str | None = None, timeout_s: float | None = None,
                    timeout: float | None = None,
                    tty: bool | tuple[int, int] = False, tag: str | None = None,
                    output_buffer_bytes: int | None = None) -> "AsyncProcess":
        """Start a background process; see Processes.start()."""
        timeout = _api.timeout_arg(timeout_s, timeout)
        body = _api.process_body(cmd, stdin=stdin, env=env, cwd=cwd, user=user, timeout=timeout,
                                 tty=tty, tag=tag, output_buffer_bytes=output_buffer_bytes)
        return AsyncProcess(self._sb, await self._sb.client._json(
            "POST", _api.process_target(self._sb.id), body))

    async def list(self, state: str | None = None) -> List["AsyncProcess"]:
        """The sandbox's background processes; see Processes.list()."""
        target = _api.process_target(self._sb.id) + (f"?state={q(state)}" if state else "")
        found = (await self._sb.client._json("GET", target))["processes"]
        return [AsyncProcess(self._sb, p) for p in found]

    async def get(self, pid: int) -> "AsyncProcess":
        """The process ``pid``; see Processes.get()."""
        return AsyncProcess(self._sb, await self._sb.client._json(
            "GET", _api.process_target(self._sb.id, pid)))


class AsyncProcess:
    """Like Process, with coroutines."""

    sandbox: AsyncSandbox
    pid: int
    info: JSONObject

    def __init__(self, sandbox: AsyncSandbox, info: JSONObject) -> None:
        self.sandbox = sandbox
        self.pid = int(info["pid"])
        self.info = info

    def __repr__(self) -> str:
        return f"<corral.AsyncProcess {self.pid} of {self.sandbox.id} {self.info.get('state')}>"

    def _target(self, tail: str = "") -> str:
        return _api.process_target(self.sandbox.id, self.pid, tail)

    @property
    def running(self) -> bool:
        return self.info.get("state") == "running"

    @property
    def result(self) -> ExecResult | None:
        res = self.info.get("result")
        return ExecResult.from_json(res, b"", b"") if res else None

    async def _post(self, tail: str, body: Any) -> JSONObject:
        self.info = await self.sandbox.client._json("POST", self._target(tail), body)
        return self.info

    async def refresh(self) -> JSONObject:
        self.info = await self.sandbox.client._json("GET", self._target())
        return self.info

    async def output(self, offset: int = 0, follow: bool = False,
                     on_stdout: AsyncOutputCallback | None = None,
                     on_stderr: AsyncOutputCallback | None = None) -> ProcessOutput:
        """Its output from ``offset``; see Process.output()."""
        decoder = _api.OutputDecoder(offset)
        await self.sandbox.client._call(
            _api.output_call(self.sandbox.id, self.pid, offset, follow),
            _dispatch(decoder, on_stdout, on_stderr))
        out = decoder.output()
        if out.result is not None:
            await self.refresh()
        return out

    async def send_stdin(self, data: bytes | str, eof: bool = False) -> int:
        """Write to its stdin; see Process.send_stdin()."""
        answer = (await self.sandbox.client._call(
            _api.stdin_call(self.sandbox.id, self.pid, data, eof))).json()
        return int(answer["bytes"])

    async def close_stdin(self) -> None:
        await self.send_stdin(b"", eof=True)

    async def signal(self, signal: int | str = "TERM", scope: str = "process") -> JSONObject:
        """See Process.signal()."""
        return await self._post("/signal", _api.signal_body(signal, scope))

    async def kill(self) -> JSONObject:
        return await self.signal("KILL", "tree")

    async def resize(self, rows: int, cols: int) -> JSONObject:
        return await self._post("/resize", {"rows": rows, "cols": cols})

    async def wait(self, timeout_s: float | None = None,
                   timeout: float | None = None) -> ExecResult:
        """See Process.wait()."""
        timeout = _api.timeout_arg(timeout_s, timeout)
        body = {} if timeout is None else {"timeout_s": max(1, math.ceil(timeout))}
        wait = math.inf if timeout is None else timeout + _api.EXEC_GRACE
        self.info = (await self.sandbox.client._call(
            _api.json_call("POST", self._target("/wait"), body, wait))).json()
        result = self.result
        if result is None:
            raise errors.Timeout("timeout", f"process {self.pid} still runs after {timeout} s")
        return result

    async def forget(self) -> JSONObject:
        self.info = await self.sandbox.client._json("DELETE", self._target())
        return self.info


class AsyncSession:
    """A shell in a sandbox; see Session.  ``async with`` closes it on exit."""

    sandbox: AsyncSandbox
    info: JSONObject
    session_id: str
    alive: bool | None

    def __init__(self, sandbox: AsyncSandbox, info: JSONObject) -> None:
        self.sandbox = sandbox
        self.info = info
        self.session_id = info["session_id"]
        self.alive = info["alive"]

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def _path(self) -> str:
        return f"{self.sandbox._path}/sessions/{q(self.session_id)}"

    async def run(self, cmd: str, timeout_s: float | None = None, timeout: float | None = None,
                  max_output_bytes: int | None = None,
                  on_stdout: AsyncOutputCallback | None = None,
                  on_stderr: AsyncOutputCallback | None = None) -> ExecResult:
        """Run a shell command line in the session; see Session.run()."""
        timeout = _api.timeout_arg(timeout_s, timeout)
        call = _api.exec_call(f"{self._path}/run", cmd, timeout=timeout,
                              max_output_bytes=max_output_bytes,
                              stream=on_stdout is not None or on_stderr is not None)
        result = await self.sandbox.client._exec(call, on_stdout, on_stderr)
        self.alive = result.session_alive
        return result

    async def close(self) -> None:
        """End the session (nothing happens if it has ended already)."""
        try:
            await self.sandbox.client._json("DELETE", self._path)
        except errors.NotFound:
            pass
        self.alive = False


class AsyncTrajectory:
    """A trajectory; see Trajectory."""

    client: AsyncClient
    id: str

    def __init__(self, client: AsyncClient, trajectory_id: str) -> None:
        self.client = client
        self.id = trajectory_id

    def __repr__(self) -> str:
        return f"<corral.AsyncTrajectory {self.id}>"

    async def info(self, outputs: bool = False) -> JSONObject:
        """The trajectory and its steps; see Trajectory.info()."""
        tail = "?outputs=1" if outputs else ""
        return await self.client._json("GET", _api.trajectory_target(self.id, tail))

    async def steps(self) -> JSONList:
        """Every step with its outputs; see Trajectory.steps()."""
        call = _api.Call("GET", _api.trajectory_target(self.id, "/steps"))
        return _api.ndjson((await self.client._call(call)).body)

    async def remove(self) -> JSONObject:
        """Delete the trajectory; see Trajectory.remove()."""
        return await self.client._json("DELETE", _api.trajectory_target(self.id))
