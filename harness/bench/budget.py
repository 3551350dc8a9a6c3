"""`draftbench run --budget`: what a wall-clock budget buys, planned before any server starts.

Costs come from what is known: a server's start-up as measured by earlier runs of this results directory
(variants.jsonl `startup_s`, the median per engine), else the engine's prior (ENGINE_STARTUP_PRIOR_S; the
stand-in's own simulated start-up); a phase at least run.min_steady_s of steady state (phase sizing cycles
the suite to reach it) plus its ramp and tail; the first look of the stopping rule needs run.repeats of every
phase. A first decode far slower than the rest (a one-off compile, ~2 min for the first EAGLE-3 server on a
fresh H200) is paid in the warmup, outside every measured phase, and charged once (COMPILE_PRIOR_S) for
the first speculative server of a real target. The runner then never starts a look it cannot pay for
(harness.bench.decide).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.common.errors import InputError

if TYPE_CHECKING:
    from harness.inputs.config import Plan

ENGINE_STARTUP_PRIOR_S = {"simulated": 4.0, "real": 90.0}
COMPILE_PRIOR_S = 120.0  # the first EAGLE-3 decode on a fresh H200 machine (docs/real-gpu.md)
WARMUP_S = 5.0
PHASE_OVERHEAD = 1.5  # ramp, tail, flush and the server-side scrape around a sized phase


@dataclass(frozen=True)
class BudgetPlan:
    budget_s: float
    first_look_s: float  # every variant's start-up, warmup and the first look's phases
    minimum_s: float  # the least that decides anything: the baseline and one variant at one level
    startup_s: float
    startup_source: str

    def words(self) -> str:
        return (f"budget {self.budget_s:.0f} s: the first look of every row needs ~{self.first_look_s:.0f} s "
                f"(start-up ~{self.startup_s:.0f} s per server, {self.startup_source}); the stopping rule's "
                "later looks run while the budget lasts, and a look it cannot pay for is not started")


def measured_startups(results_dir: str | Path) -> list[float]:
    out: list[float] = []
    for path in Path(results_dir).glob("*/variants.jsonl"):
        try:
            for line in path.read_text(encoding="utf-8").splitlines():
                value = json.loads(line).get("startup_s") if line.strip() else None
                if isinstance(value, int | float) and value > 0:
                    out.append(float(value))
        except (OSError, ValueError):
            continue
    return out


def plan_budget(plan: Plan, results_dir: str | Path, budget_s: float) -> BudgetPlan:
    """The plan's cost against `budget_s`; InputError (exit 2, before any server starts) when the budget
    cannot decide a single row, with the minimum that would."""
    seen = measured_startups(results_dir)
    if seen:
        startup, source = statistics.median(seen), f"median of {len(seen)} earlier starts here"
    else:
        kind = "simulated" if plan.target.simulated else "real"
        startup, source = ENGINE_STARTUP_PRIOR_S[kind], f"a prior for a {kind} server, none measured here yet"
    run = plan.run
    phase = float(run.min_steady_s) * 1.2 + PHASE_OVERHEAD
    levels = max(1, len(run.concurrency)) * max(1, len(plan.suites))
    compile_s = 0.0 if plan.target.simulated else COMPILE_PRIOR_S
    per_variant = startup + WARMUP_S + int(run.repeats) * phase * levels
    first_look = per_variant * len(plan.variants) + compile_s
    minimum = 2 * (startup + WARMUP_S + int(run.repeats) * phase) + compile_s
    bp = BudgetPlan(budget_s, first_look, minimum, startup, source)
    if budget_s < minimum:
        raise InputError(str(plan.source_path or ""), None, "--budget",
                         f"{budget_s:.0f} s cannot decide anything: the baseline and one variant at one "
                         f"concurrency need ~{minimum:.0f} s (start-up ~{startup:.0f} s each, {source}; "
                         f"{run.repeats} phases of >= {run.min_steady_s:g} s steady state"
                         + (f"; a first-decode compile ~{compile_s:.0f} s" if compile_s else "") + ")")
    return bp
