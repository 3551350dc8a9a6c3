"""Acceptance where it will be served, recovered from a run on the stand-in: its accept length falls with
context past 2k tokens and with temperature (harness.sim.sglang.conditions), and a run with short and long
prompts at two sampling arms shows both, per context bucket (summary_by_context.csv) and per arm
(summary.csv's `sampling`), each arm against the baseline at its own sampler. The run's realism alarms fire
for its generated suite and for a drafter measured far from its training-time accept length."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pandas as pd
import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.common import events as ev
from harness.inputs.config import load_plan
from harness.sim.sglang.conditions import ContextDecay, expected_accept_length_at, step_profile
from harness.sim.sglang.fixtures import write_eagle3_drafter, write_target_model
from harness.sim.sglang.model import SpecShape
from tests.faults_helpers import SIM_LAUNCHER, only_run_dir, reap_servers, sim_env, write_plan

PROFILE = [0.9, 0.8, 0.7]
SHAPE = SpecShape(3, 1, 4)
WORDS = ("river market engine study method result season library garden council network process record "
         "project signal storm harbour contract budget archive chapter window station harvest").split()
HOT = 0.9
pytestmark = pytest.mark.slow


def _text(words: int, rng: random.Random) -> str:
    """`words` stand-in tokens (the stand-in's tokenizer counts a short word as one) of plain generated
    text."""
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _models(workdir: Path) -> None:
    root = workdir / "models"
    write_target_model(root / "target", hidden_size=256, num_layers=8, vocab_size=1024, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=512, max_position_embeddings=65536)
    write_eagle3_drafter(root / "eagle3", target_hidden_size=256, hidden_size=256, vocab_size=1024,
                         draft_vocab_size=256, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=65536, per_position=PROFILE)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One run: baseline and an EAGLE-3 drafter at T 0 and T 0.9, over prompts of ~150, ~6k and ~24k
    tokens."""
    tmp = tmp_path_factory.mktemp("ctx")
    rng = random.Random(7)
    prompts = [{"id": f"{size}-{k}", "category": cat, "text": _text(size, rng), "max_tokens": 96}
               for size, cat in ((150, "short"), (6000, "mid"), (24000, "long")) for k in range(3)]
    path = write_plan(
        tmp / "plan.yaml", workdir=tmp / "work", launcher=SIM_LAUNCHER, sim=False,
        env={**sim_env(0.2), "DRAFTBENCH_SIM_SGLANG_VERSION": "0.5.19"},  # per-request stats in the stream
        variants=[{"name": "baseline"},
                  {"name": "eagle3", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
                   "num_draft_tokens": 4,
                   "drafter": {"name": "good", "path": "models/eagle3", "training_accept_len": 5.0,
        "training_categories": ["code"]}}],
        suite_prompts=prompts,
        run={"concurrency": [3], "ignore_eos": True, "sampling": [{"temperature": 0}, {"temperature": HOT}]})
    _models(tmp / "work")
    text = path.read_text().replace("demo-models/target", "models/target")
    path.write_text(text)
    plan = load_plan(path)
    events: list = []

    async def go():
        async def tap(stream):
            async for e in stream:
                events.append(e)
                yield e
        return await consume(tap(run_plan(plan, results_dir=tmp / "results")), out=io.StringIO())

    import asyncio

    try:
        rc = asyncio.run(go())
    finally:
        reap_servers(tmp)
    run_dir = only_run_dir(tmp / "results")
    assert rc == 0 and run_dir is not None
    return run_dir, events


def _expected(context: float, temperature: float = 0.0) -> float:
    return expected_accept_length_at(PROFILE, SHAPE, temperature=temperature, context=int(context),
                                     decay=ContextDecay())


def _sd(context: float) -> float:
    """The standard deviation of one verify step's committed tokens at a context: P(k >= i) is the running
    product of the decayed per-position acceptance, E[k] = sum P(k >= i), E[k^2] = sum (2i - 1) P(k >= i)."""
    profile = step_profile(PROFILE, SHAPE.topk, 0.0, 1.0, int(context), ContextDecay())
    reach, run = [], 1.0
    for p in list(profile)[: SHAPE.max_accepted]:
        run *= p
        reach.append(run)
    mean = sum(reach)
    return (sum((2 * i + 1) * r for i, r in enumerate(reach)) - mean * mean) ** 0.5


def test_accept_length_falls_with_context_as_the_stand_in_says(served):
    run_dir, _ = served
    table = pd.read_csv(run_dir / "summary_by_context.csv")
    ctx = table[(table["variant"] == "eagle3-t0") & (table["axis"] == "context")
                & (table["category"] == "all")]
    by = {r["bucket"]: r for _, r in ctx.iterrows()}
    assert {"0-1k", "4k-16k", "16k-64k"} <= set(by), sorted(by)
    short, mid, long_ = (float(by[b]["accept_len"]) for b in ("0-1k", "4k-16k", "16k-64k"))
    assert short > mid > long_  # the decay, recovered from the per-request stats
    for b in ("0-1k", "4k-16k", "16k-64k"):  # and its size: the stand-in's documented formula at the bucket
        got, want = float(by[b]["accept_len"]), _expected(float(by[b]["context_mean"]))
        steps = int(by[b]["verify_steps"])
        # within 4 standard errors of the draws it made (a loaded box runs fewer passes: fewer steps), plus
        # 3 % for a bucket's contexts spread around their mean
        assert abs(got / want - 1) < 4 * _sd(float(by[b]["context_mean"])) / steps ** 0.5 / want + 0.03, \
            (b, got, want, steps)
    # the buckets pool back to the summary's accept length from the same per-request stats
    summary = pd.read_csv(run_dir / "summary.csv").set_index("variant")
    pooled = float(ctx["tokens"].sum() / ctx["verify_steps"].sum())
    assert pooled == pytest.approx(float(summary.loc["eagle3-t0", "accept_len_requests"]), rel=1e-6)


def test_per_request_stats_show_the_context_dependence(served):
    run_dir, _ = served
    req = pd.read_csv(run_dir / "requests.csv")
    spec = req[(req["variant"] == "eagle3-t0") & req["spec_verify_ct"].notna()]
    by_size = spec.groupby(spec["prompt_id"].str.split("-").str[0])
    al = {size: float((g["output_tokens"] - 1).sum() / g["spec_verify_ct"].sum()) for size, g in by_size}
    assert al["150"] > al["6000"] > al["24000"]


def test_temperature_lowers_acceptance_and_each_arm_has_its_own_baseline(served):
    run_dir, _ = served
    summary = pd.read_csv(run_dir / "summary.csv").set_index("variant")
    assert summary.loc["eagle3-t0", "sampling"] == "t0" and summary.loc["eagle3-t0.9", "sampling"] == "t0.9"
    assert summary.loc["eagle3-t0.9", "compared_with"] == "baseline-t0.9"
    assert summary.loc["eagle3-t0", "compared_with"] == "baseline-t0"
    table = pd.read_csv(run_dir / "summary_by_context.csv")
    short = table[(table["axis"] == "context") & (table["category"] == "short") & (table["bucket"] == "0-1k")]
    cold = float(short[short["variant"] == "eagle3-t0"]["accept_len"].iloc[0])
    hot = float(short[short["variant"] == "eagle3-t0.9"]["accept_len"].iloc[0])
    assert hot < cold
    for got, t in ((cold, 0.0), (hot, HOT)):
        mean = float(short[short["variant"] == ("eagle3-t0" if t == 0
                                                else "eagle3-t0.9")]["context_mean"].iloc[0])
        assert abs(got / _expected(mean, t) - 1) < 0.12, (t, got)
    meta = [json.loads(x) for x in (run_dir / "variants.jsonl").read_text().splitlines() if x.strip()]
    hot_meta = [m for m in meta if m["variant"] == "eagle3-t0.9"][-1]
    assert hot_meta["temperature"] == HOT and hot_meta["sampling"] == "t0.9"


def test_only_the_greedy_arm_is_audited_against_its_own_baseline(served):
    from harness.analysis.lossless import read_audit

    run_dir, events = served
    # a sampled arm's answers differ from its baseline's by design: no audit pass on its baseline, no verdict,
    # no alarm; the greedy arm is audited against the greedy baseline
    assert not [e for e in events if isinstance(e, ev.Alarm) and e.code == "lossless-suspect"]
    audit = read_audit(run_dir)
    assert audit is not None and set(audit.passes) == {"baseline-t0"}
    summary = pd.read_csv(run_dir / "summary.csv").set_index("variant")
    assert summary.loc["eagle3-t0", "lossless_verdict"] == "lossless"
    assert pd.isna(summary.loc["eagle3-t0.9", "lossless_verdict"])


def test_the_run_warns_about_its_generated_suite_and_the_training_gap(served):
    run_dir, events = served
    alarms = [e for e in events if isinstance(e, ev.Alarm)]
    codes = {a.code for a in alarms}
    assert "synthetic-suite" in codes  # the generated filler, caught without a label
    assert "categories-not-in-training" in codes
    far = [a for a in alarms if a.code == "accept-far-from-training"]
    assert {a.variant for a in far} == {"eagle3-t0", "eagle3-t0.9"}
    assert "below the 5.00" in far[0].message


def test_the_cli_summary_prints_the_context_tables(served, capsys):
    from harness.cli import main

    run_dir, _ = served
    assert main(["summary", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "Accept length by context length" in out and "16k-64k" in out
    assert "Accept length by output position" in out


def test_a_png_when_matplotlib_is_installed(served):
    pytest.importorskip("matplotlib")
    run_dir, _ = served
    png = run_dir / "acceptance_by_context.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
