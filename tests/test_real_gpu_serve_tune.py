"""The serve and tune stages on the H200 (docs/real-gpu.md, "Verdicts and tune on the H200"), re-read from
tests/fixtures/sglang-0.5.15.post1/serve/ and tune/ (benchmarks/h200/decide.sh prep, serve, tune, run back
to back on one machine on 2026-12-01).

Every figure the doc quotes is recomputed here from the records, through draftbench's own code where that
code is what is under test (summarise, the rate table, tune's report) and by hand where the arithmetic is
the claim (the t interval over repeats, bench_serving's rounds, the chain formula over the histograms,
the accept-length error). No result of the runs is written into this file.
- serve: the c8 verdict on two servers draftbench did not start (`endpoint:` variants), 5 repeats; both
  servers' bench_serving rounds; the request-rate run with its SLO.
- tune: a steps 1-5 grid at c1 and c8; predicted against measured accept length (the issue's bar: within
  5 %) and speedup for every measured config; the rebuilt answer follows each verdict.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.fixture_dirs import unpacked
from tests.verdict_vocab import as_today

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1"
DOC = Path(__file__).parent.parent / "docs" / "real-gpu.md"
T975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}  # Student t, two-sided 95 %, by df


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name,
                                                  DOC.parent.parent / "benchmarks" / "h200" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def serve(tmp_path_factory) -> Path:
    return unpacked(FIX / "serve", tmp_path_factory.mktemp("h200") / "serve")


@pytest.fixture(scope="module")
def tune_dir(tmp_path_factory) -> Path:
    return unpacked(FIX / "tune", tmp_path_factory.mktemp("h200") / "tune")


# ------------------------------------------------------------------------------------------ serve: endpoints
def test_the_endpoints_run_measured_servers_it_did_not_start(serve):
    prov = json.loads((serve / "endpoints" / "provenance.json").read_text())
    assert prov["servers_not_started"] == ["baseline", "eagle3"] \
        and prov["engine_versions"] == {"sglang": "0.5.15.post1"}
    plan = json.loads((serve / "endpoints" / "plan.resolved.json").read_text())
    ports = {v["name"]: v["endpoint"] for v in plan["variants"]}
    kept = [json.loads(ln)
            for ln in (serve / "warm-servers.jsonl").read_text().splitlines() if '"port"' in ln]
    # the endpoints are the warm run's kept processes, on their own ports
    assert {k["variant"]: f"http://127.0.0.1:{k['port']}" for k in kept} == ports
    states = [json.loads(ln).get("state")
              for ln in (serve / "endpoints" / "servers.jsonl").read_text().splitlines()]
    assert "stopped" not in states  # draftbench never stops a server it did not start


def test_the_endpoints_summary_recomputes_from_its_records(serve):
    from harness.analysis.summary import summarise_dir

    stored = pd.read_csv(serve / "endpoints" / "summary.csv")
    again = summarise_dir(serve / "endpoints")
    cols = ["tok_s", "speedup", "speedup_ci_low", "speedup_ci_high", "accept_len", "accept_rate", "repeats"]
    assert list(again["variant"]) == list(stored["variant"]) and list(again["verdict"]) == as_today(stored)
    # 0.98-1.47x: needs more repeats
    assert again.set_index("variant").loc["eagle3", "verdict"] == "undecided"
    for col in cols:
        assert np.allclose(pd.to_numeric(again[col]), pd.to_numeric(stored[col]), equal_nan=True,
                           rtol=1e-6), col


def test_the_c8_interval_is_the_t_interval_of_five_paired_repeats(serve):
    ph = pd.read_csv(serve / "endpoints" / "phases.csv")
    ph = ph[ph["concurrency"] == 8]
    rate = {v: (g.sort_values("repeat")["output_tokens"] / g.sort_values("repeat")["wall_s"]).to_numpy()
            for v, g in ph.groupby("variant")}
    assert len(rate["baseline"]) == len(rate["eagle3"]) == 5
    logs = np.log(rate["eagle3"] / rate["baseline"])
    half = T975[len(logs) - 1] * logs.std(ddof=1) / math.sqrt(len(logs))
    row = pd.read_csv(serve / "endpoints" / "summary.csv").set_index("variant").loc["eagle3"]
    # centred on the point (the whole run's ratio), its width from the repeats' own ratios
    assert row["speedup_ci_low"] / row["speedup"] == pytest.approx(math.exp(-half), rel=1e-6)
    assert row["speedup_ci_high"] / row["speedup"] == pytest.approx(math.exp(half), rel=1e-6)
    assert row["ci_method"] == "t-repeats"
    # the interval straddles 1.00x, so the verdict cannot be a win, whatever the point (1.20x)
    # as stored
    assert row["speedup_ci_low"] < 1.0 < row["speedup_ci_high"] and row["verdict"] == "within-noise"
    # the point: whole-run tok/s (every repeat's tokens over every repeat's wall) over the baseline's
    tok = {v: g["output_tokens"].sum() / g["wall_s"].sum() for v, g in ph.groupby("variant")}
    assert row["tok_s"] == pytest.approx(tok["eagle3"], rel=1e-9)
    assert row["speedup"] == pytest.approx(tok["eagle3"] / tok["baseline"], rel=1e-9)


def test_bench_serving_on_the_same_servers_is_inside_the_verdict(serve, capsys):
    mod = _script("verdict_vs_bench")
    c = mod.compare(serve / "endpoints", serve / "bench")
    for v in ("baseline", "eagle3"):  # each round's own output_throughput, read by hand
        by_hand = []
        for r in (1, 2):
            d = json.loads((serve / "bench" / f"bench_serving-{v}-r{r}.jsonl").read_text().splitlines()[-1])
            assert d["completed"] == 64 and d["max_concurrency"] == 8
            assert d["output_throughput"] == pytest.approx(d["total_output_tokens"] / d["duration"])
            by_hand.append(d["output_throughput"])
        assert c["bench_serving"][v] == pytest.approx(by_hand)
    b, e = c["bench_serving"]["baseline"], c["bench_serving"]["eagle3"]
    assert c["bench_serving_speedups"] == pytest.approx([y / x for x in b for y in e])
    assert c["inside_ci"] and not c["contradicted"] and c["consistent"]
    # the stored table is what the script prints from these records
    mod.main([str(serve / "endpoints"), str(serve / "bench")])
    assert capsys.readouterr().out == (serve / "verdict-vs-bench.md").read_text()


def test_the_rate_run_recomputes_and_meets_its_slo(serve):
    from harness.analysis.goodput import by_rate, run_slo
    from harness.analysis.summary import _read_csv, read_variants

    d = serve / "rates"
    slo = run_slo(d)
    assert {k: v for k, v in slo.items() if v is not None} == {"ttft_ms": 100.0, "tpot_ms": 3.0}
    again = by_rate(_read_csv(d / "requests.csv"), _read_csv(d / "phases.csv"), read_variants(d), slo)
    stored = pd.read_csv(d / "summary_by_rate.csv")
    cols = ["tok_s", "tpot_mean_ms", "slo_met", "goodput_req_s", "speedup"]
    assert list(zip(again["variant"], again["request_rate"], strict=True)) == \
        list(zip(stored["variant"], stored["request_rate"], strict=True))
    for col in cols:
        assert np.allclose(pd.to_numeric(again[col]), pd.to_numeric(stored[col]), equal_nan=True,
                           rtol=1e-6), col
    assert sorted(set(stored["request_rate"])) == [4.0, 16.0]
    req = _read_csv(d / "requests.csv")
    rated = req[req["request_rate"].notna()]
    # the speedup at a rate is the baseline's mean TPOT over the variant's, TPOT = decode time / (tokens - 1)
    tpot = (rated["e2e_ms"] - rated["ttft_ms"]) / (rated["output_tokens"] - 1)
    mean = tpot.groupby([rated["variant"], rated["request_rate"]]).mean()
    for rate in (4.0, 16.0):
        row = stored[(stored["variant"] == "eagle3") & (stored["request_rate"] == rate)].iloc[0]
        assert row["speedup"] == pytest.approx(mean[("baseline", rate)] / mean[("eagle3", rate)], rel=1e-6)


# ------------------------------------------------------------------------------------------------ tune
def _wide_histograms(tune_dir: Path) -> list[int]:
    """The wide run's per-request spec_correct_drafts_histogram, summed by hand (0.5.15: the meta_info
    probe)."""
    probe = pd.read_csv(tune_dir / "wide" / "spec_probe.csv")
    probe = probe[probe["variant"] == "wide-s5-k1-d6-g"]
    total: list[int] = []
    for text in probe["spec_histogram"].dropna():
        h = [int(x) for x in str(text).split()]  # requests.csv and spec_probe.csv: space-separated counts
        total = [a + b for a, b in zip(total + [0] * (len(h) - len(total)), h + [0] * (len(total) - len(h)),
                                       strict=True)]
    return total


def test_tune_predicts_every_chain_from_the_wide_runs_histogram(tune_dir):
    h = _wide_histograms(tune_dir)
    assert len(h) == 6 and sum(h) > 1000  # 0..5 correct drafts per verify step, over every request
    rows = pd.read_csv(tune_dir / "tune-as-run.csv")
    for r in rows.itertuples():
        k = int(r.num_steps)
        chain = sum(n * (min(j, k) + 1) for j, n in enumerate(h)) / sum(h)
        assert r.accept_len_pred == pytest.approx(chain, rel=1e-6)  # tune.csv keeps 6 decimals
    profile = json.loads((tune_dir / "speculation_profile.json").read_text())
    # both rounded to 6 decimals
    assert profile["mean_accept_length"] == pytest.approx(1 + sum(profile["marginal_accept_rates"]), abs=1e-5)
    assert profile["mean_accept_length"] \
        == pytest.approx(sum(n * (j + 1) for j, n in enumerate(h)) / sum(h), abs=1e-5)


def test_tune_accept_length_error_is_within_five_percent_for_every_measured_config(tune_dir):
    rows = pd.read_csv(tune_dir / "tune-as-run.csv")
    measured = rows[rows["measured"].notna()]
    assert set(measured["num_steps"]) == {1, 3, 5} and set(measured["concurrency"]) == {1, 8}
    for r in measured.itertuples():
        pred = r.accept_len_pred if r.measured == "verified" else r.accept_len_pred_cost_prompts
        err = 100 * (pred - r.accept_len_measured) / r.accept_len_measured
        assert r.accept_len_error_pct == pytest.approx(err, abs=0.01)
        assert abs(err) <= 5.0, (r.num_steps, r.concurrency, err)


def test_the_rebuilt_report_keeps_every_number_and_follows_the_verdicts(tune_dir):
    from harness.analysis.summary import summarise_dir
    from harness.studies.tune_view import rebuild_report

    for sub in ("wide", "cost"):  # the sub-runs' summaries recompute from their records
        stored = pd.read_csv(tune_dir / sub / "summary.csv")
        again = summarise_dir(tune_dir / sub)
        for col in ("tok_s", "speedup", "accept_len", "step_ms", "decode_tok_s", "verify_step_ms"):
            assert np.allclose(pd.to_numeric(again[col]), pd.to_numeric(stored[col]), equal_nan=True,
                               rtol=1e-9), col
        assert list(again["verdict"].fillna("")) == as_today(stored)
    as_run = pd.read_csv(tune_dir / "tune-as-run.csv")
    rebuilt = pd.read_csv(rebuild_report(tune_dir))
    for col in as_run.columns:
        if pd.api.types.is_numeric_dtype(as_run[col]):
            assert np.allclose(rebuilt[col], as_run[col], equal_nan=True, rtol=1e-6), col
    # the measured speedup of every step-measured config, like for like with its prediction: the decode
    # tok/s ratio of its step-cost phase against the baseline's (same prompts, same tokens, same batch)
    cost = pd.read_csv(tune_dir / "cost" / "summary.csv")
    dec = cost.set_index(["variant", "concurrency"])["decode_tok_s"]
    names = {1: "s1-k1-d2-g", 3: "s3-k1-d4-g", 5: "s5-k1-d6-g"}
    for r in rebuilt[rebuilt["measured"].notna()].itertuples():
        ratio = dec[(names[int(r.num_steps)], r.concurrency)] / dec[("baseline", r.concurrency)]
        assert r.step_phase_decode_speedup == pytest.approx(ratio, rel=1e-9)
        assert r.decode_speedup_error_pct == pytest.approx(100 * (r.speedup_pred - ratio) / ratio, abs=0.01)
        assert abs(r.decode_speedup_error_pct) < 10
    # the verified rows are the wide run's own phases: too short to decide at both levels
    v = rebuilt[rebuilt["measured"] == "verified"].set_index("concurrency")
    assert list(v["verdict"]) == ["too-short", "too-short"]
    assert v.loc[8, "verdict_reason"].startswith("too short to decide: 16 requests in a phase, fewer than 4 "
                                                  "x 8; needs >= 32 requests per phase")
    report = (tune_dir / "tune_report.txt").read_text()
    lines = [ln for ln in report.splitlines() if ln.startswith(("c1:", "c8:"))]
    assert [ln.split(":")[1].strip() for ln in lines] == ["cannot tell yet (too-short)"] * 2
    assert "no config beats" not in report  # what the run printed at c8 (tune_report-as-run.txt), wrongly
    assert "no config beats" in (tune_dir / "tune_report-as-run.txt").read_text()


def test_the_doc_quotes_the_h200_fixtures(serve, tune_dir):
    doc = DOC.read_text()
    row = pd.read_csv(serve / "endpoints" / "summary.csv").set_index("variant").loc["eagle3"]
    assert f"{row['speedup']:.2f}x ({row['speedup_ci_low']:.2f}-{row['speedup_ci_high']:.2f})" in doc
    rows = pd.read_csv(tune_dir / "tune-as-run.csv")
    for r in rows[rows["measured"].notna()].itertuples():  # each row as the doc's table writes it
        pred = r.accept_len_pred_cost_prompts if r.measured == "step" else r.accept_len_pred
        assert f"| {int(r.num_steps)} | {int(r.concurrency)} | {pred:.2f}" in doc
        assert f"| {r.accept_len_measured:.2f} | {r.accept_len_error_pct:+.1f} % | " \
            f"{r.step_ms:.2f} ({r.base_step_ms:.2f}) | {r.speedup_pred:.2f}x |" in doc
    from harness.studies.tune_view import rebuild_report

    rebuilt = pd.read_csv(rebuild_report(tune_dir))
    for r in rebuilt[rebuilt["measured"].notna()].itertuples():
        assert f"| {r.speedup_pred:.2f}x | {r.step_phase_decode_speedup:.2f}x | " \
            f"{r.decode_speedup_error_pct:+.1f} % | {r.step_phase_speedup:.2f}x |" in doc
    rate = pd.read_csv(serve / "rates" / "summary_by_rate.csv")
    for s in rate["speedup"].dropna():
        assert f"{s:.2f}x" in doc


def test_tune_report_cli_rebuilds_from_a_copied_directory(tmp_path):
    import subprocess
    import sys

    d = unpacked(FIX / "tune", tmp_path / "tune")
    (d / "tune.csv").unlink(missing_ok=True)
    got = subprocess.run([sys.executable, "-m", "harness.cli", "tune", "--report", str(d)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("tune of eagle3 (tiny-stdlib-eagle3): 4 server starts for a grid of 5")
    assert "c8: cannot tell" in got.stdout and (d / "tune.csv").exists()
    bad = subprocess.run([sys.executable, "-m", "harness.cli", "tune", "--report", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode != 0 and "not a tune directory (no tune_plan.json)" in bad.stderr + bad.stdout
