"""harness.client.stream and harness.client.sse against an in-test aiohttp server replaying real SGLang
captures and synthetic faults."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import openai
import pytest
from aiohttp import web

from harness.client.collect import spread_tokens
from harness.client.sse import SSESplitter
from harness.client.stream import ReplayClient, ReplayRequest, prompt_text

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1"
Script = Callable[[web.Request], Awaitable[web.StreamResponse]]


def capture(name: str, tag: str) -> list[str]:
    """The raw SSE lines of one stream of a capture (`tag<TAB>seconds<TAB>line`, blank lines dropped)."""
    lines = []
    with gzip.open(FIXTURES / f"sse-{name}.txt.gz", "rt", encoding="utf-8") as f:
        for row in f:
            t, _, line = row.rstrip("\n").split("\t", 2)
            if t == tag:
                lines.append(line)
    assert lines, f"no {tag} lines in {name}"
    return lines


def events(lines: list[str]) -> list[bytes]:
    return [(line + "\n\n").encode() for line in lines]


def expected_from(lines: list[str], chat: bool) -> dict:
    """What the stream says, read independently with the stdlib json module."""
    texts, usage, finish = [], None, None
    for line in lines:
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            continue
        obj = json.loads(data)
        if obj["choices"]:
            c = obj["choices"][0]
            text = (c["delta"].get("content") if chat else c["text"]) or ""
            if text:
                texts.append(text)
            finish = c.get("finish_reason") or finish
        elif obj.get("usage"):
            usage = obj["usage"]
    return {"texts": texts, "usage": usage, "finish": finish}


class ScriptServer:
    """aiohttp server answering each request with the next queued script (the last one repeats)."""

    def __init__(self) -> None:
        self.scripts: list[Script] = []
        self.requests: list[tuple[str, dict, tuple]] = []
        self.auth: list[str] = []
        self.heads: list[tuple[str, str, list[tuple[str, str]]]] = []  # method, path, headers as received
        self.release = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.auth.append(request.headers.get("Authorization", ""))
        self.heads.append((request.method, request.path_qs, list(request.headers.items())))
        self.requests.append((request.path, body, request.transport.get_extra_info("peername")))
        script = self.scripts.pop(0) if len(self.scripts) > 1 else self.scripts[0]
        return await script(request)


@contextlib.asynccontextmanager
async def script_server() -> AsyncIterator[ScriptServer]:
    """A ScriptServer listening on a free port of 127.0.0.1 (its .url the /v1 base), stopped on exit."""
    srv = ScriptServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", srv.handle)
    app.router.add_post("/v1/completions", srv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    srv.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield srv
    finally:
        srv.release.set()
        await runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[ScriptServer]:
    async with script_server() as srv:
        yield srv


@pytest.fixture
async def client(server: ScriptServer) -> AsyncIterator[ReplayClient]:
    c = ReplayClient(server.url, "default", timeout_s=30)
    yield c
    await c.aclose()


async def _open(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    return resp


def sse(writes: list[bytes], *, then: str = "end", release: asyncio.Event | None = None) -> Script:
    """Write each item as one write; then end the body ("end"), close the socket mid-body ("close")
    or hold the connection open until the test ends ("hang")."""

    async def script(request: web.Request) -> web.StreamResponse:
        resp = await _open(request)
        for w in writes:
            await resp.write(w)
        if then == "close":
            assert request.transport is not None
            request.transport.close()
        elif then == "hang":
            assert release is not None
            await release.wait()
        else:
            await resp.write_eof()
        return resp

    return script


def status(code: int, body: dict) -> Script:
    async def script(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=code)

    return script


def chat_chunk(
    content: str | None,
    *,
    cum: int | None = None,
    prompt: int = 7,
    finish: str | None = None,
    role: bool = False,
    reasoning: str | None = None,
) -> dict:
    delta: dict = {"reasoning_content": reasoning}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    obj: dict = {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "default",
        "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        ],
    }
    if cum is not None:
        obj["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt + cum, "completion_tokens": cum}
    return obj


def usage_chunk(completion: int, prompt: int = 7) -> dict:
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "default",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        },
    }


def ev(obj: dict | str) -> bytes:
    return b"data: " + (obj.encode() if isinstance(obj, str) else json.dumps(obj).encode()) + b"\n\n"


def spec_stream(pattern: list[int], *, final: int | None = None) -> list[bytes]:
    """An SGLang chat stream with continuous usage where chunk i carries pattern[i] tokens."""
    out, cum = [ev(chat_chunk("", role=True))], 0
    for i, n in enumerate(pattern):
        cum += n
        out.append(ev(chat_chunk(f"t{i}", cum=cum)))
    out += [
        ev(chat_chunk(None, finish="stop")),
        ev(usage_chunk(cum if final is None else final)),
        ev("[DONE]"),
    ]
    return out


REQ = ReplayRequest("r1", [{"role": "user", "content": "hi"}], None, max_tokens=64)


# ---------------------------------------------------------------- SSE splitter (pure)


def split_all(chunks: list[bytes]) -> list[bytes]:
    s = SSESplitter()
    return [p for c in chunks for p in s.feed(c)]


def test_splitter_every_split_point_gives_the_same_events() -> None:
    body = b"".join(events(capture("eagle3", "v1/chat")[:5])) + b": ping\n\n" + b"data: [DONE]\n\n"
    whole = split_all([body])
    assert len(whole) == 6 and whole[-1] == b"[DONE]"
    assert all(json.loads(p)["object"] == "chat.completion.chunk" for p in whole[:5])
    for k in range(len(body) + 1):
        assert split_all([body[:k], body[k:]]) == whole, k
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(body)), 5))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        assert split_all(pieces) == whole


@pytest.mark.parametrize("nl", [b"\n", b"\r\n", b"\r"])
def test_splitter_line_endings_comments_fields_and_multiline_data(nl: bytes) -> None:
    body = nl.join(
        [
            b": comment",
            b"event: message",
            b"id: 3",
            b'data: {"a":',
            b"data:1}",
            b"",
            b"data",
            b"",
            b"retry: 5",
            b"",
            b"data: [DONE]",
            b"",
            b"",
        ]
    )
    whole = split_all([body])
    assert whole == [b'{"a":\n1}', b"", b"[DONE]"]
    for k in range(len(body) + 1):
        assert split_all([body[:k], body[k:]]) == whole, k
    assert split_all([body[i : i + 1] for i in range(len(body))]) == whole


def test_splitter_keeps_an_unterminated_event_pending() -> None:
    s = SSESplitter()
    assert s.feed(b'data: {"a": 1}\n\ndata: {"b"') == [b'{"a": 1}']
    assert s.pending == b'data: {"b"'


def test_spread_tokens_and_prompt_text() -> None:
    assert spread_tokens(64, 32) == [2] * 32
    assert sum(spread_tokens(10, 3)) == 10 and sorted(spread_tokens(10, 3)) == [3, 3, 4]
    assert spread_tokens(2, 4) == [0, 1, 0, 1] and spread_tokens(5, 0) == []
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "Q"}]}]
    assert prompt_text(msgs) == "S\n\nQ"


def test_request_needs_exactly_one_of_messages_and_prompt() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ReplayRequest("r", None, None, max_tokens=1)
    with pytest.raises(ValueError, match="exactly one"):
        ReplayRequest("r", [{"role": "user", "content": "a"}], "a", max_tokens=1)


# ---------------------------------------------------------------- real captures, byte for byte


@pytest.mark.parametrize("name", ["baseline", "eagle3"])
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("transport", ["http1", "sdk-aiohttp"])
async def test_replays_real_sglang_captures(server: ScriptServer, name: str, endpoint: str,
                                            transport: str) -> None:
    lines = capture(name, "v1/chat" if endpoint == "chat" else "v1/completions")
    exp = expected_from(lines, endpoint == "chat")
    server.scripts = [sse(events(lines))]
    # The default transport (harness.client.http1), and the reading path kept for any other httpx2 client.
    http_client = openai.DefaultAioHttpClient() if transport == "sdk-aiohttp" else None
    c = ReplayClient(server.url, "default", api_key="sk-key", endpoint=endpoint, http_client=http_client)
    try:
        r = await c.stream(REQ)
    finally:
        await c.aclose()
    assert r.ok and r.error is None and r.http_status == 200
    assert r.output_tokens == exp["usage"]["completion_tokens"]
    assert r.prompt_tokens == exp["usage"]["prompt_tokens"]
    assert r.text == "".join(exp["texts"]) and r.finish_reason == exp["finish"]
    assert len(r.chunk_times) == len(r.chunk_tokens) == len(exp["texts"]) > 0
    # The capture has no per-chunk usage: usage is spread over the content chunks.
    assert not r.chunk_tokens_exact and sum(r.chunk_tokens) == r.output_tokens
    assert r.chunk_times == sorted(r.chunk_times) and r.t_first == r.chunk_times[0]
    assert r.t_send <= r.t_first <= r.t_end and r.spec is None
    path, body, _ = server.requests[0]
    assert path == ("/v1/chat/completions" if endpoint == "chat" else "/v1/completions")
    assert server.auth == ["Bearer sk-key"] and body["model"] == "default"
    assert body["stream"] is True and body["max_tokens"] == 64 and body["temperature"] == 0.0
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    if endpoint == "chat":
        assert body["messages"] == [{"role": "user", "content": "hi"}]
    else:
        assert body["prompt"] == "hi"


async def test_one_byte_writes_parse_like_whole_events(server: ScriptServer, client: ReplayClient) -> None:
    body = b"".join(events(capture("eagle3", "v1/chat")))
    server.scripts = [
        sse(events(capture("eagle3", "v1/chat"))),
        sse([body[i : i + 1] for i in range(len(body))]),
    ]
    whole = await client.stream(REQ)
    bytewise = await client.stream(REQ)
    assert whole.ok and bytewise.ok
    for f in (
        "text",
        "chunk_tokens",
        "output_tokens",
        "prompt_tokens",
        "finish_reason",
        "chunk_tokens_exact",
    ):
        assert getattr(bytewise, f) == getattr(whole, f), f
    assert len(bytewise.chunk_times) == len(whole.chunk_times)


# ---------------------------------------------------------------- tokens and timestamps


async def test_continuous_usage_gives_exact_multi_token_chunks(
    server: ScriptServer, client: ReplayClient
) -> None:
    pattern = [1, 3, 3, 2, 3, 3, 1, 3]
    server.scripts = [sse(spec_stream(pattern))]
    r = await client.stream(REQ)
    assert r.ok and r.chunk_tokens_exact
    assert r.chunk_tokens == pattern and sum(r.chunk_tokens) == r.output_tokens == sum(pattern)
    assert r.text == "".join(f"t{i}" for i in range(len(pattern))) and r.finish_reason == "stop"


async def test_tokens_without_text_are_chunks_and_tail_tokens_stay_unassigned(
    server: ScriptServer, client: ReplayClient
) -> None:
    writes = [
        ev(chat_chunk("", role=True)),
        ev(chat_chunk(None, reasoning="think", cum=3)),
        ev(chat_chunk("", cum=3)),  # nothing new: not a content chunk
        ev(chat_chunk("a", cum=6)),
        ev(chat_chunk(None, finish="stop")),
        ev(usage_chunk(7)),
        ev("[DONE]"),
    ]
    server.scripts = [sse(writes)]
    r = await client.stream(REQ)
    assert r.ok and r.chunk_tokens_exact and r.chunk_tokens == [3, 3]
    assert r.output_tokens == 7 and r.text == "a"  # the stop token (no text, no chunk) is only in usage


async def test_events_of_one_write_share_one_timestamp(server: ScriptServer, client: ReplayClient) -> None:
    s = spec_stream([2, 2, 2, 2, 2])
    server.scripts = [sse([b"".join(s[:4]), *s[4:]])]  # role + three content chunks in one write
    r = await client.stream(REQ)
    assert r.ok and len(r.chunk_times) == 5
    assert r.chunk_times[0] == r.chunk_times[1] == r.chunk_times[2] == r.t_first


async def test_spec_tokens_details_are_captured(server: ScriptServer, client: ReplayClient) -> None:
    details = {"spec_verify_ct": 4, "spec_accept_length": 2.5, "spec_num_correct_drafts": 6}
    s = spec_stream([1, 3, 3, 3])
    sglext = {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "default",
        "choices": [],
        "sglext": {"spec_tokens_details": details},
    }
    server.scripts = [sse([*s[:-2], ev(sglext), *s[-2:]])]
    r = await client.stream(
        ReplayRequest("r", None, "hi", 10, extra_body={"return_spec_tokens_details": True})
    )
    assert r.ok and r.spec == details and r.spec_field == "sglext" and r.output_tokens == 10
    assert server.requests[0][1]["return_spec_tokens_details"] is True


async def test_vllm_metrics_ride_the_final_usage_chunk(server: ScriptServer, client: ReplayClient) -> None:
    """vLLM 0.29.0+ with --per-request-spec-decode-metrics: `metrics.speculative_decoding` in the chunk that
    carries usage (entrypoints/openai/chat_completion/serving.py, written without null fields)."""
    stats = {"mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.5,
             "acceptance_histogram": [1, 0, 2, 1], "num_spec_steps": 4, "num_accepted_draft_tokens": 6,
             "num_draft_tokens": 12, "num_spec_tokens": 3}
    s = spec_stream([1, 3, 3, 4])
    final = {**usage_chunk(11), "system_fingerprint": "vllm-0.33.0-0123abcd",
             "metrics": {"speculative_decoding": stats}}
    server.scripts = [sse([*s[:-2], ev(final), s[-1]])]
    r = await client.stream(REQ)
    assert r.ok and r.spec == stats and r.spec_field == "metrics" and r.output_tokens == 11
    server.scripts = [sse(spec_stream([1, 3]))]  # the flag off: no metrics, no field
    r = await client.stream(REQ)
    assert r.ok and r.spec is None and r.spec_field == ""


async def test_connection_is_reused_after_done(server: ScriptServer, client: ReplayClient) -> None:
    server.scripts = [sse(spec_stream([1, 1]))]
    assert (await client.stream(REQ)).ok and (await client.stream(REQ)).ok
    assert server.requests[0][2] == server.requests[1][2]  # same client address and port


async def test_many_concurrent_streams(server: ScriptServer, client: ReplayClient) -> None:
    server.scripts = [sse(spec_stream([1, 2, 3] * 10))]
    results = await asyncio.gather(*(client.stream(REQ) for _ in range(48)))
    assert all(r.ok and r.chunk_tokens == [1, 2, 3] * 10 for r in results)


# ---------------------------------------------------------------- faults: recorded, never raised


async def test_http_500_is_recorded_without_retry(server: ScriptServer, client: ReplayClient) -> None:
    server.scripts = [
        status(500, {"object": "error", "message": "boom: KV cache full", "type": "Internal", "code": 500})
    ]
    r = await client.stream(REQ)
    assert not r.ok and r.http_status == 500 and r.output_tokens is None
    assert r.error is not None and r.error.startswith("http 500: ") and "boom: KV cache full" in r.error
    assert len(server.requests) == 1 and r.chunk_times == []


async def test_connection_closed_mid_stream(server: ScriptServer, client: ReplayClient) -> None:
    server.scripts = [sse(spec_stream([1, 1, 1, 1, 1])[:4], then="close")]
    r = await client.stream(REQ)
    assert not r.ok and r.error == "connection reset" and r.http_status == 200
    assert r.chunk_tokens == [1, 1, 1] and r.text == "t0t1t2" and r.output_tokens is None


async def test_malformed_json_stops_the_stream(server: ScriptServer, client: ReplayClient) -> None:
    s = spec_stream([1, 1, 1])
    server.scripts = [sse([*s[:3], b'data: {"choices": [\n\n', *s[3:]])]
    r = await client.stream(REQ)
    assert not r.ok and r.error is not None and r.error.startswith("malformed sse: ")
    assert r.chunk_tokens == [1, 1] and r.output_tokens is None


async def test_missing_done(server: ScriptServer, client: ReplayClient) -> None:
    server.scripts = [sse(spec_stream([2, 2])[:-1])]
    r = await client.stream(REQ)
    assert not r.ok and r.error == "stream ended without [DONE]"
    assert r.output_tokens == 4 and r.chunk_tokens == [2, 2]


async def test_timeout(server: ScriptServer) -> None:
    server.scripts = [sse(spec_stream([1, 1, 1])[:3], then="hang", release=server.release)]
    c = ReplayClient(server.url, "default", timeout_s=0.3)
    try:
        r = await c.stream(REQ)
    finally:
        await c.aclose()
    assert not r.ok and r.error == "timeout" and r.chunk_tokens == [1, 1]


async def test_no_usage_chunk(server: ScriptServer, client: ReplayClient) -> None:
    server.scripts = [
        sse([ev(chat_chunk("", role=True)), ev(chat_chunk("a")), ev(chat_chunk("b")), ev("[DONE]")])
    ]
    r = await client.stream(REQ)
    assert not r.ok and r.error == "no usage chunk" and r.output_tokens is None
    assert r.text == "ab" and len(r.chunk_times) == 2 and not r.chunk_tokens_exact


async def test_server_error_event(server: ScriptServer, client: ReplayClient) -> None:
    err = {"error": {"object": "error", "message": "Generation aborted.", "type": "BadRequest", "code": 400}}
    server.scripts = [sse([*spec_stream([1])[:2], ev(err), ev("[DONE]")])]
    r = await client.stream(REQ)
    assert not r.ok and r.error == "server error: Generation aborted." and r.chunk_tokens == [1]


async def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = ReplayClient(f"http://127.0.0.1:{port}/v1", "default")
    try:
        r = await c.stream(REQ)
    finally:
        await c.aclose()
    assert not r.ok and r.error == "connection refused" and r.http_status is None


# ---------------------------------------------------------------- complete_meta


async def test_complete_meta(server: ScriptServer, client: ReplayClient) -> None:
    meta = {"id": "m", "completion_tokens": 12, "spec_verify_ct": 5, "spec_accept_length": 2.4}
    body = {
        "id": "m",
        "object": "chat.completion",
        "created": 1,
        "model": "default",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "x"},
                "finish_reason": "length",
                "meta_info": meta,
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 12, "total_tokens": 15},
    }
    server.scripts = [
        status(200, body),
        status(200, body),
        status(400, {"object": "error", "message": "unknown field", "type": "BadRequest", "code": 400}),
    ]
    # a probe's next turn
    assert await client.complete_meta_text(ReplayRequest("r", None, "hi", 12)) == ("x", meta)
    server.requests.clear()
    assert await client.complete_meta(ReplayRequest("r", None, "hi", 12)) == meta
    path, sent, _ = server.requests[0]
    assert path == "/v1/chat/completions" and sent["return_meta_info"] is True
    assert not sent.get("stream") and sent["messages"] == [{"role": "user", "content": "hi"}]
    assert await client.complete_meta(REQ) is None
