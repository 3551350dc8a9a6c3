"""A small HTTP/1.1 transport for httpx2 (and so for the openai SDK), built to ingest SSE streams fast.

SGLang (uvicorn) sends every SSE event as its own HTTP chunk. aiohttp's body reader does several
microseconds of bookkeeping per HTTP chunk (buffer entry, chunk split, flow-control resume), as much as
parsing the event itself; this transport hands over everything one network read brought, dechunked in
one pass. It receives into one reused buffer (asyncio's plain protocols allocate 256 KiB per read), and
`_Body.pump` calls the consumer straight from the read callback, so a read costs no task switch.
Plain-http connections are read with `recvmsg_into` to get the kernel's receive time of each read
(`harness.client.rxstamp`); https, and kernels without SO_TIMESTAMPNS, use an asyncio protocol (`_Conn`)
and the `time.perf_counter()` of the read callback. docs/performance.md has the numbers.

Scope: http and https, keep-alive pool, bodies framed by Content-Length, chunked encoding or connection
close. No proxies, no HTTP/2, no content decoding (ask for `Accept-Encoding: identity`). Timeouts: only
`connect` is applied here; callers bound whole requests themselves.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, NamedTuple

import httpx2

from harness.client import rxstamp
from harness.client.http1_wire import MAX_HEAD, Dechunker, framing, parse_head
from harness.client.rxstamp import PAUSE_AT, Inbox

if TYPE_CHECKING:  # httpx2's own argument types (not exported at its top level)
    from httpx2._client import UseClientDefault
    from httpx2._types import HeaderTypes, RequestContent, TimeoutTypes

__all__ = ["BODY_EXT", "PAUSE_AT", "READ_SIZE", "HTTP1Transport", "Prepared", "StreamingClient"]

READ_SIZE = 256 * 1024  # as asyncio's own max read
BODY_EXT = "draftbench.body"  # Response.extensions key of the _Body, for readers that skip httpx2's layers


def _reset(what: str) -> ConnectionResetError:
    return ConnectionResetError(what)


class _NoResponse(httpx2.RemoteProtocolError):
    """The server closed the connection before sending a single byte of response."""


class _Conn(Inbox, asyncio.BufferedProtocol):
    """One TCP (or TLS) connection over an asyncio transport: the fallback of `rxstamp.StampedConn`,
    each read timed by `time.perf_counter()` in the protocol callback.

    A BufferedProtocol: asyncio's plain protocols receive into a fresh 256 KiB bytes object per read,
    which costs ~25 µs per read here (most of a paced stream's per-chunk cost); receiving into one
    reused buffer and copying out what arrived costs ~1 µs. The buffer is shared by all connections of
    a transport: asyncio fills and hands it over synchronously, one read at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, buffer: memoryview):
        super().__init__(loop)
        self.buffer = buffer
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.deliver(bytes(self.buffer[:nbytes]), time.perf_counter())

    def data_received(self, data: bytes) -> None:
        self.deliver(data, time.perf_counter())

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.error = exc
        self._wake()

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Prepared(NamedTuple):
    """A request's method, URL, pool key, head without Content-Length, and connect timeout."""
    method: str
    url: httpx2.URL
    key: tuple
    head: bytes
    connect_s: float | None


