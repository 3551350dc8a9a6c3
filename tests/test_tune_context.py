"""tune by context length (harness.analysis.tune_context): the wide run's histograms split by context
bucket, the best config per bucket where they differ, and the warning when the suites leave a deployment
bucket empty."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis import tune_context as tc
from harness.analysis.records import RECORD_COLUMNS
from harness.analysis.tune_model import Config
from harness.inputs.config import Plan
from harness.studies.tune import _Tune
from harness.studies.tune_options import TuneOptions

GRID = [Config(s, 1, s + 1, True) for s in (1, 2, 3, 4)]
EDGES = [1024, 4096, 16384, 65536]


def _wide(tmp_path: Path, variant: str = "wide") -> Path:
    rows = []
    for i in range(3):  # short prompts: long chains accepted; long prompts: little beyond the first draft
        rows.append({"variant": variant, "phase": "s@c1#r1", "request_id": f"s/short{i}", "ok": True,
                     "prompt_tokens": 100, "output_tokens": 171, "spec_histogram": "2 2 2 2 30",
                     "spec_verify_ct": 38})
        rows.append({"variant": variant, "phase": "s@c1#r1", "request_id": f"s/long{i}", "ok": True,
                     "prompt_tokens": 20000, "output_tokens": 69, "spec_histogram": "30 10 3 1 1",
                     "spec_verify_ct": 45})
    d = tmp_path / "wide"
    d.mkdir()
    pd.DataFrame(rows, columns=RECORD_COLUMNS).to_csv(d / "requests.csv", index=False)
    return tmp_path


def _tune(tmp_path: Path, graphs: tuple[bool, ...] = (True,), sampling: list[dict] | None = None) -> _Tune:
    """The tune itself (harness.studies.tune's, as `tune --report` re-reads a tune directory) over a real
    Plan: chains of 1-4 steps (with CUDA graphs; `graphs`: also without) at c1, its wide run's records in the
    directory; `sampling`: the plan's run.sampling (tune measures the first arm)."""
    run = {"context_buckets": EDGES, **({"sampling": sampling} if sampling else {"temperature": 0.0})}
    plan = Plan.model_validate({
        "name": "tune-context", "model": {"path": "/m"}, "run": run,
        "variants": [{"name": "base"}, {"name": "eagle", "algorithm": "EAGLE3",
                                         "drafter": {"name": "d", "path": "/d"}}],
        "suites": [{"name": "s", "prompts": [{"id": "a", "text": "hi"}]}]})
    opts = TuneOptions(concurrency=[1], steps=[1, 2, 3, 4], graphs=list(graphs))
    t = _Tune(plan, opts, tmp_path.parent, tmp_path, None, time.monotonic)
    assert {c for c in t.grid if c.cuda_graph} == set(GRID) and t.conc == [1]
    assert t.tuned is next(v for v in plan.variants if not v.is_baseline)
    _wide(tmp_path, t.wide_name)
    return t


def test_histograms_split_by_the_context_their_tokens_ran_at(tmp_path):
    hists = tc.bucket_histograms(_wide(tmp_path) / "wide", "wide", EDGES)
    assert set(hists) == {"0-1k", "16k-64k"}
    assert hists["0-1k"] == pytest.approx([6, 6, 6, 6, 90])
    assert tc.accept_len_at(hists["16k-64k"], 1) == pytest.approx((90 * 1 + 45 * 2) / 135)


def test_the_best_config_per_bucket_and_what_the_suites_do_not_cover(tmp_path):
    t = _tune(tmp_path)
    measured = {cfg: {1: 10.0 + 3.0 * cfg.num_steps} for cfg in GRID}  # longer chains cost more per step
    path = tc.write_context_rows(t, measured, {1: 10.0})
    rows = pd.read_csv(path)
    assert set(rows["bucket"]) == {"0-1k", "16k-64k"} and set(rows["sampling"]) == {"t0"}
    best = {b: int(g.loc[g["speedup_pred"].idxmax(), "num_steps"]) for b, g in rows.groupby("bucket")}
    assert best == {"0-1k": 4, "16k-64k": 1}
    lines = tc.report_lines(t)
    assert lines[1].startswith("c1 by context: the best config differs with context: 0-1k: steps 4")
    assert "16k-64k: steps 1" in lines[1]
    assert lines[2].startswith("warning: the suites' context lengths do not cover the deployment's buckets "
                               "1k-4k, 4k-16k")
    assert "holds for 0-1k, 16k-64k only" in lines[2]


def test_one_best_config_everywhere_is_said_once(tmp_path):
    t = _tune(tmp_path)
    # cheap steps: the longest chain wins everywhere
    flat = {cfg: {1: 10.0 + 0.1 * cfg.num_steps} for cfg in GRID}
    rows = tc.context_rows(t, flat, {1: 10.0})
    lines = tc.context_lines(rows, [1024, 65536])
    assert lines == ["c1 by context: steps 4 is the best predicted in every context bucket the suites "
                     "reached (0-1k, 16k-64k)", lines[1]]
    assert lines[1].startswith("warning:") and "1k-64k" in lines[1]
    assert tc.context_lines(rows, [1024]) == lines[:1]  # the suites cover every bucket of a 1k deployment


def test_configs_predicted_alike_go_to_the_measured_one_with_graphs(tmp_path):
    # the grid holds each chain with graphs off and on; only graphs on measured: the graphs-off configs get
    # its step costs as their prior, so each bucket has two configs predicted alike
    t = _tune(tmp_path, graphs=(False, True))
    assert len(t.grid) == 2 * len(GRID)
    measured = {cfg: {1: 10.0 + 3.0 * cfg.num_steps} for cfg in GRID}
    rows = tc.context_rows(t, measured, {1: 10.0})
    tied = rows[(rows["num_steps"] == 4) & (rows["bucket"] == "0-1k")]
    assert tied["speedup_pred"].nunique() == 1 and set(tied["step_source"]) == {"prior", "step-cost phases"}
    line = tc.context_lines(rows, EDGES)[0]
    assert "0-1k: steps 4 (" in line and "16k-64k: steps 1 (" in line and "graphs off" not in line


def test_the_tunes_sampling_arm_labels_its_rows(tmp_path):
    t = _tune(tmp_path, sampling=[{"temperature": 0.6, "top_p": 0.95}, {"temperature": 0}])
    assert t.tuned.name == "eagle-t0.6-p0.95"
    rows = tc.context_rows(t, {cfg: {1: 10.0} for cfg in GRID}, {1: 10.0})
    assert set(rows["sampling"]) == {"t0.6-p0.95"}
