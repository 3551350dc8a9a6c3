"""JSON bodies and SSE frames of SGLang 0.5.15, built from a request's state (pure, no I/O).

Key sets and orders follow the captures: ``meta_info`` as ``tokenizer_manager.py`` assembles it (spec keys
and timestamps only when the request finishes), chat chunks as ``entrypoints/openai/sse_utils.py`` encodes
them (msgspec, ``reasoning_content`` always present), completions chunks and the usage chunks as the
pydantic models serialise (completions' final usage chunk with ``exclude_none``).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from harness.common.versions import version_at_least
from harness.sim.sglang.engine import Req
from harness.sim.sglang.resolve import emulated_version

SSE_DONE = b"data: [DONE]\n\n"


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def error_body(message: str, err_type: str = "BadRequestError", code: int = 400) -> dict[str, Any]:
    """``ErrorResponse.model_dump()`` as OpenAI-serving errors return it."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


def cached_details(req: Req) -> dict[str, int] | None:
    return {"device": req.cached_tokens, "host": 0} if req.cached_tokens else None


def meta_info(
    req: Req,
    *,
    final: bool,
    first: bool,
    enable_metrics: bool,
    spec_draft_tokens: int | None,
    sent_ts: float | None,
    logprob_fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``meta_info`` of one output; ``sent_ts`` is when the first chunk left (streaming) or None;
    ``logprob_fields``: return_logprob's keys (harness.sim.sglang.logprobs.meta_fields)."""
    m: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": req.finish if final else None,
        "prompt_tokens": len(req.prompt_ids),
        "weight_version": "default",
        "num_retractions": 0,
    }
    if enable_metrics:
        m["queue_time"] = round(max(0.0, req.t_dispatch - req.t_received), 6)
    m.update(logprob_fields or {})
    m.update(
        reasoning_tokens=0,
        completion_tokens=len(req.output_ids),
        cached_tokens=req.cached_tokens,
        cached_tokens_details=cached_details(req),
        dp_rank=None,
    )
    if first and not final and sent_ts is not None:
        m["response_sent_to_client_ts"] = sent_ts
    if not final:
        return m
    m["e2e_latency"] = req.t_finished - req.t_received
    # 0.5.12-0.5.20 also send the old names ("backward-compat aliases"); 0.5.21 dropped them (REFERENCE §4.1)
    aliases = not version_at_least(emulated_version(), "0.5.21")
    if spec_draft_tokens is not None and req.verify_ct > 0:
        proposed = req.verify_ct * (spec_draft_tokens - 1)
        if proposed > 0:
            m.update(
                spec_accept_rate=req.correct_drafts / proposed,
                spec_accept_length=len(req.output_ids) / req.verify_ct,
                spec_num_correct_drafts=req.correct_drafts,
                spec_num_proposed_drafts=proposed,
                spec_verify_ct=req.verify_ct,
            )
            if aliases:
                m.update(spec_accepted_drafts=req.correct_drafts, spec_proposed_drafts=proposed)
        if req.histogram:
            m["spec_correct_drafts_histogram"] = list(req.histogram)
            if aliases:
                m["spec_accept_histogram"] = list(req.histogram)
    if enable_metrics:
        finished_ts = req.wall_received + (req.t_finished - req.t_received)
        m["request_received_ts"] = req.wall_received
        m["api_server_dispatch_finish_ts"] = req.wall_received + 0.0005
        if sent_ts is not None:
            m["response_sent_to_client_ts"] = sent_ts
        m["request_finished_ts"] = finished_ts
        decode_s = req.t_finished - req.t_first
        m["decode_throughput"] = len(req.output_ids) / decode_s if decode_s > 0 else 0.0
    if sent_ts is None:  # nothing was sent before this final output: stamped now, last
        m["response_sent_to_client_ts"] = time.time()
    return m