class _Body(httpx2.AsyncByteStream):
    """The response body, one piece per network read; gives the connection back when read to the end.
    Read it with `reads()` (an async iterator) or `pump(handler)` (callbacks from the read)."""

    def __init__(self, pool: HTTP1Transport, key: tuple, conn: Inbox, framing: str, length: int,
                 rest: bytes, keep_alive: bool):
        self.pool, self.key, self.conn = pool, key, conn
        self.framing, self.left, self.rest, self.keep_alive = framing, length, rest, keep_alive
        self.dechunker = Dechunker() if framing == "chunked" else None
        self.complete = framing == "empty"
        self.released = False

    def _decode(self, data: bytes) -> bytes:
        """Body bytes in one non-empty read; notes when the body is complete."""
        if self.dechunker is not None:
            body = self.dechunker.feed(data)
            if self.dechunker.done:
                self.complete = True
                self.keep_alive = self.keep_alive and not self.dechunker.buf
            return body
        if self.framing == "length":
            body = data[:self.left]
            self.left -= len(body)
            self.complete = self.left == 0
            self.keep_alive = self.keep_alive and len(data) == len(body)
            return body
        return data

    def _eof(self) -> None:
        if self.framing != "close":
            cause = self.conn.error or _reset("peer closed the connection mid-body")
            raise httpx2.RemoteProtocolError("incomplete response body") from cause
        self.complete = True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in self.reads():
            yield data

    async def reads(self) -> AsyncIterator[bytes]:
        data, self.rest = self.rest, b""
        while not self.complete:
            if not data:
                data = await self.conn.read()
                if not data:
                    self._eof()
                    return
            body = self._decode(data)
            data = b""
            if body:
                yield body

    async def pump(self, handler: Callable[[bytes, float], bool] | None) -> bool:
        """Hand body bytes to `handler(data, t)` right from the read callback, with no task switch per
        read; `t` is the read's time on the `time.perf_counter()` clock (the kernel's receive stamp
        where the connection has one, else the callback's perf_counter; bytes already queued when
        pump starts carry the time of the read that brought the latest of them). Returns True once
        the body is complete, False as soon as the handler returns True (it wants no more); raises like
        `reads()` (and whatever the handler raises). `handler=None` discards the rest of the body."""
        conn = self.conn
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def finish(result: bool | BaseException) -> None:
            conn.sink = None  # from now on reads queue up on the connection again
            if isinstance(result, BaseException):
                done.set_exception(result)
            else:
                done.set_result(result)

        def on_read(data: bytes, t: float) -> None:
            try:
                if not data:
                    self._eof()
                    finish(True)
                    return
                body = self._decode(data)
                if body and handler is not None and handler(body, t):
                    finish(self.complete)
                elif self.complete:
                    finish(True)
            except BaseException as exc:  # raised in the caller's task, never into asyncio's transport
                finish(exc)

        if self.complete:
            return True
        data, self.rest = self.rest + conn.take(), b""
        conn.sink = on_read
        if data:
            on_read(data, conn.last_t)
        if not done.done() and conn.closed:
            on_read(b"", conn.last_t)
        try:
            return await done
        finally:
            conn.sink = None

    async def aclose(self) -> None:
        if self.released:
            return
        self.released = True
        self.pool.release(self.key, self.conn, reuse=self.complete and self.keep_alive)


class HTTP1Transport(httpx2.AsyncBaseTransport):
    """httpx2 transport: `httpx2.AsyncClient(transport=HTTP1Transport())`, or through the openai SDK's
    `http_client=`. At most `max_connections` requests in flight; idle connections are reused for
    `keepalive_s` (uvicorn closes them after 5 s); 0: a new connection for every request."""

    def __init__(self, *, max_connections: int = 1024, keepalive_s: float = 4.0,
                 ssl_context: ssl.SSLContext | None = None):
        self.keepalive_s = keepalive_s
        self.ssl_context = ssl_context
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: dict[tuple, list[Inbox]] = {}
        self._buffer = memoryview(bytearray(READ_SIZE))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        prepared = self.prepare(request)
        return await self.send_prepared(prepared, await request.aread())

    def prepare(self, request: httpx2.Request) -> Prepared:
        """What `request` puts on the wire before its body: reused by `send_prepared` for later
        requests to the same URL with the same headers, so the SDK builds a request only once."""
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx2.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        lines = [b"%s %s HTTP/1.1" % (request.method.encode(), url.raw_path)]
        for name, value in request.headers.raw:
            if name.lower() not in (b"content-length", b"transfer-encoding"):
                lines.append(name + b": " + value)
        connect_s = (request.extensions.get("timeout") or {}).get("connect")
        return Prepared(request.method, url, key, b"\r\n".join(lines) + b"\r\n", connect_s)

    async def send_prepared(self, prepared: Prepared, content: bytes) -> httpx2.Response:
        """Send `content` as the body of a request with `prepared`'s method, URL and headers."""
        head = prepared.head
        if content or prepared.method not in ("GET", "HEAD"):
            head += b"Content-Length: %d\r\n" % len(content)
        head += b"\r\n" + content
        await self._slots.acquire()
        try:
            return await self._exchange(prepared.method, prepared.key, head, prepared.connect_s)
        except BaseException:
            self._slots.release()
            raise

    async def _exchange(self, method: str, key: tuple, head: bytes,
                        connect_s: float | None) -> httpx2.Response:
        # A pooled connection the server has just closed fails before any response byte: the request
        # never reached the application, so it is safe to send it once more on a fresh connection.
        while True:
            conn = self._take_idle(key)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key, connect_s)
            try:
                conn.write(head)
                status, headers, rest, http10 = await _read_head(conn)
                break
            except _NoResponse:
                conn.close()
                if reused:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
        body_framing, length, keep_alive = framing(method, status, headers)
        keep_alive = keep_alive and not http10
        body = _Body(self, key, conn, body_framing, length, rest, keep_alive)
        return httpx2.Response(status, headers=headers, stream=body,
                               extensions={"http_version": b"HTTP/1.1", BODY_EXT: body})

    async def _connect(self, key: tuple, timeout: float | None) -> Inbox:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        ctx = None
        if scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
        conn: Inbox
        try:
            async with asyncio.timeout(timeout):
                if ctx is None and rxstamp.kernel_stamps():
                    conn = await rxstamp.open_stamped(loop, host, port, self._buffer)
                else:
                    _, conn = await loop.create_connection(lambda: _Conn(loop, self._buffer), host, port,
                                                           ssl=ctx)
        except TimeoutError as exc:
            raise httpx2.ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
        except OSError as exc:
            raise httpx2.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        return conn

    def _take_idle(self, key: tuple) -> Inbox | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and not conn.pending and now - conn.idle_since < self.keepalive_s:
                return conn
            conn.close()
        return None

    def release(self, key: tuple, conn: Inbox, *, reuse: bool) -> None:
        self._slots.release()
        if reuse and self.keepalive_s > 0 and not conn.closed and not conn.pending:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(key, []).append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


