"""Replay client: one streamed request in, a faithful per-chunk timing record out.

The request goes through the openai SDK (base URL, auth header, no retries, errors mapped to
openai.APIStatusError / APIConnectionError) as a custom `client.post()`; the typed `create()` spends about
a millisecond per request validating params. Later requests to the same path reuse the head the SDK
built for the first one (`ReplayClient._send`). The response is read raw over `harness.client.http1` (an
httpx2 transport that hands over each network read dechunked in one piece: aiohttp's reader costs as much
per SSE event as parsing it): one timestamp per read, on the `time.perf_counter()` clock and taken before
any parsing (the kernel's receive time of the read where the socket gives it, see `harness.client.rxstamp`),
then the bytes are split into SSE events (`harness.client.sse`) and each event is parsed with orjson. The
SDK's parsed stream builds a pydantic model per chunk and falls far behind at 64 streams.
docs/performance.md has numbers.

Tokens: the request asks for `stream_options.continuous_usage_stats`, so SGLang (and vLLM) put the
cumulative `usage.completion_tokens` on every content chunk; tokens per chunk are its deltas, exact.
Tokens that arrive with no chunk at all (a stop token with no text in SGLang's chat stream) are in
`output_tokens` but in no chunk. Servers that do not send cumulative usage get the final usage spread
over the content chunks (`chunk_tokens_exact` False). `output_tokens` always comes from the final usage
chunk, never from counting chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx2
import openai
import orjson

from harness.client.collect import StreamResult, _Collector, _numeric_spec
from harness.client.faults import FAULTS as _FAULTS
from harness.client.faults import MALFORMED as _MALFORMED
from harness.client.faults import describe_fault, http_error
from harness.client.http1 import BODY_EXT, Prepared, StreamingClient
from harness.client.sse import EventTooLarge, SSESplitter

ENDPOINTS = ("chat", "completions")
DONE_GRACE_S = 1.0  # after [DONE], wait this long for the end of the HTTP body so the connection is reused
# The SDK header behind `with_streaming_response`: return the HTTP response unread.
RAW_STREAM_HEADER = "X-Stainless-Raw-Response"


@dataclass(frozen=True)
class ReplayRequest:
    request_id: str  # unique within the run
    messages: list[dict] | None  # chat messages (role/content); None when `prompt` is used
    prompt: str | None  # plain text (sent as one user message on chat, raw on completions)
    max_tokens: int
    temperature: float = 0.0
    extra_body: dict | None = None  # merged last into the request body (may override anything)

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError(f"request {self.request_id!r}: give exactly one of messages and prompt")


def prompt_text(messages: list[dict]) -> str:
    """Messages flattened for /v1/completions: the contents (text parts of list contents) joined by
    blank lines. No chat template is applied: that is what the chat endpoint is for."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content:
            out.append(str(content))
    return "\n\n".join(out)


def _reads(http_response: httpx2.Response) -> AsyncIterator[bytes]:
    """Every read as another transport hands it over (no re-chunking, no decoding: the request asks for
    identity encoding). Skips httpx2's three generator layers where it can: they cost more than the
    parsing when each read is one chunk."""
    inner = getattr(getattr(http_response.stream, "_stream", None), "_aiohttp_response", None)
    if isinstance(inner, aiohttp.ClientResponse):  # the SDK's DefaultAioHttpClient
        return inner.content.iter_any()
    return http_response.aiter_raw()


