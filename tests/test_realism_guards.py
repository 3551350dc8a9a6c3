"""Prompt-realism guards (harness.checks.realism): `check` and the run warn about prompts sent without the
chat template, synthetic suites (marked, random tokens, filler), suites outside the drafter's training
categories, a sampler the model recommends that no arm measures, and an accept length far from the
training-time one."""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.bench.runner import run_plan
from harness.checks.realism import plan_findings, realism_alarms, synthetic_reason, training_alarms
from harness.cli.demo import prepare_demo
from harness.cli.progress import consume
from harness.common import events as ev
from harness.inputs.config import REPO_ROOT, load_plan
from harness.inputs.suites import Suite, load_suite
from tests.faults_helpers import reap_servers

DEMO = REPO_ROOT / "plans" / "demo.yaml"


def _suite(name: str, texts: list[str], **extra) -> Suite:
    prompts = [{"id": f"p{i}", "text": t} for i, t in enumerate(texts)]
    return Suite.model_validate({"name": name, "prompts": prompts, **extra})


def _random_tokens(n: int, rng: random.Random) -> str:
    """What decoding random token ids gives: subword shards glued without function words."""
    shards = ["ation", "Ġinter", "ixel", "orph", "qu", "ström", "ynb", "ilt", "ach", "zx", "olu", "ept",
              "ram"]
    return " ".join("".join(rng.choice(shards) for _ in range(rng.randint(1, 3))) for _ in range(n))


def test_synthetic_suites_are_told_apart_from_real_ones():
    for path in sorted((REPO_ROOT / "suites").glob("*.yaml")):  # every shipped suite is real text
        assert synthetic_reason(load_suite(path)) is None, path.name
    assert "marked synthetic" in synthetic_reason(_suite("s", ["hi"], synthetic=True))
    rng = random.Random(3)
    assert "random tokens" in synthetic_reason(_suite("r", [_random_tokens(400, rng)]))
    filler = "The quick brown fox jumps over the lazy dog. " * 300
    assert "repeats itself" in synthetic_reason(_suite("f", [filler]))
    # a long real document is neither
    categories = load_suite(REPO_ROOT / "suites" / "categories.yaml")
    real = "\n\n".join(p.text or p.messages[-1].content for p in categories.prompts)
    assert synthetic_reason(_suite("doc", [real])) is None


def _demo_plan(tmp_path: Path, **run) -> object:
    plan = prepare_demo(tmp_path)
    plan.variants = [plan.variant("baseline"), plan.variant("good-eagle3")]
    for key, value in run.items():
        setattr(plan.run, key, value)
    return plan


def test_findings_name_each_problem(tmp_path):
    plan = _demo_plan(tmp_path, endpoint="completions")
    codes = {f.code: f for f in plan_findings(plan)}
    assert codes["prompts-without-chat-template"].severity == "warning"
    assert "5 chat prompts are flattened" in codes["prompts-without-chat-template"].why
    assert "synthetic-suite" not in codes and "categories-not-in-training" not in codes
    plan = _demo_plan(tmp_path)
    assert plan_findings(plan) == [] and realism_alarms(plan) == []  # the demo itself is realistic
    plan.variant("good-eagle3").drafter.training_categories = ["math"]
    f = {f.code: f for f in plan_findings(plan)}["categories-not-in-training"]
    assert f.severity == "warning" and f.variant == "good-eagle3" and "trained on: math" in f.why
    plan.variant("good-eagle3").drafter.training_categories = ["code", "chat"]
    f = {f.code: f for f in plan_findings(plan)}["categories-not-in-training"]
    assert f.severity == "info" and "reasoning, summary, translation" in f.what
    got = plan_findings(_demo_plan(tmp_path), {"do_sample": True, "temperature": 0.6, "top_p": 0.95})
    assert [(f.code, f.severity) for f in got] == [("sampling-suggested", "info")]
    assert "run.sampling: [{temperature: 0}, {temperature: 0.6, top_p: 0.95}]" in got[0].fix


def test_training_categories_from_the_specforge_data_file(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"id": str(i), "category": c, "conversations": []})
                              for i, c in enumerate(["math", "math", "code"])) + "\nnot json\n")
    plan = _demo_plan(tmp_path)
    plan.variant("good-eagle3").drafter.training_data_file = str(data)
    f = {f.code: f for f in plan_findings(plan)}["categories-not-in-training"]
    assert "trained on: code, math" in f.why


