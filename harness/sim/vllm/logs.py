"""vLLM's log line formats (vLLM 0.33.0: logger prefix, uvicorn lines, v1/metrics/loggers.py and
v1/spec_decode/metrics.py). Pure functions: the server prints what these return."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence


def prefix(level: str = "INFO", where: str = "api_server.py:1") -> str:
    return f"(APIServer pid={os.getpid()}) {level} {time.strftime('%m-%d %H:%M:%S')} [{where}] "


def uvicorn(text: str) -> str:
    return f"INFO:     {text}"


def access(peer: str, method: str, path: str, status: int) -> str:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}.get(status, "")
    return uvicorn(f'{peer} - "{method} {path} HTTP/1.1" {status} {reason}'.rstrip())


def engine_stats(prompt_tps: float, gen_tps: float, running: int, waiting: int, kv_usage: float) -> str:
    return prefix(where="loggers.py:259") + (
        f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: "
        f"{gen_tps:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: "
        f"{kv_usage * 100:.1f}%, Prefix cache hit rate: 0.0%")


def spec_decoding(drafts: int, draft_tokens: int, accepted: int, per_pos: Sequence[int],
                  elapsed: float) -> str:
    """SpecDecodingLogging.log: the interval's counts; mean = 1 + accepted / drafts."""
    rates = ", ".join(f"{p / drafts:.3f}" for p in per_pos)
    rate = accepted / draft_tokens * 100 if draft_tokens else float("nan")
    return prefix(where="metrics.py:120") + (
        f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, Accepted throughput: "
        f"{accepted / elapsed:.2f} tokens/s, Drafted throughput: {draft_tokens / elapsed:.2f} tokens/s, "
        f"Accepted: {accepted} tokens, Drafted: {draft_tokens} tokens, Per-position acceptance rate: "
        f"{rates}, Avg Draft acceptance rate: {rate:.1f}%")