class ReplayClient:
    """Streams ReplayRequests to an OpenAI-compatible server (`base_url` is the OpenAI base, e.g.
    http://host:port/v1). `endpoint` is "chat" (/chat/completions) or "completions" (/completions)."""

    def __init__(self, base_url: str, model: str, *, api_key: str = "EMPTY", endpoint: str = "chat",
                 timeout_s: float = 600.0, max_connections: int = 1024, keepalive: bool = True,
                 http_client: httpx2.AsyncClient | None = None):
        if endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {ENDPOINTS}, not {endpoint!r}")
        self.model = model
        self.endpoint = endpoint
        self.timeout_s = float(timeout_s)
        # No read timeout (aiohttp would re-arm a timer for it on every HTTP chunk): `timeout_s` bounds
        # the whole request instead (asyncio.timeout in stream()).
        timeout = httpx2.Timeout(self.timeout_s, read=None)
        if http_client is None:
            # harness.client.http1 rather than the SDK's aiohttp transport: see its module doc.
            # keepalive False: a new connection per request, as sglang.bench_serving opens one
            http_client = StreamingClient(max_connections=max_connections,
                                          keepalive_s=4.0 if keepalive else 0.0, timeout=timeout)
        # No retries: a retried request would hide the failure and skew the timing of the one we record.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout,
            default_headers={"Accept-Encoding": "identity"}, http_client=http_client)
        # The SDK's own mapping of an error response to its APIStatusError subclasses: with it, streamed
        # requests after the first to a path reuse the head the SDK built (see `_send`).
        self._status_error = getattr(self._client, "_make_status_error_from_response", None)
        self._fast = http_client._http1 if isinstance(http_client, StreamingClient) else None
        self._prepared: dict[str, Prepared] = {}

    def body(self, req: ReplayRequest, *, stream: bool, chat: bool) -> dict[str, Any]:
        """The JSON request body (`extra_body` merged last)."""
        body: dict[str, Any] = {"model": self.model}
        if chat:
            body["messages"] = req.messages if req.messages is not None else [
                {"role": "user", "content": req.prompt}]
        else:
            body["prompt"] = req.prompt if req.prompt is not None else prompt_text(req.messages or [])
        body["max_tokens"] = req.max_tokens
        body["temperature"] = req.temperature
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if req.extra_body:
            body.update(req.extra_body)
        return body

    async def _post(self, path: str, body: dict[str, Any]) -> httpx2.Response:
        """POST through the SDK (base URL, auth, error mapping to openai.APIStatusError etc.) as a custom
        request: the typed `create()` spends about a millisecond per request validating the params.
        The raw-response header makes the SDK hand back the response unread, i.e. streaming."""
        return await self._client.post(path, cast_to=httpx2.Response, content=orjson.dumps(body),
                                       options={"headers": {RAW_STREAM_HEADER: "stream"}})

    async def _send(self, path: str, body: dict[str, Any]) -> httpx2.Response:
        """POST `body` to `path`, response unread. The first request to a path goes through the SDK,
        which builds its URL and headers (base URL, auth, its own headers); later ones put exactly that
        head back on the wire with the new body (`harness.client.http1.Prepared`). The SDK spends ~0.5 ms of
        CPU building each request: at concurrency 8 a closed loop sent a wave of requests spread over
        4 ms, and no read is stamped meanwhile. Error answers raise what the SDK raises for them."""
        prepared = self._prepared.get(path)
        if prepared is None or self._fast is None or self._status_error is None:
            resp = await self._post(path, body)
            if self._fast is not None and self._status_error is not None and resp.request is not None:
                self._prepared[path] = self._fast.prepare(resp.request)
            return resp
        resp = await self._fast.send_prepared(prepared, orjson.dumps(body))
        if not resp.is_success:
            resp.request = httpx2.Request(prepared.method, prepared.url)
            try:
                await resp.aread()
            finally:
                await resp.aclose()
            raise self._status_error(resp)
        return resp

    async def stream(self, req: ReplayRequest) -> StreamResult:
        """Send one streamed request and record every content chunk. Server and network faults end up
        in the result (ok=False, error=...) with whatever arrived before them; they never raise."""
        chat = self.endpoint == "chat"
        col = _Collector(chat)
        body = self.body(req, stream=True, chat=chat)
        status: int | None = None
        t_send = time.perf_counter()
        wall_send = time.time()
        try:
            async with asyncio.timeout(self.timeout_s):
                resp = await self._send("/chat/completions" if chat else "/completions", body)
                try:
                    status = resp.status_code
                    await self._consume(resp, col)
                finally:
                    await resp.aclose()
        except openai.APIStatusError as exc:
            status = exc.status_code
            col.fail(http_error(exc), time.perf_counter())
        except _FAULTS as exc:
            col.fail(describe_fault(exc), time.perf_counter())
        try:
            return col.result(t_send=t_send, wall_send=wall_send, status=status)
        except Exception as exc:  # noqa: BLE001 - whatever a server sent must not kill the worker that asked
            return StreamResult(ok=False, error=f"malformed response: {type(exc).__name__}: {exc}"[:300],
                                http_status=status, t_send=t_send, t_first=None, t_end=time.perf_counter(),
                                wall_send=wall_send)

    @staticmethod
    async def _consume(http_response: httpx2.Response, col: _Collector) -> None:
        splitter = SSESplitter()
        feed = splitter.feed
        add_all = col.add_all

        def on_read(data: bytes, t: float) -> bool:
            """Events of one read, all stamped with its time; True when no more are wanted."""
            try:
                add_all(feed(data), t)
            except EventTooLarge as exc:
                col.fail(f"sse event too large: {exc}", t)
            except _MALFORMED as exc:
                col.fail(f"malformed sse: {type(exc).__name__}: {exc}", t)
            return col.done or col.error is not None

        body = http_response.extensions.get(BODY_EXT)
        if body is not None:
            # harness.client.http1 calls on_read from the read callback (no task switch per read) with the
            # read's time: the kernel's receive stamp, or perf_counter as the read arrives.
            complete = await body.pump(on_read)
        else:
            complete = True
            reads = _reads(http_response)
            async for data in reads:
                if on_read(data, time.perf_counter()):
                    complete = False
                    break
        if col.error is not None:
            return
        if not col.done:
            col.t_end = time.perf_counter()
            if splitter.pending:
                col.fail("stream ended without [DONE] (cut inside an event)", col.t_end)
            return
        if not complete:
            # Read to the end of the HTTP body so the connection goes back to the pool.
            with contextlib.suppress(TimeoutError, *_FAULTS):
                async with asyncio.timeout(DONE_GRACE_S):
                    if body is not None:
                        await body.pump(None)
                    else:
                        async for _ in reads:
                            pass

    async def complete_meta(self, req: ReplayRequest) -> dict | None:
        """Non-streaming chat request with `return_meta_info` (SGLang >= 0.5.13); returns
        choices[0].meta_info (spec_verify_ct, completion_tokens, ...), or None when the server does not
        give it (older SGLang, another server, or any fault)."""
        got = await self.complete_meta_text(req)
        return got[1] if got else None

    async def complete_meta_text(self, req: ReplayRequest) -> tuple[str, dict] | None:
        """complete_meta, with the answer's text (a probe's next turn follows it): (text, meta_info)."""
        body = {**self.body(req, stream=False, chat=True), "return_meta_info": True}
        try:
            async with asyncio.timeout(self.timeout_s):
                resp = await self._post("/chat/completions", body)
                try:
                    data = await resp.aread()
                finally:
                    await resp.aclose()
            choice = orjson.loads(data)["choices"][0]
            meta, text = choice.get("meta_info"), (choice.get("message") or {}).get("content") or ""
        except (openai.APIStatusError, *_FAULTS, *_MALFORMED):
            return None
        if not isinstance(meta, dict):
            return None
        meta, bad = _numeric_spec(meta)  # a server's non-numbers never reach the engines' formulas
        return None if bad else (str(text), meta)

    async def complete_json(self, req: ReplayRequest, extra: dict[str, Any] | None = None) -> dict | None:
        """One non-streaming request on the client's endpoint with `extra` merged into the body (the lossless
        audit's logprobs: harness.bench.audit); the parsed answer, or None on any fault."""
        chat = self.endpoint == "chat"
        body = {**self.body(req, stream=False, chat=chat), **(extra or {})}
        try:
            async with asyncio.timeout(self.timeout_s):
                resp = await self._post("/chat/completions" if chat else "/completions", body)
                try:
                    data = await resp.aread()
                finally:
                    await resp.aclose()
            got = orjson.loads(data)
        except (openai.APIStatusError, *_FAULTS, *_MALFORMED):
            return None
        return got if isinstance(got, dict) else None

    async def aclose(self) -> None:
        await self._client.close()
