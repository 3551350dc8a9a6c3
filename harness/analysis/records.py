"""Per-request records: the source of truth of a run, appended to requests.csv as requests finish
(harness.analysis.store writes and reads the file).

The metric math for one request lives here (pure); tables are derived in summary.py.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from harness.engines.base import REQUEST_SPEC_KEYS

if TYPE_CHECKING:
    from harness.client.collect import StreamResult

# an engine's `request_spec`: a server's per-request stats (and the output tokens) -> REQUEST_SPEC_KEYS
NormaliseSpec = Callable[[dict[str, Any] | None, int | None], dict[str, Any]]


@dataclass(slots=True)
class RequestRecord:
    run_id: str
    variant: str
    phase: str
    suite: str
    prompt_id: str
    category: str
    concurrency: int
    repeat: int
    request_id: str
    ok: bool
    error: str
    http_status: int | None
    attempts: int  # 1 + retries; only the final attempt is recorded, so tokens are never double-counted
    wall_send: float  # time.time() when sent: correlates with server log timestamps
    t_send: float  # time.perf_counter() when sent
    t_first: float | None
    t_end: float
    ttft_ms: float | None
    e2e_ms: float
    output_tokens: int | None  # from the server's usage, never by counting chunks
    prompt_tokens: int | None
    chunks: int  # content chunks
    first_chunk_tokens: int | None
    decode_tok_s: float | None  # tokens after the first chunk / time after the first chunk
    itl_ms_mean: float | None  # per token: each chunk gap divided by the tokens of that chunk
    itl_ms_p50: float | None
    tokens_per_chunk: float | None
    chunk_tokens_exact: bool
    finish_reason: str
    spec_verify_ct: int | None  # per-request server-reported speculative stats (None when not offered)
    spec_accept_len: float | None
    spec_correct_drafts: int | None
    spec_proposed_drafts: int | None
    spec_histogram: str | None  # per verify step: steps with 0, 1, 2, ... correct drafts (space-separated)
    spec_source: str  # the timed response's field: "sglext" / "metrics"; "probe" (requests_with_spec); ""
    text_sha: str  # hash of the output text: compares baseline vs speculative outputs under greedy decoding
    chunk_offsets_ms: str  # space-separated arrival offsets of content chunks from t_send
    chunk_tokens: str  # space-separated tokens per content chunk
    turn: int = 1  # live multi-turn: 1 for the first user turn (harness.bench.conversation)
    conversation_id: str = ""  # suite/prompt id shared by every turn of one conversation
    request_rate: float | None = None  # open-loop phases (concurrency 0): the arrival rate, req/s
    ttft_answer_ms: float | None = None  # reasoning models: to the first answer token (ttft_ms: first of
    #                                      any kind)
    reasoning_tokens: int | None = None  # of output_tokens, the reasoning ones (where the server counts them)
    reasoning_chars: int = 0  # reasoning text received (hashed with the answer in text_sha)
    replay_pass: int = 1  # which pass over the suite within its phase (phase sizing cycles a short suite)


RECORD_COLUMNS = [f.name for f in fields(RequestRecord)]


def token_itls_ms(times: list[float], tokens: list[int]) -> list[float]:
    """Per-token inter-token latencies: a chunk of n tokens after a gap g contributes n samples of g/n.

    With speculation one chunk carries several tokens; per-chunk gaps would overstate ITL by the
    accept length (the peers' mistake, SGLang #12064, vLLM #27485).
    """
    out: list[float] = []
    last = 0  # the previous chunk that carried tokens: a zero-token chunk does not restart the clock
    for i in range(1, len(times)):
        n = tokens[i] if i < len(tokens) else 1
        if n <= 0:
            continue
        gap = (times[i] - times[last]) * 1000.0 / n
        out.extend([gap] * n)
        last = i
    return out


def output_sha(text: str | None, reasoning: str | None = "") -> str:
    """Hash of what the model said: the reasoning (when there is any) and the answer, so that under greedy
    decoding a variant that thinks differently does not count as matching. Without reasoning: the answer's
    hash."""
    body = (text or "") if not reasoning else f"{reasoning}\x1e{text or ''}"
    return hashlib.sha1(body.encode("utf-8", "replace")).hexdigest()[:16]


def make_record(*, run_id: str, variant: str, phase: str, suite: str, prompt_id: str, category: str,
                concurrency: int, repeat: int, request_id: str, result: StreamResult, spec_source: str = "",
                spec: dict | None = None, normalise_spec: NormaliseSpec | None = None,
                request_rate: float | None = None) -> RequestRecord:
    """Build a record from a client StreamResult (see harness.client.stream). `normalise_spec` is the
    engine's `request_spec` (raw per-request stats -> REQUEST_SPEC_KEYS); without it no stats are kept."""
    r = result
    times: list[float] = list(r.chunk_times)
    toks: list[int] = list(r.chunk_tokens)
    ttft = (r.t_first - r.t_send) * 1000.0 if r.t_first is not None else None
    first_tokens = toks[0] if toks else None
    decode = None
    if r.ok and r.output_tokens and len(times) >= 2 and first_tokens is not None:
        span = times[-1] - times[0]
        if span > 0:
            decode = (r.output_tokens - first_tokens) / span
    itls = token_itls_ms(times, toks)
    raw = spec if spec is not None else r.spec
    spec_vals = normalise_spec(raw, r.output_tokens) if normalise_spec else dict.fromkeys(REQUEST_SPEC_KEYS)
    if spec is None and r.spec:
        spec_source = spec_source or r.spec_field or "stream"
    return RequestRecord(
        run_id=run_id, variant=variant, phase=phase, suite=suite, prompt_id=prompt_id,
        category=category, concurrency=concurrency, repeat=repeat, request_id=request_id,
        ok=bool(r.ok), error=r.error or "", http_status=r.http_status,
        attempts=r.attempts, wall_send=r.wall_send,
        t_send=r.t_send, t_first=r.t_first, t_end=r.t_end, ttft_ms=ttft,
        e2e_ms=(r.t_end - r.t_send) * 1000.0, output_tokens=r.output_tokens,
        prompt_tokens=r.prompt_tokens, chunks=len(times), first_chunk_tokens=first_tokens,
        decode_tok_s=decode, itl_ms_mean=statistics.fmean(itls) if itls else None,
        itl_ms_p50=statistics.median(itls) if itls else None,
        tokens_per_chunk=(sum(toks) / len(toks)) if toks else None,
        chunk_tokens_exact=bool(r.chunk_tokens_exact), finish_reason=r.finish_reason or "",
        spec_source=spec_source if spec_vals["spec_verify_ct"] else "",
        text_sha=output_sha(r.text, r.reasoning),
        chunk_offsets_ms=" ".join(f"{(t - r.t_send) * 1000.0:.3f}" for t in times),
        chunk_tokens=" ".join(str(n) for n in toks),
        turn=r.turn, conversation_id=r.conversation_id, request_rate=request_rate,
        ttft_answer_ms=(r.t_first_answer - r.t_send) * 1000.0 if r.t_first_answer else None,
        reasoning_tokens=r.reasoning_tokens, reasoning_chars=len(r.reasoning), replay_pass=r.replay_pass,
        **spec_vals,
    )
