"""Python client for corrald, Corral's sandbox daemon (standard library only).

    import corral
    client = corral.Client()   # $CORRAL_URL / $CORRAL_TOKEN, else the local unix socket
    with client.create(image="busybox", memory_mb=256) as sb:
        r = sb.exec("echo hi; exit 3")
        assert r.stdout == b"hi\\n" and r.exit_code == 3
        sb.files.write("/tmp/a.txt", b"data")
        sh = sb.session()
        sh.run("cd /tmp")
        p = sb.process.start("python3 -u server.py", tag="srv")  # runs on
        p.output(offset=0).stdout; p.send_stdin("x\\n"); p.signal("INT"); p.wait()
        sb.snapshot(); sb.fork(); sb.pause(); sb.resume()
    with client.create(trajectory="t-1") as sb:   # every call a durable step
        r = sb.exec("date")                          # r.step, r.replayed
    client.trajectory("t-1").steps()
    total = client.call("add", {"a": 1, "b": 2})   # a registered function

corral.AsyncClient offers the same from asyncio (see corral.aio).  Errors
are corral.Error subclasses, one for each of the API's error codes
(docs/errors.md), carrying its ``code``, ``message`` and HTTP ``status``.
The API itself is described in docs/api.md.  The public surface has type
hints (PEP 561: the package ships py.typed).
"""

from ._api import Execution, ExecResult, FileBytes, ProcessOutput
from .aio import (AsyncClient, AsyncFiles, AsyncProcess, AsyncProcesses, AsyncSandbox, AsyncSession,
                  AsyncTrajectory)
from .client import Client, Files, Process, Processes, Sandbox, Session, Trajectory
from .errors import (CapacityError, Conflict, Error, Forbidden, FunctionError, InternalError,
                     InvalidJSON, InvalidSpec, MethodNotAllowed, NoSpace, NotFound,
                     PayloadTooLarge, Timeout, Unauthorized, Unavailable, Unsupported,
                     UnsupportedMediaType)

__all__ = [
    "AsyncClient", "AsyncFiles", "AsyncProcess", "AsyncProcesses", "AsyncSandbox", "AsyncSession",
    "AsyncTrajectory", "Execution", "Process", "Processes", "ProcessOutput",
    "CapacityError", "Client", "Conflict", "Error", "ExecResult", "FileBytes", "Files",
    "Forbidden", "FunctionError", "InternalError", "InvalidJSON", "InvalidSpec",
    "MethodNotAllowed", "NoSpace", "NotFound", "PayloadTooLarge", "Sandbox", "Session", "Timeout",
    "Trajectory", "Unauthorized", "Unavailable", "Unsupported", "UnsupportedMediaType",
]
