"""A tune whose budget runs short after the wide run (issue 30, seen on the H200 on 2026-12-03).

There, `tune --concurrency auto --budget 9m` spent 369 s of 540 on the wide run (two starts and the first
EAGLE-3 decode's 121 s compile); the wide run had kept the 84 s its servers' step-cost phases need, yet the
step-cost stage asked for a whole verification's time (153 s) before adopting them, measured nothing, and
answered `c2..c64: nothing to predict from` with `stop: budget` and no word of what it would take. A resume
with 5 minutes more stopped after 4 s the same way.

Here the stand-in's tune reaches its step-cost stage with only the adopted phases' reserve left (the clock
jumps there) and a verification that costs more than that: the wide run's servers must still measure their
step costs, the crossover must come from them, and the stop must say what the rest needs and the resume
that buys it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import pandas as pd

from harness.cli.demo import prepare_demo
from harness.common import events as ev
from harness.studies import tune_budget as tb
from harness.studies.tune import TuneOptions, tune

ENV = {"DRAFTBENCH_SIM_STARTUP_S": "0.1", "DRAFTBENCH_SIM_TIME_SCALE": "0.2"}
BUDGET_S = 3600.0
LADDER = [1, 2, 4]  # --concurrency auto --max-batch 4
# what the wide run keeps for its servers' step-cost phases (tune_budget.cost_reserve): both arms, each level
RESERVE_S = 2 * len(LADDER) * tb.COST_PHASE_PRIOR_S["simulated"]
VERIFY_S = 1000.0  # a verification dearer than anything left after the wide run (the H200's: 153 s)


def _plan(tmp_path: Path):
    plan = prepare_demo(tmp_path)
    plan.target.env = dict(ENV)
    plan.run.max_tokens = 48
    plan.run.concurrency = [1]
    plan.run.min_steady_s = 0.0
    return plan


def test_a_short_budget_still_measures_the_wide_runs_step_costs_and_says_what_the_rest_needs(
        tmp_path, monkeypatch):
    monkeypatch.setattr(tb, "verify_cost", lambda t: VERIFY_S)
    offset = [0.0]

    def clock() -> float:
        return time.monotonic() + offset[0]

    opts = TuneOptions(variant="seed-weak-eagle3", budget_s=BUDGET_S, steps=[1, 3], cost_tokens=48,
                       auto=True, max_batch=4, mix=None, load=False)
    seen: list = []
    t0 = clock()

    async def drive() -> None:
        gen = tune(_plan(tmp_path), opts, results_dir=tmp_path, clock=clock)
        async with contextlib.aclosing(gen) as events:
            async for e in events:
                seen.append(e)
                if isinstance(e, ev.TuneStage) and e.stage == "step-cost" \
                        and not e.message.startswith("budget"):
                    # the wide run is done: leave the budget what it kept for the adopted phases, and 2 s
                    spent = clock() - t0
                    offset[0] += BUDGET_S - spent - RESERVE_S - 2.0

    asyncio.run(drive())
    done = next(e for e in seen if isinstance(e, ev.TuneDone))
    tune_dir = Path(done.tune_dir)
    state = json.loads((tune_dir / "tune_state.json").read_text())
    wide = next(k.split("/")[1] for k in state["stage_s"] if k.startswith("wide/wide-"))[len("wide-"):]
    # the wide run's own servers measured the baseline's and its step costs, at every level of the ladder
    assert {"cost/baseline", f"cost/{wide}"} <= set(state["adopted"]), json.dumps(state, indent=1)
    phases = pd.read_csv(tune_dir / "cost" / "phases.csv")
    for v in ("baseline", wide):
        assert sorted(set(phases[phases["variant"] == v]["concurrency"])) == LADDER
    # nothing else started: the next config needs a start and a verification the budget cannot pay
    assert state["starts"] == 2 and done.stop_reason == "budget"
    short = state["short"]
    assert short["what"].startswith("the step costs of s") and wide not in short["what"]
    assert short["reserve_s"] == VERIFY_S
    assert short["need_s"] > short["left_s"] and short["resume_min"] * 60 >= short["need_s"]
    said = [e.message for e in seen if isinstance(e, ev.TuneStage) and e.message.startswith("budget:")]
    words = (f"budget: {short['what']} not measured: they need ~{short['need_s']:.0f} s, "
             f"~{VERIFY_S:.0f} s of it kept for a verification; {short['left_s']:.0f} s of the budget was "
             f"left; draftbench tune --resume {tune_dir} --budget {short['resume_min']}m measures them")
    assert said == [words]
    report = (tune_dir / "tune_report.txt").read_text()
    assert words in report.splitlines()[:4]  # under the header, before the answer it qualifies
    # the answer has what it needs at every level: the crossover comes from the adopted step costs
    assert "nothing to predict from" not in report and "no step costs to tell it from" not in report
    assert "crossover (where speculation stops paying), from step costs at c1, c2, c4:" in report

