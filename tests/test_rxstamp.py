"""harness.client.rxstamp: kernel receive timestamps on plain-http connections, and the fallbacks (an asyncio
protocol where the option is missing; perf_counter at the read when a read carries no stamp)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx2
import orjson
import pytest

from harness.client import http1, rxstamp
from harness.client.http1 import BODY_EXT, HTTP1Transport
from harness.client.stream import ReplayClient, ReplayRequest

MODES = ["kernel", "no-cmsg", "asyncio"]
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def frame(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def event(obj: object) -> bytes:
    return frame(b"data: " + orjson.dumps(obj) + b"\n\n")


def content(text: str, cum: int) -> bytes:
    return event({"id": "x", "object": "chat.completion.chunk", "model": "default",
                  "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
                  "usage": {"prompt_tokens": 3, "completion_tokens": cum, "total_tokens": 3 + cum}})


def tail(cum: int) -> bytes:
    return (event({"id": "x", "object": "chat.completion.chunk", "model": "default",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            + event({"id": "x", "object": "chat.completion.chunk", "model": "default", "choices": [],
                     "usage": {"prompt_tokens": 3, "completion_tokens": cum, "total_tokens": 3 + cum}})
            + frame(b"data: [DONE]\n\n") + b"0\r\n\r\n")


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """kernel: stamps from recvmsg; no-cmsg: the same reader, but the option is never set, so reads
    carry no stamp; asyncio: the feature flag off, the asyncio-protocol connection."""
    if request.param != "asyncio" and not rxstamp.kernel_stamps():
        pytest.skip("no SO_TIMESTAMPNS receive stamps on this platform")
    if request.param == "no-cmsg":
        monkeypatch.setattr(rxstamp, "enable", lambda sock: True)
    if request.param == "asyncio":
        monkeypatch.setattr(rxstamp, "KERNEL_STAMPS", False)
    yield request.param


def conn_kind(mode: str) -> type:
    return http1._Conn if mode == "asyncio" else rxstamp.StampedConn


# ---------------------------------------------------------------- the kernel's stamp, not the loop's


class ThreadServer:
    """A blocking server on its own thread, so that it writes while the client's event loop is
    blocked: one chunk at once, the second when `go` is set (its write time noted), then the end."""

    def __init__(self) -> None:
        self.lsn = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsn.getsockname()[1]
        self.first_sent = threading.Event()
        self.go = threading.Event()
        self.written = threading.Event()
        self.write_time = 0.0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        self.lsn.settimeout(20)
        conn, _ = self.lsn.accept()
        with conn:
            conn.settimeout(20)
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            head, _, body = buf.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(HEAD + content("a", 1))
            self.first_sent.set()
            if not self.go.wait(20):
                return
            self.write_time = time.perf_counter()
            conn.sendall(content("b", 2) + tail(2))
            self.written.set()

    def close(self) -> None:
        self.go.set()
        self.lsn.close()
        self.thread.join(20)


async def test_the_chunk_time_is_the_kernels_not_the_blocked_loops() -> None:
    if not rxstamp.kernel_stamps():
        pytest.skip("no SO_TIMESTAMPNS receive stamps on this platform")
    srv = ThreadServer()
    client = ReplayClient(f"http://127.0.0.1:{srv.port}/v1", "default", timeout_s=30)
    loop = asyncio.get_running_loop()
    unblocked = 0.0

    def block_the_loop() -> None:
        """The second chunk is written (and in the socket) while this callback holds the loop."""
        nonlocal unblocked
        srv.go.set()
        assert srv.written.wait(20)
        time.sleep(0.3)
        unblocked = time.perf_counter()

    try:
        task = asyncio.create_task(client.stream(ReplayRequest("r", None, "hi", 2)))
        assert await loop.run_in_executor(None, srv.first_sent.wait, 20)
        loop.call_soon(block_the_loop)
        result = await asyncio.wait_for(task, 30)
    finally:
        await client.aclose()
        srv.close()
    assert result.ok, result.error
    assert result.text == "ab" and len(result.chunk_times) == 2
    t_b = result.chunk_times[1]
    assert unblocked >= srv.write_time + 0.3
    # The read was handled after `unblocked`; its time is the kernel's, close to the write.
    late = t_b - srv.write_time
    assert -0.05 < late < 0.15, (late, unblocked - srv.write_time)
    assert result.chunk_times[0] <= t_b and result.t_end >= t_b


# ---------------------------------------------------------------- order and bounds, every path


class LockstepServer:
    """asyncio server: chunk i+1 of a response is written once the client has seen chunk i (so each
    chunk is its own read); any number of requests per connection."""

    def __init__(self) -> None:
        self.seen: dict[int, asyncio.Queue[None]] = {}
        self.connections = 0
        self.url = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                stream = int(head.split(b" ")[1].rsplit(b"/", 1)[1])
                q = self.seen.setdefault(stream, asyncio.Queue())
                writer.write(HEAD)
                for i in range(20):
                    writer.write(frame(b"%d," % i))
                    await writer.drain()
                    await asyncio.wait_for(q.get(), 20)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def lockstep() -> AsyncIterator[LockstepServer]:
    srv = LockstepServer()
    server = await asyncio.start_server(srv.serve, "127.0.0.1", 0)
    srv.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield srv
    server.close()


async def test_stamps_are_ordered_per_stream_and_never_after_the_handler(
        mode: str, lockstep: LockstepServer) -> None:
    client = httpx2.AsyncClient(transport=HTTP1Transport(max_connections=4))

    async def one_stream(stream: int) -> list[tuple[float, float, float]]:
        """(request sent, read time, handler time) per read over 3 requests on one connection."""
        rows: list[tuple[float, float, float]] = []
        for _ in range(3):
            t_send = time.perf_counter()
            async with client.stream("GET", f"{lockstep.url}/s/{stream}") as r:
                body = r.extensions[BODY_EXT]
                assert type(body.conn) is conn_kind(mode)
                got = []

                def handler(data: bytes, t: float, t_send: float = t_send, got: list = got) -> bool:
                    rows.append((t_send, t, time.perf_counter()))
                    got.append(data)
                    for _ in range(data.count(b",")):
                        lockstep.seen[stream].put_nowait(None)
                    return False

                assert await body.pump(handler) is True
                assert b"".join(got) == b"".join(b"%d," % i for i in range(20))
        return rows

    try:
        per_stream = await asyncio.wait_for(asyncio.gather(*(one_stream(s) for s in range(3))), 60)
    finally:
        await client.aclose()
    assert lockstep.connections == 3  # each stream kept its connection
    for rows in per_stream:
        assert len(rows) >= 20
        for t_send, t, t_handler in rows:
            assert t_send <= t <= t_handler
        times = [t for _, t, _ in rows]
        assert times == sorted(times)


# ---------------------------------------------------------------- flow control and writes, every path


async def test_pause_resume_and_large_request_bodies(mode: str) -> None:
    big = bytes(range(256)) * (6 * 1024 * 1024 // 256)  # more than PAUSE_AT queued before anyone reads
    received: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        received.append(len(await reader.readexactly(length)))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/p"
    client = httpx2.AsyncClient(transport=HTTP1Transport())
    try:
        async with client.stream("POST", url, content=big) as r:
            conn = r.extensions[BODY_EXT].conn
            assert type(conn) is conn_kind(mode)
            deadline = time.monotonic() + 20
            while not conn.paused and not conn.closed:  # wait for the queue to pass PAUSE_AT
                assert time.monotonic() < deadline, "reading never paused"
                await asyncio.sleep(0.005)
            assert conn.paused and conn.size > http1.PAUSE_AT
            body = b"".join([part async for part in r.aiter_raw()])
    finally:
        await client.aclose()
        server.close()
    assert received == [len(big)]
    assert body == big


async def test_replay_client_on_every_path(mode: str) -> None:
    """A whole SSE stream through ReplayClient, server closing the connection at the end."""
    chunks = b"".join(content(c, i + 1) for i, c in enumerate("hello")) + tail(5)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD + chunks)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = ReplayClient(f"http://127.0.0.1:{port}/v1", "default", timeout_s=30)
    try:
        results = [await client.stream(ReplayRequest(f"r{i}", None, "hi", 5)) for i in range(2)]
    finally:
        await client.aclose()
        server.close()
    for r in results:
        assert r.ok, r.error
        assert r.text == "hello" and r.output_tokens == 5 and r.chunk_tokens == [1] * 5
        assert r.t_first is not None and r.t_send <= r.t_first <= r.t_end
        assert r.chunk_times == sorted(r.chunk_times)


def test_the_probe_is_cached_and_a_flag_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    first = rxstamp.kernel_stamps()
    assert rxstamp.KERNEL_STAMPS is first
    monkeypatch.setattr(rxstamp, "KERNEL_STAMPS", False)
    assert rxstamp.kernel_stamps() is False


@pytest.mark.parametrize("step_s", [10.0, -10.0])
async def test_a_stepped_realtime_clock_never_moves_a_stamp_out_of_its_request(
        step_s: float, monkeypatch: pytest.MonkeyPatch, lockstep: LockstepServer) -> None:
    """The offset between the two clocks is stale by `step_s` (the realtime clock was stepped since it
    was measured). Forward (stamps would map after the read): noticed at once and measured again.
    Backward (stamps map too early): clamped to the request write until the next periodic measure."""
    if not rxstamp.kernel_stamps():
        pytest.skip("no SO_TIMESTAMPNS receive stamps on this platform")
    monkeypatch.setattr(rxstamp, "_offset_ns", rxstamp._offset_ns - int(step_s * 1e9))
    monkeypatch.setattr(rxstamp, "_recheck_at", time.perf_counter() + 3600)
    client = httpx2.AsyncClient(transport=HTTP1Transport())
    rows: list[tuple[float, float]] = []
    try:
        t_send = time.perf_counter()
        async with client.stream("GET", f"{lockstep.url}/s/0") as r:

            def handler(data: bytes, t: float) -> bool:
                rows.append((t, time.perf_counter()))
                for _ in range(data.count(b",")):
                    lockstep.seen[0].put_nowait(None)
                return False

            assert await asyncio.wait_for(r.extensions[BODY_EXT].pump(handler), 30) is True
    finally:
        await client.aclose()
    times = [t for t, _ in rows]
    assert rows and times == sorted(times)
    assert all(t_send <= t <= t_handler for t, t_handler in rows)
    if step_s > 0:
        assert abs(rxstamp._offset_ns - rxstamp.clock_offset_ns()) < 10**8  # measured again
