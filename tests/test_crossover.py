"""The crossover search against the stand-in's own scheduler, and the schedule's math.

The stand-in's truth is its step-cost model (harness.sim.sglang.model): the first batch where expected accept
length x decode step / verify step falls to 1.00x or below. The search sees what tune sees: the scheduler's
Decode lines (its real log format, parsed by the SGLang engine's parser) at each batch of the ladder and of
the bisection, with the stand-in's seeded step noise, and the accept length from the requests' histograms.
The scheduler runs on a virtual clock (tests/virtual_clock.py): its windows last their steps' modelled time
exactly, so what is tested is the search against the model and its noise, not how busy the machine is (on
wall time at time scale 0.1, with 1-4 ms windows, a loaded 2-core machine failed 7 runs in 8)."""

from __future__ import annotations

import asyncio
import io
import json

import pandas as pd
import pytest

from harness.analysis import crossover as cx
from harness.analysis import crossover_data as cd
from harness.analysis import schedule as sc
from harness.analysis import tune_model as tm
from harness.analysis.crossover_chart import chart_text
from harness.analysis.tune_model import Config
from harness.cli.demo import GOOD_PROFILE, WEAK_PROFILE
from harness.engines import ENGINE_NAMES, get_engine
from harness.sim.sglang import model
from harness.sim.sglang.engine import Engine, EngineConfig, Req
from harness.sim.sglang.logs import SimLog
from harness.sim.sglang.model import SpecShape, StepNoise
from tests.virtual_clock import run_on_virtual_clock

SCALE = 1.0  # the stand-in's time scale: on the virtual clock a step costs no wall time at any scale
TOKENS = 81  # a prefill token and 80 more: ~20 decode windows of 4 steps at the baseline


def true_crossover(profile: list[float], shape: SpecShape) -> int:
    al = model.expected_accept_length(profile, shape)
    return next(b for b in range(1, 1024)
                if al * model.decode_step_seconds(b, True) / model.verify_step_seconds(b, shape, True) <= 1.0)


async def _measure(level: int, spec: SpecShape | None, profile: list[float], seed: int
                   ) -> tuple[pd.DataFrame, list[int]]:
    """`level` requests started together on a fresh stand-in scheduler: its Decode windows, parsed as tune
    parses a server log, and the requests' summed histogram."""
    err = io.StringIO()
    cfg = EngineConfig(max_running=level, max_total_tokens=1_000_000, context_len=8192,
                       chunked_prefill_size=1 << 20, decode_log_interval=4, graph_backend="full",
                       graph_max_bs=256, vocab_size=32000,
                       eos_token_id=2, seed=seed, time_scale=SCALE, spec=spec, per_position=tuple(profile),
                       noise=StepNoise(0.05, seed))
    engine = Engine(cfg, SimLog(err=err, out=io.StringIO()))
    reqs = [Req(rid=f"r{i}", prompt_ids=[1, 10 + i, 20 + i, 30], max_new_tokens=TOKENS, ignore_eos=True)
            for i in range(level)]
    task = asyncio.create_task(engine.run())
    for r in reqs:
        engine.submit(r)
    try:
        for r in reqs:
            while not r.finished:
                await r.event.wait()
                r.event.clear()
    finally:
        task.cancel()
    parse = get_engine("sglang").parse_log_line
    rows = [{"variant": "spec" if spec else "base", "phase": f"step-cost@c{level}#r1", "line": i,
             "kind": w.kind, "running_req": w.running_req, "accept_len": w.accept_len,
             "gen_throughput": w.gen_throughput}
            for i, text in enumerate(err.getvalue().splitlines(), start=1)
            if (w := parse(text, i)) is not None]
    return pd.DataFrame(rows), tm.add_histograms(r.histogram for r in reqs)


