"""A fast stand-in for SGLang's OpenAI chat stream, for measuring clients (not servers).

Byte-compatible with SGLang 0.5.15's `/v1/chat/completions` stream: HTTP/1.1 chunked transfer encoding
with one HTTP chunk per SSE event (as uvicorn writes them), a role chunk with empty content, one content
chunk per token (with cumulative `usage` when the request asks for `continuous_usage_stats`), a finish
chunk, the `"choices": []` usage chunk when `include_usage` is asked for (or on by default, see
`--default-usage`), then `data: [DONE]`. The number of content chunks is the request's `max_tokens` (or
`max_completion_tokens`).

Modes:
  burst  every response is pre-encoded once and written in one `transport.write`: the server does
         almost no work per chunk, so the client is the bottleneck.
  paced  every stream gets its next chunk every `--interval-ms`; `--phase staggered` spreads the streams
         evenly over the interval, `--phase aligned` sends all of them in the same instant (like one
         SGLang decode step for the whole batch). Each chunk's content is the server's
         `time.perf_counter()` just before its write, as 20 fixed-width characters.

Run: python benchmarks/_fastserver.py --mode burst --cpu 1   (prints "PORT <n>" when listening)
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import selectors
import socket
import sys
import time

import orjson

HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\n\r\n")
END = b"0\r\n\r\n"
STAMP_WIDTH = 20
WORDS = [" the", " model", " drafts", " tokens", ",", " and", " verifies", " them", ".", "\n"]
ID = "7ee5aaae79cd45838b8a560f2a6885eb"
PROMPT_TOKENS = 54


def frame(event: bytes) -> bytes:
    """One SSE event as one HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(event), event)


def sse(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chunk(content: str | None, *, role: bool = False, finish: str | None = None,
          cum: int | None = None) -> bytes:
    delta: dict = {"reasoning_content": None}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    obj: dict = {"id": ID, "object": "chat.completion.chunk", "created": 1795947156, "model": "default",
                 "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                              "matched_stop": None}]}
    if cum is not None:
        obj["usage"] = usage(cum)
    return sse(obj)


def usage(cum: int) -> dict:
    return {"prompt_tokens": PROMPT_TOKENS, "total_tokens": PROMPT_TOKENS + cum, "completion_tokens": cum,
            "prompt_tokens_details": None, "reasoning_tokens": 0}


def tail(n: int, include_usage: bool) -> bytes:
    out = frame(chunk(None, finish="length"))
    if include_usage:
        out += frame(sse({"id": ID, "object": "chat.completion.chunk", "created": 1795947156,
                          "model": "default", "choices": [], "usage": usage(n)}))
    return out + frame(b"data: [DONE]\n\n") + END


def whole_response(n: int, continuous: bool, include_usage: bool) -> bytes:
    parts = [HEAD, frame(chunk("", role=True))]
    for i in range(n):
        parts.append(frame(chunk(WORDS[i % len(WORDS)], cum=i + 1 if continuous else None)))
    parts.append(tail(n, include_usage))
    return b"".join(parts)


class Stream:
    """One paced response in flight."""

    __slots__ = ("transport", "left", "sent", "continuous", "include_usage")

    def __init__(self, transport: asyncio.Transport, n: int, continuous: bool, include_usage: bool):
        self.transport, self.left, self.sent = transport, n, 0
        self.continuous, self.include_usage = continuous, include_usage


class Server:
    def __init__(self, mode: str, interval_s: float, default_usage: bool, phase: str, slots: int):
        self.mode = mode
        self.interval_s = interval_s
        self.default_usage = default_usage
        self.phase = phase
        self.slots = slots
        self.cache: dict[tuple, bytes] = {}
        self.arrivals = 0
        self.grid: float | None = None

    def respond(self, transport: asyncio.Transport, path: bytes, body: bytes) -> None:
        req = orjson.loads(body)
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        opts = req.get("stream_options") or {}
        continuous = bool(opts.get("continuous_usage_stats"))
        include_usage = bool(opts.get("include_usage")) or self.default_usage
        if self.mode == "burst":
            key = (n, continuous, include_usage)
            blob = self.cache.get(key)
            if blob is None:
                blob = self.cache[key] = whole_response(n, continuous, include_usage)
            transport.write(blob)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.grid is None:
            self.grid = now
        transport.write(HEAD + frame(chunk("", role=True)))
        # Staggered: the k-th stream to arrive sends at offset (k mod slots) / slots of the interval.
        k = self.arrivals
        self.arrivals += 1
        offset = 0.0 if self.phase == "aligned" else (k % self.slots) / self.slots * self.interval_s
        periods = math.ceil((now - self.grid - offset) / self.interval_s)
        due = self.grid + offset + max(periods, 1) * self.interval_s
        loop.call_at(due, self.send, Stream(transport, n, continuous, include_usage), due)

    def send(self, s: Stream, due: float) -> None:
        if s.transport.is_closing():
            return
        s.sent += 1
        t = time.perf_counter()
        s.transport.write(frame(chunk(f"{t:0{STAMP_WIDTH}.9f}", cum=s.sent if s.continuous else None)))
        if s.sent >= s.left:
            s.transport.write(tail(s.sent, s.include_usage))
            return
        loop = asyncio.get_running_loop()
        nxt = due + self.interval_s
        if nxt < loop.time():  # fell behind (should not happen on its own core): skip, never burst
            nxt = loop.time()
        loop.call_at(nxt, self.send, s, nxt)




class Http(asyncio.Protocol):
    """Just enough HTTP/1.1 for POST with Content-Length and keep-alive."""

    def __init__(self, server: Server):
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].split(b"\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            path = head[0].split(b" ")[1]
            assert self.transport is not None
            self.server.respond(self.transport, path, body)


async def serve(args: argparse.Namespace) -> None:
    server = Server(args.mode, args.interval_ms / 1000.0, args.default_usage, args.phase, args.slots)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: Http(server), "127.0.0.1", args.port, backlog=4096)
    port = srv.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    # Stop when the parent closes our stdin (or dies).
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()
    srv.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["burst", "paced"], default="burst")
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--phase", choices=["staggered", "aligned"], default="staggered",
                    help="paced: streams spread evenly over the interval, or all sent in the same instant")
    ap.add_argument("--slots", type=int, default=64, help="paced, staggered: phases per interval")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--cpu", type=int, default=None, help="pin to this core")
    ap.add_argument("--rt", action="store_true", help="real-time priority (SCHED_FIFO; needs root)")
    ap.add_argument("--default-usage", action="store_true",
                    help="send the usage chunk even when not asked (SGLang "
                         "--stream-response-default-include-usage)")
    args = ap.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.rt:
        realtime()
    if args.mode == "paced":
        # select() sleeps with microsecond precision; epoll (asyncio's default) rounds timeouts up to
        # whole milliseconds, which would bunch the paced sends onto a 1 ms grid.
        with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(selectors.SelectSelector())) as r:
            r.run(serve(args))
    else:
        asyncio.run(serve(args))


def realtime() -> None:
    """SCHED_FIFO, so that other work on a shared machine does not preempt the measurement."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    except (PermissionError, OSError) as exc:
        print(f"warning: no real-time priority ({exc}); figures include preemption by other work",
              file=sys.stderr)


if __name__ == "__main__":
    main()
