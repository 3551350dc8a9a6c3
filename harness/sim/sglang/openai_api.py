"""``/v1/chat/completions`` and ``/v1/completions`` as ``serving_chat.py`` / ``serving_completions.py`` of
SGLang 0.5.15 answer them (streaming and not), including ``stream_options.continuous_usage_stats``
(cumulative usage on every content chunk) and ``return_meta_info`` (non-streaming chat only)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiohttp import web

from harness.common.versions import version_at_least
from harness.sim.sglang import logprobs as lp
from harness.sim.sglang import model, request_extras
from harness.sim.sglang import responses as rs
from harness.sim.sglang.conditions import top_p_of
from harness.sim.sglang.engine import Req
from harness.sim.sglang.resolve import emulated_version
from harness.sim.sglang.state import SimState, json_response, outputs, read_json, start_stream


def _missing(field: str, body: dict[str, Any]) -> web.Response:
    err = {"type": "missing", "loc": ("body", field), "msg": "Field required", "input": body}
    message = f"1 validation error:\n  {err} [{err}]"
    return json_response(rs.error_body(message, "Bad Request"), 400)


def generate_error(state: SimState, prompt_len: int, max_new: int | None) -> str | None:
    """The ValueErrors of tokenizer_manager.generate_request: _validate_one_request's length checks, then
    SamplingParams.verify."""
    ctx = state.context_len
    if prompt_len >= ctx:
        return f"The input ({prompt_len} tokens) is longer than the model's context length ({ctx} tokens)."
    if max_new is not None and max_new + prompt_len > ctx:
        return (
            f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You "
            f"requested a total of {max_new + prompt_len} tokens: {prompt_len} tokens from the input "
            f"messages and {max_new} tokens for the completion. Please reduce the number of tokens in the "
            "input messages or the completion to fit within the limit."
        )
    if max_new is not None and max_new < 0:
        return f"max_new_tokens must be at least 0, got {max_new}."
    return None


def _usage_flags(body: dict[str, Any], state: SimState) -> tuple[bool, bool]:
    """utils.should_include_usage: (include_usage, continuous_usage_stats)."""
    opts = body.get("stream_options")
    default = bool(state.sa["stream_response_default_include_usage"])
    if opts:
        return bool(opts.get("include_usage")) or default, bool(opts.get("continuous_usage_stats"))
    return default, False


def _new_req(
    state: SimState,
    body: dict[str, Any],
    prompt_ids: list[int],
    max_new: int,
    temperature: float,
    stream: bool,
    extras: dict[str, Any] | None = None,
) -> Req:
    return state.engine.submit(
        Req(
            rid=uuid.uuid4().hex,
            prompt_ids=prompt_ids,
            max_new_tokens=max_new,
            temperature=temperature,
            top_p=top_p_of(body.get("top_p")),
            ignore_eos=bool(body.get("ignore_eos")),
            stream=stream,
            per_position=model.content_profile(state.engine.cfg.by_content, body.get("messages")),
            **(extras or {}),
        )
    )


async def _wait_finished(req: Req) -> None:
    async for _ in outputs(req):
        pass


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state: SimState = request.app["state"]
    body = await read_json(request)
    if isinstance(body, web.Response):
        return body
    if "messages" not in body:
        return _missing("messages", body)
    messages = body["messages"]
    if not messages:
        return json_response(rs.error_body("Messages cannot be empty."), 400)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    ctx_flag = state.sa["context_length"]  # _validate_request checks the flag only, not the derived length
    if max_tokens and ctx_flag and max_tokens > ctx_flag and not state.sa["allow_auto_truncate"]:
        return json_response(
            rs.error_body(
                f"max_completion_tokens is too large: {max_tokens}.This model supports at most "
                f"{ctx_flag} completion tokens."
            ),
            400,
        )
    stream = bool(body.get("stream"))
    if stream and body.get("return_meta_info"):
        return json_response(
            rs.error_body(
                "return_meta_info is not supported with streaming. Please set stream=false when using "
                "return_meta_info=true.",
                "BadRequest",
            ),
            400,
        )
    extra = request_extras.chat(body, messages, int(state.target_config.get("vocab_size", 32000)),
                                state.engine.cfg.numerics)
    prompt_ids = extra.prompt_ids
    if err := generate_error(state, len(prompt_ids), max_tokens):
        return json_response(rs.error_body(err), 400)
    temperature = body.get("temperature")
    req = _new_req(
        state,
        body,
        prompt_ids,
        max_tokens or state.context_len - len(prompt_ids),
        1.0 if temperature is None else float(temperature),
        stream,
        extra.fields,
    )
    name = str(body.get("model") or "default")
    cache_report = bool(state.sa["enable_cache_report"])
    if not stream:
        await _wait_finished(req)
        meta = None
        if body.get("return_meta_info"):
            meta = rs.meta_info(
                req,
                final=True,
                first=False,
                enable_metrics=state.enable_metrics,
                spec_draft_tokens=state.spec_draft_tokens,
                sent_ts=None,
            )
        out = rs.chat_response(req, name, meta=meta, cache_report=cache_report,
                               logprobs=lp.chat_content(req.token_logprobs) if extra.top is not None
                               else None)
        if (details := _spec_details(state, body, req)) is not None:
            out["sglext"] = {"spec_tokens_details": details}
        return json_response(out)
    include_usage, continuous = _usage_flags(body, state)
    resp, stream_outputs = await start_stream(request, state, req)
    try:
        await resp.write(rs.chat_chunk(req.rid, name, role="assistant", content=""))
        sent = lp_sent = 0
        async for r in stream_outputs:
            n = len(r.output_ids)
            delta = "".join(r.texts[sent:n])
            sent = n
            if delta:  # a step whose tokens decode to no text yet sends nothing; the next chunk carries them
                usage = None
                if continuous:
                    usage = rs.usage(len(prompt_ids), n, cached=req.cached_tokens, cache_report=cache_report)
                logprobs = lp.chat_content(req.token_logprobs[lp_sent:n]) if extra.top is not None else None
                lp_sent = n
                await resp.write(rs.chat_chunk(req.rid, name, content=delta, usage_=usage, logprobs=logprobs))
        reason, matched = rs.finish_fields(req)
        await resp.write(rs.chat_chunk(req.rid, name, finish_reason=reason, matched_stop=matched))
        if (details := _spec_details(state, body, req)) is not None:
            await resp.write(rs.sglext_chunk(req.rid, name, "chat.completion.chunk", details))
        if include_usage:
            await resp.write(
                rs.usage_chunk(
                    req.rid,
                    name,
                    "chat.completion.chunk",
                    int(time.time()),
                    rs.usage(
                        len(prompt_ids),
                        len(req.output_ids),
                        cached=req.cached_tokens,
                        cache_report=cache_report,
                    ),
                )
            )
        await resp.write(rs.SSE_DONE)
    except (ConnectionError, RuntimeError):  # client went away: SGLang aborts the request
        state.engine.abort(req)
    finally:
        if not req.finished:
            state.engine.abort(req)
    return resp


def _spec_details(state: SimState, body: dict, req: Any) -> dict | None:
    """`return_spec_tokens_details` exists from 0.5.19 (DRAFTBENCH_SIM_SGLANG_VERSION picks the release the
    stand-in answers as; 0.5.15's request models ignore the field)."""
    if not body.get("return_spec_tokens_details") or not version_at_least(emulated_version(), "0.5.19"):
        return None
    return rs.spec_tokens_details(req, state.spec_draft_tokens)


def _completion_prompt(prompt: Any, vocab: int) -> list[int] | None:
    if isinstance(prompt, str):
        return [1, *model.tokenize(prompt, vocab)]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return list(prompt)
        return _completion_prompt(prompt[0], vocab)
    return None


async def completions(request: web.Request) -> web.StreamResponse:
    state: SimState = request.app["state"]
    body = await read_json(request)
    if isinstance(body, web.Response):
        return body
    if "prompt" not in body:
        return _missing("prompt", body)
    prompt_ids = _completion_prompt(body["prompt"], int(state.target_config.get("vocab_size", 32000)))
    if not prompt_ids:
        return json_response(rs.error_body("Prompt cannot be empty"), 400)
    max_tokens = body.get("max_tokens", 16)
    extra = request_extras.completion(body, prompt_ids)
    if err := generate_error(state, len(prompt_ids), max_tokens):
        return json_response(rs.error_body(err), 400)
    stream = bool(body.get("stream"))
    req = _new_req(
        state,
        body,
        prompt_ids,
        max_tokens if max_tokens is not None else state.context_len - len(prompt_ids),
        float(body.get("temperature", 1.0)),
        stream,
        extra.fields,
    )
    name = str(body.get("model") or "default")
    cache_report = bool(state.sa["enable_cache_report"])
    if not stream:
        await _wait_finished(req)
        out = rs.completion_response(req, name, cache_report=cache_report, logprobs=None if extra.top is None
                                     else lp.completion_logprobs(req.token_logprobs, extra.top))
        if (details := _spec_details(state, body, req)) is not None:
            out["sglext"] = {"spec_tokens_details": details}
        return json_response(out)
    include_usage, continuous = _usage_flags(body, state)
    created = int(time.time())
    resp, stream_outputs = await start_stream(request, state, req)
    try:
        sent = 0
        async for r in stream_outputs:
            n = len(r.output_ids)
            delta = "".join(r.texts[sent:n])
            logprobs = None if extra.top is None else lp.completion_logprobs(req.token_logprobs[sent:n],
                                                                             extra.top)
            sent = n
            reason, matched = rs.finish_fields(r) if r.finished else (None, None)
            usage = rs.usage(len(prompt_ids), n) if continuous else None
            await resp.write(rs.completion_chunk(req.rid, name, created, delta, reason, matched, usage,
                                                 logprobs))
        if (details := _spec_details(state, body, req)) is not None:
            await resp.write(rs.sglext_chunk(req.rid, name, "text_completion", details))
        if include_usage:
            await resp.write(
                rs.usage_chunk(
                    req.rid,
                    name,
                    "text_completion",
                    created,
                    rs.usage(
                        len(prompt_ids),
                        len(req.output_ids),
                        cached=req.cached_tokens,
                        cache_report=cache_report,
                        drop_none=True,
                    ),
                )
            )
        await resp.write(rs.SSE_DONE)
    except (ConnectionError, RuntimeError):
        state.engine.abort(req)
    finally:
        if not req.finished:
            state.engine.abort(req)
    return resp
