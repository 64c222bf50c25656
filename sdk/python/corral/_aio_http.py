"""The asyncio transport: a small HTTP/1.1 client over asyncio streams
(unix socket or TCP) with a pool of keep-alive connections.  It speaks just
what corrald answers: Content-Length, chunked, or a body up to the close."""

import asyncio
from typing import Any, Awaitable, Callable, cast

from . import _api, errors
from ._api import Response

# A connection: its two streams.
_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# Takes each piece of a successful answer's body.
_Sink = Callable[[bytes], Awaitable[Any]]


class _Stale(Exception):
    """corrald closed the connection before it answered."""


class _BadAnswer(Exception):
    """The answer is not HTTP/1.1 as this client reads it."""


# From this size on a request asks "Expect: 100-continue", so that a refusal
# (413) comes back before the body is sent, not as a broken pipe after it.
_EXPECT_MIN = 1 << 20


class AsyncTransport:
    """Sends Calls to corrald from one event loop; at most ``max_connections``
    requests are in flight at once, the others wait for a connection."""

    def __init__(self, url: str | None = None, token: str | None = None,
                 max_connections: int = 256) -> None:
        self.kind, self.addr = _api.parse_url(url)
        self.url = f"unix://{self.addr}" if self.kind == "unix" else "http://%s:%d" % self.addr
        self._token = _api.resolve_token(token)
        self._idle: list[_Conn] = []  # connections with nothing in flight
        self._slots = asyncio.Semaphore(max_connections)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()

    @staticmethod
    def _expect(call: _api.Call) -> bool:
        return hasattr(call.body, "read") or len(cast(bytes, call.body)) >= _EXPECT_MIN

    def _head(self, call: _api.Call) -> bytes:
        lines = [f"{call.method} {call.target} HTTP/1.1", "Host: localhost"]
        if not hasattr(call.body, "read"):
            lines.append(f"Content-Length: {len(cast(bytes, call.body))}")
        elif call.length is not None:
            lines.append(f"Content-Length: {call.length}")
        else:
            lines.append("Transfer-Encoding: chunked")
        if self._token:
            lines.append(f"Authorization: Bearer {self._token}")
        if call.content_type:
            lines.append(f"Content-Type: {call.content_type}")
        if call.range:
            lines.append(f"Range: {call.range}")
        if call.idempotency_key:
            lines.append(f"Idempotency-Key: {call.idempotency_key}")
        if self._expect(call):
            lines.append("Expect: 100-continue")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    @staticmethod
    async def _send_body(writer: asyncio.StreamWriter, call: _api.Call) -> None:
        """The body: bytes, or a file object read (off the loop) and sent as
        it is read, chunked when its length is unknown."""
        if not hasattr(call.body, "read"):
            writer.write(cast(bytes, call.body))
            await writer.drain()
            return
        body = cast(_api.BinaryFile, call.body)
        chunked = call.length is None
        while piece := await asyncio.to_thread(body.read, 1 << 20):
            writer.write(b"%X\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async def request(self, call: _api.Call, on_data: _Sink | None = None) -> Response:
        """Send ``call`` and return its Response, or raise its errors.Error.

        With ``on_data`` (a coroutine function), a successful answer's body is
        awaited into it piece by piece as it arrives; the Response's body is
        empty.  ``call.timeout`` bounds the whole exchange.
        """
        start = _api.body_rewind(call)
        streamed = hasattr(call.body, "read")
        async with self._slots:
            for attempt in range(2):
                conn: _Conn | None = None
                while attempt == 0 and self._idle and conn is None:
                    conn = self._idle.pop()
                    if conn[0].at_eof():
                        conn[1].close()
                        conn = None
                reused = conn is not None
                try:
                    async with asyncio.timeout(call.timeout):
                        if conn is None:
                            conn = await self._connect()
                        response, keep = await self._exchange(conn, call, on_data)
                except _Stale:
                    cast(_Conn, conn)[1].close()
                    if reused and attempt == 0 and (not streamed or start is not None):
                        if streamed:
                            cast(_api.BinaryFile, call.body).seek(cast(int, start))
                        continue  # it had been closed while idle: once more on a new connection
                    raise errors.Unavailable("unavailable", f"{self.url} closed the connection")
                except TimeoutError:
                    if conn:
                        conn[1].close()
                    raise errors.Timeout("timeout",
                                         f"no answer from {self.url} in {call.timeout} s")
                except (OSError, EOFError, _BadAnswer) as e:
                    if conn:
                        conn[1].close()
                    raise errors.Unavailable("unavailable",
                                             f"talking to {self.url}: {e!r}") from e
                except BaseException:
                    if conn:
                        conn[1].close()  # cancelled, or on_data raised, mid-answer
                    raise
                if keep:
                    self._idle.append(conn)
                else:
                    conn[1].close()
                if response.status >= 400:
                    raise errors.from_response(response.status, response.headers, response.body)
                return response
            raise AssertionError("not reached: the second attempt answers or raises")

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bool] | None:
        """(status, headers with lower-case names, keep-alive) of an answer,
        or None if the connection closed first."""
        status_line = await reader.readline()
        if not status_line:
            return None
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise _BadAnswer(f"status line {status_line!r}")
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        keep = parts[0] == b"HTTP/1.1" and headers.get("connection", "").lower() != "close"
        return int(parts[1]), headers, keep

    async def _connect(self) -> _Conn:
        if self.kind == "unix":
            return await asyncio.open_unix_connection(self.addr)
        return await asyncio.open_connection(*self.addr)

    async def _exchange(self, conn: _Conn, call: _api.Call,
                        on_data: _Sink | None) -> tuple[Response, bool]:
        reader, writer = conn
        expect = self._expect(call)
        try:
            writer.write(self._head(call))
            if not expect:
                await self._send_body(writer, call)
            await writer.drain()
            answer = await self._read_head(reader)
        except ConnectionError:
            answer = None
        if answer is None:
            raise _Stale()  # not a byte of an answer: retried if the connection was reused
        status, headers, keep = answer
        if expect and status == 100:
            await self._send_body(writer, call)
            answer = await self._read_head(reader)
            if answer is None:
                raise EOFError("the connection closed after 100 Continue")
            status, headers, keep = answer
        elif expect:
            keep = False  # refused before the body was sent: the connection is spoilt

        stream = on_data is not None and 200 <= status < 300
        pieces: list[bytes] = []

        async def sink(piece: bytes) -> None:
            if on_data is not None and stream:
                await on_data(piece)
            else:
                pieces.append(piece)

        if status in (204, 304) or call.method == "HEAD":
            pass  # no body, whatever the headers say
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readline()
                try:
                    size = int(size_line.split(b";")[0], 16)
                except ValueError:
                    raise _BadAnswer(f"chunk size {size_line!r}") from None
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                await sink(await reader.readexactly(size))
                await reader.readexactly(2)
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left:
                piece = await reader.read(min(left, 1 << 20))
                if not piece:
                    raise EOFError(f"the answer ended {left} bytes short")
                left -= len(piece)
                await sink(piece)
        else:
            keep = False
            while piece := await reader.read(1 << 20):
                await sink(piece)
        return Response(status, headers, b"".join(pieces)), keep
