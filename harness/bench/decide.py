"""More repeats after a run's first round: `run.stop: decided` (the stopping rule) and `run.until_ci_pct`.

The stopping rule (harness.analysis.sequential has the statistics): looks after repeats r_1 < ... < r_K
fixed before any data (run.repeats, doubling, run.max_repeats). At each look every row still open is judged
at that look's level; decisions.jsonl records which rows the look covered, at which level and with how
many repeats, so a re-summary (`draftbench summary`, the TUI) judges each row at the look it stopped at.
Rows decided (faster, slower, equivalent) stop; the baseline and the variants with rows still undecided
get the repeats up to the next look, at those concurrencies only, on servers kept up between looks
where the GPU has room (harness.serve.kept.gpu_has_room). A look the budget (run.budget_s) cannot pay for
is not started: the rows it would have decided say what they need.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from harness.analysis import sequential
from harness.bench.conversation import requests_per_pass
from harness.common import events as ev
from harness.engines import engine_of

if TYPE_CHECKING:
    from harness.bench.run_state import RunState
    from harness.inputs.config import Plan, Variant


async def more_repeats(run: RunState, ordered: list[Variant]) -> None:
    settings = run.plan.run
    if settings.stop == "decided":
        await _decided(run, ordered)
    elif settings.until_ci_pct:
        await _until_ci(run, ordered)


async def _until_ci(run: RunState, ordered: list[Variant]) -> None:
    """run.until_ci_pct: one more repeat at a time of every variant whose speedup interval is still wider and
    of its baseline (the pairs need it), up to run.max_repeats."""
    from harness.analysis.summary import summarise_dir
    from harness.analysis.verdicts import needing_repeats

    settings = run.plan.run
    for repeat in range(settings.repeats + 1, settings.max_repeats + 1):
        wide = needing_repeats(summarise_dir(run.run_dir), settings.until_ci_pct) - run.failed
        if not wide:
            return
        paired = {run.plan.baseline_of(v).name for v in run.plan.variants if v.name in wide}  # engine, arm
        again = [v for v in ordered if v.name in wide or v.name in paired]
        run.total_requests += requests_per_pass(run.plan) * len(again)
        for variant in again:
            await run._run_variant(variant, run.versions[engine_of(run.plan, variant).name], [repeat])


def interleaved(plan: Plan) -> bool:
    """May every variant's server stay up at once (harness.serve.kept.gpu_has_room)? Then the stopping rule
    runs the arms repeat by repeat, side by side in time, on servers started once."""
    from harness.serve.kept import gpu_has_room

    return plan.run.stop == "decided" and gpu_has_room(plan, max(0, len(plan.variants) - 1))


def _spec_rows(run: RunState) -> list[tuple[str, int]]:
    return [(v.name, c) for v in run.plan.variants if not v.is_baseline and v.name not in run.failed
            for c in run.plan.run.concurrency]


def rerun_levels(plan: Plan, variant: Variant, open_rows: list[tuple[str, int]]) -> set[int]:
    """The concurrencies a later look reruns `variant` at: those of its own undecided rows, or for a baseline
    those of the undecided rows paired with it (its engine's, at its sampling arm), not of rows decided."""
    return {c for v, c in open_rows if variant.name in (v, plan.baseline_of(plan.variant(v)).name)}


def write_look(run: RunState, look: int, looks: int, level: float, rows: list[tuple[str, int]],
               repeats: int) -> None:
    from harness.analysis.summary import DECISIONS_FILE

    with open(run.run_dir / DECISIONS_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"look": look, "looks": looks, "level": round(level, 6), "repeats": repeats,
                             "rows": [{"variant": v, "concurrency": c, "repeats": repeats} for v, c in rows],
                             "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n")


def _round_cost(run: RunState, rows: list[tuple[str, int]], more: int) -> float:
    """Seconds `more` repeats of these rows (and of the baseline beside them) would take: their phases'
    mean wall time so far, plus a start-up for every server that is not kept up."""
    import pandas as pd

    from harness.analysis.summary import read_variants

    path = run.run_dir / "phases.csv"
    ph = pd.read_csv(path) if path.exists() and path.stat().st_size else pd.DataFrame()
    names = {v for v, _ in rows} | {run.plan.baseline_of(run.plan.variant(v)).name for v, _ in rows}
    concs = {c for _, c in rows}
    cost = 0.0
    if not ph.empty:
        sel = ph[ph["variant"].isin(names) & ph["concurrency"].isin(concs)]
        cost += float(pd.to_numeric(sel["wall_s"], errors="coerce").groupby([sel["variant"],
                                                                             sel["concurrency"]])
                      .mean().sum()) * more
    meta = read_variants(run.run_dir)
    for n in names - set(run.parked):
        cost += float(meta.get(n, {}).get("startup_s") or 0.0) + 5.0  # + a warmup
    return cost


async def _decided(run: RunState, ordered: list[Variant]) -> None:
    from harness.analysis.summary import summarise_dir
    from harness.analysis.verdicts import undecided_rows

    settings = run.plan.run
    schedule = sequential.look_schedule(settings.repeats, settings.max_repeats)
    looks = len(schedule)
    open_rows = _spec_rows(run)
    deadline = run.deadline
    for look, repeats in enumerate(schedule, start=1):
        if look > 1:
            prev = schedule[look - 2]
            # every server kept up: repeat by repeat, each arm's repeat r right after the baseline's, so a
            # drift of the machine over minutes falls inside each pair (the H200 moved 20 % in a minute);
            # without the room for it, each variant's repeats in one go (one start per variant and look)
            rounds = [[r] for r in range(prev + 1, repeats + 1)] if interleaved(run.plan) else \
                [list(range(prev + 1, repeats + 1))]
            for reps in rounds:
                for variant in ordered:
                    concs = rerun_levels(run.plan, variant, open_rows)
                    if not concs or variant.name in run.failed:
                        continue
                    run.total_requests += _requests_of(run, concs) * len(reps)
                    await run._run_variant(variant, run.versions[engine_of(run.plan, variant).name], reps,
                                           concs, park=True)
            open_rows = [r for r in open_rows if r[0] not in run.failed]
        level = sequential.look_level(look, looks)
        write_look(run, look, looks, level, open_rows, repeats)
        summary = summarise_dir(run.run_dir)
        still = undecided_rows(summary)
        verdicts = {(str(r["variant"]), int(r["concurrency"])): str(r["verdict"])
                    for _, r in summary.iterrows()}
        decided = tuple(f"{v}@c{c} {verdicts.get((v, c))}" for v, c in open_rows if (v, c) not in still)
        open_rows = [r for r in open_rows if r in still]
        detail = ""
        if open_rows and look < looks:
            nxt = schedule[look]
            cost = _round_cost(run, open_rows, nxt - repeats)
            if deadline is not None and time.monotonic() + cost > deadline:
                detail = (f"budget: the next look ({nxt} repeats) needs ~{cost:.0f} s, "
                          f"{max(0.0, deadline - time.monotonic()):.0f} s are left")
                run.emit(ev.Look(look, looks, level, repeats, decided,
                                 tuple(f"{v}@c{c}" for v, c in open_rows), detail))
                return
            detail = f"next look after {nxt} repeats (~{cost:.0f} s)"
        elif open_rows:
            detail = f"run.max_repeats ({settings.max_repeats}) reached"
        run.emit(ev.Look(look, looks, level, repeats, decided, tuple(f"{v}@c{c}" for v, c in open_rows),
                         detail))
        if not open_rows:
            return


def _requests_of(run: RunState, concs: set[int]) -> int:
    turns = sum(p.turns for s in run.plan.suites for p in s.prompts)
    return turns * len(concs)
