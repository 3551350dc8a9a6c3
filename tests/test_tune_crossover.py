"""`draftbench tune --concurrency auto` on the stand-in, from a recorded run (tests/fixtures/tune-crossover:
the demo's good drafter, steps 2 and 3, batches up to 64, --mix 1:4,64:1; the files its report reads, machine
paths removed). The report is rebuilt from those files (`tune --report`): docs/tune.md's figures must be what
it says, the crossover must lie within one measured batch of the stand-in's own, the paired runs must decide
both sides, and the schedule must beat every single config on the mixed load, paired by repeat."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.cli.demo import GOOD_PROFILE
from harness.sim.sglang import model
from harness.sim.sglang.model import SpecShape
from harness.studies.tune_view import load_tune, rebuild_report
from tests.fixture_dirs import docs_lines_missing

FIXTURE = Path(__file__).parent / "fixtures" / "tune-crossover"
DOCS = Path(__file__).parent.parent / "docs" / "tune.md"
MARKER = "A stand-in run (`tests/fixtures/tune-crossover/`"  # the docs block the rebuilt report must hold


def _truth(shape: SpecShape) -> int:
    al = model.expected_accept_length(GOOD_PROFILE, shape)
    return next(b for b in range(1, 512)
                if al * model.decode_step_seconds(b, True) / model.verify_step_seconds(b, shape, True) <= 1.0)


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("crossover") / "tune-demo"
    shutil.copytree(FIXTURE, d)
    rebuild_report(d)
    return d


def test_docs_figures_are_the_rebuilt_reports(rebuilt):
    block, missing = docs_lines_missing(DOCS, MARKER, rebuilt / "tune_report.txt")
    assert len(block) > 10
    assert not missing, missing


def test_the_crossover_is_the_stand_ins_and_both_sides_are_decided(rebuilt):
    cross = pd.read_csv(rebuilt / "crossover.csv")
    levels = sorted(set(cross["batch"]))
    for name, shape in (("s2-k1-d3-g", SpecShape(2, 1, 3)), ("s3-k1-d4-g", SpecShape(3, 1, 4))):
        rows = cross[cross["config"] == name]
        found, truth = float(rows["crossover_concurrency"].iloc[0]), _truth(shape)
        between = [b for b in levels if min(found, truth - 0.5) < b < max(found, truth - 0.5)]
        assert len(between) <= 1, (name, found, truth, levels)
    pick = cross[cross["verdict"].notna()]
    verdicts = dict(zip(pick["batch"], pick["verdict"], strict=True))
    at = float(pick["crossover_concurrency"].iloc[0])
    assert any(v == "faster" and b < at for b, v in verdicts.items())
    assert any(v in ("slower", "equivalent") and b > at for b, v in verdicts.items())
    assert not any(v == "faster" and b > at + 8 for b, v in verdicts.items())  # never faster far past it


def test_the_schedule_beats_every_single_config_on_the_mixed_load(rebuilt):
    mix = pd.read_csv(rebuilt / "tune_mix.csv")
    assert set(mix["single"]) == {"baseline", "s2-k1-d3-g", "s3-k1-d4-g"}
    assert (mix["verdict"] == "faster").all() and (mix["ratio_ci_low"] > 1.0).all()
    assert (mix["repeats"] >= 3).all()


def test_schedule_profile_and_exports(rebuilt):
    profile = json.loads((rebuilt / "speculation_profile.json").read_text(encoding="utf-8"))
    bands = profile["schedule"]
    assert [b["num_steps"] for b in bands] == [3, 2, 0] and bands[-1]["max_batch"] == 64
    assert all(b["max_batch"] < n["max_batch"] for b, n in zip(bands, bands[1:], strict=False))
    assert set(profile["crossover_concurrency"]) == {"s2-k1-d3-g", "s3-k1-d4-g"}
    sched = json.loads((rebuilt / "schedule.json").read_text(encoding="utf-8"))
    assert sched["engines"]["sglang"]["dynamic"]["available"]  # the stand-in is 0.5.15.post1
    assert sched["tensorrt_llm"]["draft_len_schedule"] == {str(b["max_batch"]): b["num_steps"]
                                                           for b in bands[:2]}
    rows = pd.read_csv(rebuilt / "tune.csv")
    s3_c1 = rows[(rows["num_steps"] == 3) & (rows["concurrency"] == 1)].iloc[0]
    assert s3_c1["schedule_band"] == f"c1-c{bands[0]['max_batch']}"
    load = pd.read_csv(rebuilt / "tune_load.csv")  # open loop: the faster server holds a smaller batch
    assert len(load) == 5 and load["request_rate"].is_monotonic_increasing
    assert (load["pick_goodput_req_s"] >= load["baseline_goodput_req_s"]).all()
    assert load["tpot_speedup"].iloc[0] > 1.0 >= load["tpot_speedup"].iloc[-1]  # past the baseline's capacity


def test_the_tui_view_carries_the_chart(rebuilt):
    from harness.tui.screens.tune import answer_text

    view = load_tune(rebuilt)
    assert "predicted speedup against concurrency" in view.crossover and "^ c" in view.crossover
    assert view.crossover in answer_text(view)
    # the answer by context bucket and the deployment's buckets the smoke prompts leave empty, as the CLI's
    by_context = [ln for ln in view.answer if " by context: " in ln or ln.startswith("warning: the suites' ")]
    assert by_context and all(ln in (rebuilt / "tune_report.txt").read_text() for ln in by_context)
    assert "do not cover the deployment's buckets 1k-4k, 4k-16k, 16k-64k" in by_context[-1]


# ------------------------------------------------------------------------ the load stage's budget (issue 30)
def _load_stage(tmp_path: Path, budget_over_plan: float):
    """The fixture's tune at its load stage again (its load/ gone), with a budget that leaves
    `budget_over_plan` x the stage's planned cost: the events `_load` yields and the plans it would run."""
    import asyncio

    from harness.analysis import crossover_report as cr
    from harness.studies import tune_budget as tb
    from harness.studies import tune_crossover as tx
    from harness.studies.tune_view import _from_files

    d = tmp_path / "tune-demo"
    shutil.copytree(FIXTURE, d)
    shutil.rmtree(d / "load")
    t, ready = _from_files(d)
    assert ready
    res = cr.build(t)
    rates = tx.load_rates(t, res)
    assert res.pick is not None and rates
    planned = tb.load_plan(t, res.pick, rates, max(res.levels))
    assert planned is not None
    t.opts.budget_s = t.spent() + budget_over_plan * planned.seconds
    ran: list = []

    async def sub_run(plan, sub):  # the stage's sub-run, recorded instead of started
        ran.append((sub, plan))
        return
        yield

    t.sub_run = sub_run
    st = {k: v for k, v in (t.state.crossover or {}).items() if k != "load_done"}

    async def drive() -> list:
        return [e async for e in tx._load(t, st, lambda: None)]

    return asyncio.run(drive()), ran, planned, st, t


