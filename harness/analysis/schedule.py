"""A per-batch-size schedule: the best config per concurrency band from the predicted speedup curves
(harness.analysis.crossover), the single config that maximises throughput over a stated mix of loads (what an
engine that fixes its config at launch can use), and the schedule against every single config on a mixed
load, paired by repeat.

A band holds the consecutive batches with the same best config; speculation is off (`num_steps` 0) where no
config's predicted speedup is above 1.00x. A band ends where the next one's config overtakes it: between two
tried batches, where the two curves meet (linear in between), or, towards "off", at the config's crossover.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import pandas as pd

from harness.analysis import stats
from harness.analysis.crossover import Crossing, Point
from harness.analysis.tune_model import Config
from harness.analysis.verdicts import _verdict
from harness.engines.base import ScheduleBand

OFF = "off"  # no speculation: the baseline's server


Band = ScheduleBand  # the engines' type: each engine exports a schedule in its own terms


def band_config(b: Band) -> Config | None:
    """The band's config; None where speculation is off."""
    return Config(b.num_steps, b.eagle_topk, b.num_draft_tokens, b.cuda_graph) if b.num_steps else None


def band_dict(b: Band) -> dict[str, Any]:
    return asdict(b)


def _at(pts: Sequence[Point], batch: int) -> Point | None:
    return next((p for p in pts if p.batch == batch), None)


def best_at(curves: Mapping[Config, Sequence[Point]], batch: int) -> tuple[Config | None, float | None]:
    """The config with the highest predicted speedup above 1.00x at `batch`; (None, None): none pays."""
    got = [(p.speedup, c) for c, pts in curves.items() if (p := _at(pts, batch)) is not None]
    paying = [(s, c) for s, c in got if s > 1.0]
    if not paying:
        return None, None
    s, c = max(paying, key=lambda x: (x[0], x[1]))
    return c, s


def _meet(a: Sequence[Point], b: Sequence[Point] | None, b0: int, b1: int) -> int:
    """The last batch of a's band before b takes over between tried batches b0 < b1 (b None: where a stops
    paying). Linear between the two tried batches; b0 when nothing can be told."""
    pa0, pa1 = _at(a, b0), _at(a, b1)
    if pa0 is None or pa1 is None:
        return b0
    if b is None:
        d0, d1 = pa0.speedup - 1.0, pa1.speedup - 1.0
    else:
        pb0, pb1 = _at(b, b0), _at(b, b1)
        if pb0 is None or pb1 is None:
            return b0
        d0, d1 = pa0.speedup - pb0.speedup, pa1.speedup - pb1.speedup
    if d0 <= 0 or d0 == d1:
        return b0
    x = b0 + d0 / (d0 - d1) * (b1 - b0)
    return int(min(b1 - 1, max(b0, math.floor(x))))


def bands(curves: Mapping[Config, Sequence[Point]], levels: Sequence[int], max_batch: int | None = None
          ) -> list[Band]:
    """The schedule over `levels` (the batches tried); its last band reaches max_batch (default: the last
    level)."""
    levels = sorted(set(levels))
    picks = [best_at(curves, b) for b in levels]
    out: list[Band] = []
    start = 1
    for i, (b, (cfg, spd)) in enumerate(zip(levels, picks, strict=True)):
        nxt = picks[i + 1][0] if i + 1 < len(levels) else "end"
        if nxt == cfg:
            continue
        if nxt == "end":
            end = max(max_batch or b, b)
        elif cfg is None:
            end = levels[i + 1] - 1  # off until the next tried batch where a config pays
        else:
            end = _meet(curves[cfg], curves.get(nxt) if isinstance(nxt, Config) else None, b, levels[i + 1])
        first = _at(curves[cfg], start) if cfg is not None else None
        spd0 = first.speedup if first is not None else spd
        out.append(Band(end, cfg.num_steps, cfg.eagle_topk, cfg.num_draft_tokens, cfg.cuda_graph, start, spd0)
                   if cfg is not None else Band(end, 0, 0, 0, False, start, None))
        start = end + 1
    return out


def band_of(schedule: Sequence[Band], batch: int) -> Band | None:
    last = schedule[-1] if schedule else None
    return next((b for b in schedule if b.min_batch <= batch <= b.max_batch), last)


def tok_s(p: Point) -> float:
    return p.speedup * p.batch / p.base_step_ms * 1000.0


