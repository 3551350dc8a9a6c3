"""Acceptance where it will be served: accept length per context-length bucket (prompt tokens plus the tokens
generated so far) and per output-position bucket (tokens generated so far), per category, from each request's
step data (summary_by_context.csv; the tables and the PNG: by_context_report.py).

Each request's verify steps are placed where they ran:
  per step     where the stream carried each verify step's tokens in a chunk of its own (exact per-chunk
               usage, SGLang's stream_interval 1): a content chunk after the first is a step's committed
               tokens, at the context where the step started. Where chunks are fewer than the server's
               verify count (a step whose text decoded to nothing rides with the next chunk), a chunk longer
               than the deepest accepted path (num_steps + 1) counts as the steps it must have taken, and the
               request's verify count is spread over its chunks in proportion, so every request's total stays
               the server's.
  per request  otherwise (no exact chunk tokens, or a server that sends several steps per chunk): the
               request's verify steps spread evenly over its decode tokens, in proportion to the tokens in
               each bucket.
A bucket's accept length is Σ tokens / Σ verify steps over what falls in it: the same formula as the
summary's accept_len_requests (the first token of a request comes from prefill, not from a verify step), so
the buckets of a row pool back to that row's number.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.analysis.acceptance import with_probe
from harness.analysis.columns import is_true
from harness.analysis.summary_rows import sampling_of
from harness.inputs.run_settings import DEFAULT_CONTEXT_BUCKETS

POSITION_EDGES = (64, 128, 256, 512, 1024, 2048, 4096)
AXES = ("context", "position")
CONTEXT_COLUMNS = ["variant", "sampling", "concurrency", "category", "axis", "bucket", "lo", "hi", "requests",
                   "verify_steps", "tokens", "accept_len", "context_mean", "per_step_share"]
ALL = "all"


def bucket_label(lo: float, hi: float) -> str:
    def k(n: float) -> str:
        return f"{n / 1024:g}k" if n >= 1024 and n % 1024 == 0 else f"{n:g}"
    return f"{k(lo)}+" if math.isinf(hi) else f"{k(lo)}-{k(hi)}"


@dataclass(frozen=True)
class Buckets:
    """Buckets (lo, hi] by upper edges, the last one open."""

    edges: tuple[int, ...]

    @property
    def bounds(self) -> list[tuple[float, float]]:
        lows = (0, *self.edges)
        return [(float(lo), float(hi)) for lo, hi in zip(lows, (*self.edges, math.inf), strict=True)]

    @property
    def labels(self) -> list[str]:
        return [bucket_label(lo, hi) for lo, hi in self.bounds]

    def index(self, value: float) -> int:
        for i, edge in enumerate(self.edges):
            if value <= edge:
                return i
        return len(self.edges)

    def split(self, first: float, count: int) -> list[tuple[int, int]]:
        """(bucket, n) of the `count` integer positions first, first + 1, ... by bucket."""
        out: list[tuple[int, int]] = []
        pos, left = first, count
        while left > 0:
            i = self.index(pos)
            hi = self.bounds[i][1]
            n = left if math.isinf(hi) else max(1, min(left, int(hi - pos) + 1))
            out.append((i, n))
            pos, left = pos + n, left - n
        return out


@dataclass(frozen=True)
class Segment:
    """Verify steps of one request: `steps` (a fraction where spread) committing `tokens` from output
    position `start` (tokens generated before them, the prefill's first included)."""

    start: int
    tokens: int
    steps: float
    per_step: bool


def _ints(text: object) -> list[int]:
    if not isinstance(text, str) or not text.strip():
        return []
    try:
        return [int(float(x)) for x in text.split()]
    except ValueError:
        return []


def segments(completion: int, verify: float, chunk_tokens: object, exact: bool, output_tokens: float | None,
             max_tokens_per_step: int | None = None) -> list[Segment]:
    """A request's verify steps by output position (module doc: per step, else per request)."""
    decode = int(completion) - 1
    if decode <= 0 or not verify or verify <= 0:
        return []
    chunks = _ints(chunk_tokens)
    same_output = (output_tokens is not None and not pd.isna(output_tokens)
                   and int(output_tokens) == completion)
    if exact and chunks and same_output:
        toks = ([chunks[0] - 1] if chunks[0] > 1 else []) + [c for c in chunks[1:] if c > 0]
        if toks and sum(toks) <= decode and len(toks) <= verify:
            toks[-1] += decode - sum(toks)  # a stop token sent in no chunk came with the last step
            cap = max_tokens_per_step or 0
            est = [max(1, math.ceil(t / cap)) if cap > 0 else 1 for t in toks]
            scale = verify / sum(est)
            out, pos = [], 1
            for t, e in zip(toks, est, strict=True):
                out.append(Segment(pos, t, e * scale, True))
                pos += t
            return out
    return [Segment(1, decode, float(verify), False)]


@dataclass
class _Cell:
    tokens: float = 0.0
    steps: float = 0.0
    exact_steps: float = 0.0
    context_sum: float = 0.0  # Σ steps x context at the step
    requests: set[tuple[str, str]] = field(default_factory=set)


def _spread(seg: Segment, base: int, buckets: Buckets) -> list[tuple[int, float, float, float]]:
    """(bucket, tokens, steps, Σ steps x position) of a segment on an axis whose position is base + output
    position: a step sits where it started; a request-level segment is spread over its tokens."""
    if seg.per_step:
        pos = base + seg.start
        return [(buckets.index(pos), float(seg.tokens), seg.steps, seg.steps * pos)]
    out = []
    first = base + seg.start
    for i, n in buckets.split(first, seg.tokens):
        share = seg.steps * n / seg.tokens
        mid = first + (n - 1) / 2.0
        first += n
        out.append((i, float(n), share, share * mid))
    return out


def _max_step_tokens(meta: dict[str, Any]) -> int | None:
    steps = meta.get("num_steps")
    return int(steps) + 1 if isinstance(steps, int | float) and not isinstance(steps, bool) and steps > 0 \
        else None


def by_context(requests: pd.DataFrame, variants: dict[str, dict[str, Any]], probe: pd.DataFrame | None = None,
               context_edges: list[int] | tuple[int, ...] | None = None,
               position_edges: tuple[int, ...] = POSITION_EDGES) -> pd.DataFrame:
    """summary_by_context.csv: per (variant, concurrency, category incl. "all", axis, bucket) the verify
    steps, the tokens they committed, their accept length and the steps' mean context; speculative rows
    only."""
    if requests.empty or "spec_verify_ct" not in requests:
        return pd.DataFrame(columns=CONTEXT_COLUMNS)
    ok = requests[requests["ok"].eq(True)]
    if ok.empty:
        return pd.DataFrame(columns=CONTEXT_COLUMNS)
    ok = with_probe(ok, probe)
    axes = {"context": Buckets(tuple(context_edges or DEFAULT_CONTEXT_BUCKETS)),
            "position": Buckets(tuple(position_edges))}
    cells: dict[tuple[str, int, str, str, int], _Cell] = defaultdict(_Cell)
    for rec in ok.to_dict("records"):
        verify, completion, prompt = rec.get("_verify"), rec.get("_completion"), rec.get("prompt_tokens")
        if pd.isna(verify) or pd.isna(completion) or prompt is None or pd.isna(prompt) or verify <= 0:
            continue
        meta = variants.get(str(rec["variant"]), {})
        segs = segments(int(completion), float(verify), rec.get("chunk_tokens"),
                        is_true(rec.get("chunk_tokens_exact")), rec.get("output_tokens"),
                        _max_step_tokens(meta))
        key = (str(rec["variant"]), int(rec["concurrency"]))
        who = (str(rec.get("phase")), str(rec.get("request_id")))
        for axis, buckets in axes.items():
            base = int(prompt) if axis == "context" else 0
            for seg in segs:
                for i, tokens, steps, weighted in _spread(seg, base, buckets):
                    for cat in (ALL, str(rec["category"])):
                        c = cells[(*key, cat, axis, i)]
                        c.tokens += tokens
                        c.steps += steps
                        c.exact_steps += steps if seg.per_step else 0.0
                        c.context_sum += weighted
                        c.requests.add(who)
    rows = []
    def order(kv: tuple[tuple[str, int, str, str, int], _Cell]) -> tuple:
        return kv[0][0], kv[0][1], kv[0][2] != ALL, kv[0][2:]

    for (variant, conc, cat, axis, i), c in sorted(cells.items(), key=order):
        lo, hi = axes[axis].bounds[i]
        rows.append({"variant": variant, "sampling": sampling_of(variants.get(variant, {})),
                     "concurrency": conc, "category": cat, "axis": axis, "bucket": axes[axis].labels[i],
                     "lo": lo, "hi": hi, "requests": len(c.requests), "verify_steps": round(c.steps, 3),
                     "tokens": round(c.tokens, 3),
                     "accept_len": c.tokens / c.steps if c.steps > 0 else None,
                     "context_mean": c.context_sum / c.steps if c.steps > 0 else None,
                     "per_step_share": round(c.exact_steps / c.steps, 4) if c.steps > 0 else None})
    return pd.DataFrame(rows, columns=CONTEXT_COLUMNS)


def uncovered(table: pd.DataFrame, edges: list[int] | tuple[int, ...], min_steps: float = 1.0) -> list[str]:
    """The deployment's context buckets (up to the last edge of run.context_buckets) that no speculative
    request reached with at least `min_steps` verify steps."""
    buckets = Buckets(tuple(edges))
    ctx = table[(table["axis"] == "context") & (table["category"] == ALL)] if not table.empty else table
    got = set(ctx[pd.to_numeric(ctx["verify_steps"], errors="coerce") >= min_steps]["bucket"]) \
        if not ctx.empty else set()
    return [label for label in buckets.labels[:-1] if label not in got]
