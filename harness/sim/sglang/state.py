"""Shared server state and HTTP helpers for the stand-in's handlers (app.py, openai_api.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from harness.sim.sglang.engine import Engine, Req
from harness.sim.sglang.logs import SimLog
from harness.sim.sglang.metrics import Metrics


@dataclass
class SimState:
    sa: dict[str, Any]  # resolved ServerArgs fields, dataclass order
    engine: Engine
    log: SimLog
    metrics: Metrics | None
    target_config: dict[str, Any]
    max_total_num_tokens: int
    context_len: int
    effective_max_running: int
    memory_usage: dict[str, Any]
    time_scale: float = 1.0
    status: str = "starting"  # "starting" until the warm-up request finished, then "up"; "exiting" on SIGTERM
    internal_extra: dict[str, Any] = field(default_factory=dict)

    @property
    def served_model_name(self) -> str:
        return str(self.sa["served_model_name"])

    @property
    def spec_draft_tokens(self) -> int | None:
        return self.sa["speculative_num_draft_tokens"] if self.engine.cfg.spec is not None else None

    @property
    def enable_metrics(self) -> bool:
        return bool(self.sa["enable_metrics"])


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def log_access_now(request: web.Request, state: SimState, status: int) -> None:
    """uvicorn logs a streaming response when its headers go out, not when the body ends."""
    request["access_logged"] = True
    host, port = peer(request)
    state.log.access(host, port, request.method, request.path_qs, status)


def peer(request: web.Request) -> tuple[str, int]:
    info = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return "127.0.0.1", 0


async def start_sse(request: web.Request, state: SimState) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    log_access_now(request, state, 200)
    return resp


async def start_stream(
    request: web.Request, state: SimState, req: Req
) -> tuple[web.StreamResponse, AsyncIterator[Req]]:
    """The OpenAI handlers' kick-start: SGLang awaits the first output before it returns the
    StreamingResponse, so the headers (and uvicorn's access line) go out after the prefill. Returns the
    response and the outputs; a client gone before that aborts the request."""
    rest = outputs(req)
    try:
        first = await anext(rest)
        resp = await start_sse(request, state)
    except BaseException:
        if not req.finished:
            state.engine.abort(req)
        raise

    async def chained() -> AsyncIterator[Req]:
        yield first
        async for r in rest:
            yield r

    return resp, chained()


async def outputs(req: Req) -> AsyncIterator[Req]:
    """Yield the request each time the engine committed tokens (several commits may coalesce, as in
    SGLang)."""
    while True:
        await req.event.wait()
        req.event.clear()
        yield req
        if req.finished:
            return


async def read_json(request: web.Request) -> dict[str, Any] | web.Response:
    """The request body as a JSON object, or the 400 response FastAPI's validation would give."""
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        detail = [
            {
                "type": "json_invalid",
                "loc": ["body", e.pos],
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": str(e)},
            }
        ]
        return json_response(
            {"object": "error", "message": f"{detail}", "type": "Bad Request", "param": None, "code": 400},
            400,
        )
    if not isinstance(body, dict):
        return json_response(
            {
                "object": "error",
                "message": "Input should be a valid dictionary or object to extract fields from",
                "type": "Bad Request",
                "param": None,
                "code": 400,
            },
            400,
        )
    return body
