"""The blocking client: Client, Sandbox, Files, Session, Processes, Process,
Trajectory."""

import contextlib
import math
from typing import Any, Callable, List, Mapping, Sequence

from . import _api, errors
from ._api import (BinaryFile, Command, Execution, ExecResult, FileBytes, JSONList, JSONObject,
                   LocalPath, ProcessOutput, Response, q)
from ._http import Transport

# Called with each piece of a command's output as it arrives.
OutputCallback = Callable[[bytes], object]


class Client:
    """A connection to corrald.

    ``url`` is ``unix:///path/to/corrald.sock`` or ``http://127.0.0.1:PORT``
    (default: ``$CORRAL_URL``, else ``unix:///run/corral/corrald.sock``);
    ``token`` is the bearer token the TCP listener needs (default:
    ``$CORRAL_TOKEN``).  ``timeout`` is how many seconds to wait for an
    answer, else errors.Timeout (an exec waits for its own timeout plus 30 s).  Connections are
    kept alive in a pool, so threads may share one Client.
    """

    url: str
    timeout: float

    def __init__(self, url: str | None = None, token: str | None = None,
                 timeout: float = _api.DEFAULT_TIMEOUT) -> None:
        self._transport = Transport(url, token)
        self.url = self._transport.url
        self.timeout = timeout

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the idle connections (the client stays usable)."""
        self._transport.close()

    def _call(self, call: _api.Call,
              on_data: Callable[[bytes], object] | None = None) -> Response:
        return self._transport.request(call.waiting(self.timeout), on_data)

    def _json(self, method: str, target: str, obj: Any = None) -> Any:
        return self._call(_api.json_call(method, target, obj)).json()

    def create(self, spec: Mapping[str, Any] | None = None, *,
               idempotency_key: str | None = None, **fields: Any) -> "Sandbox":
        """Create a sandbox and return it once it is ready.

        Keyword fields: backend, runtime (the function backend's: "shell" or
        "python"), image, memory_mb, cpus, pids, disk_mb, ttl_s,
        idle_ttl_s, on_ttl ("destroy", the default, or "pause": the next
        call resumes it), labels, env, cwd, network, services, trajectory,
        volumes (``[{"name": "data", "path": "/data", "read_only": True}]``:
        see create_volume()); they go over
        ``spec``, a dict in the form of docs/api.md.  Use the Sandbox as a
        context manager to destroy it when done.

        ``trajectory`` ("t-1", or ``{"id": "t-1", "checkpoint":
        "every-step"|"on-request"|"none"}``) records every call made to the
        sandbox as a step of that trajectory; if it exists already, the
        sandbox first fast-forwards through it (see Trajectory).

        ``idempotency_key``: a create retried with the same key (and the
        same spec) answers with the sandbox the first made, never a second.
        """
        return Sandbox(self, self._call(_api.create_call(spec, idempotency_key, fields)).json())

    def get(self, sandbox_id: str) -> "Sandbox":
        """The sandbox with this id (NotFound if corrald does not know it)."""
        return Sandbox(self, self._json("GET", f"/v1/sandboxes/{q(sandbox_id)}"))

    def list(self, labels: Mapping[str, str] | None = None,
             state: str | None = None) -> List["Sandbox"]:
        """Every sandbox corrald knows (destroyed ones for a while too), or
        those with all of ``labels`` and in ``state`` (``ready``,
        ``paused``, ...), oldest first."""
        found = self._json("GET", _api.list_target(labels, state=state))["sandboxes"]
        return [Sandbox(self, info) for info in found]

    def host(self) -> JSONObject:
        """The host's capacity and use: a dict."""
        return self._json("GET", "/v1/host")

    def hosts(self, state: str | None = None) -> JSONList:
        """The cluster's hosts (this host alone without ``--cluster``): a list
        of dicts (``id``, ``addr``, ``state``: ready, draining or lost,
        ``free``, ``sandboxes``, ``heartbeat_age_s``, ``self``...)."""
        return self._json("GET", _api.hosts_target(state))["hosts"]

    def drain_host(self, host_id: str, drain: bool = True) -> JSONObject:
        """Stop placing creates on a cluster's host (``drain=False``: place
        them there again); its sandboxes run on to their ends."""
        return self._json("POST" if drain else "DELETE", _api.drain_target(host_id))

    def pools(self) -> JSONList:
        """The host's warm pools: a list of dicts (``name``, ``template``,
        ``min``, ``max``, ``target``, ``ready``, ``claims``, ``misses``,
        ``died``, ``state``, ``error``...)."""
        return self._json("GET", "/v1/pools")["pools"]

    def set_pool(self, name: str, min: int, max: int,
                 template: Mapping[str, Any] | None = None, **fields: Any) -> JSONObject:
        """Keep ``min`` to ``max`` ready sandboxes of ``template`` (a spec, as
        create() takes, with the keyword fields over it): a create() of that
        spec (labels, TTLs, env and cwd aside) is then a claim of one."""
        return self._json("PUT", _api.pool_target(name),
                          _api.pool_body(min, max, template, fields))

    def remove_pool(self, name: str) -> None:
        """Remove a pool; its ready sandboxes are destroyed."""
        self._json("DELETE", _api.pool_target(name))

    def create_volume(self, name: str, size_mb: int | None = None,
                      labels: Mapping[str, str] | None = None) -> JSONObject:
        """Make a named volume (an ext4 file system of ``size_mb`` MiB,
        default 1024, whose size the kernel enforces) that outlives
        sandboxes; a create mounts it with ``volumes=[{"name": name, "path":
        "/data", "read_only": False}]``.  Conflict if it exists."""
        return self._json("POST", "/v1/volumes", _api.volume_body(name, size_mb, labels))

    def volumes(self, labels: Mapping[str, str] | None = None) -> JSONList:
        """The volumes (with all of ``labels``), by name: dicts with ``name``,
        ``size_mb``, ``used_bytes``, ``created_at``, ``labels`` and ``mounts``
        (``sandbox``, ``path``, ``read_only``)."""
        return self._json("GET", _api.list_target(labels, "/v1/volumes"))["volumes"]

    def volume(self, name: str) -> JSONObject:
        """One volume (NotFound if there is none)."""
        return self._json("GET", _api.volume_target(name))

    def remove_volume(self, name: str) -> JSONObject:
        """Remove a volume and its files, and return it as it was (Conflict
        while a sandbox mounts it)."""
        return self._json("DELETE", _api.volume_target(name))

    def images(self) -> JSONList:
        """The images sandboxes can be created from: a list of dicts."""
        return self._json("GET", "/v1/images")["images"]

    def image(self, name: str) -> JSONObject:
        """One image (``NAME[:TAG]`` or its id): a dict with ``name``, ``names``,
        ``id``, ``layers``, ``size``, ``env``, ``cwd``, ``user``,
        ``entrypoint``, ``cmd``, ``sandboxes`` (NotFound if there is none)."""
        return self._json("GET", _api.image_target(name))

    def import_image(self, path_or_fileobj: LocalPath | BinaryFile,
                     name: str | None = None, timeout: float | None = None, *,
                     ref: str | None = None) -> JSONObject:
        """Import an image and return it (a dict, as image() gives it).

        ``path_or_fileobj`` is a docker-archive or oci-archive (maybe gzip,
        zstd or xz compressed) as a path or a binary file object (read to its
        end, streamed), or an OCI image layout directory (tarred into a
        temporary file first).  ``ref`` picks one image of an archive that
        holds several: a name the archive gives it (a layout's tag such as
        ``"v1"``, containerd's full name, a docker archive's RepoTag) or its
        digest; without one, an archive of several images is refused
        (InvalidSpec, listing them).  ``name`` (``NAME[:TAG]``) tags it;
        without one the archive's own full name for it is used.
        ``timeout``: seconds to wait for the answer (default: no limit).
        """
        with contextlib.ExitStack() as stack:
            fileobj, length = _api.import_source(path_or_fileobj, stack)
            image: JSONObject = self._call(_api.import_call(fileobj, length, name, timeout,
                                                            ref)).json()
        return image

    def remove_image(self, name: str) -> None:
        """Remove an image's tag (the image goes with its last one); Conflict
        while a sandbox uses it."""
        self._call(_api.json_call("DELETE", _api.image_target(name)))

    def tag_image(self, source: str, target: str) -> JSONObject:
        """Tag the image ``source`` as ``target`` (``NAME[:TAG]``); returns it."""
        return self._json("POST", "/v1/images/tag", _api.tag_body(source, target))

    def gc_images(self) -> JSONObject:
        """Remove layers no image references: ``{"layers_removed", "bytes_freed"}``."""
        return self._json("POST", "/v1/images/gc")

    def health(self) -> JSONObject:
        """``{"status": "ok", "host_id": ...}`` when corrald is up."""
        return self._json("GET", "/healthz")

    def trajectories(self) -> JSONList:
        """Every trajectory corrald has: a list of ``{"id", "spec", "base",
        "created_at", "n_steps", "heads", "live_sandbox"}`` (``{"id",
        "error"}`` for one whose log cannot be read)."""
        return self._json("GET", "/v1/trajectories")["trajectories"]

    def trajectory(self, trajectory_id: str) -> "Trajectory":
        """The Trajectory with this id (nothing is asked of corrald yet)."""
        return Trajectory(self, trajectory_id)

    def call(self, name: str, args: Any = None, timeout: float | None = None) -> Any:
        """Call the registered function ``name`` with ``args`` (any JSON
        value; None: ``{}``) and return its result.

        Raises FunctionError when the call failed (non-zero exit, killed by
        its timeout, memory or output limit, output not JSON), NotFound for
        an unknown function, InvalidSpec for arguments its schema refuses.
        ``timeout``: seconds to wait for the answer (default: as long as the
        function's own limit); when it passes the call is abandoned, which
        kills it, and Timeout is raised.
        """
        answer = self._call(_api.function_call(name, args, timeout)).json()
        return _api.function_result(name, answer)

    def functions(self) -> JSONList:
        """The registered functions: a list of ``{"name", "runtime",
        "description", "schema"}``, or ``{"name", "error"}`` for a
        definition corrald could not load."""
        return self._json("GET", "/v1/functions")["functions"]

    def function(self, name: str) -> JSONObject:
        """One function's definition as corrald holds it (NotFound if none)."""
        return self._json("GET", f"/v1/functions/{q(name)}")

    def _exec(self, call: _api.Call, on_stdout: OutputCallback | None,
              on_stderr: OutputCallback | None) -> ExecResult:
        if on_stdout is None and on_stderr is None:
            return ExecResult.from_json(self._call(call).json())
        decoder = _api.StreamDecoder()
        self._call(call, _dispatch(decoder, on_stdout, on_stderr))
        return decoder.result()