def _search(profile: list[float], shape: SpecShape, seed: int, top: int) -> tuple[cx.Crossing, list[int]]:
    """tune's crossover search on the stand-in: the ladder, then bisection of the bracket."""
    base: dict[int, cx.Step] = {}
    spec: dict[int, cx.Step] = {}
    hist: list[int] = []

    def measure(level: int) -> None:
        nonlocal hist
        for arm in (None, shape):
            windows, h = run_on_virtual_clock(_measure(level, arm, profile, seed * 1000 + level))
            steps = cd._level_steps(windows, "spec" if arm else "base")
            (spec if arm else base)[level] = steps[level]
            hist = tm.add_histograms([hist, h]) if arm else hist

    for level in cx.ladder(top):
        measure(level)
    cfg = Config(shape.num_steps, 1, shape.num_draft_tokens, True)
    while True:
        al = tm.predicted_accept_len(hist, cfg)
        cross = cx.crossing(al, cx.curve(al, cx.accept_len_se(hist, cfg.depth), spec, base, sorted(base)))
        nxt = cx.next_level(cross, sorted(base))
        if nxt is None:
            return cross, sorted(base)
        measure(nxt)


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "shape", "top", "seeds"), [
    # more seeds than on wall time: a search now costs a fraction of a second
    (WEAK_PROFILE, SpecShape(2, 1, 3), 16, (1, 2, 3, 4, 5, 6)),  # true crossover: batch 10
    (GOOD_PROFILE, SpecShape(3, 1, 4), 64, (1, 2, 3)),  # batch 35: past the compute ridge
])
def test_the_crossover_found_is_within_one_measured_level_of_the_stand_ins(profile, shape, top, seeds):
    truth = true_crossover(profile, shape)
    for seed in seeds:
        cross, levels = _search(profile, shape, seed, top)
        assert cross.status == "crosses" and cross.at is not None, (seed, cross)
        # the true crossing lies in (truth - 1, truth]: count the measured levels between it and the found one
        between = [b for b in levels if min(cross.at, truth - 0.5) < b < max(cross.at, truth - 0.5)]
        assert len(between) <= 1, (seed, cross, truth, levels)
        assert cross.below is not None and cross.above is not None and cross.below < cross.above


# ----------------------------------------------------------------------------------------- the math alone
def _model_curves(profile, shapes, levels):
    base = {b: cx.Step(model.decode_step_seconds(b, True) * 1000) for b in levels}
    out = {}
    for s in shapes:
        cfg = Config(s.num_steps, s.topk, s.num_draft_tokens, True)
        steps = {b: cx.Step(model.verify_step_seconds(b, s, True) * 1000) for b in levels}
        out[cfg] = cx.curve(model.expected_accept_length(profile, s), None, steps, base, levels)
    return out


def test_bands_follow_the_best_config_and_switch_speculation_off_at_the_crossover():
    levels = [1, 2, 4, 8, 16, 32]
    curves = _model_curves(WEAK_PROFILE, [SpecShape(2, 1, 3), SpecShape(3, 1, 4)], levels)
    bands = sc.bands(curves, levels, max_batch=48)
    assert [(b.min_batch, b.max_batch, b.num_steps) for b in bands] == [(1, 1, 3), (2, 9, 2), (10, 48, 0)]
    assert sc.band_config(bands[-1]) is None and sc.band_of(bands, 9).num_steps == 2
    # the band ends where its config's predicted speedup crosses 1.00x (linear between c8 and c16)
    s2 = Config(2, 1, 3, True)
    cross = cx.crossing(model.expected_accept_length(WEAK_PROFILE, SpecShape(2, 1, 3)), curves[s2])
    assert cross.below == 8 and cross.above == 16 and int(cross.at) == 9
    other = cx.Crossing("crosses", 4, 8, 6.1)
    assert sc.crossover_of({s2: cross, Config(3, 1, 4, True): other}) == (s2, cross)


def test_one_config_for_a_mix_weighs_throughput_by_the_time_spent_at_each_load():
    levels = [1, 16]
    curves = _model_curves(WEAK_PROFILE, [SpecShape(2, 1, 3)], levels)
    s2 = Config(2, 1, 3, True)
    assert sc.single_best(curves, {1: 1.0}) == s2  # it pays at c1
    assert sc.single_best(curves, {1: 1.0, 16: 1.0}) is None  # c16's tokens outweigh c1's gain: the baseline
    pred = sc.mix_throughput(curves, {1: 1.0, 16: 1.0})
    assert pred[sc.OFF] > pred[s2] > 0
    assert sc.parse_mix("1:0.5,8:0.3,1:0.5") == {1: 1.0, 8: 0.3}
    with pytest.raises(ValueError):
        sc.parse_mix("0:1")