async def _read_head(conn: Inbox) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    """(status, headers, body bytes already received, HTTP/1.0?); skips 1xx interim responses."""
    buf = b""
    while True:
        head = parse_head(buf)
        if head is not None:
            status, headers, http10, buf = head
            if 100 <= status < 200:
                continue
            return status, headers, buf, http10
        if len(buf) > MAX_HEAD:
            raise httpx2.RemoteProtocolError("response head too large")
        data = await conn.read()
        if not data:
            what = "server closed the connection " + ("mid-head" if buf else "without a response")
            cause = conn.error or _reset(what)
            if buf:
                raise httpx2.RemoteProtocolError(what) from cause
            raise _NoResponse(what) from cause
        buf += data


class StreamingClient(httpx2.AsyncClient):
    """An httpx2.AsyncClient over HTTP1Transport for the openai SDK, minus what the SDK does not use:
    `build_request` skips merging client-level URL, headers and cookies (the SDK sends absolute URLs
    and all its headers), `send` skips auth flows, redirects, cookies and event hooks (the key is a
    header). About 0.3 ms less per request, which is time the event loop cannot timestamp reads."""

    def __init__(self, *, max_connections: int = 1024, keepalive_s: float = 4.0, **kwargs: object):
        self._http1 = HTTP1Transport(max_connections=max_connections, keepalive_s=keepalive_s)
        super().__init__(transport=self._http1, **kwargs)  # type: ignore[arg-type]

    def build_request(  # type: ignore[override]
        self, method: str, url: httpx2.URL | str, *, content: RequestContent | None = None,
        headers: HeaderTypes | None = None,
        timeout: TimeoutTypes | UseClientDefault = httpx2.USE_CLIENT_DEFAULT,
        extensions: dict | None = None, **kwargs: object,
    ) -> httpx2.Request:
        if any(v is not None for v in kwargs.values()) or not str(url).startswith(("http://", "https://")):
            return super().build_request(method, url, content=content, headers=headers, timeout=timeout,
                                         extensions=extensions, **kwargs)
        extensions = dict(extensions or {})
        if "timeout" not in extensions:
            t = self.timeout if timeout is httpx2.USE_CLIENT_DEFAULT else httpx2.Timeout(timeout)
            extensions["timeout"] = t.as_dict()
        return httpx2.Request(method, url, content=content, headers=headers, extensions=extensions)

    async def send(self, request: httpx2.Request, *, stream: bool = False, **_: object) -> httpx2.Response:
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        response = await self._http1.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response