def _dispatch(decoder: Any, on_stdout: OutputCallback | None,
              on_stderr: OutputCallback | None) -> Callable[[bytes], None]:
    """An answer's pieces through `decoder`, its output to the callbacks."""
    callbacks = {"stdout": on_stdout, "stderr": on_stderr}

    def on_data(piece: bytes) -> None:
        for stream, chunk in decoder.feed(piece):
            callback = callbacks[stream]
            if callback:
                callback(chunk)

    return on_data


class Sandbox:
    """One sandbox.  ``id`` is its id, ``info`` what corrald last said of it.

    As a context manager it destroys the sandbox on exit.
    """

    client: Client
    id: str
    info: JSONObject
    files: "Files"
    process: "Processes"

    def __init__(self, client: Client, info: JSONObject) -> None:
        self.client = client
        self.id = info["id"]
        self.info = info
        self.files = Files(self)
        self.process = Processes(self)

    @classmethod
    def create(cls, spec: Mapping[str, Any] | None = None, **fields: Any) -> "Sandbox":
        """Client.create() on a Client made from the environment."""
        return _default_client().create(spec, **fields)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __repr__(self) -> str:
        return f"<corral.Sandbox {self.id} {self.info.get('state')}>"

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{q(self.id)}"

    def inspect(self) -> JSONObject:
        """The sandbox as corrald sees it now (state, spec, usage, ...): a dict."""
        self.info = self.client._json("GET", self._path)
        return self.info

    def destroy(self) -> None:
        """Destroy the sandbox and wait until all of it is gone.  Destroying a
        destroyed (or forgotten) sandbox does nothing."""
        try:
            self.info = self.client._json("DELETE", self._path)
        except errors.NotFound:
            pass

    def exec(self, cmd: Command, stdin: bytes | str | None = None,
             env: Mapping[str, str] | None = None, cwd: str | None = None,
             user: str | None = None, timeout_s: float | None = None, timeout: float | None = None,
             max_output_bytes: int | None = None, on_stdout: OutputCallback | None = None,
             on_stderr: OutputCallback | None = None, background: bool = False,
             tty: bool | tuple[int, int] = False, tag: str | None = None) -> Any:
        """Run a command and return its ExecResult.

        ``cmd`` is a string (run by ``/bin/sh -c``) or an argv list.  ``stdin``
        is bytes or str; ``user`` is ``"root"``, ``"UID"`` or ``"UID:GID"``;
        ``timeout_s`` (or ``timeout``, its older name) is in seconds (0:
        none; corrald's default is 300), after
        which the command's whole process tree is killed and the result's
        reason is ``"timeout"``.  ``on_stdout``/``on_stderr`` are called with
        bytes as output arrives; the result has all of it too.

        ``background=True`` starts it as a background process instead and
        returns its Process at once (``tty`` and ``tag`` as
        Processes.start() takes them; no timeout unless given).
        """
        timeout = _api.timeout_arg(timeout_s, timeout)
        if background or tty:
            return self.process.start(cmd, stdin=stdin, env=env, cwd=cwd, user=user,
                                      timeout=timeout, tty=tty, tag=tag)
        call = _api.exec_call(f"{self._path}/exec", cmd, stdin=stdin, env=env, cwd=cwd, user=user,
                              timeout=timeout, max_output_bytes=max_output_bytes,
                              stream=on_stdout is not None or on_stderr is not None)
        return self.client._exec(call, on_stdout, on_stderr)

    def session(self, env: Mapping[str, str] | None = None, cwd: str | None = None,
                shell: str | None = None, user: str | None = None) -> "Session":
        """Open a shell Session that keeps its cwd and environment between
        commands.  Use it as a context manager to close it when done."""
        body = {k: v for k, v in (("env", env), ("cwd", cwd), ("shell", shell), ("user", user))
                if v is not None}
        return Session(self, self.client._json("POST", f"{self._path}/sessions", body))

    def snapshot(self, name: str | None = None) -> JSONObject:
        """Checkpoint the sandbox's writable filesystem now (not its
        processes): ``{"sandbox", "checkpoint": "sha256:...", "name",
        "stats": {"entries", "changed", "removed", "bytes_stored",
        "seconds"}}``.  On a trajectory sandbox it is a step too."""
        return self.client._json("POST", f"{self._path}/snapshot", _api.snapshot_body(name))

    def fork(self, step: int | None = None, checkpoint: str | None = None,
             trajectory: str | Mapping[str, Any] | None = None) -> "Sandbox":
        """A new Sandbox with this one's spec, on the state after ``step`` of
        its trajectory, or of ``checkpoint`` (an id from snapshot()), or
        (neither) its state now.  ``trajectory`` (an id or ``{"id",
        "checkpoint"}``, a new one) makes the new sandbox record one; its
        ``info["forked_from"]`` is ``{"sandbox", "step", "checkpoint"}``.
        NotFound for a step that does not exist."""
        body = _api.fork_body(step, checkpoint, trajectory)
        return Sandbox(self.client, self.client._json("POST", f"{self._path}/fork", body))

    def pause(self) -> JSONObject:
        """Freeze every process of the sandbox and release what memory can
        be; any later call resumes it.  Returns the sandbox's info."""
        self.info = self.client._json("POST", f"{self._path}/pause")
        return self.info

    def resume(self) -> JSONObject:
        """Thaw a paused sandbox.  Returns the sandbox's info."""
        self.info = self.client._json("POST", f"{self._path}/resume")
        return self.info

    def run_code(self, code: str, context: str | None = None,
                 timeout_s: float | None = None, timeout: float | None = None) -> Execution:
        """Run python ``code`` in a code context (``"default"``, made at its
        first use, or one from create_code_context()), whose globals persist
        between calls: ``run_code("x = 1")``, then ``run_code("x + 1").text
        == "2"``.  An exception is the Execution's ``error``, not raised;
        past ``timeout_s`` seconds (default 300) the cell is interrupted."""
        timeout = _api.timeout_arg(timeout_s, timeout)
        wait = math.inf if timeout == 0 else (timeout or 300) + _api.EXEC_GRACE
        answer = self.client._call(_api.json_call("POST", f"{self._path}/code",
                                                  _api.code_body(code, context, timeout),
                                                  wait)).json()
        return Execution.from_json(answer)

    def create_code_context(self, cwd: str | None = None) -> JSONObject:
        """A new code context (its python starts now): ``{"id", "language",
        "cwd", "state", ...}``; pass its ``id`` as run_code's ``context``."""
        return self.client._json("POST", f"{self._path}/code/contexts", _api.fs_body(cwd=cwd))

    def code_contexts(self) -> JSONList:
        return self.client._json("GET", f"{self._path}/code/contexts")["contexts"]

    def restart_code_context(self, context: str = "default") -> JSONObject:
        """Start a context's python again: its state goes."""
        return self.client._json("POST", f"{self._path}/code/contexts/{q(context)}/restart")

    def remove_code_context(self, context: str) -> None:
        self.client._json("DELETE", f"{self._path}/code/contexts/{q(context)}")

    def set_timeout(self, timeout_s: int) -> JSONObject:
        """End the sandbox's ttl ``timeout_s`` seconds from now (0: never),
        longer or shorter than its spec said; its ``on_ttl`` says what
        happens then.  Returns the sandbox's info (``expires_at``)."""
        self.info = self.client._json("POST", f"{self._path}/timeout", {"timeout_s": timeout_s})
        return self.info

    def url(self, port: int, path: str = "/") -> str:
        """Where a request reaches ``port`` of the sandbox through corrald's
        port proxy: ``{client url}/v1/sandboxes/{id}/ports/{port}{path}``.
        Over TCP the request needs the client's token, as every call does.
        The server may listen on the sandbox's loopback."""
        return _api.port_url(self.client.url, self.id, port, path)

    def set_network(self, mode: str, allow: Sequence[str] | None = None,
                    deny: Sequence[str] | None = None) -> JSONObject:
        """Replace the sandbox's network policy while it runs: in force for
        its next connection (those open go on), its names asked again under
        the new rules.  ``set_network("allow", allow=["deb.example"])``;
        mode "none" cuts it off.  Returns the sandbox's info."""
        self.info = self.client._json("PATCH", f"{self._path}/network",
                                      _api.network_body(mode, allow, deny))
        return self.info

    def services(self) -> JSONObject:
        """The sandbox's services (``services`` of its spec, each with the
        address its name resolves to inside) and their newest exchanges:
        ``{"services": [...], "exchanges": [...], "exchanges_total": n}``.
        Each exchange with a mock is its request and the route's answer;
        each connection to a sandbox service is one entry."""
        return self.client._json("GET", f"{self._path}/services")


