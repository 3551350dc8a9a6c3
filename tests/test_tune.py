"""draftbench tune end to end against the stand-in: a small grid, short phases, budget and resume.

The grid's truth comes from the stand-in's own model (expected accept length x step time), so the test can
say whether tune found the true best without paying for every grid point."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis import tune_model as tm
from harness.cli.demo import WEAK_PROFILE, prepare_demo
from harness.common import events as ev
from harness.common.errors import InputError
from harness.sim.sglang import model
from harness.sim.sglang.model import SpecShape
from harness.studies.tune import TuneOptions, read_tune_plan, tune

ENV = {"DRAFTBENCH_SIM_STARTUP_S": "0.1", "DRAFTBENCH_SIM_TIME_SCALE": "0.5"}
WIDE_ONLY_S = 30.0  # above the planner's wide-run estimate for this plan (~24 s), below what a step cost adds
CONC = [1, 4]


def _plan(tmp_path: Path):
    plan = prepare_demo(tmp_path)
    plan.target.env = dict(ENV)
    plan.run.max_tokens = 48
    plan.run.concurrency = CONC
    plan.run.min_steady_s = 0.0  # 5 prompts of 48 tokens: only the request count can rule a phase too short
    return plan


def _options(budget: float = 3600.0) -> TuneOptions:
    return TuneOptions(variant="seed-weak-eagle3", budget_s=budget, steps=[1, 2, 3], cost_tokens=48,
                       preflight=True)


def _truth(cfg: tm.Config, c: int) -> float:
    shape = SpecShape(cfg.num_steps, cfg.eagle_topk, cfg.num_draft_tokens)
    al = model.expected_accept_length(WEAK_PROFILE, shape)
    return al * model.decode_step_seconds(c, True) / model.verify_step_seconds(c, shape, cfg.cuda_graph)


async def _drive(gen, stop_after_measured: int | None = None) -> list:
    seen, measured = [], 0
    async with __import__("contextlib").aclosing(gen) as events:
        async for e in events:
            if isinstance(e, ev.TuneCandidate | ev.TuneDone | ev.TuneStage):
                seen.append(e)
            if isinstance(e, ev.TuneCandidate) and e.status == "measured" and e.config != "baseline":
                measured += 1
                if stop_after_measured is not None and measured >= stop_after_measured:
                    break  # as a dropped SSH session would: the generator is closed mid-search
    return seen


def test_tune_budget_resume_and_the_answer(tmp_path):
    plan = _plan(tmp_path)
    # 0. a budget that cannot buy even the wide run: refused before any server starts, with the minimum
    with pytest.raises(InputError, match="cannot decide anything: the wide run alone needs ~"):
        asyncio.run(_drive(tune(plan, _options(budget=1.0), results_dir=tmp_path)))
    # 1. a budget the wide run alone spends: no step-cost stage may start, and the tune still answers
    first = asyncio.run(_drive(tune(plan, _options(budget=WIDE_ONLY_S), results_dir=tmp_path)))
    done = [e for e in first if isinstance(e, ev.TuneDone)][0]
    assert done.stop_reason == "budget" and not done.complete and done.answered
    said = [e.message for e in first if isinstance(e, ev.TuneStage) and e.stage == "plan"]
    assert len(said) == 1 and said[0].startswith(f"{WIDE_ONLY_S:.0f} s buys the wide run (~")
    assert "stay predicted" in said[0]
    tune_dir = Path(done.tune_dir)
    budget_rows = pd.read_csv(tune_dir / "tune.csv")
    # every grid config has a predicted speedup: step costs from the wide run's own windows and the prior
    assert budget_rows["speedup_pred"].notna().all() and budget_rows["accept_len_pred"].notna().all()
    report = (tune_dir / "tune_report.txt").read_text()
    assert "nothing predicted" not in report and "nothing to predict" not in report
    assert all(f"c{c}: " in report for c in CONC) and "left to decide:" in report
    state = json.loads((tune_dir / "tune_state.json").read_text())
    # no step-cost config started: at most the wide run's own servers measured their step costs (adopted)
    assert state["starts"] == 2
    assert all(k in state.get("adopted", []) for k in state["stage_s"] if k.startswith("cost/"))
    assert all(d["spent_s"] + d["est_cost_s"] <= d["budget_s"] for d in state["decisions"])
    # and it says what the rest needs, with the resume that buys it, under the report's header
    assert state["short"]["need_s"] > state["short"]["left_s"]
    assert f"not measured: they need ~{state['short']['need_s']:.0f} s" in report.splitlines()[2]
    assert f"draftbench tune --resume {tune_dir} --budget {state['short']['resume_min']}m" in report

    # 2. resumed with a real budget, then interrupted after one measured config (closing the generator)
    first_phases = pd.read_csv(tune_dir / "wide" / "phases.csv")
    plan2, opts = read_tune_plan(tune_dir)
    opts.budget_s = 3600.0
    asyncio.run(_drive(tune(plan2, opts, resume_dir=tune_dir), stop_after_measured=1))
    mid = json.loads((tune_dir / "tune_state.json").read_text())
    # the wide run was not redone: the phases of its first session stand as they were (phases.csv is
    # appended to), and what the resume added are only later repeats, of the rows the budget had left
    # undecided (the stopping rule resumes where the budget stopped it)
    wide_phases = pd.read_csv(tune_dir / "wide" / "phases.csv")
    assert not wide_phases.duplicated(["variant", "phase"]).any()
    pd.testing.assert_frame_equal(wide_phases.head(len(first_phases)), first_phases)
    added = wide_phases.iloc[len(first_phases):]
    done_repeats = first_phases.groupby(["variant", "concurrency"])["repeat"].max()
    assert all(r.repeat > done_repeats[(r.variant, r.concurrency)] for r in added.itertuples())
    # a stage's time adds up over the sessions (as spent_s does): the baseline's grew by what the resume ran
    # of it, and stayed where nothing of it ran (two sessions' wall times are never compared)
    grown = mid["stage_s"]["wide/baseline"] - state["stage_s"]["wide/baseline"]
    assert grown > 0 if (added["variant"] == "baseline").any() else grown == 0

    # 3. resumed to the end
    last = asyncio.run(_drive(tune(plan2, opts, resume_dir=tune_dir)))
    done = [e for e in last if isinstance(e, ev.TuneDone)][0]
    assert done.complete and done.stop_reason in ("confirmed", "grid-exhausted")
    assert json.loads((tune_dir / "tune_state.json").read_text()).get("short") is None  # bought: said no more
    assert "not measured: they need" not in (tune_dir / "tune_report.txt").read_text()
    # the search pruned: fewer configs had their step costs measured than a grid run measures (each a server
    # start, unless it took over the wide run's); `starts` also counts the restarts of the two resumes above,
    # 7 to 9 of them here, so it is not what tells a search from a grid run
    final = json.loads((tune_dir / "tune_state.json").read_text())
    costed = {k.split("/", 1)[1] for k in final["stage_s"] if k.startswith("cost/") and k != "cost/baseline"}
    assert 0 < len(costed) < done.grid_size, sorted(costed)
    rows = pd.read_csv(tune_dir / "tune.csv")
    assert len(rows) == done.grid_size * len(CONC)
    grid = [tm.Config(int(r.num_steps), int(r.eagle_topk), int(r.num_draft_tokens), bool(r.cuda_graph))
            for r in rows.drop_duplicates(["num_steps", "eagle_topk", "num_draft_tokens", "cuda_graph"])
            .itertuples()]
    seed = tm.Config(15, 1, 16, False)
    assert seed in grid
    for c in CONC:
        at = rows[rows["concurrency"] == c]
        m = at[at["measured"].notna()]
        # predictions of measured configs against the stand-in's own model (the full grid's truth); the
        # stand-in's own processing adds a near-constant time per step at this time scale (and load more)
        for r in m.itertuples():
            cfg = tm.Config(int(r.num_steps), int(r.eagle_topk), int(r.num_draft_tokens), bool(r.cuda_graph))
            # +21 % seen once on a loaded 2-core machine; the pick below is the strong check
            assert r.speedup_pred == pytest.approx(_truth(cfg, c), rel=0.3)
        best = m.loc[m["speedup_pred"].idxmax()]
        pick = tm.Config(int(best.num_steps), int(best.eagle_topk), int(best.num_draft_tokens),
                         bool(best.cuda_graph))
        true_best = max(_truth(g, c) for g in grid)
        # near the best: under a loaded 2-core machine neighbouring configs (1.06x vs 1.11x at c4 once) swap
        # places
        assert _truth(pick, c) >= 0.90 * true_best
        assert _truth(pick, c) > _truth(seed, c) and best.speedup_pred > 1.0
        # a full paired run measured it: above 1.00x at c1 (true ~1.2x); at c4 the true gain is ~1.06-1.11x,
        # inside what a loaded 2-core machine moves one short run by, so there only "not slower than 0.9x"
        assert best.measured == "verified" and best.speedup > (1.0 if c == 1 else 0.9)
    # accept length predicted from the steps-15 histogram at every shorter chain: equal to the stand-in's
    # model up to the sampling noise of the verify steps it saw (each step's draws are independent there), so
    # within 3 standard errors of the mean; 10 requests of 48 tokens are ~240 steps, about 4 % of AL each se
    from harness.analysis import tune_data as td

    hist = tm.add_histograms(td.histograms_by_category(tune_dir / "wide", "wide-s15-k1-d16-g").values())
    steps = sum(hist)
    assert steps >= 100
    for r in rows[rows["cuda_graph"]].drop_duplicates("num_steps").itertuples():
        k = int(r.num_steps)
        truth = model.expected_accept_length(WEAK_PROFILE, SpecShape(k, 1, k + 1))
        vals = [(min(j, k) + 1, n) for j, n in enumerate(hist)]
        mean = sum(v * n for v, n in vals) / steps
        se = (sum(n * (v - mean) ** 2 for v, n in vals) / (steps - 1) / steps) ** 0.5
        assert r.accept_len_pred == pytest.approx(mean, abs=1e-9)  # the chain formula, over what was seen
        assert abs(r.accept_len_pred - truth) <= 3 * se, (k, r.accept_len_pred, truth, se)
    profile = json.loads((tune_dir / "speculation_profile.json").read_text())
    assert profile["validation"]["mean_consistency"]["passed"]
    assert profile["num_speculative_tokens"] == 15 and len(profile["marginal_accept_rates"]) == 15
    report = (tune_dir / "tune_report.txt").read_text()
    lines = {ln.split(":")[0]: ln for ln in report.splitlines() if ln.startswith(("c1:", "c4:"))}
    # c1: 5 requests of a 1.2x config decide it (min_steady_s 0), unless a loaded machine widens the interval
    assert lines["c1"].startswith(("c1: use num_steps", "c1: cannot tell yet"))
    assert "no config" not in lines["c1"]
    # c4: phase sizing cycles the 5 prompts to 4 x 4 requests, so the row is judged, never too short
    assert "too short" not in lines["c4"] and "P(accepted >= k)" in report
    if lines["c1"].startswith("c1: use"):
        assert "  launch flags: --speculative-algorithm EAGLE3 --speculative-draft-model-path " in report
    warned = [e.message for e in first if isinstance(e, ev.TuneStage) and e.message.startswith("warning:")]
    assert warned == []  # phase sizing: no suite is too short for a verification
    # by context bucket (harness.analysis.tune_context): the smoke prompts reach the first bucket only, and
    # the answer says which of the deployment's buckets (run.context_buckets, the defaults) it misses
    by_context = pd.read_csv(tune_dir / "tune_by_context.csv")
    assert set(by_context["bucket"]) == {"0-1k"} and set(by_context["concurrency"]) == set(CONC)
    assert set(by_context["sampling"]) == set(rows["sampling"]) == {"t0"}
    assert "c1 by context: steps " in report and "warning: the suites' context lengths do not cover the " \
        "deployment's buckets 1k-4k, 4k-16k, 16k-64k" in report
    assert not os.environ.get("DRAFTBENCH_SIM_TIME_SCALE")  # the stand-in's knobs stay in the plan's env


def test_tune_adopts_the_wide_runs_servers_and_leaves_none_running(tmp_path):
    """The wide run's baseline and longest chain get their step-cost phases where they stand (no second
    start of either), a winner still up is verified without a restart, and when the tune ends every
    server it kept is stopped."""
    from tests.faults_helpers import live_groups, read_jsonl

    plan = _plan(tmp_path)
    plan.run.concurrency = [1]
    opts = TuneOptions(variant="seed-weak-eagle3", budget_s=3600.0, steps=[1, 3], graphs=[True],
                       cost_tokens=32, concurrency=[1], preflight=False)
    seen = asyncio.run(_drive(tune(plan, opts, results_dir=tmp_path)))
    done = [e for e in seen if isinstance(e, ev.TuneDone)][0]
    tune_dir = Path(done.tune_dir)
    state = json.loads((tune_dir / "tune_state.json").read_text())
    wide = "s15-k1-d16-g"  # the plan's own num_steps (15) is the longest chain
    assert {"cost/baseline", f"cost/{wide}"} <= set(state["adopted"])
    entries = [e for p in tune_dir.rglob("servers.jsonl") for e in read_jsonl(p)]
    started = [e for e in entries if e.get("state") == "started"]
    fresh = [e for e in started if "adopted_from" not in e]
    assert state["starts"] == len(fresh)  # a start is a new process group; an adoption is not one
    # on the target each sub-run's servers live under this tune's own directory, never a `runs/wide/` that
    # the next tune would share (tests/test_remote_run_dirs.py)
    for e in fresh:
        assert Path(e["pid_path"]).parent.parent.name == tune_dir.name, e["pid_path"]
    cost_started = [e for e in read_jsonl(tune_dir / "cost" / "servers.jsonl") if e.get("state") == "started"]
    by_variant = {e["variant"]: e for e in cost_started}
    assert "adopted_from" in by_variant["baseline"] and "adopted_from" in by_variant[wide]
    assert "adopted_from" not in by_variant["s1-k1-d2-g"]  # a config the wide run never served: started
    # nothing left running: every group any sub-run started or adopted is gone
    assert not ({e["pgid"] for e in started} & live_groups())
    wide_run = {e["variant"]: e["pgid"] for e in read_jsonl(tune_dir / "wide" / "servers.jsonl")
                if e.get("state") == "started" and "adopted_from" not in e}
    assert by_variant["baseline"]["pgid"] == wide_run["baseline"]
    assert by_variant[wide]["pgid"] == wide_run[f"wide-{wide}"]
    # the winner (a short chain: this drafter's acceptance collapses long before 15) was verified on the
    # server its step-cost phases had kept, not on a new one
    verified = [e for e in read_jsonl(tune_dir / "wide" / "servers.jsonl") if e.get("state") == "started"
                and e["variant"] not in wide_run]
    assert verified and all(e.get("adopted_from") == "cost" for e in verified)
    rows = pd.read_csv(tune_dir / "tune.csv")
    assert set(rows["measured"].dropna()) <= {"verified", "step"} and rows["step_ms"].notna().sum() >= 3
    # a step row's accept length error is against the prediction for the prompts its phases replayed
    step = rows[rows["measured"] == "step"]
    assert len(step) and step["accept_len_pred_cost_prompts"].notna().all()
    for r in step.itertuples():
        want = 100 * (r.accept_len_pred_cost_prompts - r.accept_len_measured) / r.accept_len_measured
        assert r.accept_len_error_pct == pytest.approx(want, abs=0.01)