def _check_json(plan_path: Path, tmp_path: Path, capsys) -> list[dict]:
    from harness.cli import main

    # warnings do not fail
    assert main(["check", str(plan_path), "--results-dir", str(tmp_path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["findings"]


def _plan_file(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load(DEMO.read_text())
    data["variants"] = data["variants"][:2]
    for key, value in changes.items():
        data[key] = value if key != "run" else {**data["run"], **value}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
def test_check_warns_on_a_raw_text_suite_and_a_synthetic_suite(tmp_path, capsys):
    raw = _check_json(_plan_file(tmp_path, run={"endpoint": "completions"}), tmp_path, capsys)
    assert [f["code"] for f in raw if f["severity"] == "warning"] == ["prompts-without-chat-template"]
    suite = tmp_path / "long.yaml"
    suite.write_text(yaml.safe_dump({"name": "long", "synthetic": True, "description": "SYNTHETIC: generated",
                                     "prompts": [{"id": "synthetic-64-1", "category": "synthetic-64",
                                                  "messages": [{"role": "user",
                                                                "content": "Summarize it."}]}]}))
    syn = _check_json(_plan_file(tmp_path, suites=[str(suite)]), tmp_path, capsys)
    warned = [f for f in syn if f["severity"] == "warning"]
    assert [f["code"] for f in warned] == ["synthetic-suite"]
    assert "suite 'long' is synthetic" in warned[0]["what"]
    # the model's own sampler, from generation_config.json in its directory, is suggested as an arm
    plan = load_plan(_plan_file(tmp_path))
    model_dir = tmp_path / ".demo-target" / "demo-models" / "target"
    (model_dir / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.7}))
    got = _check_json(_plan_file(tmp_path), tmp_path, capsys)
    assert [f["code"] for f in got if f["code"] == "sampling-suggested"] == ["sampling-suggested"]
    assert plan.run.sampling == []


async def _run_events(plan, tmp_path) -> list:
    """Every event of the plan's run through the CLI's consumer, its servers reaped whatever happens."""
    events: list = []

    async def tap(stream):
        async for e in stream:
            events.append(e)
            yield e

    try:
        await consume(tap(run_plan(plan, results_dir=tmp_path / "results")), out=io.StringIO())
    finally:
        reap_servers(tmp_path)
    return events


@pytest.mark.slow
async def test_the_run_warns_before_measuring_a_raw_text_suite(tmp_path):
    plan = _demo_plan(tmp_path, endpoint="completions", concurrency=[1], max_tokens=8, repeats=1,
                      warmup_requests=0, stop="fixed", phase_sizing=False)
    plan.suites[0].prompts = plan.suites[0].prompts[:2]
    events = await _run_events(plan, tmp_path)
    first_phase = next(i for i, e in enumerate(events) if isinstance(e, ev.PhaseStarted))
    warned = [i for i, e in enumerate(events)
              if isinstance(e, ev.Alarm) and e.code == "prompts-without-chat-template"]
    assert warned and warned[0] < first_phase  # said before anything is measured
    assert events[warned[0]].severity == "warning"


@pytest.mark.slow
async def test_a_synthetic_suite_is_warned_about_and_labelled_wherever_its_numbers_go(tmp_path, capsys):
    from harness.analysis.runs import result_rows  # the TUI's Results rows
    from harness.cli import main

    plan = _demo_plan(tmp_path, concurrency=[1], max_tokens=8, repeats=1, warmup_requests=0, stop="fixed",
                      phase_sizing=False)
    plan.suites[0].prompts = plan.suites[0].prompts[:1]
    long_doc = "Summarize the document above in five bullet points."
    plan.suites.append(_suite("long", [long_doc, long_doc + " Then list its open questions."], synthetic=True,
                              description="SYNTHETIC: generated"))
    events = await _run_events(plan, tmp_path)
    first_phase = next(i for i, e in enumerate(events) if isinstance(e, ev.PhaseStarted))
    warned = [i for i, e in enumerate(events) if isinstance(e, ev.Alarm) and e.code == "synthetic-suite"]
    assert warned and warned[0] < first_phase and "suite 'long' is synthetic" in events[warned[0]].message
    run_dir = next(e for e in events if isinstance(e, ev.RunDone)).run_dir
    # every row measured the synthetic suite beside smoke: summary.csv, the CLI table and its legend say so
    summary = pd.read_csv(Path(run_dir) / "summary.csv")
    assert list(summary["synthetic_suites"]) == ["long", "long"]
    assert main(["summary", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.count("SYNTHETIC suite long") == 2
    assert "SYNTHETIC: the row pools prompts of a suite marked synthetic" in out
    assert all(row.note.startswith("SYNTHETIC suite long") for row in result_rows(summary))


def test_an_accept_length_far_from_training_is_an_alarm(tmp_path):
    plan = _demo_plan(tmp_path)
    plan.variant("good-eagle3").drafter.training_accept_len = 3.0
    summary = pd.DataFrame([{"variant": "baseline", "accept_len": None},
                            {"variant": "good-eagle3", "accept_len": 2.0},
                            {"variant": "good-eagle3", "accept_len": 2.1}])
    (alarm,) = training_alarms(plan, summary)
    assert alarm.code == "accept-far-from-training" and alarm.variant == "good-eagle3"
    assert "2.05 is 32% below the 3.00" in alarm.message
    near = summary.assign(accept_len=[None, 2.8, 2.9])
    assert training_alarms(plan, near) == []
    shutil.rmtree(tmp_path / ".demo-target", ignore_errors=True)


@pytest.mark.slow
def test_check_holds_an_earlier_runs_accept_length_against_training_time(tmp_path, capsys):
    data = yaml.safe_load(DEMO.read_text())
    data["variants"] = [data["variants"][0], {**data["variants"][1], "drafter": {
        "name": "demo-good-eagle3", "path": "demo-models/good-eagle3", "training_accept_len": 4.5}}]
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(data, sort_keys=False))
    earlier = tmp_path / "20260101-000000-demo"
    earlier.mkdir()
    pd.DataFrame([{"variant": "baseline", "concurrency": 1, "accept_len": None, "tok_s": 100.0},
                  {"variant": "good-eagle3", "concurrency": 1, "accept_len": 2.9, "tok_s": 170.0}]).to_csv(
        earlier / "summary.csv", index=False)
    (earlier / "variants.jsonl").write_text(
        json.dumps({"variant": "good-eagle3", "drafter": "demo-good-eagle3"}) + "\n")
    found = _check_json(plan_path, tmp_path, capsys)
    (gap,) = [f for f in found if f["code"] == "accept-far-from-training"]
    assert gap["severity"] == "warning" and "2.90 is 36% below the 4.50" in gap["what"]
    assert "20260101-000000-demo (good-eagle3)" in gap["why"]
