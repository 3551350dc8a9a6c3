"""The lossless audit through a whole run on the stand-in: near-tie flips that follow the batch shape read as
lossless, a broken verify path as suspect (its worst cases named, a live alarm), a structured-output prompt
whose JSON speculation breaks; the timed records are the same as without the audit; the demo plan's good
drafter is lossless."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.summary import load_summary
from harness.bench.runner import run_plan
from harness.cli.demo import prepare_demo, write_demo_models
from harness.common import events as ev
from harness.inputs.config import load_plan

ROOT = Path(__file__).resolve().parent.parent
PLAN = """\
name: lossless
target:
  host: local
  python: {python}
  launcher: ["{{python}}", "-m", "harness.sim"]
  workdir: {workdir}
  simulated: true
  env: {{DRAFTBENCH_SIM_STARTUP_S: "0.1", DRAFTBENCH_SIM_TIME_SCALE: "0.05",
        DRAFTBENCH_SIM_NEAR_TIES: "0.02"}}
model: {{path: demo-models/target}}
server: {{port: auto, max_running_requests: 32, decode_log_interval: 5, startup_timeout_s: 60}}
variants:
  - name: baseline
  - name: good
    drafter: {{name: good, path: demo-models/good-eagle3, algorithm: EAGLE3}}
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
  - name: broken
    drafter: {{name: good, path: demo-models/good-eagle3, algorithm: EAGLE3}}
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
    env: {{DRAFTBENCH_SIM_BROKEN_VERIFY: "1.0"}}
suites:
  - name: tiny
    prompts:
{prompts}      - id: js
        text: "Give a city as JSON."
        response_format: {{type: json_schema, json_schema: {{name: city, schema: {{type: object,
          required: [city], properties: {{city: {{type: string}}, n: {{type: integer}}}}}}}}}}
run:
  concurrency: [1, 4]
  max_tokens: 48
  warmup_requests: 0
  min_steady_s: 0
  phase_sizing: false
  repeats: 1
"""


async def _run(plan, results):
    seen, done = [], None
    async with contextlib.aclosing(run_plan(plan, results_dir=results)) as evs:
        async for e in evs:
            seen.append(e)
            done = e
    assert isinstance(done, ev.RunDone) and done.complete
    return done.run_dir, seen


@pytest.mark.slow
async def test_near_ties_read_lossless_and_a_broken_verify_path_suspect(tmp_path):
    write_demo_models(tmp_path / "work")
    prompts = "".join(f'      - {{id: p{i}, text: "Tell me about item {i} in some detail."}}\n'
                      for i in range(12))
    workdir = json.dumps(str(tmp_path / "work"))
    (tmp_path / "plan.yaml").write_text(PLAN.format(python=sys.executable, workdir=workdir, prompts=prompts))
    run_dir, seen = await _run(load_plan(tmp_path / "plan.yaml"), tmp_path / "results")
    s = load_summary(run_dir).set_index(["variant", "concurrency"])
    good, broken = s.loc["good"], s.loc["broken"]
    assert (good["lossless_verdict"] == "lossless").all(), good["lossless_detail"].tolist()
    # ties, and only ties
    assert good["divergence_rate"].max() > 0 and good["max_divergence_margin"].max() < 0.5
    assert (s.loc["baseline", "control_divergence_rate"] >= 0).all()
    assert (broken["lossless_verdict"] == "suspect").all()
    detail = broken.loc[1, "lossless_detail"]
    assert "divergences at 0.5 nats or more: tiny/p" in detail and " nats" in detail
    assert "answers break the expectation the baseline's met: tiny/js: not JSON" in detail
    # raised live, as the broken variant finished, with its worst cases
    alarms = [e for e in seen if isinstance(e, ev.Alarm) and e.code == "lossless-suspect"]
    assert [a.variant for a in alarms] == ["broken"]
    done_at = next(i for i, e in enumerate(seen) if isinstance(e, ev.VariantDone) and e.variant == "broken")
    assert seen.index(alarms[0]) < done_at and "token " in alarms[0].message
    # off the timed path: no audit request among the records, no audit phase
    reqs = pd.read_csv(f"{run_dir}/requests.csv")
    assert not reqs["request_id"].str.startswith("audit/").any()
    assert set(pd.read_csv(f"{run_dir}/phases.csv")["phase"]) == {
        f"tiny@c{c}#r1" for c in (1, 4)}
    head = [json.loads(x) for x in open(f"{run_dir}/audit.jsonl") if '"kind": "audit"' in x]
    assert [(h["variant"], h["concurrency"], h["answered"]) for h in head] == [("baseline", 2, 13)]
    # benchmarks/h200/lossless_report.py, which classifies the H200's divergences case by case, on this run
    report = _h200_report().report(Path(run_dir))
    rows = {(r["variant"], r["concurrency"]): r for r in report["rows"]}
    good1 = rows[("good", 1)]
    assert good1["verdict"] == "lossless" and good1["compared"] == 13
    assert good1["same"] + len(good1["cases"]) == 13
    assert all(abs(c["margin"]) < 0.5 and not c["bound"] for c in good1["cases"])
    assert max(c["margin"] for c in rows[("broken", 1)]["cases"] if c["margin"] is not None) > 1.0
    assert rows[("broken", 1)]["broken_expectations"][0].startswith("tiny/js: not JSON")


def _h200_report():
    spec = importlib.util.spec_from_file_location("lossless_report",
                                                  ROOT / "benchmarks/h200/lossless_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
async def test_the_demo_plans_good_drafter_is_lossless(tmp_path):
    plan = prepare_demo(tmp_path)
    assert float(plan.target.env["DRAFTBENCH_SIM_NEAR_TIES"]) > 0  # the demo's answers do differ now and then
    plan.target.env["DRAFTBENCH_SIM_TIME_SCALE"] = "0.1"
    plan.variants = [v for v in plan.variants if v.name in ("baseline", "good-eagle3")]
    plan.run.concurrency, plan.run.stop, plan.run.repeats = [1], "fixed", 1
    run_dir, _ = await _run(plan, tmp_path / "results")
    row = load_summary(run_dir).set_index("variant").loc["good-eagle3"]
    assert row["lossless_verdict"] == "lossless", row["lossless_detail"]
    assert row["divergence_rate"] > 0 and row["output_match"] < 1.0
