"""aiohttp application with SGLang 0.5.15's native endpoints (``entrypoints/http_server.py``) and the
middleware SGLang's stack provides: uvicorn access lines, the API-key check, Prometheus HTTP counters,
FastAPI's JSON 404/405 bodies."""

from __future__ import annotations

import asyncio
import os
import time
import traceback
import uuid
from typing import Any

from aiohttp import web

from harness.sim.sglang import logprobs as lp
from harness.sim.sglang import openai_api, request_extras
from harness.sim.sglang import responses as rs
from harness.sim.sglang.conditions import top_p_of
from harness.sim.sglang.engine import Req
from harness.sim.sglang.resolve import emulated_version
from harness.sim.sglang.state import SimState, json_response, outputs, peer, read_json, start_sse

HEALTH_CHECK_TIMEOUT = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", 20))
FLUSH_OK = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
    "requests, the operation will not be performed.)\n"
)


def _deprecated(state: SimState, old: str, new: str) -> None:
    state.log.warning(
        f"Endpoint '{old}' is deprecated and will be removed in a future version. Please use '{new}' instead."
    )


def _authorized(request: web.Request, api_key: str | None) -> bool:
    if not api_key or request.method == "OPTIONS" or request.path.startswith(("/health", "/metrics")):
        return True
    parts = request.headers.get("Authorization", "").split(" ", 1)
    return len(parts) == 2 and parts[0].lower() == "bearer" and parts[1] == api_key


@web.middleware
async def sglang_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    state: SimState = request.app["state"]
    metrics = state.metrics if request.match_info.route.resource is not None else None  # no 404 series
    if metrics:
        metrics.http_start(request.path, request.method)
    try:
        if not _authorized(request, state.sa["api_key"]):
            resp: web.StreamResponse = json_response({"error": "Unauthorized"}, 401)
        else:
            resp = await handler(request)
    except web.HTTPException as e:  # aiohttp's 404/405 -> FastAPI's bodies
        resp = json_response({"detail": e.reason}, e.status)
    except (asyncio.CancelledError, ConnectionError):
        if metrics:
            metrics.http_end(request.path, request.method, 499)
        raise
    except Exception:  # Starlette's ServerErrorMiddleware: traceback in the log, plain 500 to the client
        state.log.raw("Exception in ASGI application\n" + traceback.format_exc())
        resp = web.Response(status=500, text="Internal Server Error")
    if metrics:
        metrics.http_end(request.path, request.method, resp.status)
    if not request.get("access_logged"):
        host, port = peer(request)
        state.log.access(host, port, request.method, request.path_qs, resp.status)
    return resp


async def health_generate(request: web.Request) -> web.Response:
    """503 while starting or exiting; else a 1-token generation must produce any output within the timeout."""
    state: SimState = request.app["state"]
    if state.status == "exiting":
        state.log.info("Health check request received during shutdown. Returning 503.")
        return web.Response(status=503)
    if state.status != "up":
        return web.Response(status=503)
    if request.path == "/health" and os.environ.get(
        "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "1"
    ).lower() in (
        "0",
        "false",
    ):
        return web.Response(status=200)  # pure liveness probe when generation is switched off
    tic = time.time()
    state.engine.submit(
        Req(rid=f"HEALTH_CHECK_{uuid.uuid4().hex}", prompt_ids=[0], max_new_tokens=1, log_metrics=False)
    )
    while time.time() < tic + HEALTH_CHECK_TIMEOUT:
        await asyncio.sleep(1.0 * state.time_scale)
        if state.engine.last_output_time > tic:
            return web.Response(status=200)
    state.log.error(
        f"Health check failed. Server couldn't get a response from detokenizer for last "
        f"{int(HEALTH_CHECK_TIMEOUT)} seconds. tic start time: {time.strftime('%H:%M:%S')}. "
        f"last_heartbeat time: {time.strftime('%H:%M:%S', time.localtime(state.engine.last_output_time))}"
    )
    return web.Response(status=503)


def _model_info(state: SimState) -> dict[str, Any]:
    cfg = state.target_config
    return {
        "model_path": state.sa["model_path"],
        "tokenizer_path": state.sa["tokenizer_path"],
        "is_generation": True,
        "preferred_sampling_params": state.sa["preferred_sampling_params"],
        "weight_version": state.sa["weight_version"],
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": cfg.get("model_type"),
        "architectures": cfg.get("architectures"),
    }