def test_the_schedule_against_single_configs_is_paired_by_repeat_and_judged_by_its_interval():
    rows = []
    for r, jitter in enumerate((1.0, 1.02, 0.98), start=1):  # every arm moves together within a repeat
        for variant, c1, c16 in (("base", 100.0, 800.0), ("s2", 150.0, 740.0)):
            rows += [{"variant": variant, "concurrency": 1, "repeat": r, "tok_s": c1 * jitter},
                     {"variant": variant, "concurrency": 16, "repeat": r, "tok_s": c16 * jitter}]
    out = sc.mix_comparison(pd.DataFrame(rows), {1: "s2", 16: "base"}, {1: 1.0, 16: 1.0}, ["base", "s2"])
    got = {r.single: r for r in out.itertuples()}
    assert got["base"].ratio == pytest.approx(950 / 900) and got["s2"].ratio == pytest.approx(950 / 890)
    assert {r.verdict for r in out.itertuples()} == {"faster"} and (out["repeats"] == 3).all()
    # one repeat: no interval, so no verdict either way
    one = sc.mix_comparison(pd.DataFrame([x for x in rows if x["repeat"] == 1]), {1: "s2", 16: "base"},
                            {1: 1.0, 16: 1.0}, ["base"])
    assert one.iloc[0]["verdict"] == "undecided"


def test_every_engine_exports_every_band_and_says_what_it_fixes_at_launch():
    bands = [sc.Band(4, 3, 1, 4, True), sc.Band(9, 2, 1, 3, False, 5), sc.Band(64, 0, 0, 0, False, 10)]
    for name in ENGINE_NAMES:
        e = get_engine(name).schedule_export(bands, algorithm="EAGLE3", draft_path="heads/x", version=None)
        assert e["engine"] == name and len(e["per_band"]) == len(bands) and e["note"]
        assert [b["speculative"] for b in e["per_band"]] == [True, True, False]
        assert e["dynamic"]["available"] is False  # an unknown version is never assumed to have it
    sglang = get_engine("sglang").schedule_export(bands, algorithm="EAGLE3", draft_path="heads/x",
                                                  version="0.5.15.post1")
    assert "--speculative-num-steps 3" in sglang["per_band"][0]["launch_flags"]
    assert "--cuda-graph-backend-decode disabled" in sglang["per_band"][1]["launch_flags"]  # 0.5.14+ spelling
    assert sglang["per_band"][2]["launch_flags"] == ""
    assert sglang["dynamic"]["flag"] == "--speculative-adaptive"
    old = get_engine("sglang").schedule_export(bands, algorithm="EAGLE3", draft_path=None, version="0.5.9")
    assert old["dynamic"]["available"] is False
    assert "--disable-cuda-graph" in old["per_band"][1]["launch_flags"]
    vllm = get_engine("vllm").schedule_export(bands, algorithm="EAGLE3", draft_path="heads/x",
                                              version="0.33.0")
    dyn = json.loads(vllm["dynamic"]["speculative_config"])
    assert dyn["num_speculative_tokens_per_batch_size"] == [[1, 4, 3], [5, 9, 2], [10, 64, 0]]
    assert json.loads(vllm["per_band"][0]["speculative_config"])["num_speculative_tokens"] == 3
    from harness.analysis.crossover_report import trtllm_schedule

    assert trtllm_schedule(bands) == {"4": 3, "9": 2}


def test_the_text_chart_marks_each_config_and_the_crossover():
    levels = [1, 2, 4, 8, 16]
    curves = _model_curves(WEAK_PROFILE, [SpecShape(2, 1, 3)], levels)
    s2 = Config(2, 1, 3, True)
    al = model.expected_accept_length(WEAK_PROFILE, SpecShape(2, 1, 3))
    cross = cx.crossing(al, curves[s2])

    class Res:  # the fields chart_text reads of a crossover_report.Result
        pass

    res = Res()
    res.levels, res.curves, res.crossings, res.cross = levels, curves, {s2: cross}, cross
    res.sides = {8: {"speedup": 1.01}, 16: {"speedup": 0.95}}
    text = chart_text(res)
    assert "a s2-k1-d3-g: stops paying at c9." in text and "^ c9." in text
    plot = [ln for ln in text.splitlines() if "x |" in ln]
    assert sum(ln.count("#") for ln in plot) == 2 and all(f"c{b}" in text for b in levels)


