"""`draftbench breakeven`: the derived plan, the table from a summary (hand-computed), and one run on the
stand-in with forced accept lengths."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.breakeven import forced_table, render_forced_table
from harness.cli.progress import consume
from harness.common.errors import InputError
from harness.inputs.config import load_plan
from harness.studies.breakeven import derive_plan, read_forced_table, run_breakeven
from tests.faults_helpers import GOOD, SIM_LAUNCHER, only_run_dir, prompts, sim_env, write_plan

# The stand-in's time scale of the run on it. Its break-even is tok/s over whole phases, so a phase must last
# the modelled steps' time, not the stand-in's and the client's own work per step: at 0.2 a baseline step
# was 2.2 ms, as short as that work on a loaded 2-core machine, and the baseline phase (one step per token,
# the most steps) lost a third of its speed once (measured 1.13 against 1.60 from step costs). Three such runs
# at once next to two CPU hogs: at 0.2, 10 of 30 off by more than 20 %; at 0.5 (5.6 ms baseline, 8.9 ms
# verify steps), 54 within 11 %.
SCALE = 0.5


def _plan(tmp_path: Path, **run):
    return load_plan(write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                                env=sim_env(SCALE), variants=[{"name": "baseline"}, GOOD],
                                suite_prompts=prompts(4), run={"concurrency": [1], "max_tokens": 48, **run}))


def test_derived_plan_forces_copies_of_the_variant(tmp_path):
    plan = _plan(tmp_path)
    derived = derive_plan(plan, "good", [2.5, 1.5], concurrency=[1, 2])
    assert [v.name for v in derived.variants] == ["baseline", "good-al1.5", "good-al2.5"]
    assert derived.variants[0].env == {}
    assert derived.variants[1].env == {"SGLANG_SIMULATE_ACC_LEN": "1.5",
                                       "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    assert derived.run.concurrency == [1, 2] and plan.run.concurrency == [1]
    with pytest.raises(InputError, match="does not speculate"):
        derive_plan(plan, "baseline", [1.5, 2.5])
    with pytest.raises(InputError, match="no variant"):
        derive_plan(plan, "nope", [1.5, 2.5])
    with pytest.raises(InputError, match="at least two"):
        derive_plan(plan, "good", [2.0])


def test_forced_table_interpolates_the_measured_points():
    summary = pd.DataFrame([
        {"variant": "baseline", "concurrency": 1, "tok_s": 90.0, "accept_len": None,
         "forced_acceptance": None},
        {"variant": "v-al1.5", "concurrency": 1, "tok_s": 60.0, "accept_len": 1.5, "forced_acceptance": 1.5,
         "break_even_accept_len": 2.2, "break_even_batch": 1},
        {"variant": "v-al2.5", "concurrency": 1, "tok_s": 100.0, "accept_len": 2.5, "forced_acceptance": 2.5,
         "break_even_accept_len": 2.3, "break_even_batch": 1},
        {"variant": "v", "concurrency": 1, "tok_s": 80.0, "accept_len": 2.0, "forced_acceptance": None},
    ])
    t = forced_table(summary, "v", "baseline")
    assert t["row"].tolist() == ["point", "point", "break-even"]
    end = t.iloc[-1]
    # 90 tok/s lies 3/4 of the way from 60 to 100: 1.5 + 0.75 * 1.0
    assert end["break_even_measured"] == pytest.approx(2.25)
    assert end["break_even_steps"] == pytest.approx(2.25) and end["break_even_batch"] == 1
    assert t.iloc[0]["speedup"] == pytest.approx(60 / 90)
    text = render_forced_table(t)
    assert "measured 2.25" in text and "not the model's" in text



def test_a_break_even_beyond_the_forced_points_is_called_extrapolated(tmp_path):
    # the demo's seed-weak arm at c4: forced 1.5-3.5 reached 0.70x at most, and "measured 5.14" was a line
    # drawn past the last point; and a config whose steps cannot reach the break-even says so
    summary = pd.DataFrame([
        {"variant": "baseline", "concurrency": 1, "tok_s": 120.0, "accept_len": None,
         "forced_acceptance": None},
        *({"variant": f"v-al{a:g}", "concurrency": 1, "tok_s": t, "accept_len": a, "forced_acceptance": a,
           "break_even_accept_len": 2.9, "break_even_batch": 1, "num_steps": 1} for a, t in ((1.5, 60.0),
                                                                                           (2.5, 100.0))),
    ])
    t = forced_table(summary, "v", "baseline")
    end = t.iloc[-1]
    assert end["break_even_measured"] == pytest.approx(3.0) and end["break_even_extrapolated"] is True
    assert end["accept_len_cap"] == 2
    t.to_csv(tmp_path / "breakeven.csv", index=False)  # the CLI renders what it wrote
    for table in (t, read_forced_table(tmp_path / "breakeven.csv")):
        text = render_forced_table(table)
        assert ("at concurrency 1: extrapolated 3.00 (the baseline's tok/s lies beyond every forced point, "
                "accept len 1.50-2.50: --accept-lens up to ~3.5 measures it)") in text
        assert "measured 3.00" not in text
        assert ("unreachable: this config commits at most 2 tokens per verify step (num_steps 1 + the bonus "
                "token), below the break-even 2.90") in text
    # inside the points it is measured, and a deep enough config is not called unreachable
    inside = summary.assign(num_steps=3, tok_s=[90.0, 60.0, 100.0])
    text = render_forced_table(forced_table(inside, "v", "baseline"))
    assert "measured 2.25" in text and "extrapolated" not in text and "unreachable" not in text

def _windows(variant: str, acc: float, step_ms: dict[int, float], phase: str) -> list[dict]:
    """Decode windows of one server: three at batch 4, then four at batch 1 (the tail: the most windows)."""
    rows = []
    for bs, n in ((4, 3), (1, 4)):
        for _ in range(n):
            rows.append({"variant": variant, "phase": phase, "kind": "decode", "running_req": bs,
                         "accept_len": acc, "gen_throughput": bs * acc / step_ms[bs] * 1000.0})
    return [{**r, "line": i} for i, r in enumerate(rows)]


def test_the_break_even_row_uses_its_own_concurrency_and_names_the_batch():
    """At concurrency 4 the step cost is the one at batch 4, not the batch-1 tail the windows ran most."""
    summary = pd.DataFrame([
        {"variant": "baseline", "concurrency": 4, "tok_s": 300.0, "accept_len": None,
         "forced_acceptance": None},
        *({"variant": f"v-al{a:g}", "concurrency": 4, "tok_s": t, "accept_len": a, "forced_acceptance": a,
           "break_even_accept_len": 3.16, "break_even_batch": 1} for a, t in ((1.5, 250.0), (2.5, 350.0))),
    ])
    windows = pd.DataFrame(_windows("baseline", 1.0, {4: 20.0, 1: 10.0}, "c4")
                           + _windows("v-al1.5", 1.5, {4: 40.0, 1: 31.6}, "c4")
                           + _windows("v-al2.5", 2.5, {4: 40.0, 1: 31.6}, "c4"))
    phases = pd.DataFrame([{"variant": v, "concurrency": 4, "phase": "c4"}
                           for v in ("baseline", "v-al1.5", "v-al2.5")])
    end = forced_table(summary, "v", "baseline", windows=windows, phases=phases).iloc[-1]
    assert end["break_even_steps"] == pytest.approx(2.0) and end["break_even_batch"] == 4
    text = render_forced_table(forced_table(summary, "v", "baseline", windows=windows, phases=phases))
    line = next(ln for ln in text.splitlines() if "break-even" in ln)
    assert "at concurrency 4: measured 2.00" in line and "from step costs 2.00 (steps at batch 4)" in line
    assert "baseline 300.0 tok/s at concurrency 4" in line
    # without windows at the row's batch, the summary's figure is shown with the batch it is for
    fallback = render_forced_table(forced_table(summary, "v", "baseline"))
    assert "from step costs 3.16 (steps at batch 1: no decode windows at batch 4 to compare)" in fallback


@pytest.mark.slow
async def test_breakeven_run_on_the_stand_in(tmp_path):
    # stop: decided keeps every server up to the end (the stand-in needs no GPU room), so the three stop
    # together: one shutdown pause (5 s x SCALE) instead of three; max_repeats 1: one look, no repeat added
    plan = _plan(tmp_path, stop="decided", repeats=1, max_repeats=1)
    events = run_breakeven(plan, "good", [1.5, 3.0], results_dir=tmp_path / "results")
    assert await consume(events, out=io.StringIO()) == 0
    run_dir = only_run_dir(tmp_path / "results")
    summary = pd.read_csv(run_dir / "summary.csv").set_index("variant")
    assert summary.loc["good-al1.5", "forced_acceptance"] == 1.5
    assert pd.isna(summary.loc["baseline", "forced_acceptance"])
    # match-expected: the measured accept length follows the forced one (one draw per verify step)
    assert summary.loc["good-al1.5", "accept_len"] == pytest.approx(1.5, abs=0.25)
    assert summary.loc["good-al3", "accept_len"] == pytest.approx(3.0, abs=0.1)
    assert summary.loc["good-al3", "output_match"] < 1.0  # forced outputs are not the model's
    table = pd.read_csv(run_dir / "breakeven.csv")
    end = table[table["row"] == "break-even"].iloc[0]
    assert 1.0 < end["break_even_measured"] < 3.5
    # the end-to-end break-even and the step-cost estimate agree within 20 % on the stand-in
    assert end["break_even_measured"] == pytest.approx(end["break_even_steps"], rel=0.2)
