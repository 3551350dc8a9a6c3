"""Where speculation stops paying: each config's predicted speedup against concurrency and the concurrency
where it crosses 1.00x. Pure functions of measured step costs (the schedule: harness.analysis.schedule).

A config's speedup at batch b is `AL x base_step_ms(b) / step_ms(b)` (harness.analysis.tune_model): the accept
length from the wide run's histograms, both step costs from decode windows at that running batch. Its interval
adds the three relative errors in quadrature on the log scale: each step cost's (the spread of its clean
windows' log step time over their count) and the accept length's (the spread of the per-step accepted tokens
over the verify steps); it is the prediction's sampling error, never a verdict: only a paired run decides.

Between two measured batches a step cost is linear in the batch (it is, away from a GPU's tile waves:
per-token compute past the memory-bound floor), so the crossing inside a bracket [below, above] is where
`AL x base(x) = step(x)` on those two lines, in closed form. The search (harness.studies.tune_crossover)
narrows the bracket by bisection, measuring the middle batch, and verifies one level on each side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Z95 = 1.959964  # the prediction interval's two-sided 95 % normal quantile
RESOLUTION = 0.25  # bisection stops when above / below <= 1 + this (or the levels are adjacent)


@dataclass(frozen=True)
class Step:
    """A step cost at one batch: its median ms and the standard error of its mean log (None: one window);
    eager: most of its windows ran without CUDA graphs (the server's `cuda graph: False`)."""

    ms: float
    se_log: float | None = None
    eager: bool = False


@dataclass(frozen=True)
class Point:
    batch: int
    step_ms: float
    base_step_ms: float
    speedup: float
    low: float | None
    high: float | None
    source: str  # "measured" (both step costs at this batch) or "interpolated" (between measured batches)


@dataclass(frozen=True)
class Crossing:
    status: str  # "crosses" | "pays-to-max" (pays at every batch tried) | "never-pays" | "unknown"
    below: int | None = None  # the largest batch tried where it pays, before it stops
    above: int | None = None  # the smallest batch tried where it no longer pays
    at: float | None = None  # where the step-cost lines cross (AL x base = step), between below and above
    low: float | None = None  # the range of the crossing: where the interval's bounds cross 1.00x
    high: float | None = None
    # a config that does not pay at the smallest batches tried but does further up (a fixed per-step cost
    # that a larger batch spreads out): the first batch where it pays, and the batches below it where not
    pays_from: int | None = None
    unpaid: tuple[int, int] | None = None  # (the smallest batch tried, the last one below pays_from)

    def words(self) -> str:
        late = ""
        if self.pays_from is not None and self.unpaid is not None:
            lo, hi = self.unpaid
            late = f"does not pay at c{lo}{f'-c{hi}' if hi != lo else ''}, pays from c{self.pays_from}; "
        if self.status == "crosses" and self.at is not None:
            known = self.low is not None and self.high is not None
            rng = f", range c{self.low:.1f}-c{self.high:.1f}" if known else ""
            return f"{late}stops paying at c{self.at:.1f} (pays at c{self.below}, not at c{self.above}{rng})"
        if self.status == "pays-to-max":
            return f"{late}pays up to the largest batch tried (c{self.below})"
        if self.status == "never-pays":
            return f"does not pay even at c{self.above}"
        return "nothing to tell from"


def accept_len_se(h: Sequence[int], depth: int) -> float | None:
    """Standard error of the chain prediction AL(depth) over the verify steps of histogram h."""
    n = sum(h)
    if n < 2:
        return None
    vals = [(min(j, depth) + 1, c) for j, c in enumerate(h)]
    mean = sum(v * c for v, c in vals) / n
    var = sum(c * (v - mean) ** 2 for v, c in vals) / (n - 1)
    return math.sqrt(var / n)


def step_at(points: Mapping[int, Step], batch: float) -> Step | None:
    """The step cost at `batch`: measured there, else linear between the nearest measured batches on either
    side (with the larger of their errors); None outside the measured range (never extrapolated)."""
    if not points:
        return None
    if batch in points:
        return points[int(batch)]
    lo = [b for b in points if b < batch]
    hi = [b for b in points if b > batch]
    if not lo or not hi:
        return None
    b0, b1 = max(lo), min(hi)
    s0, s1 = points[b0], points[b1]
    ms = s0.ms + (s1.ms - s0.ms) * (batch - b0) / (b1 - b0)
    errs = [e for e in (s0.se_log, s1.se_log) if e is not None]
    return Step(ms, max(errs) if errs else None)


def point(al: float, al_se: float | None, step: Step, base: Step, batch: int, source: str) -> Point:
    spd = al * base.ms / step.ms
    parts = [step.se_log, base.se_log, (al_se / al) if al_se is not None and al > 0 else None]
    if any(p is None for p in parts):
        return Point(batch, step.ms, base.ms, spd, None, None, source)
    half = Z95 * math.sqrt(sum(p * p for p in parts if p is not None))
    return Point(batch, step.ms, base.ms, spd, spd * math.exp(-half), spd * math.exp(half), source)


def curve(al: float, al_se: float | None, steps: Mapping[int, Step], base: Mapping[int, Step],
          levels: Sequence[int]) -> list[Point]:
    """The config's predicted speedup at each of `levels` it can be told at: both step costs measured there,
    or interpolated between batches measured on either side."""
    out = []
    for b in sorted(set(levels)):
        s, bs = step_at(steps, b), step_at(base, b)
        if s is None or bs is None:
            continue
        out.append(point(al, al_se, s, bs, b, "measured" if b in steps and b in base else "interpolated"))
    return out


def _solve(al: float, b0: int, b1: int, s0: float, s1: float, v0: float, v1: float) -> float | None:
    """x in [b0, b1] where al x base(x) = step(x), both lines through their two measured batches."""
    f0, f1 = al * s0 - v0, al * s1 - v1  # > 0 where it pays
    if f0 == f1:
        return None
    t = f0 / (f0 - f1)
    return b0 + min(1.0, max(0.0, t)) * (b1 - b0)


def _first_drop(pts: list[Point], value: str) -> tuple[Point, Point] | None:
    for p0, p1 in zip(pts, pts[1:], strict=False):
        v0, v1 = getattr(p0, value), getattr(p1, value)
        if v0 is not None and v1 is not None and v0 > 1.0 >= v1:
            return p0, p1
    return None


def _cross_of(al: float, pts: list[Point], value: str) -> float | None:
    """Where `value` (speedup, low or high) first crosses 1.00x going up in batch; the speedup's own crossing
    comes from the two step-cost lines, the bounds' by linear interpolation of the bound."""
    pair = _first_drop(pts, value)
    if pair is None:
        return None
    p0, p1 = pair
    if value == "speedup":
        return _solve(al, p0.batch, p1.batch, p0.base_step_ms, p1.base_step_ms, p0.step_ms, p1.step_ms)
    v0, v1 = getattr(p0, value), getattr(p1, value)
    return p0.batch + (v0 - 1.0) / (v0 - v1) * (p1.batch - p0.batch)


def crossing(al: float, pts: list[Point]) -> Crossing:
    """The first batch where the predicted speedup stops paying (<= 1.00x) after a batch where it paid.
    Where it does not pay at the smallest batches but does further up, the search starts where it first
    pays (`pays_from`): "does not pay even at c1" would hide that it pays at c2-c64 (seen on the H200)."""
    if not pts:
        return Crossing("unknown")
    first = next((i for i, p in enumerate(pts) if p.speedup > 1.0), None)
    if first is None:
        return Crossing("never-pays", above=pts[0].batch)
    late = {"pays_from": pts[first].batch, "unpaid": (pts[0].batch, pts[first - 1].batch)} if first else {}
    pts = pts[first:]
    pair = _first_drop(pts, "speedup")
    if pair is None:
        return Crossing("pays-to-max", below=pts[-1].batch, **late)
    p0, p1 = pair
    at = _cross_of(al, pts, "speedup")
    lo, hi = _cross_of(al, pts, "low"), _cross_of(al, pts, "high")
    if lo is None and pts[0].low is not None and pts[0].low <= 1.0:
        lo = float(pts[0].batch)  # the interval's low bound never pays: the range starts at the first batch
    return Crossing("crosses", p0.batch, p1.batch, at, lo, hi, **late)


def next_level(cross: Crossing, tried: Sequence[int], resolution: float = RESOLUTION) -> int | None:
    """Bisection: the middle batch of the crossing's bracket, or None once it is narrow enough (adjacent
    batches, or above / below within 1 + resolution) or that batch was tried."""
    if cross.status != "crosses" or cross.below is None or cross.above is None:
        return None
    lo, hi = cross.below, cross.above
    if hi - lo <= 1 or hi <= lo * (1.0 + resolution):
        return None
    mid = (lo + hi) // 2
    return None if mid in tried else mid


def ladder(max_batch: int, first: int = 1) -> list[int]:
    """The batch sizes a crossover search measures first: powers of two from `first`, and max_batch."""
    out, b = [], max(1, first)
    while b < max_batch:
        out.append(b)
        b *= 2
    return [*out, max_batch]


def verify_sides(cross: Crossing, levels: Sequence[int]) -> tuple[int | None, int | None]:
    """The levels a paired run checks: the bracket's two ends (a crossing), the largest batch tried (pays to
    the end) or the smallest (never pays)."""
    if cross.status == "crosses":
        return cross.below, cross.above
    if cross.status == "pays-to-max":
        return cross.below, None
    if cross.status == "never-pays":
        return None, cross.above
    return None, None


def step_outward(level: int, levels: Sequence[int], side: str) -> int | None:
    """The next tried level further from the crossing: lower on the paying side, higher on the other."""
    ordered = sorted(set(levels))
    if side == "below":
        lower = [b for b in ordered if b < level]
        return max(lower) if lower else None
    higher = [b for b in ordered if b > level]
    return min(higher) if higher else None
