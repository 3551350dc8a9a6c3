"""`draftbench demo`: the demo plan on the built-in SGLang stand-in, with its model directories made here.

The drafters are real EAGLE-3 layouts (config.json + safetensors, small shapes) with an acceptance
profile the stand-in reads: a good drafter, the seed's weak one (16 draft tokens, CUDA graphs off),
and the good one served with the wrong `--speculative-algorithm EAGLE`.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.inputs.config import Plan, data_dir, load_plan
from harness.sim.sglang.fixtures import write_eagle3_drafter, write_target_model

DEMO_PLAN = data_dir("plans") / "demo.yaml"  # the checkout's plans/, or the copy a wheel ships
TARGET_HIDDEN = 256
VOCAB = 1024
GOOD_PROFILE = [0.85, 0.75, 0.65]  # accept len ≈ 1 + .85 + .64 + .41 ≈ 2.9 with 3 steps
WEAK_PROFILE = [0.6, 0.45, 0.3, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01]


def write_demo_models(workdir: str | Path) -> Path:
    """(Re)create the demo's model directories under workdir/demo-models; idempotent and small (KBs-MBs)."""
    root = Path(workdir) / "demo-models"
    write_target_model(root / "target", hidden_size=TARGET_HIDDEN, num_layers=8, vocab_size=VOCAB,
                       num_attention_heads=4, num_key_value_heads=2, intermediate_size=512)
    common = {"target_hidden_size": TARGET_HIDDEN, "hidden_size": TARGET_HIDDEN, "vocab_size": VOCAB,
              "draft_vocab_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2}
    for name, profile in (("good-eagle3", GOOD_PROFILE), ("seed-weak-eagle3", WEAK_PROFILE)):
        write_eagle3_drafter(root / name, per_position=profile, **common)
        _copy_rope(root / "target" / "config.json", root / name / "config.json")
    return root


def _copy_rope(target_cfg: Path, draft_cfg: Path) -> None:
    """SpecForge copies the target's rope settings into the draft config; so do we (the check compares
    them)."""
    target, draft = json.loads(target_cfg.read_text()), json.loads(draft_cfg.read_text())
    for key in ("rope_theta", "rope_scaling", "rope_parameters"):
        if key in target:
            draft[key] = target[key]
    draft_cfg.write_text(json.dumps(draft, indent=1) + "\n")


def prepare_demo(results_dir: str | Path, plan_path: str | Path | None = None) -> Plan:
    """Load plans/demo.yaml, point its work directory at results/.demo-target and write the models there."""
    workdir = (Path(results_dir) / ".demo-target").resolve()
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_demo_models(workdir)
    plan = load_plan(plan_path or DEMO_PLAN)
    plan.target.workdir = str(workdir)
    return plan


def load_ready_plan(path: str | Path, results_dir: str | Path) -> Plan:
    """`load_plan` for every command: a simulated local plan whose relative model/drafter paths are missing
    under its workdir (plans/demo.yaml as shipped) gets the demo's checkpoints, as `draftbench demo` does."""
    return ready_demo_models(load_plan(path), results_dir)


def ready_demo_models(plan: Plan, results_dir: str | Path) -> Plan:
    """Point a simulated plan that lacks its relative checkpoints at results/.demo-target, written if
    needed."""
    if not plan.target.simulated or plan.target.host != "local" \
            or not _missing_relative(plan, plan.target.workdir):
        return plan
    workdir = (Path(results_dir) / ".demo-target").resolve()
    if _missing_relative(plan, str(workdir)):
        workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_demo_models(workdir)
    plan.target.workdir = str(workdir)
    return plan


def _missing_relative(plan: Plan, workdir: str) -> bool:
    paths = [plan.model.path] + [str(v.drafter.path) for v in plan.variants if v.drafter is not None]
    root = Path(workdir).expanduser()
    return any(not p.startswith(("/", "~")) and not (root / p / "config.json").exists() for p in paths)
