"""`draftbench compare A B` says whether a change is real: B's tok/s over A's with a 95 % interval from data
both runs hold (paired requests, else repeats) and a verdict, not only percentages."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from harness.analysis.compare import compare_runs, comparison_rows
from harness.analysis.runs import load_run
from tests.cli_helpers import cli_here, run_dirs, small_plan

DIFFICULTY = [0.6, 1.4, 0.9, 2.0, 1.1, 0.7, 1.6, 1.0]  # per-prompt e2e factors: what pairing cancels


def _run(path: Path, tok_s: float, e2e_ms: list[float], phase: str = "smoke@c1#r1",
         repeats: list[float] | None = None, conc: int = 1) -> Path:
    path.mkdir(parents=True)
    (path / "provenance.json").write_text(json.dumps({"status": "complete", "plan": "p"}))
    (path / "summary_by_category.csv").write_text("variant,concurrency,category\n")
    pd.DataFrame([{"variant": "good", "concurrency": conc, "phase": phase, "request_id": f"p{i}", "ok": True,
                   "output_tokens": 100, "e2e_ms": t}
                  for i, t in enumerate(e2e_ms)]).to_csv(path / "requests.csv", index=False)
    pd.DataFrame([{"variant": "good", "concurrency": conc, "phase": f"smoke@c{conc}#r{k + 1}",
                   "output_tokens": 800, "wall_s": 800 / r} for k, r in enumerate(repeats or [])],
                 columns=["variant", "concurrency", "phase", "output_tokens", "wall_s"]).to_csv(
        path / "phases.csv", index=False)
    pd.DataFrame([{"variant": "good", "concurrency": conc, "accept_len": 2.5, "tok_s": tok_s,
                   "ttft_p50_ms": 20, "speedup": 1.5, "status": "ok"}]).to_csv(path / "summary.csv",
                                                                               index=False)
    return path


def _row(tmp_path: Path, a: Path, b: Path) -> pd.Series:
    return compare_runs(load_run(a), load_run(b)).table.iloc[0]


def test_a_real_speedup_of_b_is_called_faster_from_paired_requests(tmp_path):
    a = _run(tmp_path / "a", 100.0, [1000 * d for d in DIFFICULTY])
    b = _run(tmp_path / "b", 125.0, [800 * d * (1 + 0.02 * (-1) ** i) for i, d in enumerate(DIFFICULTY)])
    r = _row(tmp_path, a, b)
    assert r["tok_s_ratio"] == 1.25 and r["tok_s_change"] == "B faster"
    assert 1.0 < r["tok_s_ratio_low"] < 1.25 < r["tok_s_ratio_high"] < 1.4
    assert r["tok_s_change_method"] == "paired, 8 requests"
    headers, rows = comparison_rows(compare_runs(load_run(a), load_run(b)))
    cells = dict(zip(headers, rows[0][1], strict=True))
    assert cells["tok/s B/A"] == "1.25x" and cells["change"] == "B faster" and "-" in cells["95% CI"]


def test_noise_is_undecided(tmp_path):
    a = _run(tmp_path / "a", 100.0, [1000 * d for d in DIFFICULTY])
    b = _run(tmp_path / "b", 103.0, [1000 * d * (1 + 0.3 * (-1) ** i) for i, d in enumerate(DIFFICULTY)])
    r = _row(tmp_path, a, b)
    assert r["tok_s_change"] == "undecided" and r["tok_s_ratio_low"] < 1.0 < r["tok_s_ratio_high"]



def test_a_change_inside_the_band_is_equivalent_not_faster(tmp_path):
    # two runs of one config on the stand-in: the same prompts took the same time to within 0.1 %, and the
    # paired interval, 1.00-1.00, was called "B faster"
    a = _run(tmp_path / "a", 100.0, [1000 * d for d in DIFFICULTY])
    b = _run(tmp_path / "b", 101.0, [990 * d * (1 + 0.001 * (-1) ** i) for i, d in enumerate(DIFFICULTY)])
    r = _row(tmp_path, a, b)
    assert 1.0 < r["tok_s_ratio_low"] and r["tok_s_ratio_high"] < 1.03 and r["tok_s_change"] == "equivalent"


def test_above_concurrency_one_a_single_repeat_decides_nothing(tmp_path):
    # a batch's requests share their run's moment: pairing them cannot see the noise between runs
    a = _run(tmp_path / "a", 100.0, [1000 * d for d in DIFFICULTY], phase="smoke@c4#r1", conc=4)
    b = _run(tmp_path / "b", 125.0, [800 * d for d in DIFFICULTY], phase="smoke@c4#r1", conc=4)
    r = _row(tmp_path, a, b)
    assert r["tok_s_change"] == "undecided" and r["tok_s_ratio_low"] > 1.0  # shown, not decisive
    assert r["tok_s_change_method"] == "paired, 8 requests; one repeat cannot see the noise between runs"
    # two repeats a side: their tok/s decide, paired requests or not
    a2 = _run(tmp_path / "a2", 100.0, [1000 * d for d in DIFFICULTY], phase="smoke@c4#r1", conc=4,
              repeats=[99.0, 101.0, 100.0])
    b2 = _run(tmp_path / "b2", 125.0, [800 * d for d in DIFFICULTY], phase="smoke@c4#r1", conc=4,
              repeats=[124.0, 126.0, 125.0])
    r2 = _row(tmp_path, a2, b2)
    assert r2["tok_s_change"] == "B faster" and r2["tok_s_change_method"] == "repeats, 3 and 3"

def test_without_common_requests_the_repeats_decide(tmp_path):
    a = _run(tmp_path / "a", 100.0, [1000.0] * 3, phase="one@c1#r1", repeats=[99.0, 100.0, 101.0])
    b = _run(tmp_path / "b", 80.0, [1250.0] * 3, phase="other@c1#r1", repeats=[79.0, 80.0, 81.0])
    r = _row(tmp_path, a, b)
    assert r["tok_s_change"] == "B slower" and r["tok_s_change_method"] == "repeats, 3 and 3"
    c = _run(tmp_path / "c", 100.0, [1000.0], phase="x@c1#r1")  # one request, one repeat: no interval
    assert _row(tmp_path, a, c)["tok_s_change"] == "n/a"


def test_compare_of_two_stand_in_runs_at_different_speeds(tmp_path):
    runs = []
    for name, scale in (("slow", "1.0"), ("fast", "0.5")):
        d = tmp_path / name
        d.mkdir()
        plan = yaml.safe_load(small_plan(d, variants=("baseline",), max_tokens=64).read_text())
        plan["target"]["env"] = {"DRAFTBENCH_SIM_TIME_SCALE": scale}
        (d / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
        out = cli_here("run", str(d / "plan.yaml"), "--results-dir", "r", cwd=d)
        assert out.returncode == 0, out.stderr
        runs += run_dirs(d / "r")
    out = cli_here("compare", str(runs[0]), str(runs[1]), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(ln for ln in out.stdout.splitlines() if ln.startswith("baseline "))
    assert row.rstrip().endswith("B faster"), out.stdout
    assert "paired over the requests both runs made" in out.stdout
