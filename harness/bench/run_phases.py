"""A run's phases: which ones a variant still has to measure (`plan_phases`), the sizing of each closed-loop
phase (`sizer_for`, harness.bench.sizing) and the one-off first-decode compile seen in a warmup (`one_off`).
Functions of the run (harness.bench.runner._Run), kept apart so the runner stays one seam."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from harness.analysis.store import VariantMeta
from harness.bench.arrivals import rate_label
from harness.bench.sizing import Sizer, level_prompts
from harness.common import events as ev
from harness.common.errors import InputError
from harness.inputs.run_settings import MIN_REQUESTS_PER_SLOT

if TYPE_CHECKING:
    from harness.bench.run_state import RunState
    from harness.inputs.config import Plan, Variant
    from harness.inputs.suites import Prompt, Suite

    # a phase still to measure: (phase id, suite, concurrency, repeat, its prompts in replay order)
    Phase = tuple[str, Suite, int, int, list[Prompt]]

# a first decode this slow, and COMPILE_RATIO x the rest, is a compile (docs/real-gpu.md)
COMPILE_MIN_S = 20.0
COMPILE_RATIO = 10.0


def phase_id(suite: str, concurrency: int, repeat: int) -> str:
    return f"{suite}@c{concurrency}#r{repeat}"


def rate_phase_id(suite: str, rate: float, repeat: int) -> str:
    return f"{suite}@r{rate_label(rate)}#r{repeat}"


def require_levels(plan: Plan) -> None:
    """A plan whose run.concurrency is `auto` has no levels to run: its levels are the crossover search's
    (`draftbench run` hands it to tune's search, harness.cli.tune.run_auto; tune's sub-runs get lists). Run as
    it stands it would measure concurrency 1 alone, so it is refused before anything starts."""
    if plan.run.concurrency_auto:
        raise InputError(str(plan.source_path or ""), None, "run.concurrency",
                         "auto is a search, run by `draftbench run PLAN` (each speculative variant's "
                         "crossover, docs/tune.md) or `draftbench tune PLAN --concurrency auto`; run as a "
                         "list of levels it would measure concurrency 1 alone")


def plan_phases(run: RunState, variant: Variant, repeats: list[int] | None = None,
                only: set[int] | None = None) -> list[Phase]:
    out: list[Phase] = []
    rates = [] if only is not None else list(map(float, run.plan.run.request_rate))
    levels = [c for c in run.plan.run.concurrency if only is None or c in only]
    for repeat in repeats or range(1, run.plan.run.repeats + 1):
        for suite in run.plan.suites:
            for c in [*levels, *rates]:
                pid = phase_id(suite.name, c, repeat) if not isinstance(c, float) else \
                    rate_phase_id(suite.name, c, repeat)
                if isinstance(c, float):
                    run.phase_rate[pid], c = c, 0  # open loop: records and phases say concurrency 0
                # run.requests_per_slot: per_slot x c of the suite's prompts (tune's step-cost phases)
                prompts = level_prompts(suite.prompts, run.plan.run.requests_per_slot, c)
                if run.plan.run.order == "shuffled":
                    # same seed for every variant: all arms see the same order (TTFT depends on it)
                    random.Random(f"{run.plan.run.seed}/{pid}").shuffle(prompts)
                if (variant.name, pid) not in run.done.phases:  # no phase row: replayed whole (attempts.py)
                    out.append((pid, suite, c, repeat, prompts))
    return out


def one_off(run: RunState, name: str, meta: VariantMeta, timing: dict[str, Any]) -> None:
    """The warmup's first (sampled) request far slower than the rest: a one-off compile, seen for the
    first EAGLE-3 decode on a fresh H200 (~2 min). It stays out of every measured phase (the warmup is
    never measured); recorded as `compile_s` so budgets charge it once per machine (harness.studies.tune)."""
    first, rest = timing.get("first_s"), timing.get("rest_s")
    meta.warmup_first_s = round(first, 3) if first is not None else None
    if first is None or rest is None or first < COMPILE_MIN_S or first < COMPILE_RATIO * max(rest, 0.05):
        return
    meta.compile_s = round(first - rest, 1)
    run.emit(ev.Alarm(name, "info", "one-off-compile",
                       f"the first decode took {first:.0f} s against {rest:.1f} s for the rest of the "
                       "warmup: a one-off compile, charged once per machine and kept "
                       "out of every measured phase"))


def sizer_for(run: RunState, name: str, pid: str, suite: Suite, c: int,
              prompts: list[Prompt]) -> Sizer | None:
    """Phase sizing (harness.bench.sizing) for a closed-loop phase over its whole suite (a resumed phase is
    replayed whole: harness.analysis.attempts); none under run.requests_per_slot (the count is set)."""
    settings = run.plan.run
    if len(prompts) != len(suite.prompts) or not settings.phase_sizing or settings.requests_per_slot:
        return None
    per_pass = sum(p.turns for p in prompts)

    def count(passes: int) -> None:  # the progress total covers every pass planned or already started
        more = per_pass * (max(passes, sizer.passes) - 1) - sizer.counted
        if more > 0:
            run.total_requests += more
            sizer.counted += more

    def told(n: int, one: float, passes: int, planned: float, capped: bool) -> None:
        count(passes)  # the progress total grows with the plan
        run.emit(ev.PhaseSized(name, pid, c, n, one, passes, planned, capped))

    sizer = Sizer(prompts=per_pass, concurrency=c, min_steady_s=float(settings.min_steady_s),
                  max_phase_s=float(settings.max_phase_s), min_requests=MIN_REQUESTS_PER_SLOT * c,
                  fixed_passes=run.pass_count.get((name, suite.name, c)), on_plan=told, on_pass=count)
    if sizer.fixed_passes:  # a later repeat replays at least as many passes as the first: known now
        sizer.counted = per_pass * (sizer.fixed_passes - 1)
        run.total_requests += sizer.counted
    return sizer


def settle_total(run: RunState, sizer: Sizer | None) -> None:
    """After a sized phase: the progress total counts the passes it really ran (the plan was an estimate)."""
    if sizer is not None:
        done = sizer.prompts * (sizer.passes - 1)
        run.total_requests += done - sizer.counted
        sizer.counted = done
