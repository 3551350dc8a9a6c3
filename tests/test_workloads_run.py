"""Whole runs on the stand-in with real workloads: live multi-turn and request-rate phases (started
servers), an existing endpoint started by the test (never stopped by draftbench), API keys."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.inputs.config import load_plan
from tests.faults_helpers import SIM_LAUNCHER, only_run_dir, read_csv, reap_servers, sim_env, write_plan

GOOD = {"name": "eagle3", "drafter": {"name": "good", "path": "demo-models/good-eagle3"},
        "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
CONVERSATIONS = [
    {"id": "q1", "category": "writing", "text": "Write a haiku about rain.",
     "followups": ["Now make it rhyme."]},
    {"id": "q2", "category": "math", "text": "What is 12 * 13?"},
    {"id": "q3", "category": "coding", "text": "Reverse a list.", "followups": ["In C.", "In Rust."]},
]


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


@pytest.mark.slow
async def test_multi_turn_and_request_rate_phases(tmp_path: Path):
    plan_path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                           env=sim_env(0.2), variants=[{"name": "baseline"}, GOOD],
                           suite_prompts=CONVERSATIONS,
                           run={"concurrency": [2], "max_tokens": 16, "repeats": 1,
   "request_rate": [20, "inf"], "slo": {"ttft_ms": 60000, "tpot_ms": 60000}})
    plan = load_plan(plan_path)
    assert plan.run.request_rate == [20.0, math.inf]
    out = io.StringIO()
    assert await consume(run_plan(plan, results_dir=tmp_path / "results"), out=out) == 0
    run_dir = only_run_dir(tmp_path / "results")
    assert run_dir is not None
    printed = out.getvalue()
    assert "Request-rate phases" in printed and "speedup (TPOT)" in printed and "By turn" in printed
    assert "eagle3: " in printed and ("stops paying at" in printed or "at every rate measured" in printed)
    rows = read_csv(run_dir / "requests.csv")
    assert all(r["ok"] == "True" for r in rows)
    phases = sorted({r["phase"] for r in rows})
    assert phases == ["s@c2#r1", "s@r20#r1", "s@rinf#r1"]
    for variant in ("baseline", "eagle3"):
        for phase in phases:
            got = sorted((r["request_id"], r["turn"], r["conversation_id"]) for r in rows
                         if r["variant"] == variant and r["phase"] == phase)
            assert got == [("s/q1", "1", "s/q1"), ("s/q1/turn2", "2", "s/q1"), ("s/q2", "1", "s/q2"),
                           ("s/q3", "1", "s/q3"), ("s/q3/turn2", "2", "s/q3"), ("s/q3/turn3", "3", "s/q3")]
    by_id = {(r["variant"], r["phase"], r["request_id"]): r for r in rows}
    t1, t2 = by_id[("baseline", "s@c2#r1", "s/q1")], by_id[("baseline", "s@c2#r1", "s/q1/turn2")]
    # it carries the answer
    assert int(t2["prompt_tokens"]) > int(t1["prompt_tokens"]) + int(t1["output_tokens"])
    rate_rows = [r for r in rows if r["phase"].startswith("s@r")]
    assert {r["concurrency"] for r in rate_rows} == {"0"} \
        and {r["request_rate"] for r in rate_rows} == {"20.0", "inf"}

    summary = read_csv(run_dir / "summary.csv")
    assert sorted((r["variant"], r["concurrency"]) for r in summary) == [("baseline", "2"), ("eagle3", "2")]
    spec = next(r for r in summary if r["variant"] == "eagle3")
    assert float(spec["output_match"]) == 1.0  # greedy and lossless: every turn matches, later ones included
    by_rate = read_csv(run_dir / "summary_by_rate.csv")
    assert sorted((r["variant"], r["request_rate"]) for r in by_rate) == [
        ("baseline", "20.0"), ("baseline", "inf"), ("eagle3", "20.0"), ("eagle3", "inf")]
    assert all(float(r["goodput_req_s"]) > 0 and r["slo_met"] == "1.0" for r in by_rate)
    assert all(float(r["speedup"]) > 0 for r in by_rate if r["variant"] == "eagle3")
    turns = read_csv(run_dir / "summary_by_turn.csv")
    assert {(r["variant"], r["turn"]) for r in turns} >= {("eagle3", "1"), ("eagle3", "2"), ("eagle3", "3")}
    # from the 0.5.15 probe, every turn: its later turns follow its own (greedy, so the timed pass's) answers
    spec_turns = [r for r in turns if r["variant"] == "eagle3"]
    assert {r["turn"] for r in spec_turns} == {"1", "2", "3"}
    assert all(r["accept_len_requests"] and float(r["accept_len_requests"]) > 1 for r in spec_turns)
    probe = read_csv(run_dir / "spec_probe.csv")
    assert {r["request_id"] for r in probe if r["phase"] == "s@c2#r1"} == {
        "s/q1", "s/q1/turn2", "s/q2", "s/q3", "s/q3/turn2", "s/q3/turn3"}
    assert json.loads((run_dir / "provenance.json").read_text())["servers_not_started"] == []


@pytest.mark.slow
async def test_acceptance_of_every_turn_on_a_streaming_server(tmp_path: Path):
    """SGLang >= 0.5.19 streams per-request spec stats: later turns get their own accept length."""
    plan_path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                           env={**sim_env(0.2), "DRAFTBENCH_SIM_SGLANG_VERSION": "0.5.19"},
                           variants=[{"name": "baseline"}, GOOD], suite_prompts=CONVERSATIONS,
                           run={"concurrency": [2], "max_tokens": 16, "repeats": 1})
    plan = load_plan(plan_path)
    plan.target.sglang.version = "0.5.19"
    assert await consume(run_plan(plan, results_dir=tmp_path / "results"), out=io.StringIO()) == 0
    run_dir = only_run_dir(tmp_path / "results")
    assert run_dir is not None
    turns = {(r["category"], r["turn"]): r for r in read_csv(run_dir / "summary_by_turn.csv")
             if r["variant"] == "eagle3"}
    assert set(turns) == {("writing", "1"), ("writing", "2"), ("math", "1"), ("coding", "1"), ("coding", "2"),
                          ("coding", "3")}
    assert all(float(r["accept_len_requests"]) > 1 for r in turns.values())
    assert float(turns[("coding", "3")]["prompt_tokens_mean"]) \
        > float(turns[("coding", "1")]["prompt_tokens_mean"])


@pytest.mark.slow
async def test_a_run_of_request_rates_only(tmp_path: Path):
    """`concurrency: []` with request rates: open-loop phases only, nothing closed-loop measured."""
    plan_path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                           env=sim_env(0.2), variants=[{"name": "baseline"}, GOOD],
                           suite_prompts=CONVERSATIONS[1:2] * 1 + [dict(CONVERSATIONS[1], id="q4")],
                           run={"concurrency": [], "max_tokens": 16, "request_rate": [10],
                                "slo": {"ttft_ms": 60000}})
    plan = load_plan(plan_path)
    assert plan.run.concurrency == [] and plan.run.repeats == 1
    out = io.StringIO()
    assert await consume(run_plan(plan, results_dir=tmp_path / "results"), out=out) == 0
    run_dir = only_run_dir(tmp_path / "results")
    assert run_dir is not None
    rows = read_csv(run_dir / "requests.csv")
    assert sorted({r["phase"] for r in rows}) == ["s@r10#r1"] and len(rows) == 4 \
        and all(r["ok"] == "True" for r in rows)
    assert read_csv(run_dir / "summary.csv") == []  # no closed-loop level: no rows there
    by_rate = read_csv(run_dir / "summary_by_rate.csv")
    assert sorted(r["variant"] for r in by_rate) == ["baseline", "eagle3"] \
        and all(r["slo_met"] == "1.0" for r in by_rate)
    assert "Request-rate phases" in out.getvalue()


def test_a_run_needs_a_concurrency_level_or_a_request_rate(tmp_path: Path):
    from harness.common.errors import InputError

    plan_path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                           variants=[{"name": "baseline"}], suite_prompts=CONVERSATIONS[1:2],
                           run={"concurrency": []})
    with pytest.raises(InputError) as err:
        load_plan(plan_path)
    text = str(err.value)
    assert "plan.yaml" in text and "run.concurrency" in text \
        and "a concurrency level or a request rate" in text
