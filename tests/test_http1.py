"""harness.client.http1: the chunked decoder byte by byte, and the transport against a raw in-test server."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import pytest

from harness.client import rxstamp
from harness.client.http1 import HTTP1Transport, StreamingClient
from harness.client.http1_wire import Dechunker

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]

CHUNKED = (b"5\r\nhello\r\n1;ext=1\r\n \r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n"
           b"0\r\nTrailer: x\r\n\r\n")
DECODED = b"hello abcdefghijklmnopqrstuvwxyz"


def dechunk_all(pieces: list[bytes]) -> tuple[bytes, bool]:
    d = Dechunker()
    out = b"".join(d.feed(p) for p in pieces)
    return out, d.done


def test_dechunker_every_split_point() -> None:
    assert dechunk_all([CHUNKED]) == (DECODED, True)
    for k in range(len(CHUNKED) + 1):
        assert dechunk_all([CHUNKED[:k], CHUNKED[k:]]) == (DECODED, True), k
    assert dechunk_all([CHUNKED[i:i + 1] for i in range(len(CHUNKED))]) == (DECODED, True)
    rng = random.Random(3)
    for _ in range(100):
        cuts = sorted(rng.sample(range(1, len(CHUNKED)), 6))
        pieces = [CHUNKED[a:b] for a, b in zip([0, *cuts], [*cuts, len(CHUNKED)], strict=True)]
        assert dechunk_all(pieces) == (DECODED, True)


def test_dechunker_not_done_before_the_last_chunk_and_rejects_garbage() -> None:
    assert dechunk_all([CHUNKED[:-10]]) == (DECODED, False)
    with pytest.raises(httpx2.RemoteProtocolError, match="chunk size"):
        Dechunker().feed(b"zz\r\nhello\r\n")
    with pytest.raises(httpx2.RemoteProtocolError, match="no CRLF"):
        Dechunker().feed(b"2\r\nhiXX")


class RawServer:
    """asyncio server; each accepted connection runs `handler(reader, writer, connection_number)`."""

    def __init__(self) -> None:
        self.handler: Handler | None = None
        self.connections = 0
        self.open = 0
        self.max_open = 0
        self.url = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            assert self.handler is not None
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            writer.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


@pytest.fixture
async def raw() -> AsyncIterator[RawServer]:
    srv = RawServer()
    server = await asyncio.start_server(srv.serve, "127.0.0.1", 0)
    srv.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield srv
    server.close()


@pytest.fixture(params=["kernel-stamps", "asyncio-protocol"])
async def client(request: pytest.FixtureRequest,
                 monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx2.AsyncClient]:
    """Both connection kinds: harness.client.rxstamp's recvmsg reader (plain http where the kernel gives
    receive stamps) and the asyncio-protocol fallback (https, or no SO_TIMESTAMPNS)."""
    if request.param == "asyncio-protocol":
        monkeypatch.setattr(rxstamp, "KERNEL_STAMPS", False)
    elif not rxstamp.kernel_stamps():
        pytest.skip("no SO_TIMESTAMPNS receive stamps on this platform")
    c = httpx2.AsyncClient(transport=HTTP1Transport(max_connections=2))
    yield c
    await c.aclose()


def respond(*responses: bytes) -> Handler:
    """Answer each request on a connection with the next response (the last one repeats)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        i = 0
        while True:
            await read_request(reader)
            writer.write(responses[min(i, len(responses) - 1)])
            await writer.drain()
            i += 1

    return handler


async def test_content_length_and_keep_alive(raw: RawServer, client: httpx2.AsyncClient) -> None:
    raw.handler = respond(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello")
    for _ in range(3):
        r = await client.post(raw.url + "/p", content=b'{"a": 1}')
        assert r.status_code == 200 and r.content == b"hello" and r.headers["x-a"] == "b"
    assert raw.connections == 1


async def test_chunked_streaming_reads(raw: RawServer, client: httpx2.AsyncClient) -> None:
    raw.handler = respond(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + CHUNKED)
    async with client.stream("POST", raw.url + "/p", content=b"x") as r:
        body = b"".join([part async for part in r.aiter_raw()])
    assert body == DECODED
    assert (await client.post(raw.url + "/p", content=b"x")).content == DECODED
    assert raw.connections == 1


async def test_close_delimited_body_and_interim_response(raw: RawServer, client: httpx2.AsyncClient) -> None:
    async def close_after(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil eof")
        await writer.drain()

    raw.handler = close_after
    for _ in range(2):
        assert (await client.post(raw.url + "/p", content=b"x")).content == b"until eof"
    assert raw.connections == 2


async def test_stale_pooled_connection_is_retried_once(raw: RawServer, client: httpx2.AsyncClient) -> None:
    async def one_then_drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await read_request(reader)  # the second request on this connection: drop it unanswered

    raw.handler = one_then_drop
    for _ in range(3):
        assert (await client.post(raw.url + "/p", content=b"x")).content == b"ok"
    assert raw.connections == 3


async def test_cut_body_refused_and_malformed(raw: RawServer, client: httpx2.AsyncClient) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nonly a part")
        await writer.drain()

    raw.handler = cut
    with pytest.raises(httpx2.RemoteProtocolError) as err:
        await client.post(raw.url + "/p", content=b"x")
    assert isinstance(err.value.__cause__, ConnectionError)
    raw.handler = respond(b"HTTP/9 what\r\n\r\n")
    with pytest.raises(httpx2.RemoteProtocolError, match="status line"):
        await client.post(raw.url + "/p", content=b"x")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(httpx2.ConnectError) as cerr:
        await client.post(f"http://127.0.0.1:{port}/p", content=b"x")
    assert isinstance(cerr.value.__cause__, ConnectionRefusedError)


async def test_at_most_max_connections(raw: RawServer, client: httpx2.AsyncClient) -> None:
    gate = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await read_request(reader)
            if raw.open == 2:
                gate.set()
            await asyncio.wait_for(gate.wait(), 10)  # never 2 open: the requests fail
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    raw.handler = slow
    rs = await asyncio.gather(*(client.post(raw.url + "/p", content=b"x") for _ in range(6)))
    assert [r.content for r in rs] == [b"ok"] * 6
    assert raw.max_open == 2


async def test_streaming_client_falls_back_for_relative_urls_and_params(raw: RawServer) -> None:
    seen: list[bytes] = []

    async def echo_target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            seen.append((await read_request(reader)).split(b" ")[1])
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    raw.handler = echo_target
    async with StreamingClient(base_url=raw.url + "/v1") as c:
        assert (await c.post("/p", params={"a": "1"}, content=b"x")).content == b"ok"
        assert (await c.post(raw.url + "/abs", content=b"x")).content == b"ok"
    assert seen == [b"/v1/p?a=1", b"/abs"]
