"""The retrain loop's stand-in scenario (tests/test_retrain_loop*.py, docs/retrain.md): a drafter that accepts
well except on one kind of prompt (Python code: the stand-in's acceptance.json `by_content` rule), a plan with
code and chat prompts that names it through drafters/weak-coder.yaml, so a promotion rewrites that file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.cli.demo import GOOD_PROFILE, TARGET_HIDDEN, VOCAB, write_demo_models
from harness.sim.sglang.fixtures import write_eagle3_drafter

REPO = Path(__file__).resolve().parent.parent
WEAK_RULE = {"contains": ["python"], "per_position": [0.1, 0.05, 0.02]}
CODE = ["reverses a list", "counts words in a file", "merges two sorted lists", "checks for a palindrome",
        "flattens a nested list", "parses a CSV line", "computes a moving average", "finds duplicates",
        "rotates a matrix", "validates an email address", "groups items by key", "retries a flaky call"]
CHAT = ["Tell me about green tea.", "How do I plan a picnic?", "What makes a good novel?",
        "Why is the sky blue?"]

PLAN = """\
name: loop
target:
  host: local
  python: {python}
  sglang: {{launcher: ["{{python}}", "-m", "harness.sim"]}}
  workdir: {workdir}
  simulated: true
  env: {env}
model: {{path: demo-models/target, served_model_name: loop-target}}
server: {{port: auto, max_running_requests: 32, decode_log_interval: 5, startup_timeout_s: 60}}
variants:
  - name: baseline
  - name: coder
    drafter: weak-coder
    num_steps: 3
    eagle_topk: 1
    num_draft_tokens: 4
suites:
  - name: mixed
    prompts:
{prompts}
run:
  concurrency: {concurrency}
  max_tokens: {max_tokens}
  warmup_requests: 1
  repeats: 1
  max_repeats: 8                  # the gate's looks: 2, 4, then 8 repeats (room for a busy CI box's noise)
  min_steady_s: 0.4                # 0.2 left 0.04 s of slack over the floor: a busy box fell under it
  max_phase_s: 6                  # under a loaded CI box a c2 phase needs more passes to reach its floor
  request_timeout_s: 60
"""

DRAFTER = """\
# The loop scenario's drafter: good in general, weak on Python code (acceptance.json's by_content rule).
name: weak-coder
path: demo-models/weak-coder
algorithm: EAGLE3
trained_for: demo-models/target
"""


def write_weak_drafter(directory: Path) -> Path:
    common = {"target_hidden_size": TARGET_HIDDEN, "hidden_size": TARGET_HIDDEN, "vocab_size": VOCAB,
              "draft_vocab_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2}
    write_eagle3_drafter(directory, per_position=list(GOOD_PROFILE), by_content=[WEAK_RULE], **common)
    target_cfg = json.loads((directory.parent / "target" / "config.json").read_text())
    cfg = json.loads((directory / "config.json").read_text())
    for key in ("rope_theta", "rope_scaling", "rope_parameters"):
        if key in target_cfg:
            cfg[key] = target_cfg[key]
    (directory / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return directory


def write_scenario(root: Path, *, concurrency: tuple[int, ...] = (1, 2), max_tokens: int = 32,
                   time_scale: str = "0.1") -> Path:
    """root/plans/loop.yaml, root/drafters/weak-coder.yaml (found next to plans/ as in the checkout),
    root/work (the target's workdir with the models)."""
    work = root / "work"
    write_demo_models(work)
    write_weak_drafter(work / "demo-models" / "weak-coder")
    prompts = [f"      - {{id: code-{i}, category: code, text: \"Write a Python function that {t}.\"}}"
               for i, t in enumerate(CODE)]
    prompts += [f"      - {{id: chat-{i}, category: chat, text: \"{t}\"}}" for i, t in enumerate(CHAT)]
    env = {"DRAFTBENCH_SIM_STARTUP_S": "0.1", "DRAFTBENCH_SIM_TIME_SCALE": time_scale}
    (root / "drafters").mkdir(parents=True, exist_ok=True)
    (root / "drafters" / "weak-coder.yaml").write_text(DRAFTER)
    (root / "plans").mkdir(parents=True, exist_ok=True)
    plan = root / "plans" / "loop.yaml"
    plan.write_text(PLAN.format(python=sys.executable, workdir=json.dumps(str(work)), env=json.dumps(env),
                                prompts="\n".join(prompts), concurrency=list(concurrency),
                                max_tokens=max_tokens))
    return plan
