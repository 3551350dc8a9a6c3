"""What a tune's budget buys, said before any server starts (`draftbench tune --budget`).

The plan from what is known: a server start as measured by this tune's earlier sub-runs or by earlier runs
beside it (variants.jsonl `startup_s`), else a prior (harness.bench.budget); a one-off compile of the first
EAGLE-3 decode on a real target, charged once (never again: a later start on the machine does not pay it);
the wide run's first look (both arms, every level, phases of run.min_steady_s at least: phase sizing);
the baseline's and the longest chain's step-cost phases on the wide run's own servers (adopted, no start);
every further config one start plus its decode-only phases. A budget below the wide run gets the minimum
that would buy it, as an error, before anything starts.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from harness.bench.budget import (
    COMPILE_PRIOR_S,
    ENGINE_STARTUP_PRIOR_S,
    PHASE_OVERHEAD,
    WARMUP_S,
    measured_startups,
)
from harness.common.errors import InputError

if TYPE_CHECKING:
    from harness.analysis.tune_types import TuneSearch

COST_PHASE_PRIOR_S = {"simulated": 2.0, "real": 6.0}  # one decode-only step-cost phase


def _kind(t: TuneSearch) -> str:
    return "simulated" if t.plan.target.simulated else "real"


def startup_s(t: TuneSearch) -> tuple[float, str]:
    seen = measured_startups(t.dir) or measured_startups(t.dir.parent)
    if seen:
        return statistics.median(seen), f"measured, median of {len(seen)}"
    return ENGINE_STARTUP_PRIOR_S[_kind(t)], "a prior: none measured here yet"


def costs(t: TuneSearch) -> dict[str, float]:
    start, _ = startup_s(t)
    run = t.plan.run
    levels = len(t.wide_conc) * max(1, len(t.plan.suites))
    phase = float(run.min_steady_s) * 1.2 + PHASE_OVERHEAD
    compile_s = 0.0 if t.plan.target.simulated else COMPILE_PRIOR_S
    cost_phase = COST_PHASE_PRIOR_S[_kind(t)]
    return {
        "wide": 2 * (start + WARMUP_S) + compile_s + 2 * int(run.repeats) * levels * phase,
        "adopted_costs": 2 * len(t.conc) * cost_phase,
        "config": start + WARMUP_S + len(t.conc) * cost_phase,
        "verify": start + WARMUP_S + int(run.repeats) * levels * phase,
        "startup": start,
    }


def cost_reserve(t: TuneSearch) -> float:
    """Seconds the wide run leaves for the step-cost phases on its own servers."""
    return costs(t)["adopted_costs"]


def plan_words(t: TuneSearch) -> list[str]:
    """The budget's plan in words; InputError when it cannot buy even the wide run."""
    c = costs(t)
    start, source = startup_s(t)
    left = t.opts.budget_s - t.spent()
    if t.state.starts:  # resumed: what is already measured stays; the rest of the plan below
        left = max(left, 0.0)
    elif left < c["wide"]:
        raise InputError(str(t.plan.source_path or ""), None, "--budget",
                         f"{t.opts.budget_s:.0f} s cannot decide anything: the wide run alone needs "
                         f"~{c['wide']:.0f} s (two starts of ~{start:.0f} s, {source}"
                         + ("; the first EAGLE-3 decode's one-off compile" if not t.plan.target.simulated
                            else "")
                         + f"; its first look at {len(t.wide_conc)} concurrencies); "
                         f"give --budget {c['wide'] * 1.3:.0f}s or more")
    after = left - c["wide"] - c["adopted_costs"] - c["verify"]
    n = max(0, int(after // c["config"])) if c["config"] > 0 else 0
    others = [g for g in t.grid if g != t.wide]
    n = min(n, len(others))
    words = (f"{t.opts.budget_s:.0f} s buys the wide run (~{c['wide']:.0f} s, start-up ~{start:.0f} s each: "
             f"{source}), the step costs of the baseline and {t.wide.name} on its servers "
             f"(~{c['adopted_costs']:.0f} s)"
             f" and {n} more step-cost config{'s' if n != 1 else ''} (~{c['config']:.0f} s each)")
    rest = len(others) - n
    tail = (f"; {rest} of the grid's {len(t.grid)} configs stay predicted from the wide run's histograms"
            if rest else "; every config of the grid gets measured")
    return [words + tail]


def est_cost(t: TuneSearch) -> float:
    """A step-cost stage's seconds: the mean of those measured so far (start-up included)."""
    from harness.analysis import tune_data as td

    adopted = set(t.state.adopted or [])  # no start-up in those: not what a new config costs
    costs = [v for k, v in t.state.stage_s.items() if k.startswith("cost/") and k not in adopted]
    if costs:
        return sum(costs) / len(costs)
    return float(td.startup_seconds(t.dir / "wide") or 0.0) * 2


def verify_cost(t: TuneSearch) -> float:
    """A verify run's seconds: the wide run's speculative stage, less a one-off compile it paid (charged
    once per machine, never again: harness.bench.run_phases.one_off)."""
    from harness.analysis.store import read_variants

    stage = float(t.state.stage_s.get(f"wide/{t.wide_name}", 0.0))
    wide = read_variants(t.dir / "wide").get(t.wide_name)
    compile_s = float(wide.compile_s or 0.0) if wide is not None else 0.0
    return max(0.0, stage - compile_s)