class Files:
    """A sandbox's files: ``sandbox.files``.  Paths are absolute, without ``..``."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def write(self, path: str, data: bytes | bytearray | memoryview | str,
              mode: int | str | None = None, user: str | None = None) -> JSONObject:
        """Write bytes (or str, as UTF-8) to a file, creating missing parent
        directories; ``mode`` is an int (0o644) and ``user`` ``"UID[:GID]"``.
        Returns ``{"path", "bytes"}``."""
        written: JSONObject = self._sb.client._call(
            _api.write_call(self._sb.id, path, data, mode, user)).json()
        return written

    def read(self, path: str, offset: int | None = None,
             length: int | None = None) -> FileBytes:
        """A file's bytes: a FileBytes, which is bytes with ``mode`` and, on
        a trajectory sandbox, ``step`` and ``replayed``; with ``offset``
        and ``length`` (to the end if None), that range of them."""
        return FileBytes.from_response(
            self._sb.client._call(_api.read_call(self._sb.id, path, offset, length)))

    def stat(self, path: str, user: str | None = None) -> JSONObject:
        """What is at ``path`` (a symlink itself, not followed): ``{"path",
        "name", "type": "file"|"dir"|"symlink"|..., "size", "mode", "uid",
        "gid", "mtime", "symlink_target"}``.  NotFound if nothing."""
        return self._sb.client._json("GET", _api.fs_target(self._sb.id, "stat", path=path,
                                                           user=user))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except errors.NotFound:
            return False

    def list(self, path: str, depth: int = 1, user: str | None = None) -> JSONList:
        """The entries of a directory (as stat() gives them), and of those
        below it to ``depth`` levels (never through a symlink)."""
        answer = self._sb.client._json("GET", _api.fs_target(self._sb.id, "list", path=path,
                                                             depth=depth, user=user))
        entries: JSONList = answer["entries"]
        return entries

    def make_dir(self, path: str, parents: bool = True, mode: int | None = None,
                 user: str | None = None) -> JSONObject:
        """Make a directory (and, with ``parents``, those above it); returns it."""
        return self._sb.client._json("POST", _api.fs_target(self._sb.id, "mkdir"),
                                     _api.fs_body(path=path, parents=parents, mode=mode,
                                                  user=user))

    def move(self, src: str, dst: str, overwrite: bool = False,
             user: str | None = None) -> JSONObject:
        """Rename ``src`` to ``dst`` (InvalidSpec if it exists, unless
        ``overwrite``); returns what is at ``dst``."""
        return self._sb.client._json("POST", _api.fs_target(self._sb.id, "move"),
                                     _api.fs_body(**{"from": src, "to": dst,
                                                     "overwrite": overwrite, "user": user}))

    def remove(self, path: str, recursive: bool = False, user: str | None = None) -> int:
        """Remove a file or an empty directory (with ``recursive``, a
        directory and all in it); returns how many entries went."""
        answer = self._sb.client._json("POST", _api.fs_target(self._sb.id, "remove"),
                                       _api.fs_body(path=path, recursive=recursive, user=user))
        return int(answer["removed"])

    def watch(self, path: str, on_event: Callable[[JSONObject], object],
              recursive: bool = False, timeout: float | None = None) -> JSONObject | None:
        """Watch a directory: ``on_event`` gets each event as it comes
        (``{"type": "create"|"write"|"remove"|"rename"|"chmod", "path",
        "dir", "from"}``; ``"ready"`` first, once the watch is in place;
        ``"overflow"`` when events were lost), and returns False (or raises
        StopWatch) to stop.  Returns the end (``{"type": "end", "error"}``)
        when the directory went, None when stopped."""
        decoder = _api.WatchDecoder()

        def on_data(piece: bytes) -> None:
            for ev in decoder.feed(piece):
                if on_event(ev) is False:
                    raise _api.StopWatch()

        call = _api.Call("GET", _api.fs_target(self._sb.id, "watch", path=path,
                                               recursive="true" if recursive else None),
                         timeout=math.inf if timeout is None else timeout)
        try:
            self._sb.client._call(call, on_data)
        except _api.StopWatch:
            return None
        return decoder.end

    def put_dir(self, local_dir_or_tar: LocalPath | bytes | bytearray | memoryview,
                path: str) -> JSONObject:
        """Copy a local directory's contents (or extract a tar archive given as
        bytes, optionally compressed) into the directory ``path``, created if
        missing.  Returns ``{"path", "entries", "bytes"}``."""
        call = _api.file_call(self._sb.id, "PUT", path, _api.tar_of(local_dir_or_tar),
                              "application/x-tar")
        put: JSONObject = self._sb.client._call(call).json()
        return put

    def get_dir(self, path: str) -> bytes:
        """A directory's tree as tar bytes (open it with tarfile)."""
        resp = self._sb.client._call(_api.file_call(self._sb.id, "GET", path))
        return _api.dir_tar(path, resp)


