"""Shared by the tests/test_retrain_*.py files: a small stand-in plan, conversation data, a trainer spec."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.cli.demo import write_demo_models
from harness.inputs.config import load_plan

REPO = Path(__file__).resolve().parent.parent
SIM_ENV = {"DRAFTBENCH_SIM_STARTUP_S": "0.1", "DRAFTBENCH_SIM_TIME_SCALE": "0.05"}

PLAN = """\
name: retrain test
target:
  host: {host}
  python: {python}
  launcher: ["{{python}}", "-m", "harness.sim"]
  workdir: {workdir}
  simulated: true
  env: {env}
model:
  path: demo-models/target
server:
  port: auto
  max_running_requests: 32
  decode_log_interval: 5
  startup_timeout_s: 60
variants:
  - name: baseline
  - name: seed
    drafter: {{name: seed, path: demo-models/seed-weak-eagle3, algorithm: EAGLE3}}
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
suites:
  - name: tiny
    prompts:
      - {{id: a, category: code, text: "Write a function that reverses a list."}}
      - {{id: b, category: chat, text: "Tell me about tea."}}
run:
  concurrency: [2]
  max_tokens: 32
  warmup_requests: 0
  # these tests read accept lengths and records, no verdict: one pass of the suite per phase
  phase_sizing: false
"""


def write_plan(tmp_path: Path, *, host: str = "local", workdir: Path | None = None, env: dict | None = None):
    """A plan on the stand-in with the demo's models under `workdir` (default tmp_path/'target work')."""
    workdir = workdir or tmp_path / "target work"  # a space on purpose: every path is quoted
    write_demo_models(workdir)
    path = tmp_path / "plan.yaml"
    path.write_text(
        PLAN.format(
            host=host,
            python=sys.executable,
            workdir=json.dumps(str(workdir)),
            env=json.dumps({**SIM_ENV, **(env or {})}),
        )
    )
    return load_plan(path), workdir


def conversation(i: int, turns: int = 1, *, sharegpt: bool = False, end_with_user: bool = False) -> dict:
    msgs = []
    for t in range(turns):
        msgs.append(("human", "user", f"Question {t} of row {i}: explain item {i * 7 + t} briefly."))
        if t < turns - 1 or not end_with_user:
            msgs.append(("gpt", "assistant", f"an old answer {t} that must be replaced"))
    if sharegpt:
        return {"id": f"row-{i}", "conversations": [{"from": f, "value": v} for f, _, v in msgs]}
    return {"id": f"row-{i}", "conversations": [{"role": r, "content": v} for _, r, v in msgs]}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def trainer_spec(
    workdir: Path, *, epochs: int = 3, save_interval: int = 4, step_s: float = 0.05, rows: int = 8, **extra
):
    """A script-era TrainSpec whose launcher is the fake trainer, on the demo target (hidden 256)."""
    from harness.retrain.train import TrainSpec

    write_jsonl(workdir / "train.jsonl", [conversation(i, turns=2) for i in range(rows)])
    return TrainSpec(
        target_model_path="demo-models/target",
        data_path="train.jsonl",
        output_dir="outputs/k25 draft",
        epochs=epochs,
        save_interval=save_interval,
        log_interval=2,
        ttt_length=3,
        python=sys.executable,
        launcher=["{python}", "-m", "harness.retrain.fake_trainer"],
        env={"DRAFTBENCH_FAKE_STEP_S": str(step_s), "PYTHONPATH": str(REPO)},
        **extra,
    )
