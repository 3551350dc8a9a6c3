"""Where a drafter accepts least, from a finished run's per-request records: per category, per prompt or per
turn of a conversation, the pooled accept length with its 95 % interval over prompts and the acceptance per
draft position from the accepted-count histograms (SGLang's `spec_correct_drafts_histogram`).

Definitions (docs/retrain.md):
  accept length   Σ (completion tokens − 1) / Σ verify steps over the spot's requests (the summary's pooled
                  per-request definition, harness.analysis.acceptance.pooled_accept);
  P(≥k)           of the spot's verify steps, the share that accepted at least k drafts: Σ_{j≥k} h[j] / Σ h
                  (marginal; the bonus token is not a draft);
  P(k | k−1)      P(≥k) / P(≥k−1): acceptance at position k given the drafts before it were accepted.
Rows of forced-acceptance variants and of request-rate phases are never read: they are not the drafter's own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from harness.analysis import stats
from harness.common.errors import InputError

Level = Literal["category", "prompt", "turn"]
LEVELS: tuple[Level, ...] = ("category", "prompt", "turn")


@dataclass(frozen=True)
class Spot:
    level: Level
    key: str  # category, "suite/prompt" or "suite/prompt#turn"
    category: str
    suite: str | None
    prompt_id: str | None
    turn: int | None
    requests: int
    prompts: int
    accept_len: float | None
    accept_low: float | None  # 95 % interval over the spot's prompts (None with fewer than 2)
    accept_high: float | None
    marginal: tuple[float, ...]  # P(>=k), k = 1..
    conditional: tuple[float, ...]  # P(k | k-1)

    def metric(self, position: int | None) -> float | None:
        """What ranks the spot: its accept length, or P(>=position) from the histograms."""
        if position is None:
            return self.accept_len
        return self.marginal[position - 1] if len(self.marginal) >= position else 0.0


def _num(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


def variant_requests(run_dir: str | Path, variant: str) -> pd.DataFrame:
    """The variant's answered requests of the run's closed-loop phases, per-request spec stats filled from the
    untimed probe where the stream carried none; InputError when the run has no such variant or it is
    forced."""
    from harness.analysis.acceptance import requests_with_spec
    from harness.analysis.forced import forced_value
    from harness.analysis.goodput import closed_loop
    from harness.analysis.summary import read_tables

    run_dir = Path(run_dir)
    if not (run_dir / "requests.csv").exists():
        raise InputError(str(run_dir), None, None, "not a run directory (no requests.csv)")
    requests, _phases, _windows, variants, probe = read_tables(run_dir)
    if variant not in variants:
        known = ", ".join(sorted(n for n, m in variants.items() if not m.get("baseline"))) or "none"
        raise InputError(str(run_dir), None, "variant",
                         f"no variant {variant!r} in this run (speculative: {known})")
    if forced_value(variants[variant].get("forced_acceptance")) is not None:
        raise InputError(str(run_dir), None, "variant",
                         f"{variant} ran under forced acceptance: its acceptance "
                         "is not the drafter's")
    requests, probe = closed_loop(requests, probe)
    rq = requests_with_spec(requests, probe) if not requests.empty else requests
    if rq.empty:
        return rq
    rq = rq[(rq["variant"].astype(str) == variant) & rq["ok"].eq(True)].copy()
    rq["_verify"] = _num(rq["spec_verify_ct"]) if "spec_verify_ct" in rq else np.nan
    rq["_extra"] = _num(rq["output_tokens"]) - 1  # the first token comes from prefill, not a verify step
    rq = rq[rq["_verify"].notna() & (rq["_verify"] > 0) & rq["_extra"].notna()]
    for col in ("suite", "prompt_id", "category"):
        rq[col] = rq[col].astype(str) if col in rq else ""
    rq["turn"] = _num(rq["turn"]).fillna(1).astype(int) if "turn" in rq else 1
    return rq


def histogram_rates(histograms: Sequence[object]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(marginal P(>=k), conditional P(k | k-1)) for k = 1.. from per-request histograms ("h0 h1 h2 ..."),
    summed first (harness.analysis.tune_model's arithmetic, as tune's speculation_profile.json has it)."""
    from harness.analysis import tune_model as tm

    h = tm.add_histograms(tm.parse_histogram(x) for x in histograms)
    if tm.steps_of(h) <= 0 or len(h) < 2:
        return (), ()
    return tuple(tm.marginal_rates(h)), tuple(tm.conditional_rates(h))


def accept_interval(group: pd.DataFrame) -> tuple[float | None, float | None, float | None]:
    """(accept length, low, high): pooled over the group's requests, the interval a bootstrap over its
    prompts, never narrower than the verify steps' own sampling noise (step_half_width).

    Why the floor: a request's accept length is (tokens − 1) / steps, a ratio of small integers, so a few
    prompts can all land on the same value (31 tokens in 11 steps: 2.82) and the bootstrap over them is then
    0 wide, although each step accepted 1, 2 or 4 tokens. The steps' spread, from the summed histogram, is the
    least uncertainty the mean of that many steps has (steps taken as independent; prompts only add to it)."""
    if group.empty or group["_verify"].sum() <= 0:
        return None, None, None
    est = float(group["_extra"].sum() / group["_verify"].sum())
    per = group.groupby(["suite", "prompt_id"])[["_extra", "_verify"]].sum()
    if len(per) < 2:
        return est, None, None
    ones = np.ones(len(per))
    got = stats.paired_bootstrap_ratio(per["_extra"].to_numpy(), per["_verify"].to_numpy(), ones, ones)
    if got is None:
        return est, None, None
    floor = step_half_width(list(group["spec_histogram"])) if "spec_histogram" in group else 0.0
    below, above = max(math.log(est / got[1]), floor), max(math.log(got[2] / est), floor)
    return est, est * math.exp(-below), est * math.exp(above)