class Processes:
    """A sandbox's background processes: ``sandbox.process``."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def start(self, cmd: Command | None, stdin: bytes | str | None = None,
              env: Mapping[str, str] | None = None, cwd: str | None = None,
              user: str | None = None, timeout_s: float | None = None, timeout: float | None = None,
              tty: bool | tuple[int, int] = False, tag: str | None = None,
              output_buffer_bytes: int | None = None) -> "Process":
        """Start a command that runs on in the background, and return its
        Process once it runs (its ``pid`` is the sandbox's).  ``cmd`` as
        exec() takes it (None: the image's entrypoint and cmd); ``stdin``
        is written first and stdin stays open; ``timeout`` in seconds
        (default: none); ``tty``: a terminal of its own (True: 24x80, or
        (rows, cols)); ``tag``: a name to find it by in list();
        ``output_buffer_bytes``: how much of its newest output corrald
        keeps for readers (default 1 MiB)."""
        timeout = _api.timeout_arg(timeout_s, timeout)
        body = _api.process_body(cmd, stdin=stdin, env=env, cwd=cwd, user=user, timeout=timeout,
                                 tty=tty, tag=tag, output_buffer_bytes=output_buffer_bytes)
        return Process(self._sb, self._sb.client._json(
            "POST", _api.process_target(self._sb.id), body))

    def list(self, state: str | None = None) -> List["Process"]:
        """The sandbox's background processes, oldest first: running and
        ended ones (until forgotten), or those in ``state``
        ("running" or "exited")."""
        target = _api.process_target(self._sb.id) + (f"?state={q(state)}" if state else "")
        return [Process(self._sb, p) for p in self._sb.client._json("GET", target)["processes"]]

    def get(self, pid: int) -> "Process":
        """The process ``pid`` (NotFound if the sandbox has no such record):
        a handle from another client, to read, feed, signal or wait."""
        return Process(self._sb, self._sb.client._json(
            "GET", _api.process_target(self._sb.id, pid)))


class Process:
    """A background process: ``pid`` (the sandbox's), and ``info``, what
    corrald last said of it (``cmd``, ``tag``, ``tty``, ``state``,
    ``started_at``, ``ended_at``, ``stdin_open``, ``output``: the offsets
    corrald keeps, ``result``)."""

    sandbox: Sandbox
    pid: int
    info: JSONObject

    def __init__(self, sandbox: Sandbox, info: JSONObject) -> None:
        self.sandbox = sandbox
        self.pid = int(info["pid"])
        self.info = info

    def __repr__(self) -> str:
        return f"<corral.Process {self.pid} of {self.sandbox.id} {self.info.get('state')}>"

    def _target(self, tail: str = "") -> str:
        return _api.process_target(self.sandbox.id, self.pid, tail)

    def _update(self, info: JSONObject) -> JSONObject:
        self.info = info
        return info

    @property
    def running(self) -> bool:
        return self.info.get("state") == "running"

    @property
    def result(self) -> ExecResult | None:
        """How it ended (None while it runs, as last seen)."""
        res = self.info.get("result")
        return ExecResult.from_json(res, b"", b"") if res else None

    def refresh(self) -> JSONObject:
        return self._update(self.sandbox.client._json("GET", self._target()))

    def output(self, offset: int = 0, follow: bool = False,
               on_stdout: OutputCallback | None = None,
               on_stderr: OutputCallback | None = None) -> ProcessOutput:
        """Its output from byte ``offset`` on (0: all that corrald keeps;
        what it no longer keeps is counted in ``lost``): what is there now,
        or with ``follow`` all of it until the process ends, handed to the
        callbacks as it comes.  Read on from the answer's ``next_offset``."""
        decoder = _api.OutputDecoder(offset)
        self.sandbox.client._call(_api.output_call(self.sandbox.id, self.pid, offset, follow),
                                  _dispatch(decoder, on_stdout, on_stderr))
        out = decoder.output()
        if out.result is not None:
            self.refresh()
        return out

    def send_stdin(self, data: bytes | str, eof: bool = False) -> int:
        """Write to its stdin (str as UTF-8); with ``eof``, close it after.
        Returns how many bytes were taken.  Conflict once stdin is closed
        or the process has ended."""
        answer = self.sandbox.client._call(
            _api.stdin_call(self.sandbox.id, self.pid, data, eof)).json()
        return int(answer["bytes"])

    def close_stdin(self) -> None:
        """End its stdin (a terminal reads end-of-file)."""
        self.send_stdin(b"", eof=True)

    def signal(self, signal: int | str = "TERM", scope: str = "process") -> JSONObject:
        """Send a signal (a name such as "INT", or a number) to it
        (``scope="process"``), its process group ("group") or everything it
        started ("tree").  Conflict once it has ended."""
        return self._update(self.sandbox.client._json("POST", self._target("/signal"),
                                                      _api.signal_body(signal, scope)))

    def kill(self) -> JSONObject:
        """SIGKILL to it and every process it started."""
        return self.signal("KILL", "tree")

    def resize(self, rows: int, cols: int) -> JSONObject:
        """Its terminal's new size (the program in front gets SIGWINCH)."""
        return self._update(self.sandbox.client._json("POST", self._target("/resize"),
                                                      {"rows": rows, "cols": cols}))

    def wait(self, timeout_s: float | None = None, timeout: float | None = None) -> ExecResult:
        """Wait for it to end and return how (an ExecResult without output:
        read that with output()); errors.Timeout if it still runs after
        ``timeout`` seconds (None: as long as it takes)."""
        timeout = _api.timeout_arg(timeout_s, timeout)
        body = {} if timeout is None else {"timeout_s": max(1, math.ceil(timeout))}
        wait = math.inf if timeout is None else timeout + _api.EXEC_GRACE
        info = self.sandbox.client._call(
            _api.json_call("POST", self._target("/wait"), body, wait)).json()
        self._update(info)
        result = self.result
        if result is None:
            raise errors.Timeout("timeout", f"process {self.pid} still runs after {timeout} s")
        return result

    def forget(self) -> JSONObject:
        """Kill it (its tree) if it runs, and drop its record."""
        return self._update(self.sandbox.client._json("DELETE", self._target()))


class Session:
    """A shell in a sandbox: ``session_id``, and ``alive`` until it exits;
    ``info`` is corrald's answer to its opening (with ``step`` and
    ``replayed`` on a trajectory sandbox)."""

    sandbox: Sandbox
    info: JSONObject
    session_id: str
    alive: bool | None

    def __init__(self, sandbox: Sandbox, info: JSONObject) -> None:
        self.sandbox = sandbox
        self.info = info
        self.session_id = info["session_id"]
        self.alive = info["alive"]

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _path(self) -> str:
        return f"{self.sandbox._path}/sessions/{q(self.session_id)}"

    def run(self, cmd: str, timeout_s: float | None = None, timeout: float | None = None,
            max_output_bytes: int | None = None, on_stdout: OutputCallback | None = None,
            on_stderr: OutputCallback | None = None) -> ExecResult:
        """Run a shell command line in the session; see Sandbox.exec().  A
        timeout kills what the command started but keeps the shell."""
        timeout = _api.timeout_arg(timeout_s, timeout)
        call = _api.exec_call(f"{self._path}/run", cmd, timeout=timeout,
                              max_output_bytes=max_output_bytes,
                              stream=on_stdout is not None or on_stderr is not None)
        result = self.sandbox.client._exec(call, on_stdout, on_stderr)
        self.alive = result.session_alive
        return result

    def close(self) -> None:
        """End the session (nothing happens if it has ended already)."""
        try:
            self.sandbox.client._json("DELETE", self._path)
        except errors.NotFound:
            pass
        self.alive = False


class Trajectory:
    """A trajectory: the durable log of every call made to the sandboxes
    that recorded it, as a tree of steps (docs/api.md, "Trajectories").
    ``client.trajectory(id)``; ``id`` is its id."""

    client: Client
    id: str

    def __init__(self, client: Client, trajectory_id: str) -> None:
        self.client = client
        self.id = trajectory_id

    def __repr__(self) -> str:
        return f"<corral.Trajectory {self.id}>"

    def info(self, outputs: bool = False) -> JSONObject:
        """``{"id", "spec", "base", "created_at", "steps", "events",
        "n_steps", "heads", "live_sandbox"}``; each step without its outputs
        (stdout, stderr, stdin) unless ``outputs``.  NotFound if none."""
        tail = "?outputs=1" if outputs else ""
        return self.client._json("GET", _api.trajectory_target(self.id, tail))

    def steps(self) -> JSONList:
        """Every step, in order, as a dict with its outputs: the NDJSON
        export (``n``, ``parent``, ``kind``, ``request``, ``hash``,
        ``status``, ``response``, ``checkpoint``, ...; a file read's bytes
        as ``content_base64``, a file write's as
        ``request["body_base64"]``)."""
        resp = self.client._call(_api.Call("GET", _api.trajectory_target(self.id, "/steps")))
        return _api.ndjson(resp.body)

    def remove(self) -> JSONObject:
        """Delete the trajectory and its log, and return it as it was (as
        info() without its steps); Conflict while a sandbox holds it.
        Checkpoints stay in the shared store."""
        return self.client._json("DELETE", _api.trajectory_target(self.id))


_default: Client | None = None


def _default_client() -> Client:
    global _default
    if _default is None:
        _default = Client()
    return _default
