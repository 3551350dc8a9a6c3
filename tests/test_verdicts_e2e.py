"""The real runner against the stand-in with seeded timing noise: every row gets an interval that holds its
speedup and the method that made it, the good drafter (~1.7x) is `faster` at concurrency 1, a second
baseline server (true speedup 1.00) has an interval near 1.00, and run.until_ci_pct adds a repeat of the
baseline and of each wide variant. (Coverage of the true speedup over many seeds: tests/test_stats.py.)"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.report import render_table
from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.inputs.config import load_plan
from tests.faults_helpers import GOOD, SIM_LAUNCHER, prompts, reap_servers, sim_env, write_plan


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


async def test_noisy_run_gets_intervals_and_verdicts(tmp_path: Path):
    twin = {"name": "twin", "baseline": False, "extra_args": ["--random-seed", "7"]}  # other noise draws
    plan_path = write_plan(
        tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
        env={**sim_env(0.5), "DRAFTBENCH_SIM_STEP_NOISE": "0.2", "DRAFTBENCH_SIM_NOISE_SEED": "3"},
        variants=[{"name": "baseline"}, GOOD, twin], suite_prompts=prompts(8),
        # until_ci_pct 0.01 % is never met: every variant (and the baseline) gets the third repeat
        run={"concurrency": [1, 2], "max_tokens": 24, "repeats": 2, "min_steady_s": 0,
             "until_ci_pct": 0.01, "max_repeats": 3},
    )
    rc = await consume(run_plan(load_plan(plan_path), results_dir=tmp_path / "results"), out=io.StringIO())
    assert rc == 0
    run_dir = next((tmp_path / "results").iterdir())
    phases = pd.read_csv(run_dir / "phases.csv")
    assert sorted(set(phases["repeat"])) == [1, 2, 3]
    assert phases.groupby("variant")["repeat"].max().to_dict() == {"baseline": 3, "good": 3, "twin": 3}
    s = pd.read_csv(run_dir / "summary.csv").set_index(["variant", "concurrency"])
    assert set(s.loc["baseline", "verdict"]) == {"baseline"}
    for (name, conc), row in s.drop(index="baseline", level=0).iterrows():
        # at concurrency 1 the prompt bootstrap, widened where the repeats disagree beyond the prompts' noise
        assert row.ci_method in ({"bootstrap-prompts", "bootstrap-prompts+repeats"} if conc == 1
                                 else {"t-repeats"}), (name, conc)
        assert row.speedup_ci_low <= row.speedup <= row.speedup_ci_high
        assert row.repeats == 3 and not row.too_short
        assert 0 < row.mean_in_flight <= conc and row.steady_tok_s > 0
    # 8 prompts of 24 tokens on a shared 2-core box: concurrency 1 (24 paired prompts' worth) decides the
    # 1.7x drafter; three 0.2 s phases at concurrency 2 may honestly not (the interval there is over repeats)
    good = s.loc["good"]
    assert good.loc[1, "verdict"] == "faster" and good.loc[1, "speedup_ci_low"] > 1.2
    assert good.loc[2, "verdict"] in {"faster", "undecided"} and good.loc[2, "speedup_ci_high"] > 1.2
    # the twin is the baseline again (true speedup 1.00): near it, whatever the load did between the two
    assert (s.loc["twin", "speedup_ci_low"] < 1.15).all() and (s.loc["twin", "speedup_ci_high"] > 0.87).all()
    table = render_table(pd.read_csv(run_dir / "summary.csv"))
    assert "CI" in table and "*good" in table  # the star: the faster verdict at concurrency 1
