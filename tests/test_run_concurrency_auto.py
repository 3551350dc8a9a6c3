"""`draftbench run` with `run.concurrency: auto`, end to end on the stand-in, read as a user reads it: per
speculative variant, where it stops paying (the crossover, that it pays up to the largest batch tried, or that
it does not pay even at c1), the batches measured, what each level's phases held, the paired runs' summary
rows and verdicts, the request rates planned and run, and no server left running. The demo's good drafter
(it pays at every batch up to 2 on the stand-in) and the seed's weak setup (15 steps, 16 draft tokens, CUDA
graphs off: it pays at none); batches up to 2 and short requests keep it to seconds of stand-in time. Where
the stand-in's crossover lies is tests/test_crossover.py's and tests/test_tune_crossover.py's to check."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from harness.common.errors import InputError
from tests.faults_helpers import (
    GOOD,
    SIM_LAUNCHER,
    Cli,
    live_groups,
    prompts,
    reap_servers,
    sim_env,
    started_pgids,
    write_plan,
)

MAX_BATCH = 2  # the servers' max running requests
LADDER = [1, 2]  # the batches the step costs are measured at first (harness.analysis.crossover.ladder)
PER_SLOT = 4  # requests per slot of a level's batch (harness.studies.tune_plans.COST_PER_SLOT)
# the seed's weak setup (plans/demo.yaml): on the stand-in's model 0.73x at c1 and less above
SEED_WEAK = {"name": "seed-weak", "drafter": {"name": "weak", "path": "demo-models/seed-weak-eagle3",
                                              "algorithm": "EAGLE3"},
             "num_steps": 15, "eagle_topk": 1, "num_draft_tokens": 16, "cuda_graph": False}
CONFIGS = {"good": "s3-k1-d4-g", "seed-weak": "s15-k1-d16-eager"}  # each variant's own config: a grid of one
STATUSES = {"crosses", "pays-to-max", "never-pays"}


def _plan(tmp_path: Path) -> Path:
    return write_plan(
        tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
        variants=[{"name": "baseline"}, {**GOOD, "cuda_graph": True}, SEED_WEAK], suite_prompts=prompts(4),
        server={"max_running_requests": MAX_BATCH},
        # min_steady_s 0: phase sizing sizes by request count alone (4 x the concurrency), in seconds of
        # stand-in time; two repeats a look, up to three: a paired run at c2 can decide on its interval
        run={"concurrency": "auto", "max_tokens": 16, "warmup_requests": 1, "repeats": 2, "max_repeats": 3,
             "min_steady_s": 0, "slo": {"tpot_ms": 8}},
        env=sim_env(0.2))


def test_run_plan_refuses_a_plan_whose_concurrency_is_auto(tmp_path):
    """run_plan itself (the TUI's Run, a multi-node run) has no levels for `auto`: refused before anything
    starts, never a run at concurrency 1 alone."""
    from harness.bench.runner import run_plan
    from harness.inputs.config import load_plan

    plan = load_plan(_plan(tmp_path))
    assert plan.run.concurrency_auto and plan.run.concurrency == [1]

    async def first() -> None:
        async for _ in run_plan(plan, results_dir=tmp_path / "results"):
            break

    with pytest.raises(InputError, match="auto is a search, run by `draftbench run PLAN`"):
        asyncio.run(first())
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


@pytest.mark.slow
def test_run_concurrency_auto_end_to_end(tmp_path):
    plan = _plan(tmp_path)
    results = tmp_path / "results"
    cli = Cli(["run", str(plan), "--results-dir", str(results)])
    try:
        rc, out, err = cli.finish(timeout=300)
    finally:
        cli.kill()
        reap_servers(results)
    assert rc == 0, err[-3000:]

    # one tune per speculative variant, over that variant's own config; each printed with its directory
    dirs = [Path(line) for line in out.splitlines() if line.startswith(str(results))]
    assert len(dirs) == 2
    tuned = {json.loads((d / "tune_plan.json").read_text())["options"]["variant"]: d for d in dirs}
    assert set(tuned) == set(CONFIGS)
    for name in CONFIGS:
        assert f"run.concurrency auto: where {name} stops paying" in err

    loads: list[str] = []
    for name, d in tuned.items():
        cfg = CONFIGS[name]
        state = json.loads((d / "tune_state.json").read_text())
        cross = pd.read_csv(d / "crossover.csv")
        report = (d / "tune_report.txt").read_text()
        assert report in out  # what the CLI printed is the report on disk
        # the crossover of this variant's config, in crossover.csv, schedule.json and the profile alike
        assert set(cross["config"]) == {cfg}
        status = str(cross["crossover_status"].iloc[0])
        assert status in STATUSES
        sched = json.loads((d / "schedule.json").read_text())
        profile = json.loads((d / "speculation_profile.json").read_text())
        said = sched["crossover_concurrency"][cfg]
        assert profile["crossover_concurrency"][cfg] == said
        if status == "crosses":
            at = float(cross["crossover_concurrency"].iloc[0])
            assert said == pytest.approx(at, abs=0.01) and 1 <= at <= MAX_BATCH
            assert re.search(rf"speculation stops paying: {cfg} stops paying at c{at:.1f} \(pays at c\d+, "
                             rf"not at c\d+", report)
        elif status == "pays-to-max":
            assert said == f">{MAX_BATCH}"
            assert f"stops paying: {cfg} pays up to the largest batch tried (c{MAX_BATCH})" in report
        else:
            assert said == 0 and f"{cfg}: does not pay even at c1" in report
        assert sched["schedule"][-1]["max_batch"] == MAX_BATCH

        # the batches measured: the ladder and the bisection's, as the report lists them
        levels = sorted(int(b) for b in cross["batch"].unique())
        assert levels == sorted({*LADDER, *state["crossover"]["bisected"]})
        assert f"from step costs at {', '.join(f'c{b}' for b in levels)}:" in report
        # what each level's phases held: the step-cost phases 4 x their batch, both arms; the paired runs
        # at least 4 x theirs (phase sizing)
        assert (cross["cost_requests"] == PER_SLOT * cross["batch"]).all(), cross
        assert (cross["base_cost_requests"] == PER_SLOT * cross["batch"]).all(), cross
        phases = pd.concat([pd.read_csv(p) for p in d.glob("cost*/phases.csv")])
        assert (phases["requests"] == PER_SLOT * phases["concurrency"]).all()
        assert set(phases["variant"]) == {"baseline", cfg}

        # the paired runs (of this config: the pick, or where nothing pays the one closest to paying): each
        # verified batch has its summary rows, and crossover.csv and the report say their verdicts
        verified = {int(k): v for k, v in state["crossover"]["verified"].items()}
        assert verified and state["crossover"]["pick"] == cfg
        for level, verdict in verified.items():
            summary = pd.read_csv(d / f"verify-c{level}" / "summary.csv")
            rows = summary[summary["concurrency"] == level].set_index("variant")
            assert set(rows.index) == {"baseline", cfg}
            assert rows.loc[cfg, "speedup"] > 0 and rows.loc[cfg, "verdict"] == verdict
            row = cross[cross["batch"] == level].iloc[0]
            assert row["verdict"] == verdict and row["verify_requests"] >= PER_SLOT * level
            held = pd.read_csv(d / f"verify-c{level}" / "phases.csv")
            assert int(held["requests"].min()) == int(row["verify_requests"])
            assert f"verified at c{level}: measured {float(rows.loc[cfg, 'speedup']):.2f}x" in report
        tune_rows = pd.read_csv(d / "tune.csv")
        assert sorted(tune_rows["concurrency"]) == LADDER  # the tune's own levels, one config

        # the request rates, where a config pays somewhere: run as planned, within a factor of 2 of the plan
        # (a loaded 2-core machine moves the stand-in's seconds; tests/test_tune_crossover.py holds each
        # phase within 15 % of its plan on a recorded run)
        got = state["crossover"]
        if status == "never-pays":
            assert not got.get("load_done") and not (d / "load").exists()
        else:
            loads.append(name)
            assert got["load_done"] and got["load_planned_s"] > 0
            assert 0.5 <= got["load_s"] / got["load_planned_s"] <= 2.0, got
            rates = pd.read_csv(d / "load" / "summary_by_rate.csv")
            assert set(rates["variant"]) == {"baseline", cfg}
            assert (rates["requests"] + rates["errors"] == PER_SLOT * MAX_BATCH).all()
            assert "request rate (goodput under run.slo; the baseline against" in report
        assert not state.get("stop_failed")  # the tune stopped every server it kept
    assert loads  # the good drafter pays at c1 on the stand-in whatever the machine's load

    # no server left running: every process group any sub-run started is gone, and none is said to be left
    pgids = [p for f in results.rglob("servers.jsonl") for ps in started_pgids(f.parent).values() for p in ps]
    assert pgids and not set(pgids) & live_groups()
    assert "may still be running" not in err


def test_run_budget_is_the_whole_runs_shared_by_the_variants_searched(tmp_path, monkeypatch):
    """`draftbench run --budget` with run.concurrency: auto: each speculative variant's search gets an equal
    share of what is left when it starts, never the whole budget each (two variants once spent 2 x it)."""
    import argparse

    from harness.cli import tune as cli_tune
    from harness.inputs.config import load_plan

    plan = load_plan(_plan(tmp_path))
    now = [0.0]
    given: list[tuple[str, float]] = []

    async def fake_go(plan, opts, results_dir, resume):
        given.append((opts.variant, opts.budget_s))
        now[0] += 40.0  # the first search spends 40 s of its 50
        return 0, ""

    monkeypatch.setattr(cli_tune, "_go", fake_go)
    args = argparse.Namespace(budget="100s", results_dir=str(tmp_path / "results"))
    assert cli_tune.run_auto(plan, args, clock=lambda: now[0]) == 0
    assert given == [("good", 50.0), ("seed-weak", 60.0)]
    # a later search its share cannot buy is said and skipped (exit 1); the first one's refusal, before
    # anything started, stays the error it is (exit 2)
    refuse_from = [1]

    async def refusing_go(plan, opts, results_dir, resume):
        given.append((opts.variant, opts.budget_s))
        if len(given) > refuse_from[0]:
            raise InputError(None, None, "--budget", "cannot decide anything")
        return 0, ""

    given.clear()
    monkeypatch.setattr(cli_tune, "_go", refusing_go)
    assert cli_tune.run_auto(plan, args, clock=lambda: now[0]) == 1
    assert [g[0] for g in given] == ["good", "seed-weak"]
    given.clear()
    refuse_from[0] = 0
    with pytest.raises(InputError, match="cannot decide anything"):
        cli_tune.run_auto(plan, args, clock=lambda: now[0])
    assert [g[0] for g in given] == ["good"]