def step_half_width(histograms: Sequence[object], z: float = 1.96) -> float:
    """z x the relative standard error of the mean tokens per verify step, from the summed histogram (h[j]
    steps accepted j drafts, so gave j + 1 tokens): the half-width, on the log scale, of the 95 % interval
    of an accept length measured over those steps as independent draws. 0 without a histogram or with fewer
    than two steps."""
    from harness.analysis import tune_model as tm

    h = tm.add_histograms(tm.parse_histogram(x) for x in histograms)
    n = tm.steps_of(h)
    if n < 2:
        return 0.0
    mean = tm.mean_accept_len(h)
    if not mean:
        return 0.0
    tokens = np.arange(1, len(h) + 1, dtype=float)
    var = float((np.asarray(h, dtype=float) * (tokens - mean) ** 2).sum() / (n - 1))
    return z * math.sqrt(var / n) / mean


def _key(level: Level, cat: str, suite: str, pid: str, turn: int) -> str:
    if level == "category":
        return cat
    return f"{suite}/{pid}" + (f"#{turn}" if level == "turn" else "")


def spots(rq: pd.DataFrame, level: Level = "category") -> list[Spot]:
    """One Spot per category, prompt or (prompt, turn) of the variant's requests, lowest accept length
    first."""
    if level not in LEVELS:
        raise InputError(None, None, "by", f"one of {', '.join(LEVELS)}, not {level!r}")
    if rq.empty:
        return []
    keys = {"category": ["category"], "prompt": ["suite", "prompt_id", "category"],
            "turn": ["suite", "prompt_id", "turn", "category"]}[level]
    out = []
    for values, g in rq.groupby(keys, sort=True):
        v = dict(zip(keys, values if isinstance(values, tuple) else (values,), strict=True))
        est, low, high = accept_interval(g)
        marginal, conditional = histogram_rates(list(g["spec_histogram"])) if "spec_histogram" in g \
            else ((), ())
        out.append(Spot(level, _key(level, v["category"], v.get("suite", ""), v.get("prompt_id", ""),
                                    int(v.get("turn", 1))),
                        str(v["category"]), v.get("suite"), v.get("prompt_id"),
                        int(v["turn"]) if "turn" in v else None, len(g),
                        int(g.groupby(["suite", "prompt_id"]).ngroups), est, low, high, marginal,
                        conditional))
    return sorted(out, key=lambda s: (s.accept_len if s.accept_len is not None else float("inf"), s.key))


def overall(rq: pd.DataFrame) -> Spot | None:
    """The variant over all its requests (the reference a spot is weak against)."""
    if rq.empty:
        return None
    est, low, high = accept_interval(rq)
    marginal, conditional = histogram_rates(list(rq["spec_histogram"])) if "spec_histogram" in rq \
        else ((), ())
    return Spot("category", "(all)", "(all)", None, None, None, len(rq),
                int(rq.groupby(["suite", "prompt_id"]).ngroups), est, low, high, marginal, conditional)


def pick(found: list[Spot], *, lowest: int | None = 1, below: float | None = None,
         position: int | None = None, ref: Spot | None = None) -> list[Spot]:
    """The weak spots: those whose metric is below `below` x the variant's own (when given), else the
    `lowest` N by the metric (accept length, or P(>=position))."""
    ranked = sorted((s for s in found if s.metric(position) is not None),
                    key=lambda s: (s.metric(position), s.key))
    if below is not None:
        ref_value = ref.metric(position) if ref is not None else None
        if ref_value is None:
            return []
        return [s for s in ranked if s.metric(position) < below * ref_value]  # type: ignore[operator]
    return ranked[: max(0, lowest or 0)]


def spot_lines(found: list[Spot], chosen: list[Spot], ref: Spot | None, positions: int = 4) -> list[str]:
    """The table `draftbench weak-spots` prints (tab-separated), weak spots marked with `*`."""
    pos = min(positions, max((len(s.marginal) for s in found), default=0))
    head = ["", "spot", "requests", "prompts", "accept len", "95% CI"] \
        + [f"P(>={k})" for k in range(1, pos + 1)]
    out = ["\t".join(head)]
    keys = {s.key for s in chosen}

    def row(s: Spot, mark: str) -> str:
        known = s.accept_low is not None and s.accept_high is not None
        ci = f"{s.accept_low:.2f}-{s.accept_high:.2f}" if known else "-"
        al = f"{s.accept_len:.2f}" if s.accept_len is not None else "-"
        ps = [f"{s.marginal[k]:.2f}" if k < len(s.marginal) else "-" for k in range(pos)]
        return "\t".join([mark, s.key, str(s.requests), str(s.prompts), al, ci, *ps])

    out += [row(s, "*" if s.key in keys else "") for s in found]
    if ref is not None:
        out.append(row(ref, "="))
    return out
