"""Break-even accept length from step costs, and the TTFT cost of speculation (docs/metrics.md).

A speculative server commits AL tokens per request per verify step of Tv ms; the baseline one token per
decode step of Td ms at the same running batch. Decode speeds are equal at AL = Tv / Td: that ratio is
the break-even accept length (`step_ms_ratio`; the two columns hold the same number, the second under the
name the tuner uses). Prefill, queueing and the tail do not enter it; their cost shows as
`ttft_cost_ms` (paired mean TTFT difference against the baseline). At concurrency > 1 the batch differs
over a phase: the ratio is taken at the batch size the variant's decode windows ran at most often among
those both servers have step times for (`break_even_batch`).

The forced-acceptance sweep (`draftbench breakeven`) measures the same point end to end: tok/s against
measured accept length, interpolated to the baseline's tok/s (`interpolate_break_even`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.analysis.steps import step_ms_by_batch, windows_by_batch


def step_break_even(windows: pd.DataFrame, variant: str, variant_phases: set[str], baseline: str,
                    baseline_phases: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"break_even_accept_len": None, "break_even_batch": None, "step_ms_ratio": None,
                           "verify_step_ms": None, "decode_step_ms": None}
    if windows is None or windows.empty:
        return out
    sv = step_ms_by_batch(windows, variant, variant_phases)
    sb = step_ms_by_batch(windows, baseline, baseline_phases)
    common = [b for b in sv if b in sb and sb[b] > 0]
    if not common:
        return out
    counts = windows_by_batch(windows, variant, variant_phases)
    batch = max(common, key=lambda b: (counts.get(b, 0), b))
    ratio = sv[batch] / sb[batch]
    out.update(break_even_accept_len=ratio, break_even_batch=batch, step_ms_ratio=ratio,
               verify_step_ms=sv[batch], decode_step_ms=sb[batch])
    return out


def ttft_cost_ms(requests: pd.DataFrame, variant: str, baseline: str, concurrency: int) -> float | None:
    """Mean over prompts both servers answered of (variant TTFT − baseline TTFT), in ms; without any
    common prompt, the difference of the two means."""
    if requests.empty or variant == baseline:
        return None
    r = requests[(requests["concurrency"] == concurrency) & (requests["ok"].astype(str) == "True")]
    a = pd.to_numeric(r[r["variant"] == variant].set_index(["phase", "request_id"])["ttft_ms"], errors="coerce")
    b = pd.to_numeric(r[r["variant"] == baseline].set_index(["phase", "request_id"])["ttft_ms"], errors="coerce")
    a, b = a[~a.index.duplicated(keep="last")].dropna(), b[~b.index.duplicated(keep="last")].dropna()
    common = a.index.intersection(b.index)
    if len(common):
        return float((a.loc[common] - b.loc[common]).mean())
    if len(a) and len(b):
        return float(a.mean() - b.mean())
    return None


def interpolate_break_even(points: Sequence[tuple[float, float]], baseline_tok_s: float) -> float | None:
    """The accept length at which tok/s equals the baseline's, by linear interpolation over
    (measured accept length, tok/s) points sorted by accept length; linear extrapolation from the nearest
    two points when the baseline lies outside them. None with fewer than two distinct points."""
    pts = sorted({(float(a), float(t)) for a, t in points if a == a and t == t})
    if len(pts) < 2 or len({a for a, _ in pts}) < 2:
        return None
    for (a0, t0), (a1, t1) in zip(pts, pts[1:], strict=False):
        if min(t0, t1) <= baseline_tok_s <= max(t0, t1) and t1 != t0:
            return a0 + (baseline_tok_s - t0) * (a1 - a0) / (t1 - t0)
    (a0, t0), (a1, t1) = (pts[0], pts[1]) if baseline_tok_s < pts[0][1] else (pts[-2], pts[-1])
    if t1 == t0 or a1 == a0:
        return None
    return a0 + (baseline_tok_s - t0) * (a1 - a0) / (t1 - t0)
