"""Exceptions: one class per error of the API (docs/api.md, "Errors")."""

import json


class Error(Exception):
    """An error from corrald, or on the way to it.

    ``code`` is the API's error code (``"not_found"``, ...), ``message`` its
    explanation and ``status`` the HTTP status (None when no answer came).
    """

    def __init__(self, code, message, status=None):
        super().__init__(f"{code}: {message}" if status is None else f"{status} {code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class InvalidSpec(Error):
    """400: a malformed body, or a field unknown, of the wrong type or out of range."""


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


class InternalError(Error):
    """500: a failure inside corrald."""


class Unsupported(Error):
    """501: valid, but not in this version of corrald."""


class CapacityError(Error):
    """503 capacity_exceeded: admission control refused a create.

    ``retry_after`` is the number of seconds corrald asks to wait (or None).
    """

    def __init__(self, code, message, status=None, retry_after=None):
        super().__init__(code, message, status)
        self.retry_after = retry_after


class Unavailable(Error):
    """503 unavailable (corrald is shutting down), or corrald cannot be reached."""


class NoSpace(Error):
    """507: the sandbox's disk is full."""


class Timeout(Error):
    """No answer from corrald in time (a client-side timeout).

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

    def __init__(self, name, answer):
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


_BY_CODE = {
    "invalid_json": InvalidSpec,
    "invalid_argument": InvalidSpec,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "conflict": Conflict,
    "payload_too_large": PayloadTooLarge,
    "internal": InternalError,
    "not_implemented": Unsupported,
    "capacity_exceeded": CapacityError,
    "unavailable": Unavailable,
    "no_space": NoSpace,
}

_BY_STATUS = {
    400: InvalidSpec,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    500: InternalError,
    501: Unsupported,
    503: Unavailable,
    507: NoSpace,
}


def from_response(status, headers, body):
    """The exception for an error answer (``headers`` with lower-case names)."""
    code, message = None, None
    try:
        err = json.loads(body)["error"]
        code, message = err["code"], err["message"]
    except (ValueError, KeyError, TypeError):
        message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status, Error)
    code = code or f"http_{status}"
    if cls is CapacityError:
        retry = headers.get("retry-after")
        return cls(code, message, status, int(retry) if retry and retry.isdigit() else None)
    return cls(code, message, status)
