"""The blocking transport: http.client over a unix socket or TCP, with a
pool of keep-alive connections."""

import http.client
import socket
import threading
from typing import Callable, cast

from . import _api, errors
from ._api import Response


_BLOCKSIZE = 1 << 16  # a streamed body's reads


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", blocksize=_BLOCKSIZE)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class _Stale(Exception):
    """corrald closed the connection before it answered."""


class Transport:
    """Sends Calls to corrald.  Threads may share one: each request takes an
    idle connection from the pool, or opens one, and puts it back after."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self.kind, self.addr = _api.parse_url(url)
        self.url = f"unix://{self.addr}" if self.kind == "unix" else "http://%s:%d" % self.addr
        self._token = _api.resolve_token(token)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def request(self, call: _api.Call,
                on_data: Callable[[bytes], object] | None = None) -> Response:
        """Send ``call`` and return its Response, or raise its errors.Error.

        With ``on_data``, a successful answer's body is handed to it piece by
        piece as it arrives, and the Response's body is empty.
        """
        headers: dict[str, str] = {}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if call.content_type:
            headers["Content-Type"] = call.content_type
        if call.range:
            headers["Range"] = call.range
        if call.idempotency_key:
            headers["Idempotency-Key"] = call.idempotency_key
        streamed = hasattr(call.body, "read")
        if streamed and call.length is not None:
            headers["Content-Length"] = str(call.length)
        start = _api.body_rewind(call)
        for attempt in range(2):
            conn: http.client.HTTPConnection | None = None
            if attempt == 0:
                with self._lock:
                    conn = self._idle.pop() if self._idle else None
            reused = conn is not None
            if conn is None:
                conn = (_UnixConnection(self.addr) if self.kind == "unix" else
                        http.client.HTTPConnection(self.addr[0], self.addr[1],
                                                   blocksize=_BLOCKSIZE))
            conn.timeout = call.timeout
            if conn.sock:
                conn.sock.settimeout(call.timeout)
            try:
                response = self._receive(conn, self._send(conn, call, headers), on_data)
            except _Stale:
                conn.close()
                if reused and attempt == 0 and (not streamed or start is not None):
                    if streamed:
                        cast(_api.BinaryFile, call.body).seek(cast(int, start))
                    continue  # it had been closed while idle: once more on a new connection
                raise errors.Unavailable("unavailable", f"{self.url} closed the connection")
            except TimeoutError:
                conn.close()
                raise errors.Timeout("timeout", f"no answer from {self.url} in {call.timeout} s")
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise errors.Unavailable("unavailable", f"talking to {self.url}: {e!r}") from e
            except BaseException:
                conn.close()  # e.g. an on_data callback's exception, mid-answer
                raise
            if response.status >= 400:
                raise errors.from_response(response.status, response.headers, response.body)
            return response
        raise AssertionError("not reached: the second attempt answers or raises")

    @staticmethod
    def _send(conn: http.client.HTTPConnection, call: _api.Call,
              headers: dict[str, str]) -> http.client.HTTPResponse:
        try:
            conn.request(call.method, call.target, body=call.body, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # corrald may have answered before it read the whole body (413)
        try:
            return conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError):
            raise _Stale()

    def _receive(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse,
                 on_data: Callable[[bytes], object] | None) -> Response:
        headers = {k.lower(): v for k, v in resp.getheaders()}
        if on_data is not None and 200 <= resp.status < 300:
            while piece := resp.read1(65536):
                on_data(piece)
            body = b""
        else:
            body = resp.read()
        if resp.will_close:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        return Response(resp.status, headers, body)
