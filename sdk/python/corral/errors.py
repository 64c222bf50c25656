"""Exceptions: one class per error code of the API (docs/errors.md).

Every class is a subclass of :class:`Error`; ``invalid_json`` is a kind of
:class:`InvalidSpec` (both are 400), so code that catches ``InvalidSpec``
sees both.
"""

import json
from typing import Any, Mapping


class Error(Exception):
    """An error from corrald, or on the way to it.

    ``code`` is the API's error code (``"not_found"``, ...), ``message`` its
    explanation and ``status`` the HTTP status (None when no answer came).
    """

    code: str
    message: str
    status: int | None

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}" if status is None else f"{status} {code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class InvalidSpec(Error):
    """400 invalid_argument: a field unknown, of the wrong type or out of
    range, a bad path, a command that cannot be executed; and the base of
    InvalidJSON, the other 400."""


class InvalidJSON(InvalidSpec):
    """400 invalid_json: the body is not a JSON object (or, for a function
    call, not JSON)."""


class Unauthorized(Error):
    """401: the TCP listener wants a valid bearer token."""


class Forbidden(Error):
    """403: the sandbox refused the operation."""


class NotFound(Error):
    """404: no such sandbox, session, image, executable, directory or file."""


class MethodNotAllowed(Error):
    """405: wrong method for the endpoint."""


class Conflict(Error):
    """409: the sandbox is not ready, or the session is busy or has ended."""


class PayloadTooLarge(Error):
    """413: the request body is over corrald's limit."""


class UnsupportedMediaType(Error):
    """415: an upload of a content type the endpoint does not take."""


class InternalError(Error):
    """500: a failure inside corrald."""


class Unsupported(Error):
    """501: valid, but not in this version of corrald."""


class CapacityError(Error):
    """503 capacity_exceeded: admission control refused a create.

    ``retry_after`` is the number of seconds corrald asks to wait (or None).
    """

    retry_after: int | None

    def __init__(self, code: str, message: str, status: int | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(code, message, status)
        self.retry_after = retry_after


class Unavailable(Error):
    """503 unavailable (corrald is shutting down, or what a backend needs is
    not running), or corrald cannot be reached."""


class NoSpace(Error):
    """507: the sandbox's disk is full."""


class Timeout(Error):
    """No answer from corrald in time (a client-side timeout: ``status`` is
    None), or corrald's 504 ``timeout``.

    A command that runs past its own ``timeout`` is not an error: its
    result has ``reason == "timeout"``.
    """


class FunctionError(Error):
    """A registered function's call that failed: it exited non-zero, was
    killed (its timeout, memory or output limit) or wrote no JSON result.

    ``reason`` is ``exited``, ``signaled``, ``timeout``, ``oom``,
    ``output_limit`` or ``killed``; ``exit_code`` and ``signal`` say how it
    ended, ``stderr`` (str) what it wrote there (a Python function's
    traceback), ``stdout`` the first 4 KiB of its output, ``answer`` the
    whole answer.  ``code`` is ``"function_failed"``.
    """

    function: str
    answer: dict[str, Any]
    reason: str | None
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    duration_s: float | None

    def __init__(self, name: str, answer: dict[str, Any]) -> None:
        self.function = name
        self.answer = answer
        self.reason = answer.get("reason")
        self.exit_code = answer.get("exit_code")
        self.signal = answer.get("signal")
        self.stdout = answer.get("stdout", "")
        self.stderr = answer.get("stderr", "")
        self.duration_s = answer.get("duration_s")
        super().__init__("function_failed",
                         f"{name}: {answer.get('error', 'failed')} ({self.reason})", 200)


# Every code of the API's table (lib/util/err.c, docs/errors.md) but "ok".
BY_CODE: dict[str, type[Error]] = {
    "invalid_argument": InvalidSpec,
    "invalid_json": InvalidJSON,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "conflict": Conflict,
    "payload_too_large": PayloadTooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "internal": InternalError,
    "not_implemented": Unsupported,
    "capacity_exceeded": CapacityError,
    "unavailable": Unavailable,
    "timeout": Timeout,
    "no_space": NoSpace,
}

# For an answer without a code this SDK knows (a proxy's, a newer corrald's).
_BY_STATUS: dict[int, type[Error]] = {
    400: InvalidSpec,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    500: InternalError,
    501: Unsupported,
    503: Unavailable,
    504: Timeout,
    507: NoSpace,
}


def from_response(status: int, headers: Mapping[str, str], body: bytes) -> Error:
    """The exception for an error answer (``headers`` with lower-case names)."""
    code: str | None = None
    try:
        err = json.loads(body)["error"]
        code, message = err["code"], err["message"]
    except (ValueError, KeyError, TypeError):
        message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    cls = BY_CODE.get(code or "") or _BY_STATUS.get(status) or Error
    code = code or f"http_{status}"
    if cls is CapacityError:
        retry = headers.get("retry-after")
        return CapacityError(code, message, status,
                             int(retry) if retry and retry.isdigit() else None)
    return cls(code, message, status)
