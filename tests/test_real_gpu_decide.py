"""The verdict run on the H200 (docs/real-gpu.md, "Verdicts and tune on the H200"), re-read from
tests/fixtures/sglang-0.5.15.post1/decide/ (benchmarks/h200/decide.sh prep and verdict, then
`draftbench run --resume` of that run on the same machine).

What can be recomputed from the fixture is recomputed here, and no result of the run is written into this
file: each interval holds its speedup and decides its verdict; the speedup is tok/s over the baseline's; the
interval above concurrency 1 is the t interval of the per-repeat log ratios in phases.csv, computed by hand;
the concurrency-1 interval is the paired bootstrap over the prompts of the requests' timings; the doc quotes
the fixture's numbers. `draftbench tune` did not run on the GPU in that session (no device time left); the
next session's serve and tune stages are tests/test_real_gpu_serve_tune.py. Last, the H200 plans tell
draftbench their memory fraction (the lesson of that run: a kept server was stopped because draftbench could
not know it fitted).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

FIX = Path(__file__).parent / "fixtures" / "sglang-0.5.15.post1" / "decide"
DOC = Path(__file__).parent.parent / "docs" / "real-gpu.md"
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}  # Student t, two-sided 95 %, by df


def _true(x: object) -> bool:
    return str(x) == "True"


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    return pd.read_csv(FIX / "summary.csv")


def _spec_rows(summary: pd.DataFrame) -> pd.DataFrame:
    rows = summary[~summary["baseline"].map(_true)]
    assert not rows.empty
    return rows


def test_the_run_is_baseline_and_eagle3_at_c1_and_c8_with_three_repeats(summary):
    assert sorted(summary["concurrency"].unique()) == [1, 8]
    assert set(summary["variant"]) == {"baseline", "eagle3"}
    assert set(summary["repeats"]) == {3}


def test_speedup_is_tok_s_over_the_baseline_at_the_same_concurrency(summary):
    for _, g in summary.groupby("concurrency"):
        base = float(g[g["baseline"].map(_true)]["tok_s"].iloc[0])
        for _, r in g[~g["baseline"].map(_true)].iterrows():
            assert float(r["speedup"]) == pytest.approx(float(r["tok_s"]) / base, rel=1e-6)


def test_each_interval_holds_its_speedup_and_decides_the_verdict(summary):
    for _, r in _spec_rows(summary).iterrows():
        low, high, speedup = float(r["speedup_ci_low"]), float(r["speedup_ci_high"]), float(r["speedup"])
        assert low <= speedup <= high
        if _true(r["too_short"]):
            want = "within-noise"  # the vocabulary this fixture was written in (tests/verdict_vocab.py)
        else:
            want = "faster" if low > 1.0 else "slower" if high < 1.0 else "within-noise"
        assert r["verdict"] == want, r["verdict_reason"]


def _per_repeat(phases: pd.DataFrame, name: str, conc: int) -> pd.Series:
    """tok/s of each repeat: output tokens over wall time of its phases."""
    g = phases[(phases["variant"] == name) & (phases["concurrency"] == conc)].groupby("repeat")
    return g["output_tokens"].sum() / g["wall_s"].sum()


def test_the_c8_interval_is_the_t_interval_of_the_per_repeat_ratios(summary):
    phases = pd.read_csv(FIX / "phases.csv")
    rows = _spec_rows(summary)
    rows = rows[rows["concurrency"] > 1]
    assert not rows.empty
    base = summary[summary["baseline"].map(_true)]
    for _, r in rows.iterrows():
        assert r["ci_method"] == "t-repeats"
        bname = base[base["concurrency"] == r["concurrency"]]["variant"].iloc[0]

        d = np.log((_per_repeat(phases, r["variant"], r["concurrency"])
                    / _per_repeat(phases, bname, r["concurrency"])).dropna().to_numpy())
        assert len(d) == int(r["repeats"])
        half = T975[len(d) - 1] * d.std(ddof=1) / math.sqrt(len(d))
        assert float(r["speedup_ci_low"]) / float(r["speedup"]) == pytest.approx(math.exp(-half), rel=1e-6)
        assert float(r["speedup_ci_high"]) / float(r["speedup"]) == pytest.approx(math.exp(half), rel=1e-6)


def test_the_c1_interval_is_the_paired_bootstrap_over_prompts(summary):
    from harness.analysis.stats import paired_bootstrap_ratio

    req = pd.read_csv(FIX / "requests-timing.csv.gz")
    req = req[(req["concurrency"] == 1) & (req["ok"].astype(str) == "True")]
    req = req.assign(secs=req["t_end"] - req["t_send"])
    rows = _spec_rows(summary)
    base = summary[summary["baseline"].map(_true) & (summary["concurrency"] == 1)]["variant"].iloc[0]
    for _, r in rows[rows["concurrency"] == 1].iterrows():
        assert r["ci_method"] == "bootstrap-prompts"
        v = req[req["variant"] == r["variant"]].groupby("prompt_id")[["output_tokens", "secs"]].sum()
        b = req[req["variant"] == base].groupby("prompt_id")[["output_tokens", "secs"]].sum()
        common = v.index.intersection(b.index)
        assert len(common) == len(v) == len(b)
        est, low, high = paired_bootstrap_ratio(v.loc[common, "output_tokens"], v.loc[common, "secs"],
                                                b.loc[common, "output_tokens"], b.loc[common, "secs"])
        assert float(r["speedup_ci_low"]) / float(r["speedup"]) == pytest.approx(low / est, rel=1e-6)
        assert float(r["speedup_ci_high"]) / float(r["speedup"]) == pytest.approx(high / est, rel=1e-6)


def test_the_doc_quotes_the_fixture(summary):
    doc = DOC.read_text()
    section = doc[doc.index("## Verdicts and tune on the H200"):]
    for _, r in _spec_rows(summary).iterrows():
        quoted = f"{float(r['speedup']):.2f}x " \
            f"({float(r['speedup_ci_low']):.2f}-{float(r['speedup_ci_high']):.2f})"
        assert quoted in section, quoted
        assert f"**{r['verdict']}**" in section
        assert f"{float(r['tok_s']):.1f}" in section


def test_h200_plans_tell_draftbench_their_memory_fraction(tmp_path, monkeypatch):
    """--mem-fraction-static travels as server.mem_fraction_static, so that a kept server stays up next to
    the next variant's (harness.serve.kept.gpu_has_room) and bench_serving finds both afterwards."""
    import importlib.util

    import yaml

    from harness.inputs.config import load_plan
    from harness.serve.kept import gpu_has_room

    spec = importlib.util.spec_from_file_location("make_plan",
                                                  DOC.parent.parent / "benchmarks" / "h200" / "make_plan.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({"name": "s", "prompts": [
        {"id": f"p{i}", "category": "code", "text": f"x = {i}"} for i in range(8)]}))
    monkeypatch.delenv("VARIANTS", raising=False)
    mod.decide(str(tmp_path))
    for name in ("decide", "tune", "warm"):
        plan = load_plan(tmp_path / f"{name}.yaml")
        assert "--mem-fraction-static" not in plan.model.extra_args
        assert plan.server.mem_fraction_static is not None
        assert gpu_has_room(plan, len(plan.variants) - 1)


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name,
                                                  DOC.parent.parent / "benchmarks" / "h200" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_serve_stage_plans_measure_the_kept_servers_as_endpoints(tmp_path, monkeypatch):
    """decide.sh serve: the verdict and request-rate plans point at the two servers the warm run kept, name
    what they expect of the EAGLE3 one, and load as plans; a warm run that kept only one is a clear error."""
    import json

    import yaml

    from harness.inputs.config import load_plan

    mod = _script("make_plan")
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({"name": "s", "prompts": [
        {"id": f"p{i}", "category": "code", "text": f"x = {i}"} for i in range(8)]}))
    monkeypatch.delenv("VARIANTS", raising=False)
    mod.decide(str(tmp_path))
    assert len((tmp_path / "bench.jsonl").read_text().splitlines()) == 8  # bench_serving's copy of the suite
    warm = tmp_path / "warm-run"
    warm.mkdir()
    entries = [{"variant": "baseline", "pgid": 11, "port": 30001, "state": "started"},
               {"variant": "baseline", "pgid": 11, "state": "kept"},
               {"variant": "eagle3", "pgid": 12, "port": 30002, "state": "started"}]
    (warm / "servers.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    with pytest.raises(SystemExit, match=r"did not keep \['eagle3'\]"):
        mod.endpoints(str(tmp_path), str(warm))
    with open(warm / "servers.jsonl", "a") as fh:
        fh.write(json.dumps({"variant": "eagle3", "pgid": 12, "state": "kept"}) + "\n")
    monkeypatch.setenv("RATES", "4,16")
    mod.endpoints(str(tmp_path), str(warm))
    verdict, rates = load_plan(tmp_path / "endpoints.yaml"), load_plan(tmp_path / "rates.yaml")
    for plan in (verdict, rates):
        assert [(v.name, v.endpoint) for v in plan.variants] == [("baseline", "http://127.0.0.1:30001"),
                                                                ("eagle3", "http://127.0.0.1:30002")]
        eagle = plan.variants[1]
        assert (eagle.algorithm, eagle.num_steps, eagle.eagle_topk, eagle.num_draft_tokens) \
            == ("EAGLE3", 3, 1, 4)
    assert verdict.run.concurrency == [8] and verdict.run.repeats == 5 and not verdict.run.request_rate
    assert rates.run.request_rate == [4.0, 16.0] and rates.run.slo is not None and rates.run.repeats == 1


def _bench_files(tmp_path, base_rounds, spec_rounds, base_repeats, spec_repeats, ci, verdict):
    import json

    import pandas as pd

    run, bench = tmp_path / "run", tmp_path / "bench"
    run.mkdir(exist_ok=True)
    bench.mkdir(exist_ok=True)
    rows = [{"variant": v, "concurrency": 8, "repeat": i + 1, "output_tokens": tok, "wall_s": 1.0}
            for v, reps in (("baseline", base_repeats), ("eagle3", spec_repeats))
            for i, tok in enumerate(reps)]
    pd.DataFrame(rows).to_csv(run / "phases.csv", index=False)
    pd.DataFrame([{"variant": "baseline", "concurrency": 8, "speedup": 1.0, "speedup_ci_low": None,
                   "speedup_ci_high": None, "verdict": "baseline", "ci_method": ""},
                  {"variant": "eagle3", "concurrency": 8, "speedup": 1.1, "speedup_ci_low": ci[0],
                   "speedup_ci_high": ci[1], "verdict": verdict, "ci_method": "t-repeats"}]).to_csv(
        run / "summary.csv", index=False)
    for v, rounds in (("baseline", base_rounds), ("eagle3", spec_rounds)):
        for i, tok_s in enumerate(rounds, 1):
            line = json.dumps({"output_throughput": tok_s}) + "\n"
            (bench / f"bench_serving-{v}-r{i}.jsonl").write_text(line)
    return run, bench


def test_verdict_against_bench_serving_spread(tmp_path):
    mod = _script("verdict_vs_bench")
    run, bench = _bench_files(tmp_path, [4000, 4400], [4400, 4600], [4000, 4200, 3800], [4400, 4500, 4300],
                              (0.95, 1.25), "within-noise")
    c = mod.compare(run, bench)
    assert c["draftbench"]["eagle3"] == [4400.0, 4500.0, 4300.0] \
        and c["bench_serving"]["baseline"] == [4000.0, 4400.0]
    # every baseline round against every eagle3 round: 1.10, 1.15, 1.00, 1.045
    assert [round(x, 3) for x in c["bench_serving_speedups"]] == [1.1, 1.15, 1.0, 1.045]
    assert c["spread"]["bench_serving"]["baseline"] == pytest.approx(0.1)
    assert c["inside_ci"] and not c["contradicted"] and c["consistent"]
    # a "faster" verdict with a bench_serving pairing at 1.00 is contradicted, though inside the interval
    run, bench = _bench_files(tmp_path, [4000, 4400], [4400, 4600], [4000, 4200, 3800], [4400, 4500, 4300],
                              (0.95, 1.25), "faster")
    c = mod.compare(run, bench)
    assert c["inside_ci"] and c["contradicted"] and not c["consistent"]
    # a pairing outside a narrow interval
    run, bench = _bench_files(tmp_path, [4000, 4400], [4400, 4600], [4000, 4200, 3800], [4400, 4500, 4300],
                              (1.05, 1.12), "faster")
    c = mod.compare(run, bench)
    assert not c["inside_ci"] and not c["consistent"]
    # no bench_serving result: nothing to be consistent with
    for f in bench.glob("*.jsonl"):
        f.unlink()
    assert not mod.compare(run, bench)["consistent"]