def test_the_load_stage_is_planned_from_what_it_runs(tmp_path):
    # the fixture's own run: each rate's phase, both arms, as measured (summary_by_rate.csv's wall_s)
    measured = pd.read_csv(FIXTURE / "load" / "summary_by_rate.csv")
    events, ran, planned, st, t = _load_stage(tmp_path, 1.2)
    assert planned.rates == sorted(measured["request_rate"].unique().tolist())
    for arm, got in planned.phase_s.items():
        walls = measured[measured["variant"] == arm].sort_values("request_rate")["wall_s"].tolist()
        assert len(walls) == len(got)
        for want, plan_s in zip(walls, got, strict=True):
            assert plan_s == pytest.approx(want, rel=0.15), (arm, plan_s, want)
    # the baseline's whole stage (its server adopted: no start), warmup and phases, as the tune timed it
    state = json.loads((FIXTURE / "tune_state.json").read_text(encoding="utf-8"))
    assert planned.arm_s["baseline"] == pytest.approx(state["stage_s"]["load/baseline"], rel=0.15)
    assert t.verify_cost() < planned.seconds / 10  # what the stage was charged before: a paired run's cost
    # and the plan counts what the stage runs: both arms, these rates, these requests, no acceptance probe
    (sub, plan), = ran
    assert sub == "load" and st["load_done"] and st["load_planned_s"] == pytest.approx(planned.seconds, 0.01)
    assert [float(r) for r in plan.run.request_rate] == planned.rates and not plan.run.concurrency
    assert [len(s.prompts) for s in plan.suites] == [planned.requests] and planned.requests == 4 * 64
    assert int(plan.run.max_tokens) == planned.max_tokens and plan.run.per_request_spec == "off"
    assert {v.name for v in plan.variants} == set(planned.arm_s) and plan.run.repeats == 1
    assert any(e.stage == "load" and f"~{planned.seconds:.0f} s" in e.message for e in events)


def test_a_budget_too_small_for_the_load_stage_skips_it_with_a_line(tmp_path):
    events, ran, planned, st, _ = _load_stage(tmp_path, 0.5)
    assert not ran and not st.get("load_done")  # nothing started: the budget is not overrun
    said = [e.message for e in events if e.stage == "load"]
    assert len(said) == 1 and said[0].startswith(
        f"budget: the request rates are not run: they need ~{planned.seconds:.0f} s ({planned.words()}), ")
    left = re.search(r", (\d+) s of the budget is left$", said[0])
    assert left is not None and int(left.group(1)) <= 0.5 * planned.seconds + 1  # the clock ran meanwhile
    assert "5 rates x 256 requests x 2 arms, up to 64 tokens each" in said[0]
    assert st["load_skipped"] == pytest.approx(planned.seconds, abs=0.1)