def test_a_profile_gets_the_crossover_and_the_schedule():
    prof = tm.speculation_profile([5, 3, 2], 2)
    out = tm.with_schedule(prof, {"s2-k1-d3-g": 9.5}, [sc.band_dict(sc.Band(9, 2, 1, 3, True))])
    assert out["crossover_concurrency"] == {"s2-k1-d3-g": 9.5}
    assert out["schedule"] == [{"max_batch": 9, "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3,
                                "cuda_graph": True}]
    assert out["conditional_accept_rates"] == prof["conditional_accept_rates"]


def test_auto_concurrency_is_read_from_the_plan_and_the_command_line():
    import argparse

    from harness.cli.args import levels_or_auto
    from harness.inputs.run_settings import RunSettings

    auto = RunSettings.model_validate({"concurrency": "auto"})
    assert auto.concurrency_auto and auto.concurrency == [1]
    assert not RunSettings.model_validate({"concurrency": [1, 8]}).concurrency_auto
    assert levels_or_auto(" AUTO ") == "auto" and levels_or_auto("1,8") == [1, 8]
    with pytest.raises(argparse.ArgumentTypeError):
        levels_or_auto("sometimes")
    assert cx.ladder(48) == [1, 2, 4, 8, 16, 32, 48] and cx.ladder(1) == [1]


def test_every_step_cost_level_holds_four_times_its_batch_and_the_judging_runs_are_sized(tmp_path):
    """tune's step-cost phases: 4 x its batch at every level (run.requests_per_slot), not the largest batch's
    count everywhere (64 one after another at c1, one wave at c64); its runs that judge: phase sizing on."""
    from harness.analysis.attempts import DonePhases
    from harness.bench.conversation import requests_per_pass
    from harness.bench.run_phases import plan_phases
    from harness.bench.runner import _Run
    from harness.bench.sizing import level_prompts
    from harness.cli.demo import prepare_demo
    from harness.studies import tune_plans as tp

    plan = prepare_demo(tmp_path)
    for levels in ([1, 2, 8, 64], [40]):  # the ladder, and one bisection level
        cost = tp.derived(plan, [], levels, 48, cost=True, source="plan.yaml")
        run = _Run(cost, results_dir=tmp_path, keep_servers=False, resume_dir=None, target=None,
                   emit=lambda event: None)
        run.done = DonePhases(frozenset(), 0, {})  # a fresh run directory: no phase finished
        phases = plan_phases(run, cost.baseline)
        held = {c: len(ps) for _, _, c, _, ps in phases}
        assert held == {c: tp.COST_PER_SLOT * c for c in levels} and tp.COST_PER_SLOT == 4
        assert all(len({p.id for p in ps}) == len(ps) for *_, ps in phases)  # every request its own id
        assert requests_per_pass(cost) == sum(held.values())  # the progress total counts them
        assert not cost.run.phase_sizing and not cost.run.concurrency_auto
    # a suite shorter than a level's count is cycled, the copies named as phase sizing names a pass
    few = plan.suites[0].prompts[:3]
    got = level_prompts(few, 4, 2)
    assert [p.id for p in got] == [p.id for p in few] + [f"{p.id}#p2" for p in few] + [f"{few[0].id}#p3",
                                                                                         f"{few[1].id}#p3"]
    assert level_prompts(few, None, 8) == few and level_prompts(few, 4, 0) == few  # unset, open loop
    # the wide, paired and mixed runs judge: phase sizing (>= 4 x c requests a phase) whatever the plan says
    plan.run.phase_sizing, plan.run.requests_per_slot = False, 2
    for kw in ({}, {"fixed_repeats": 3}):
        judged = tp.derived(plan, [], [1, 64], 48, cost=False, source="plan.yaml", **kw)
        assert judged.run.phase_sizing and judged.run.requests_per_slot is None