def spec_tokens_details(req: Req, spec_draft_tokens: int | None) -> dict[str, Any] | None:
    """``SpecTokensDetails`` of SGLang 0.5.19-0.5.23 (entrypoints/openai/utils.py
    ``spec_tokens_details_from_meta_info``): the spec keys of the final ``meta_info``, every field present,
    those it lacks (the DSpark-only cap fields for EAGLE) at their defaults 0.0 and []; None when the
    ``meta_info`` has no spec key (no verify step)."""
    if spec_draft_tokens is None or req.verify_ct <= 0:
        return None
    proposed = req.verify_ct * (spec_draft_tokens - 1)
    if proposed <= 0:  # meta_info then holds only the histogram
        return {"spec_accept_rate": 0.0, "spec_accept_length": 0.0, "spec_cap_length": 0.0,
                "spec_block_accept_length": 0.0, "spec_num_correct_drafts": 0, "spec_num_proposed_drafts": 0,
                "spec_verify_ct": 0, "spec_correct_drafts_histogram": list(req.histogram),
                "spec_cap_lens_histogram": []} if req.histogram else None
    return {
        "spec_accept_rate": req.correct_drafts / proposed,
        "spec_accept_length": len(req.output_ids) / req.verify_ct,
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": req.correct_drafts,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": req.verify_ct,
        "spec_correct_drafts_histogram": list(req.histogram),
        "spec_cap_lens_histogram": [],
    }


def sglext_chunk(rid: str, model: str, obj: str, details: dict[str, Any]) -> bytes:
    """The extra streaming chunk of 0.5.19+ (serving_chat.py / serving_completions.py): the stream response
    model's ``model_dump_json()``, so ``usage`` is there as null; no choices; ``sglext`` without its None
    fields."""
    return sse({"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": [],
                "usage": None, "sglext": {"spec_tokens_details": details}})


def usage(
    prompt: int, completion: int, *, cached: int = 0, cache_report: bool = False, drop_none: bool = False
) -> dict[str, Any]:
    """``UsageInfo`` (``prompt_tokens_details`` only with --enable-cache-report and a cache hit)."""
    u: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached} if cache_report and cached else None,
        "reasoning_tokens": 0,
    }
    if drop_none and u["prompt_tokens_details"] is None:
        del u["prompt_tokens_details"]
    return u


def chat_chunk(
    rid: str,
    model: str,
    *,
    role: str | None = None,
    content: str | None = None,
    finish_reason: str | None = None,
    matched_stop: Any = None,
    usage_: dict[str, Any] | None = None,
    logprobs: dict[str, Any] | None = None,
) -> bytes:
    delta: dict[str, Any] = {"reasoning_content": None}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
                "matched_stop": matched_stop,
            }
        ],
    }
    if usage_ is not None:
        chunk["usage"] = usage_
    return sse(chunk)


def usage_chunk(rid: str, model: str, obj: str, created: int, usage_: dict[str, Any]) -> bytes:
    return sse({"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": usage_})


def completion_chunk(
    rid: str,
    model: str,
    created: int,
    text: str,
    finish_reason: str | None,
    matched_stop: Any,
    usage_: dict[str, Any] | None,
    logprobs: dict[str, Any] | None = None,
) -> bytes:
    return sse(
        {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": logprobs,
                    "finish_reason": finish_reason,
                    "matched_stop": matched_stop,
                }
            ],
            "usage": usage_,
        }
    )


def finish_fields(req: Req) -> tuple[str | None, Any]:
    f = req.finish
    if not f:
        return None, None
    return f["type"], f.get("matched")


def chat_response(req: Req, model: str, *, meta: dict[str, Any] | None, cache_report: bool,
                  logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    reason, matched = finish_fields(req)
    choice: dict[str, Any] = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": req.text(),
            "reasoning_content": None,
            "tool_calls": None,
        },
        "logprobs": logprobs,
        "finish_reason": reason,
        "matched_stop": matched,
    }
    if meta is not None:
        choice["meta_info"] = meta
    return {
        "id": req.rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(
            len(req.prompt_ids), len(req.output_ids), cached=req.cached_tokens, cache_report=cache_report
        ),
        "metadata": {"weight_version": "default"},
    }


def completion_response(req: Req, model: str, *, cache_report: bool,
                        logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    reason, matched = finish_fields(req)
    return {
        "id": req.rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": req.text(),
                "logprobs": logprobs,
                "finish_reason": reason,
                "matched_stop": matched,
            }
        ],
        "usage": usage(
            len(req.prompt_ids), len(req.output_ids), cached=req.cached_tokens, cache_report=cache_report
        ),
        "metadata": {"weight_version": "default"},
    }
