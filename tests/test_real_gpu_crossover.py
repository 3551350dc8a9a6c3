"""`draftbench tune --concurrency auto` on the H200 (2026-12-04, real SGLang 0.5.15.post1, the trained tiny
target and its EAGLE-3 head; tests/fixtures/sglang-0.5.15.post1/crossover: the files the report reads, the
report and crossover.csv as the run wrote them, the stages' printouts). The report is rebuilt from those
files: docs/tune.md's H200 figures must be what it says; every predicted speedup must be AL x base step / step
over the recorded step costs; the run as written must agree with the rebuild; and the report must say what
the run showed: the pick pays up to the largest batch tried, verified there, below its prediction; the steps
above the servers' CUDA graph cap ran eagerly; the config that does not pay at c1 pays from c2; the request
rates show no single rate where speculation stops paying. Plus the pure rules behind those lines."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis import crossover as cx
from harness.analysis import crossover_text as ct
from harness.analysis import schedule as sc
from harness.analysis import tune_model as tm
from harness.analysis.tune_model import Config
from harness.studies.tune_view import _from_files, rebuild_report
from tests.fixture_dirs import docs_lines_missing, unpacked

FIXTURE = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1" / "crossover"
DOCS = Path(__file__).parent.parent / "docs" / "tune.md"
MARKER = "An H200 run (`tests/fixtures/sglang-0.5.15.post1/crossover/`"  # the block the report must hold


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> Path:
    d = unpacked(FIXTURE, tmp_path_factory.mktemp("h200") / "crossover")
    rebuild_report(d)
    return d


def test_docs_figures_are_the_rebuilt_reports(rebuilt):
    block, missing = docs_lines_missing(DOCS, MARKER, rebuilt / "tune_report.txt")
    assert len(block) > 8
    assert not missing, missing


def test_every_prediction_is_the_accept_length_times_the_step_cost_ratio(rebuilt):
    t, ready = _from_files(rebuilt)
    assert ready
    cross = pd.read_csv(rebuilt / "crossover.csv")
    assert sorted(set(cross["batch"])) == [1, 2, 4, 8, 16, 32, 64]
    for name, rows in cross.groupby("config"):
        cfg = next(c for c in t.grid if c.name == name)
        al = tm.predicted_accept_len(t.hist, cfg)
        assert al is not None and 2.0 < al < cfg.num_steps + 1
        again = al * rows["base_step_ms"] / rows["step_ms"]
        assert (again - rows["speedup_pred"]).abs().max() < 1e-9, name
        assert (rows["speedup_pred_low"] < rows["speedup_pred"]).all()
        assert (rows["speedup_pred"] < rows["speedup_pred_high"]).all()


def test_the_run_as_written_is_what_the_rebuild_gives(rebuilt):
    as_run = pd.read_csv(FIXTURE / "crossover-as-run.csv").sort_values(["config", "batch"], ignore_index=True)
    again = pd.read_csv(rebuilt / "crossover.csv").sort_values(["config", "batch"], ignore_index=True)
    for col in ("batch", "step_ms", "base_step_ms", "speedup_pred", "speedup", "speedup_ci_low",
                "speedup_ci_high", "cost_requests", "verify_requests"):
        a, b = pd.to_numeric(as_run[col]), pd.to_numeric(again[col])
        assert ((a - b).abs() < 1e-9).where(a.notna(), b.isna()).all(), col


def test_the_grid_and_the_crossover_predict_the_same_speedups(rebuilt):
    """One estimator of a step cost in one report: the grid's heatmaps and the answer read the step-cost
    phases as the crossover does (before: 2.53x against 2.32x for 5/1/6 at c8)."""
    cross = pd.read_csv(rebuilt / "crossover.csv")
    tune = pd.read_csv(rebuilt / "tune.csv")
    for r in cross.itertuples():
        cfg = Config(int(r.num_steps), int(r.eagle_topk), int(r.num_draft_tokens), bool(r.cuda_graph))
        row = tune[(tune["num_steps"] == cfg.num_steps) & (tune["num_draft_tokens"] == cfg.num_draft_tokens)
                   & (tune["concurrency"] == r.batch)]
        assert len(row) == 1
        assert abs(float(row["speedup_pred"].iloc[0]) - r.speedup_pred) < 1e-6, (cfg.name, r.batch)


def test_what_the_h200_run_showed_is_said(rebuilt):
    cross = pd.read_csv(rebuilt / "crossover.csv")
    pick = cross[cross["config"] == "s5-k1-d6-g"]
    assert set(pick["crossover_status"]) == {"pays-to-max"}
    side = pick[pick["verdict"].notna()]
    assert list(side["batch"]) == [64] and list(side["verdict"]) == ["faster"]
    assert float(side["speedup_ci_low"].iloc[0]) > 1.0
    # the paired run lies below the decode steps' prediction at c64
    assert float(side["speedup_ci_high"].iloc[0]) < float(side["speedup_pred_low"].iloc[0])
    late = cross[cross["config"] == "s3-k1-d4-g"]
    assert set(late["crossover_pays_from"]) == {2}
    assert float(late[late["batch"] == 1]["speedup_pred"].iloc[0]) < 1.0
    assert (late[late["batch"] > 1]["speedup_pred"] > 1.0).all()
    schedule = json.loads((rebuilt / "schedule.json").read_text(encoding="utf-8"))
    assert schedule["crossover_concurrency"] == {"s3-k1-d4-g": ">64", "s5-k1-d6-g": ">64"}
    assert schedule["pays_from"] == {"s3-k1-d4-g": 2}
    assert [(b["min_batch"], b["max_batch"], b["num_steps"]) for b in schedule["schedule"]] == [(1, 64, 5)]
    report = (rebuilt / "tune_report.txt").read_text(encoding="utf-8")
    assert "s3-k1-d4-g: does not pay at c1, pays from c2; pays up to the largest batch tried (c64)" in report
    assert "does not pay even at c1" not in report
    assert ("without CUDA graphs at c32, c64 (baseline, s3-k1-d4-g, s5-k1-d6-g): the servers capture CUDA "
            "graphs up to batch 16") in report
    assert "the paired run lies below it" in report
    assert "speculation pays up to c64, the largest batch tried: where it stops lies beyond it" in report
    assert "no single rate where it stops" in report and "stops paying at 24.8" not in report
    # the answer per level says what the crossover's paired run decided (it said "not verified" at c64)
    assert ("c64: use num_steps 5, eagle_topk 1, num_draft_tokens 6, CUDA graphs on: measured 1.25x "
            "(99.5% CI 1.06-1.47), faster than the baseline; predicted 1.64x") in report
    assert ("predictions against paired runs of the same config: c1 1.74x predicted, 1.35x measured; "
            "c64 1.64x predicted, 1.25x measured: every measurement is below its prediction") in report
    tune = pd.read_csv(rebuilt / "tune.csv")
    at64 = tune[(tune["num_steps"] == 5) & (tune["concurrency"] == 64)]
    assert list(at64["measured"]) == ["verified"] and list(at64["verdict"]) == ["faster"]
    vllm = next(ln for ln in report.splitlines() if ln.startswith("vllm: "))
    assert vllm.count("0.24.0+") == 1, vllm


def _pts(speedups: list[float]) -> list[cx.Point]:
    return [cx.Point(b, 2.0 / s, 1.0, s, None, None, "measured")  # AL 2, base step 1 ms
            for b, s in zip([1, 2, 4, 8, 16, 32, 64], speedups, strict=False)]


def test_a_config_that_starts_paying_above_the_smallest_batch_is_not_called_never_paying():
    late = cx.crossing(2.0, _pts([0.9, 0.95, 1.2, 1.1, 0.8]))
    assert (late.status, late.pays_from, late.unpaid, late.below, late.above) == ("crosses", 4, (1, 2), 8, 16)
    assert late.words().startswith("does not pay at c1-c2, pays from c4; stops paying at c")
    assert cx.crossing(2.0, _pts([0.9, 0.8, 0.7])).status == "never-pays"
    early = cx.crossing(2.0, _pts([1.3, 1.2, 1.1]))
    assert (early.status, early.pays_from) == ("pays-to-max", None)
    # both pay to the largest batch: the pick is the one that pays from the smallest batch up
    a, b = Config(3, 1, 4, True), Config(5, 1, 6, True)
    got = sc.crossover_of({b: cx.crossing(2.0, _pts([0.9, 1.2, 1.1])), a: early})
    assert got[0] == a


def test_request_rates_that_pay_again_above_a_rate_that_does_not_are_no_crossing():
    rates = pd.DataFrame({"request_rate": [10.0, 20.0, 30.0], "goodput_ratio": [1.0, 1.0, 1.0],
                          "tpot_speedup": [0.7, 1.1, 1.2]})
    assert ct.rate_words(rates, slo=False).startswith("does not pay at 10 req/s and pays at 20, 30 req/s")
    rates["tpot_speedup"] = [1.3, 1.1, 0.9]
    assert ct.rate_words(rates, slo=False).startswith("stops paying at 30 req/s")
    rates["tpot_speedup"] = [1.3, 1.1, 1.01]
    assert ct.rate_words(rates, slo=False) == "pays at every rate measured"
    rates["goodput_ratio"] = [1.2, 0.9, 0.8]
    assert ct.rate_words(rates, slo=True).startswith("stops paying at 20 req/s")


def test_a_greedy_warmup_paid_no_compile_on_the_fresh_machine():
    """docs/real-gpu.md, "The compile, measured once more": the first EAGLE-3 server of that machine, its
    first request at the run's own (greedy) sampler: 0.32 s, no one-off compile (121 s the day before)."""
    metas = [json.loads(ln) for ln in (FIXTURE / "wide" / "variants.jsonl").read_text().splitlines() if ln]
    first = {m["variant"]: m.get("warmup_first_s") for m in metas}
    assert set(first) == {"baseline", "wide-s5-k1-d6-g"}
    assert all(v is not None and v < 1.0 for v in first.values()), first
    assert not any(m.get("compile_s") for m in metas)
    assert {m["temperature"] for m in metas} == {0.0}
