"""`draftbench tune --concurrency auto`: where speculation stops paying, found and verified.

After tune's search has measured the grid's step costs at a ladder of batches (1, 2, 4, ... up to the
server's max running requests):
  1. bisection: the config that pays furthest (harness.analysis.schedule.crossover_of) and the baseline get
     step-cost phases at the middle batch of the bracket where its predicted speedup crosses 1.00x
     (`cost-c<N>/`), until the bracket is narrow (harness.analysis.crossover.next_level) or the budget ends;
  2. verification: a paired run of that config against the baseline over the plan's suites (stopping when
     decided) at the bracket's two ends (`verify-c<N>/`); a side whose verdict is not decided on its side
     (undecided, too short, or decided the other way: end to end, prefill and the batch's tail move the
     crossover off the decode steps' one) moves to the next batch tried further out, up to SIDE_RUNS runs;
  3. the mixed load (`--mix`): the baseline and every measured config at the mix's levels, a fixed number
     of repeats (`mix/`), so the schedule meets each single config paired by repeat;
  4. the load: the baseline and the pick at request rates that hold batches around the crossover
     (`load/`): goodput under run.slo against rate.
Each step is a sub-run of the tune (servers kept and adopted as for the search); tune_state.json's
`crossover` records the batches bisected and the verdicts, and a resume re-reads every run directory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from harness.analysis import crossover as cx
from harness.analysis import crossover_data as cd
from harness.analysis import crossover_report as cr
from harness.analysis import schedule as sc
from harness.analysis.tune_report import _verdict_of
from harness.common import events as ev
from harness.studies import tune_budget as tb

if TYPE_CHECKING:
    from harness.analysis.tune_types import TuneSearch

MAX_ROUNDS = 4  # bisection rounds: a bracket of a ladder step (x2) narrows to 1.25x in at most 3
MIX_REPEATS = 3  # the mixed load's repeats: the pairing's t interval needs 2 at least
SIDE_RUNS = 3  # paired runs per side of the crossover at most
PAYS, STOPS = ("faster",), ("slower", "equivalent")  # the verdicts that decide each side
OVERLOAD = 1.3  # the load stage's last rate, over the baseline's rate at the largest batch of the bracket


async def crossover_stage(t: TuneSearch) -> AsyncIterator[Any]:
    st: dict[str, Any] = dict(t.state.crossover or {})
    st.setdefault("bisected", [])
    st.setdefault("verified", {})

    def save() -> None:
        t.state.crossover = st
        t.save()

    async for e in _bisect(t, st, save):
        yield e
    async for e in _verify(t, st, save):
        yield e
    if t.opts.mix:
        async for e in _mix(t, st, save):
            yield e
    if t.opts.load:
        async for e in _load(t, st, save):
            yield e


def _room(t: TuneSearch, cost: float) -> bool:
    return t.spent() + cost <= t.opts.budget_s


async def _bisect(t: TuneSearch, st: dict[str, Any], save: Callable[[], None]) -> AsyncIterator[Any]:
    for _ in range(MAX_ROUNDS):
        res = cr.build(t)
        if res.pick is None or res.cross is None:
            return
        level = cx.next_level(res.cross, [*res.levels, *st["bisected"]])
        if level is None:
            return
        cost = t.est_cost()
        if not _room(t, cost + t.verify_cost()):
            yield t.stage("crossover", f"budget: the crossover stays between c{res.cross.below} and "
                          f"c{res.cross.above}")
            return
        st["bisected"].append(level)
        save()
        yield t.stage("crossover", f"bisection: {res.pick.name} and the baseline at c{level} (it pays at "
                      f"c{res.cross.below}, not at c{res.cross.above})")
        yield ev.TuneCandidate(res.pick.name, "measuring", None, cost, f"step cost at c{level}")
        plan = t.derived([t.variant_dict(res.pick)], cost=True, conc=[level])
        async for e in t.sub_run(plan, f"cost-c{level}"):
            yield e
        yield ev.TuneCandidate(res.pick.name, "measured", None, cost, f"step cost at c{level}")


async def _verify(t: TuneSearch, st: dict[str, Any], save: Callable[[], None]) -> AsyncIterator[Any]:
    res = cr.build(t)
    pick = res.verified  # the pick, else (no config pays anywhere) the one closest to paying at c1
    if pick is None:
        return
    cross = res.cross or res.crossings.get(pick) or cx.Crossing("unknown")
    below, above = cx.verify_sides(cross, res.levels)
    st["pick"] = pick.name
    save()
    yield t.stage("verify", f"paired runs of {pick.name} against the baseline: "
                  + ", ".join(f"c{lvl}" for lvl in (below, above) if lvl is not None))
    for side, level in (("below", below), ("above", above)):
        runs = 0
        while level is not None and runs < SIDE_RUNS:
            row = cd.side_rows(t.dir, pick.name).get(level)
            if row is None:
                if not _room(t, t.verify_cost()):
                    yield ev.TuneCandidate(pick.name, "skipped", None, t.verify_cost(),
                                           f"budget: c{level} not verified")
                    return
                yield ev.TuneCandidate(pick.name, "verifying", None, t.verify_cost(), f"c{level} ({side})")
                plan = t.derived([t.variant_dict(pick)], cost=False, conc=[level])
                async for e in t.sub_run(plan, f"verify-c{level}"):
                    yield e
                row = cd.side_rows(t.dir, pick.name).get(level)
            verdict = _verdict_of(row) if row else "undecided"
            st["verified"][str(level)] = verdict
            save()
            yield ev.TuneCandidate(pick.name, "verified", None, None, f"c{level}: {verdict}")
            if verdict in (PAYS if side == "below" else STOPS):
                break
            runs += 1  # further out: a larger effect decides sooner, or the crossover lies past it
            level = cx.step_outward(level, res.levels, side)


async def _mix(t: TuneSearch, st: dict[str, Any], save: Callable[[], None]) -> AsyncIterator[Any]:
    res = cr.build(t)
    mix = sc.parse_mix(t.opts.mix)
    configs = sorted(res.curves)
    if not configs or (t.dir / "mix" / "summary.csv").exists() and st.get("mix_done"):
        return
    per = t.est_cost() + len(mix) * MIX_REPEATS * max(1.0, t.verify_cost() / max(1, len(t.wide_conc)))
    if not _room(t, per * (len(configs) + 1) * 0.5):
        yield t.stage("mix", f"budget: the mixed load ({len(configs)} configs and the baseline) is not run")
        return
    yield t.stage("mix", f"mixed load {t.opts.mix}: the baseline and {len(configs)} configs, "
                  f"{MIX_REPEATS} repeats each")
    plan = t.derived([t.variant_dict(c) for c in configs], cost=False, conc=sorted(mix),
                     fixed_repeats=MIX_REPEATS)
    async for e in t.sub_run(plan, "mix"):
        yield e
    st["mix_done"] = True
    save()


def load_rates(t: TuneSearch, res: cr.Result) -> list[float]:
    """Request rates that hold the batches around the crossover in steady decode: a batch b of requests of
    run.max_tokens tokens at the baseline's step cost is served at b / (max_tokens x step_s) requests/s
    (the speculative server, faster, holds a smaller batch at the same rate: open loop, it pays further);
    and OVERLOAD x the largest, where the baseline's queue grows."""
    base = cd.step_costs(t.dir, t.plan.baseline.name)
    cross = res.cross
    if cross is None or not base:
        return []
    near = {cross.below, cross.above} - {None}
    if cross.below:
        near.add(max(1, cross.below // 2))
    if cross.above:
        near.add(min(res.levels[-1], cross.above * 2))
    out = []
    for b in sorted(x for x in near if x is not None):
        step = cx.step_at(base, b)
        if step is not None:
            out.append(b / (int(t.plan.run.max_tokens) * step.ms / 1000.0))
    if out:  # and past what the baseline serves at the largest batch: both servers saturated
        out.append(max(out) * OVERLOAD)
    return sorted({float(f"{r:.3g}") for r in out})


async def _load(t: TuneSearch, st: dict[str, Any], save: Callable[[], None]) -> AsyncIterator[Any]:
    res = cr.build(t)
    rates = load_rates(t, res)
    if res.pick is None or not rates or st.get("load_done"):
        return
    # planned from what the stage runs (rates x requests x tokens on each arm, the starts), never from a
    # verify run's cost: that undercount let the stage overrun a budget many times over
    planned = tb.load_plan(t, res.pick, rates, max(res.levels))
    if planned is None:
        yield t.stage("load", f"no step costs of {res.pick.name} to plan the request rates from: not run")
        return
    if not _room(t, planned.seconds):
        st["load_skipped"] = round(planned.seconds, 1)
        save()
        left = max(0.0, t.opts.budget_s - t.spent())
        yield t.stage("load", f"budget: the request rates are not run: they need ~{planned.seconds:.0f} s "
                      f"({planned.words()}), {left:.0f} s of the budget is left")
        return
    st["load_planned_s"] = round(planned.seconds, 1)
    save()
    yield t.stage("load", f"request rates {', '.join(f'{r:g}' for r in rates)}/s: the baseline and "
                  f"{res.pick.name}, goodput under run.slo (~{planned.seconds:.0f} s: {planned.words()})")
    began = t.spent()
    plan = t.derived([t.variant_dict(res.pick)], cost=False, rates=rates, conc=[max(res.levels)])
    async for e in t.sub_run(plan, "load"):
        yield e
    st["load_s"] = round(t.spent() - began, 1)
    st["load_done"] = True
    save()
