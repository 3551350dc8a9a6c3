"""The H200 run of "Decide within the budget" (2026-12-02, benchmarks/h200/decide.sh prep, tune, decided;
fixtures in tests/fixtures/sglang-0.5.15.post1/decided/): real SGLang 0.5.15.post1, the trained tiny target
and its EAGLE-3 head. Every figure docs/real-gpu.md quotes ("Deciding within the budget") is recomputed here
from the records: through draftbench's own code (summarise_dir, the tune's report) and by hand where the
arithmetic is short (the t intervals at the stopping rule's look levels)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis import stats
from harness.analysis.sequential import look_level, look_schedule
from tests.fixture_dirs import assert_same_columns, unpacked

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1" / "decided"
DOC = Path(__file__).parent.parent / "docs" / "real-gpu.md"


@pytest.fixture(scope="module")
def tune_dir(tmp_path_factory) -> Path:
    return unpacked(FIX / "tune", tmp_path_factory.mktemp("h200") / "tune")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return unpacked(FIX / "run", tmp_path_factory.mktemp("h200") / "run")


def _looks(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _t_interval(ph: pd.DataFrame, base: str, name: str, conc: int, repeats: int, level: float) -> tuple:
    """By hand: per-repeat tok/s of each arm (tokens over wall time), the t interval of the mean log ratio."""
    ph = ph[(ph["concurrency"] == conc) & (ph["repeat"] <= repeats)]
    rate = {v: (g.sort_values("repeat")["output_tokens"] / g.sort_values("repeat")["wall_s"]).to_numpy()
            for v, g in ph.groupby("variant")}
    logs = np.log(rate[name] / rate[base])
    half = stats.t_quantile(level, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    tok = {v: g["output_tokens"].sum() / g["wall_s"].sum() for v, g in ph.groupby("variant")}
    speedup = tok[name] / tok[base]
    return speedup, speedup * math.exp(-half), speedup * math.exp(half), rate


# ---------------------------------------------------------------------------------------- the tune, 8 minutes
def test_the_tune_planned_its_budget_and_stopped_by_it(tune_dir):
    printout = (tune_dir / "tune-printout.txt").read_text()
    assert printout.startswith("tune [plan] 480 s buys the wide run (~351 s, start-up ~90 s each: a prior")
    assert "4 of the grid's 5 configs stay predicted from the wide run's histograms" in printout
    state = json.loads((tune_dir / "tune_state.json").read_text())
    assert state["stop_reason"] == "budget" and state["starts"] == 2 \
        and state["spent_s"] == pytest.approx(440.5, abs=0.1)
    assert "exited 0" in (tune_dir / "timeline.txt").read_text()  # a budget-stopped tune that answered: rc 0
    # the first EAGLE-3 decode's one-off compile: detected in the warmup, outside every measured phase
    from harness.analysis.summary import read_variants

    meta = read_variants(tune_dir / "wide")
    spec = meta["wide-s5-k1-d6-g"]
    assert spec["warmup_first_s"] == pytest.approx(99, abs=1) \
        and spec["compile_s"] == pytest.approx(98.7, abs=0.6)
    assert "the first decode took 99 s against 0.7 s for the rest of the warmup" in printout
    assert "compile_s" not in meta["baseline"]


def test_the_wide_runs_looks_and_verdicts_recompute(tune_dir):
    from harness.analysis.summary import summarise_dir

    looks = _looks(tune_dir / "wide" / "decisions.jsonl")
    assert [(d["look"], d["level"], d["repeats"]) for d in looks] \
        == [(1, 0.995, 2), (2, 0.995, 4), (3, 0.97, 6)]
    assert look_schedule(2, 6) == [2, 4, 6] \
        and [round(look_level(k, 3), 3) for k in (1, 2, 3)] == [0.995, 0.995, 0.97]
    stored = pd.read_csv(tune_dir / "wide" / "summary.csv")
    again = summarise_dir(tune_dir / "wide")
    assert list(again["verdict"]) == list(stored["verdict"])
    assert_same_columns(again, stored, ("tok_s", "speedup", "speedup_ci_low", "speedup_ci_high", "ci_level"))
    row = again.set_index(["variant", "concurrency"])
    one, eight = row.loc[("wide-s5-k1-d6-g", 1)], row.loc[("wide-s5-k1-d6-g", 8)]
    # c1: decided at the first look over 64 paired prompts x 2 repeats: 2.13x (99.5 % CI 1.83-2.48), faster
    assert (one.verdict, one.decide_look, one.ci_level) == ("faster", "1/3", 0.995)
    assert (round(one.speedup, 2), round(one.speedup_ci_low, 2), round(one.speedup_ci_high, 2)) \
        == (2.13, 1.83, 2.48)
    # c8: six paired repeats at the last look (97 %) still straddle 1.00: undecided, with what would decide it
    assert (eight.verdict, eight.decide_look) == ("undecided", "3/3")
    ph = pd.read_csv(tune_dir / "wide" / "phases.csv")
    spd, low, high, rate = _t_interval(ph, "baseline", "wide-s5-k1-d6-g", 8, 6, 0.97)
    assert (eight.speedup, eight.speedup_ci_low, eight.speedup_ci_high) \
        == pytest.approx((spd, low, high), rel=1e-9)
    assert (round(spd, 2), round(low, 2), round(high, 2)) == (1.17, 0.80, 1.70)
    assert eight.needs_repeats == 35 and "needs ~35 repeats (29 more" in eight.verdict_reason
    # the machine drifted: the baseline's own c8 tok/s over its six repeats, and its c1 between two repeats
    assert [round(x) for x in rate["baseline"]] == [4726, 3377, 4940, 4063, 3107, 3456]
    c1 = ph[(ph["variant"] == "baseline") & (ph["concurrency"] == 1)].sort_values("repeat")
    assert [round(x) for x in c1["output_tokens"] / c1["wall_s"]] == [457, 556]
    # phase sizing: 64 prompts at c8 gave ~2.1-2.6 s of steady state per pass; every c8 phase ran 2 passes
    assert set(ph[ph["concurrency"] == 8]["passes"]) == {2} \
        and set(ph[ph["concurrency"] == 1]["passes"]) == {1}


def test_the_tune_answers_at_both_concurrencies_from_what_it_has(tune_dir):
    from harness.studies.tune_view import rebuild_report

    rows = pd.read_csv(rebuild_report(tune_dir))
    as_run = pd.read_csv(tune_dir / "tune-as-run.csv")
    assert_same_columns(rows, as_run, ("accept_len_pred", "speedup_pred", "step_ms", "base_step_ms",
                                       "speedup", "speedup_ci_low"))
    assert rows["speedup_pred"].notna().all()  # every config predicted, though only the wide run ran
    diag = rows.sort_values("num_steps")
    assert [round(x, 2) for x in diag[diag["concurrency"] == 1]["speedup_pred"]] \
        == [1.05, 1.49, 1.91, 2.30, 2.67]
    assert [round(x, 2) for x in diag[diag["concurrency"] == 8]["speedup_pred"]] \
        == [0.60, 0.85, 1.09, 1.31, 1.53]
    # the step costs came from the wide run's own decode windows (no step-cost phase fitted the budget)
    wide = rows[rows["num_steps"] == 5]
    assert set(wide["step_source"]) == {"the wide run's decode windows"} \
        and set(wide["measured"]) == {"verified"}
    report = (tune_dir / "tune_report.txt").read_text()
    assert ("c1: use num_steps 5, eagle_topk 1, num_draft_tokens 6, CUDA graphs on: measured 2.13x "
            "(99.5% CI 1.83-2.48), faster than the baseline; predicted 2.67x") in report
    assert "c8: cannot tell yet (undecided): the best measured (num_steps 5" in report
    assert "  launch flags: --speculative-algorithm EAGLE3 --speculative-draft-model-path /tmp/tiny/draft " \
           "--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6" in report
    assert report.count("left to decide: 4 configs predicted only (steps 1, steps 2, steps 3, steps 4)") == 2
    profile = json.loads((tune_dir / "speculation_profile.json").read_text())
    assert [round(x, 2) for x in profile["marginal_accept_rates"]] == [0.83, 0.76, 0.72, 0.68, 0.65]


# ---------------------------------------------------------------------------------- run --until-decided at c8
def test_run_until_decided_decides_the_pick_at_c8(run_dir):
    from harness.analysis.summary import summarise_dir

    plan = json.loads((run_dir / "plan.resolved.json").read_text())
    assert plan["run"]["stop"] == "decided" and plan["run"]["concurrency"] == [8]
    pick = next(v for v in plan["variants"] if v.get("algorithm"))
    assert (pick["num_steps"], pick["eagle_topk"], pick["num_draft_tokens"]) == (5, 1, 6)
    looks = _looks(run_dir / "decisions.jsonl")
    assert [(d["look"], d["level"], d["repeats"]) for d in looks] == [(1, 0.995, 2), (2, 0.995, 4)]
    again = summarise_dir(run_dir).set_index("variant")
    stored = pd.read_csv(run_dir / "summary.csv").set_index("variant")
    assert list(again["verdict"]) == list(stored["verdict"])
    row = again.loc["pick-s5k1d6"]
    ph = pd.read_csv(run_dir / "phases.csv")
    spd, low, high, _ = _t_interval(ph, "baseline", "pick-s5k1d6", 8, 4, 0.995)
    assert (row.speedup, row.speedup_ci_low, row.speedup_ci_high) == pytest.approx((spd, low, high), rel=1e-9)
    assert (row.verdict, row.decide_look) == ("faster", "2/3")
    assert (round(spd, 2), round(low, 2), round(high, 2)) == (1.53, 1.05, 2.22)
    assert round(row.accept_len, 2) == 4.64 and round(float(again.loc["baseline", "tok_s"]), 1) == 5439.4
    # the first look (2 repeats) could not tell; 4 repeats decided
    printout = (run_dir / "run-printout.txt").read_text()
    assert "look 1/3 after 2 repeats (99.5% intervals): undecided: pick-s5k1d6@c8" in printout
    assert "look 2/3 after 4 repeats (99.5% intervals): decided: pick-s5k1d6@c8 faster" in printout
    assert "exited 0" in (run_dir / "timeline.txt").read_text()


def test_the_doc_quotes_these_figures():
    doc = " ".join(DOC.read_text().split())
    for figure in ("2.13x (99.5 % CI 1.83-2.48)", "1.17x (97 % CI 0.80-1.70)", "1.53x (99.5 % CI 1.05-2.22)",
                   "99 s", "4726, 3377, 4940, 4063, 3107, 3456", "457 and 556", "needs ~35 repeats"):
        assert figure in doc, figure
