"""What a tune's budget buys, said before any server starts (`draftbench tune --budget`).

The plan from what is known: a server start as measured by this tune's earlier sub-runs or by earlier runs
beside it (variants.jsonl `startup_s`), else a prior (harness.bench.budget); a one-off compile of the first
EAGLE-3 decode on a real target, charged once (never again: a later start on the machine does not pay it);
the wide run's first look (both arms, every level, phases of run.min_steady_s at least: phase sizing);
the baseline's and the longest chain's step-cost phases on the wide run's own servers (adopted, no start);
every further config one start plus its decode-only phases. A budget below the wide run gets the minimum
that would buy it, as an error, before anything starts. `--concurrency auto`'s request-rate stage is planned
when it is reached, from what it will run (`load_plan`: rates x requests x tokens on each arm's own step
costs, the arrivals it will draw, the starts), and skipped, said, where the budget cannot pay for it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.analysis import crossover as cx
from harness.analysis import crossover_data as cd
from harness.bench.arrivals import arrival_offsets
from harness.bench.budget import (
    COMPILE_PRIOR_S,
    ENGINE_STARTUP_PRIOR_S,
    PHASE_OVERHEAD,
    WARMUP_S,
    measured_startups,
)
from harness.bench.run_phases import rate_phase_id
from harness.common.errors import InputError
from harness.serve.kept import gpu_has_room, kept_servers
from harness.studies.tune_plans import LOAD_PER_SLOT, LOAD_SUITE

if TYPE_CHECKING:
    from harness.analysis.tune_model import Config
    from harness.analysis.tune_types import TuneSearch

COST_PHASE_PRIOR_S = {"simulated": 2.0, "real": 6.0}  # one decode-only step-cost phase
# the load stage (tune --concurrency auto's request rates): around each rate phase, the cache flush, the
# /metrics scrapes and the log catch-up; around its sub-run, the engine's version probe and the summary
LOAD_PHASE_OVERHEAD_S = {"simulated": 0.3, "real": 1.0}
LOAD_RUN_OVERHEAD_S = {"simulated": 1.5, "real": 10.0}


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
    if not t.opts.auto:
        return [words + tail]
    return [words + tail, "then, while the budget lasts, the crossover's bisection, a paired run on each side"
            + (", the mixed load" if t.opts.mix else "") + (", the request rates" if t.opts.load else "")
            + ": each planned when reached, and skipped with a line where the budget cannot pay for it"]


def shortfall(t: TuneSearch, what: str, cost_s: float, reserve_s: float = 0.0) -> dict[str, Any]:
    """What the search could not buy when it stopped on its budget (tune_state.json `short`): `what`, the
    seconds it needs (its own `cost_s` and the `reserve_s` kept for a verification), the seconds left, and
    the budget a resume would take for it (a resume starts its servers again: cost_s counts start-ups)."""
    left = max(0.0, t.opts.budget_s - t.spent())
    need = cost_s + reserve_s
    return {"what": what, "need_s": round(need, 1), "reserve_s": round(reserve_s, 1),
            "left_s": round(left, 1), "resume_min": max(1, math.ceil(need * 1.15 / 60))}


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


@dataclass(frozen=True)
class LoadPlan:
    """What the load stage runs and what it costs: both arms (the baseline and the pick), every rate, each
    rate a phase of `requests` requests of up to `max_tokens` tokens; `starts` servers not kept to adopt."""

    seconds: float  # all of it: the arms, the starts, the sub-run's own overhead
    rates: list[float]
    requests: int
    max_tokens: int
    starts: int
    arm_s: dict[str, float]  # per arm: its warmup and its rate phases (a start not included)
    phase_s: dict[str, list[float]]  # per arm: each rate's phase, first arrival to last answer

    def words(self) -> str:
        starts = f", {self.starts} server start{'s' if self.starts != 1 else ''}" if self.starts else ""
        return (f"{len(self.rates)} rates x {self.requests} requests x {len(self.arm_s)} arms, up to "
                f"{self.max_tokens} tokens each{starts}")


def _phase_s(per_token_s: Callable[[float], float], rate: float, n: int, tokens: int, cap_batch: int,
             span: float) -> float:
    """One request-rate phase, arrival of the first request to the end of the last: the arrivals' span, or the
    time the server needs for n requests at its full batch when the rate is past what it serves; then the
    last request's own time at the batch the rate holds (Little's law: rate x its time per request)."""
    capacity = cap_batch / (tokens * per_token_s(cap_batch))
    if rate >= capacity:
        return max(span, n / capacity) + tokens * per_token_s(cap_batch)
    batch = 1.0
    for _ in range(20):  # the batch b the rate holds: b = rate x tokens x per-token time at b
        batch = min(float(cap_batch), max(1.0, rate * tokens * per_token_s(batch)))
    return span + tokens * per_token_s(batch)


def load_plan(t: TuneSearch, pick: Config, rates: list[float], largest: int) -> LoadPlan | None:
    """The load stage's cost from what it will run (harness.studies.tune_plans.derived with `rates`): per arm
    a start where no server of its variant is kept to adopt, the warmup (a first request alone and
    run.warmup_requests, one at a time: no closed-loop level), then each rate's phase of LOAD_PER_SLOT x the
    largest batch requests on that arm's own time per token (its step costs over its accept length: the
    speculative server is the faster one below the crossover), at the arrivals the phase will draw (the
    same seeded schedule); None without step costs to tell it from."""
    base_steps = cd.step_costs(t.dir, t.plan.baseline.name)
    pick_steps = cd.step_costs(t.dir, pick.name)
    al = t.accept(pick)
    if not base_steps or not pick_steps or not al:
        return None
    run, kind = t.plan.run, _kind(t)
    n, tokens = LOAD_PER_SLOT * largest, int(run.max_tokens)
    cap_batch = max(int(t.plan.server.max_running_requests), int(t.opts.max_batch or 0))
    start, _ = startup_s(t)
    # this tune's sub-runs' servers, newest first: adopted, no start; where the GPU holds one server at a
    # time (harness.serve.kept.gpu_has_room) only the newest can still be up when the stage starts
    kept = [k.variant for k in kept_servers(t.dir)][: None if gpu_has_room(t.plan, 1) else 1]

    def per_token(steps: dict[int, cx.Step], accept: float) -> Callable[[float], float]:
        lo, hi = min(steps), max(steps)

        def at(batch: float) -> float:  # seconds per output token of one request at that batch
            step = cx.step_at(steps, min(float(hi), max(float(lo), batch)))
            return (step.ms if step is not None else steps[hi].ms) / 1000.0 / accept
        return at

    arms = {t.plan.baseline.name: per_token(base_steps, 1.0), pick.name: per_token(pick_steps, al)}
    arm_s: dict[str, float] = {}
    phase_s: dict[str, list[float]] = {}
    for name, tok in arms.items():
        phase_s[name] = []
        for rate in rates:
            offsets = arrival_offsets(n, rate, burstiness=float(run.burstiness),
                                      seed=f"{run.seed}/{rate_phase_id(LOAD_SUITE, rate, 1)}")
            phase_s[name].append(_phase_s(tok, rate, n, tokens, cap_batch, offsets[-1] if offsets else 0.0))
        warm = (1 + max(1, int(run.warmup_requests))) * tokens * tok(1)
        arm_s[name] = warm + sum(phase_s[name]) + len(rates) * LOAD_PHASE_OVERHEAD_S[kind]
    starts = sum(1 for name in arms if name not in kept)
    total = sum(arm_s.values()) + starts * start + LOAD_RUN_OVERHEAD_S[kind]
    return LoadPlan(total, list(rates), n, tokens, starts, arm_s, phase_s)