def mix_throughput(curves: Mapping[Config, Sequence[Point]], mix: Mapping[int, float]
                   ) -> dict[Config | str, float | None]:
    """Predicted tok/s over the mix (its weights: shares of time at each concurrency) of each config and of
    the baseline (OFF); None where a level of the mix cannot be told for that config."""
    total = sum(mix.values()) or 1.0
    out: dict[Config | str, float | None] = {}
    some = next(iter(curves.values()), [])
    base = [_at(some, c) for c in mix]
    out[OFF] = (sum(w * c / p.base_step_ms * 1000.0 for (c, w), p in zip(mix.items(), base, strict=True))
                / total) if all(p is not None for p in base) else None
    for cfg, pts in curves.items():
        at = [_at(pts, c) for c in mix]
        out[cfg] = (sum(w * tok_s(p) for w, p in zip(mix.values(), at, strict=True) if p is not None) / total
                    if all(p is not None for p in at) else None)
    return out


def single_best(curves: Mapping[Config, Sequence[Point]], mix: Mapping[int, float]) -> Config | None:
    """The config (None: the baseline) with the highest predicted tok/s over the mix."""
    got = {k: v for k, v in mix_throughput(curves, mix).items() if v is not None}
    if not got:
        return None
    best = max(got, key=lambda k: (got[k], str(k)))
    return best if isinstance(best, Config) else None


def parse_mix(text: str) -> dict[int, float]:
    """'1:0.5,8:0.3,32:0.2' (concurrency:share of time) -> {1: 0.5, 8: 0.3, 32: 0.2}; the shares need not
    sum to 1."""
    out: dict[int, float] = {}
    for part in [p for p in text.split(",") if p.strip()]:
        level, _, share = part.partition(":")
        c, w = int(level), float(share or 1.0)
        if c < 1 or w <= 0:
            raise ValueError(f"{part!r}: a concurrency of 1 or more and a share above 0")
        out[c] = out.get(c, 0.0) + w
    if not out:
        raise ValueError("an empty mix")
    return out


def mix_comparison(phases: pd.DataFrame, picks: Mapping[int, str], mix: Mapping[int, float],
                   singles: Sequence[str], *, level: float = 0.95, equivalence: float = 0.03) -> pd.DataFrame:
    """The schedule against each single variant over the mix, paired by repeat: per repeat r the mix's tok/s
    is sum_c share_c x tok_s(variant, c, r) (the schedule's: the variant its band picks at c, in the same
    repeat); the ratio's t interval over repeats and its verdict (harness.analysis.verdicts' words)."""
    cols = ["single", "schedule_tok_s", "single_tok_s", "ratio", "ratio_ci_low", "ratio_ci_high", "repeats",
            "verdict", "verdict_reason"]
    if phases.empty:
        return pd.DataFrame(columns=cols)
    ph = phases.copy()
    ph["tok_s"] = pd.to_numeric(ph["tok_s"], errors="coerce")
    ph["concurrency"] = pd.to_numeric(ph["concurrency"], errors="coerce")
    total = sum(mix.values()) or 1.0
    table = ph.groupby(["variant", "concurrency", "repeat"])["tok_s"].mean()

    def mix_tok_s(choose: Mapping[int, str], r: int) -> float | None:
        vals = [table.get((choose[c], c, r)) for c in mix]
        if any(v is None or v != v for v in vals):
            return None
        return sum(w * float(v) for w, v in zip(mix.values(), vals, strict=True)) / total

    repeats = sorted(set(ph["repeat"]))
    rows = []
    for name in singles:
        pairs = [(mix_tok_s(picks, r), mix_tok_s(dict.fromkeys(mix, name), r)) for r in repeats]
        pairs = [(s, x) for s, x in pairs if s and x]
        ratios = [s / x for s, x in pairs]
        ci = stats.t_interval_log(ratios, level) if len(ratios) >= 2 else None
        low, high = (ci[1], ci[2]) if ci else (None, None)
        verdict, reason = _verdict(low, high, "t-repeats", f"{len(ratios)} repeats", None, None,
                                   equivalence=equivalence, level=level)
        n = len(pairs)
        rows.append({"single": name, "schedule_tok_s": sum(s for s, _ in pairs) / n if n else None,
                     "single_tok_s": sum(x for _, x in pairs) / n if n else None,
                     "ratio": ci[0] if ci else (ratios[0] if ratios else None), "ratio_ci_low": low,
                     "ratio_ci_high": high, "repeats": len(ratios), "verdict": verdict,
                     "verdict_reason": reason})
    return pd.DataFrame(rows, columns=cols)


def crossover_of(cross: Mapping[Config, Crossing]) -> tuple[Config | None, Crossing | None]:
    """The config that pays furthest (where speculation as a whole stops paying) and its crossing."""
    def reach(c: Crossing) -> float:
        if c.status == "pays-to-max":
            return math.inf
        return c.at if c.status == "crosses" and c.at is not None else -math.inf

    paying = {k: v for k, v in cross.items() if v.status in ("crosses", "pays-to-max")}
    if not paying:
        return None, None
    # equal reach (both pay to the largest batch): the one that pays from the smallest batch up
    best = max(paying, key=lambda k: (reach(paying[k]), paying[k].pays_from is None, k))
    return best, paying[best]
