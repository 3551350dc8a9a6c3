"""The 400 answers of the vLLM stand-in's completion endpoints, in the bodies vLLM gives them: a request
body that is not JSON, and stream_options on a request that does not stream (vLLM's protocol
validate_stream_options, raised as a VLLMValidationError by 0.26.0; the body the H200's vLLM 0.26.0 gave,
tests/fixtures/vllm-0.26.0/smoke/probe.json)."""

from __future__ import annotations

from typing import Any

from aiohttp import web


def invalid_json() -> web.Response:
    return web.json_response({"error": {"message": "invalid JSON", "type": "BadRequestError", "code": 400}},
                             status=400)


def stream_options_without_stream(body: dict[str, Any]) -> web.Response | None:
    """The refusal when `body` carries stream_options without stream true, else None (served)."""
    if body.get("stream_options") is None or body.get("stream"):
        return None
    why = "Stream options can only be defined when `stream=True`."
    msg = f"Value error, {why} (parameter=stream_options)"
    detail = {"type": "value_error", "loc": ("body",), "msg": msg, "input": body}
    text = repr(detail)[:-1] + f", 'ctx': {{'error': VLLMValidationError({why!r})}}}}"
    return web.json_response({"error": {"message": f"1 validation error:\n  {text}", "type": "Bad Request",
                                        "param": "stream_options", "code": 400}}, status=400)