async def model_info(request: web.Request) -> web.Response:
    return json_response(_model_info(request.app["state"]))


async def get_model_info(request: web.Request) -> web.Response:
    _deprecated(request.app["state"], "/get_model_info", "/model_info")
    return await model_info(request)


def internal_state(state: SimState) -> dict[str, Any]:
    """Scheduler.get_internal_state: the args again plus the live numbers."""
    eng = state.engine
    st = dict(
        state.sa, disable_chunked_prefix_cache=True, pp_max_micro_batch_size=state.effective_max_running
    )
    st.update(state.internal_extra)
    st.update(
        max_speculative_num_draft_tokens=state.spec_draft_tokens,
        last_gen_throughput=eng.last_gen_throughput,
        memory_usage=state.memory_usage,
        effective_max_running_requests_per_dp=state.effective_max_running,
    )
    if eng.avg_spec_accept_length is not None:
        st["avg_spec_accept_length"] = eng.avg_spec_accept_length
    return st


async def server_info(request: web.Request) -> web.Response:
    state: SimState = request.app["state"]
    return json_response(
        {
            **state.sa,
            "status": "ready",
            "max_total_num_tokens": state.max_total_num_tokens,
            "max_req_input_len": state.context_len - 6,
            "internal_states": [internal_state(state)],
            "version": emulated_version(),
            "kv_events": None,
        }
    )


async def get_server_info(request: web.Request) -> web.Response:
    _deprecated(request.app["state"], "/get_server_info", "/server_info")
    return await server_info(request)


async def get_load(request: web.Request) -> web.Response:
    state: SimState = request.app["state"]
    _deprecated(state, "/get_load", "/v1/loads")
    eng = state.engine
    pending = sum(len(r.prompt_ids) for r in eng.waiting)
    return json_response(
        [
            {
                "dp_rank": 0,
                "num_reqs": len(eng.running) + len(eng.waiting),
                "num_waiting_reqs": len(eng.waiting),
                "num_tokens": eng.num_used_tokens() + pending,
                "num_pending_tokens": pending,
                "ts_tic": time.perf_counter(),
            }
        ]
    )


async def v1_models(request: web.Request) -> web.Response:
    state: SimState = request.app["state"]
    name = state.served_model_name
    card = {
        "id": name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": name,
        "parent": None,
        "max_model_len": state.context_len,
    }
    model = request.match_info.get("model")
    if model is not None and model != name:
        return json_response(
            {
                "error": {
                    "message": f"The model '{model}' does not exist",
                    "type": "invalid_request_error",
                    "param": "model",
                    "code": "model_not_found",
                }
            },
            404,
        )
    return json_response(card if model is not None else {"object": "list", "data": [card]})


async def flush_cache(request: web.Request) -> web.Response:
    state: SimState = request.app["state"]
    try:
        timeout = float(request.query.get("timeout", "0"))
    except ValueError:
        timeout = 0.0
    deadline = time.monotonic() + timeout * state.time_scale
    while not state.engine.idle and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    if state.engine.flush_cache():
        state.log.info("Cache flushed successfully!", scheduler=True)
        return web.Response(text=FLUSH_OK)
    eng = state.engine
    if timeout > 0:
        state.log.warning("Deferred flush_cache timed out while waiting for idle state.")
        return web.Response(text="Timed out waiting for idle state.", status=400)
    state.log.warning(
        f"Cache not flushed because there are pending requests. #queue-req: {len(eng.waiting)}, "
        f"#running-req: {len(eng.running)}"
    )
    return web.Response(text="Flush cache failed.\n", status=400)


async def metrics(request: web.Request) -> web.Response:
    state: SimState = request.app["state"]
    assert state.metrics is not None
    return web.Response(
        body=state.metrics.render().encode(),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )


async def generate(request: web.Request) -> web.StreamResponse:
    """Native /generate: cumulative text/output_ids per chunk, meta_info with spec stats at the end."""
    state: SimState = request.app["state"]
    body = await read_json(request)
    if isinstance(body, web.Response):
        return body
    sp = body.get("sampling_params") or {}
    text, ids = body.get("text"), body.get("input_ids")
    if isinstance(text, list) and len(text) == 1:
        text = text[0]
    vocab = int(state.target_config.get("vocab_size", 32000))
    if isinstance(ids, list) and ids and all(isinstance(t, int) for t in ids):
        prompt_ids = list(ids)
    elif isinstance(text, str):
        from harness.sim.sglang.model import tokenize

        prompt_ids = [1, *tokenize(text, vocab)]
    else:
        return json_response(
            {
                "error": {
                    "message": "Either text or input_ids should be provided (one request "
                    "per call in the stand-in)."
                }
            },
            400,
        )
    max_new = sp.get("max_new_tokens", 128)
    if err := openai_api.generate_error(state, len(prompt_ids), max_new):
        state.log.error(f"[http_server] Error: {err}")
        if not body.get("stream"):
            return json_response({"error": {"message": err}}, 400)
        resp = await start_sse(request, state)  # the stream has begun when tokenizer_manager raises
        error = {"message": err, "type": "invalid_request_error", "code": 400, "retryable": False}
        await resp.write(rs.sse({"error": error}))
        await resp.write(rs.SSE_DONE)
        return resp
    req = state.engine.submit(
        Req(
            rid=str(body.get("rid") or uuid.uuid4().hex),
            prompt_ids=prompt_ids,
            max_new_tokens=int(max_new if max_new is not None else state.context_len),
            temperature=float(sp.get("temperature", 1.0)),
            top_p=top_p_of(sp.get("top_p")),
            ignore_eos=bool(sp.get("ignore_eos")),
            stream=bool(body.get("stream")),
            **request_extras.generate(body, prompt_ids).fields,
        )
    )
    kw = {"enable_metrics": state.enable_metrics, "spec_draft_tokens": state.spec_draft_tokens}

    # return_logprob: the lists so far (tokenizer_manager)
    def logprob_fields(r: Req) -> dict[str, Any] | None:
        if r.logprob_top is None:
            return None
        return lp.meta_fields(r.token_logprobs, prompt_ids[-1], r.logprob_top,
                              bool(body.get("return_text_in_logprobs")))

    if not req.stream:
        async for _ in outputs(req):
            pass
        return json_response(
            {
                "text": req.text(),
                "output_ids": list(req.output_ids),
                "meta_info": rs.meta_info(req, final=True, first=False, sent_ts=None,
                                          logprob_fields=logprob_fields(req), **kw),
            }
        )
    resp = await start_sse(request, state)
    sent_ts: float | None = None
    incremental = bool(state.sa["incremental_streaming_output"])  # else cumulative text and ids per chunk
    sent = 0
    try:
        async for r in outputs(req):
            first = sent_ts is None
            if first and not r.finished:
                sent_ts = time.time()
            meta = rs.meta_info(r, final=r.finished, first=first, sent_ts=sent_ts,
                                logprob_fields=logprob_fields(r), **kw)
            n = len(r.output_ids)
            if incremental:
                text, ids = "".join(r.texts[sent:n]), r.output_ids[sent:n]
            else:
                text, ids = r.text(), list(r.output_ids)
            sent = n
            await resp.write(rs.sse({"text": text, "output_ids": ids, "meta_info": meta}))
        await resp.write(rs.SSE_DONE)
    except (ConnectionError, RuntimeError):
        state.engine.abort(req)
    finally:
        if not req.finished:
            state.engine.abort(req)
    return resp


def make_app(state: SimState) -> web.Application:
    app = web.Application(middlewares=[sglang_middleware], client_max_size=64 * 1024 * 1024)
    app["state"] = state
    r = app.router
    for path in ("/health", "/health_generate"):
        r.add_get(path, health_generate, allow_head=False)
    r.add_get("/model_info", model_info, allow_head=False)
    r.add_get("/get_model_info", get_model_info, allow_head=False)
    r.add_get("/server_info", server_info, allow_head=False)
    r.add_get("/get_server_info", get_server_info, allow_head=False)
    r.add_get("/get_load", get_load, allow_head=False)
    r.add_get("/v1/models", v1_models, allow_head=False)
    r.add_get("/v1/models/{model:.+}", v1_models, allow_head=False)
    r.add_route("GET", "/flush_cache", flush_cache)
    r.add_route("POST", "/flush_cache", flush_cache)
    for method in ("POST", "PUT"):
        r.add_route(method, "/generate", generate)
    r.add_post("/v1/chat/completions", openai_api.chat_completions)
    r.add_post("/v1/completions", openai_api.completions)
    if state.sa["enable_metrics"]:
        r.add_get("/metrics", metrics, allow_head=False)
    return app
