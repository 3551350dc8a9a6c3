"""A SpecForge EAGLE-3 training run, as argv lists built by pure functions (REFERENCE §8.1-8.2).

Eras of SpecForge, each with its own entry point:
* "script" (2025-11 .. 2026-07, incl. v0.2.0): `torchrun --standalone --nproc_per_node N
  <checkout>/scripts/train_eagle3.py --target-model-path ... --output-dir ...`; `--resume` picks the
  last `epoch_E_step_S` directory in the output directory.
* "script-v0.1" (v0.1.0): `scripts/train_eagle3_online.py`, which needs `--draft-model-config`, has no
  `--ttt-length`, and counts `--save-interval` in epochs.
* "cli" (2026-07+): `specforge train --config run.yaml [section.field=value ...]`, run here as
  `python -m specforge.cli` so the target's interpreter is used even where the console script is not
  on PATH; resuming sets `training.resume_from`.

`torchrun` is run as `python -m torch.distributed.run` for the same reason. Relative paths resolve
against the job's working directory on the target (the plan's `target.workdir`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, field_validator

from harness.common.errors import HarnessError, InputError
from harness.inputs.yamlio import StrictModel

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.targets.base import Target

ERAS = ("script", "script-v0.1", "cli")
Era = Literal["script", "script-v0.1", "cli"]
SCRIPT = "scripts/train_eagle3.py"
SCRIPT_V01 = "scripts/train_eagle3_online.py"


class TrainSpec(StrictModel):
    """Everything that defines one EAGLE-3 training run on the target."""

    target_model_path: str = Field(
        min_length=1, description="target model directory (or HF id) on the target"
    )
    data_path: str = Field(min_length=1, description="training JSONL in SpecForge's conversation format")
    output_dir: str = Field(min_length=1, description="where SpecForge writes checkpoints (on the target)")
    epochs: int = Field(default=10, gt=0, description="--num-epochs / training.num_epochs")
    learning_rate: float = Field(default=1e-4, gt=0, description="peak learning rate")
    max_length: int = Field(default=2048, gt=0, description="maximum tokens per training sample")
    ttt_length: int = Field(default=7, gt=0, description="test-time-training unroll length (draft positions)")
    chat_template: str = Field(default="llama3", min_length=1, description="SpecForge chat template name")
    tp_size: int = Field(default=1, gt=0, description="tensor parallelism of the target inside the trainer")
    gpus: int | list[int] = Field(default=1, description="trainer processes per node, or the GPU ids to use")
    nnodes: int = Field(default=1, ge=1,
                        description="nodes of the training job (torchrun --nnodes); each node "
                        "runs this job with its own node_rank")
    node_rank: int = Field(default=0, ge=0,
                           description="this node's rank among nnodes (torchrun --node_rank)")
    master_addr: str | None = Field(default=None, description="rank 0's address, reachable from every node "
                                    "(torchrun --master_addr; required with nnodes > 1)")
    master_port: int = Field(default=29500, ge=1, le=65535, description="rank 0's rendezvous port")
    batch_size: int = Field(default=1, gt=0, description="per-rank batch size")
    save_interval: int | None = Field(
        default=None, gt=0, description="steps between checkpoints (v0.1: epochs)"
    )
    log_interval: int | None = Field(default=None, gt=0, description="steps between metric lines")
    max_steps: int | None = Field(default=None, gt=0, description="stop after this many optimizer steps")
    draft_model_config: str | None = Field(default=None, description="draft config.json (default: derived)")
    init_from: str | None = Field(default=None,
                                  description="a drafter checkpoint to fine-tune from (script era: "
                                  "--ckpt-dir); default: train from scratch")
    eval_data_path: str | None = Field(default=None, description="evaluation JSONL (script era)")
    report_to: str | None = Field(default=None, description="tracker: tensorboard, wandb, ... (script era)")
    era: Literal["auto", "script", "script-v0.1", "cli"] = Field(default="auto", description="SpecForge era")
    specforge_dir: str | None = Field(
        default=None, description="SpecForge checkout on the target (script eras)"
    )
    python: str = Field(
        default="python3", min_length=1, description="python on the target with torch + SpecForge"
    )
    launcher: list[str] | None = Field(
        default=None,
        min_length=1,
        description="argv replacing torchrun + script in the script eras ('{python}' substituted)",
    )
    run_id: str | None = Field(default=None, description="CLI era run id (names the checkpoints)")
    base_config: dict[str, Any] | None = Field(default=None, description="CLI era recipe the fields override")
    extra_args: list[str] = Field(default_factory=list, description="appended verbatim to the trainer argv")
    env: dict[str, str] = Field(default_factory=dict, description="environment for the trainer")

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: int | list[int]) -> int | list[int]:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be at least 1, got {value}")
        if isinstance(value, list) and (
            not value or any(g < 0 for g in value) or len(set(value)) != len(value)
        ):
            raise ValueError(f"must be distinct GPU ids, got {value}")
        return value

    @property
    def nproc(self) -> int:
        return self.gpus if isinstance(self.gpus, int) else len(self.gpus)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def trainer_env(self) -> dict[str, str]:
        env = dict(self.env)
        if isinstance(self.gpus, list):
            env.setdefault("CUDA_VISIBLE_DEVICES", ",".join(str(g) for g in self.gpus))
        return env


def spec_from_plan(plan: Plan, **fields: object) -> TrainSpec:
    """A TrainSpec for the plan's target model, run by the plan's target python; `fields` set the rest
    (data_path and output_dir are required). Raises pydantic's ValidationError on bad fields."""
    base = {"target_model_path": str(plan.model.path), "python": str(plan.target.python)}
    return TrainSpec.model_validate({**base, **{k: v for k, v in fields.items() if v is not None}})


def parse_gpus(text: str) -> int | list[int]:
    """`4` -> 4 processes; `0,1,2,3` -> those GPU ids (CUDA_VISIBLE_DEVICES)."""
    t = text.strip()
    try:
        return int(t) if "," not in t else [int(x) for x in t.split(",") if x.strip()]
    except ValueError:
        raise InputError(
            None, None, "gpus", f"expected a count (4) or GPU ids (0,1,2,3), got {text!r}"
        ) from None


# --- era detection -----------------------------------------------------------------------------------

# find_spec, not import: nothing of SpecForge runs (or loads CUDA) just to see that it is there
_FIND = "'import importlib.util as u, sys; sys.exit(u.find_spec(\"{}\") is None)'"
# Prints one token per finding; the pure `era_from_probe` decides.
PROBE_SH = (
    "py=$1; dir=$2; "
    "command -v specforge >/dev/null 2>&1 && echo cli-bin; "
    f'"$py" -c {_FIND.format("specforge.cli")} >/dev/null 2>&1 && echo cli-module; '
    f'"$py" -c {_FIND.format("specforge")} >/dev/null 2>&1 && echo module; '
    f'"$py" -c {_FIND.format("torch")} >/dev/null 2>&1 && echo torch; '
    f'if [ -n "$dir" ]; then [ -f "$dir/{SCRIPT}" ] && echo script; '
    f'[ -f "$dir/{SCRIPT_V01}" ] && echo script-v0.1; fi; true'
)


def era_from_probe(output: str, *, specforge_dir: str | None) -> Era:
    """The era to use from PROBE_SH's output. A checkout with the training script wins (it was deleted
    when the CLI arrived, so a checkout that has it is what the user pointed at)."""
    found = set(output.split())
    if "script" in found:
        return "script"
    if "script-v0.1" in found:
        return "script-v0.1"
    if "cli-module" in found:
        return "cli"
    where = (
        f"no {SCRIPT} under {specforge_dir}"
        if specforge_dir
        else "no SpecForge checkout given (specforge_dir)"
    )
    hint = (
        "SpecForge is importable but has no CLI: give the checkout that holds scripts/ (specforge_dir)"
        if "module" in found
        else "install SpecForge on the target, or point specforge_dir at a checkout"
    )
    raise HarnessError(f"SpecForge not found on the target: no `specforge.cli` module and {where}; {hint}")


async def detect_era(target: Target, spec: TrainSpec, *, workdir: str) -> Era:
    """Ask the target which SpecForge it has (CLI module, or a checkout with the training script)."""
    if spec.era != "auto":
        return spec.era
    if spec.launcher:
        return "script"  # a launcher stands in for torchrun + train_eagle3.py
    d = resolve(spec.specforge_dir, workdir) if spec.specforge_dir else ""
    # the trainer's environment (PYTHONPATH, PATH of a venv) decides what it can import, so probe with it
    res = await target.run(
        ["sh", "-c", PROBE_SH, "sh", spec.python, d], timeout=120, cwd=workdir, env=spec.trainer_env()
    )
    return era_from_probe(res.stdout, specforge_dir=d or None)


def resolve(path: str, workdir: str) -> str:
    """A path on the target: absolute and ~ paths as given, relative ones under workdir."""
    return path if path.startswith(("/", "~")) else f"{workdir.rstrip('/')}/{path}"


# --- argv ----------------------------------------------------------------------------------------------


def _launcher(spec: TrainSpec, script: str, workdir: str) -> list[str]:
    if spec.launcher:
        return [a.replace("{python}", spec.python) for a in spec.launcher]
    if not spec.specforge_dir:
        raise InputError(
            None, None, "specforge_dir", f"the script era needs the SpecForge checkout ({script})"
        )
    if spec.nnodes > 1:  # torchrun's static rendezvous: the same command on every node, its own rank
        if not spec.master_addr:
            raise InputError(None, None, "master_addr", f"{spec.nnodes} nodes need rank 0's address")
        if spec.node_rank >= spec.nnodes:
            raise InputError(None, None, "node_rank", f"{spec.node_rank} is not below nnodes {spec.nnodes}")
        where = ["--nnodes", str(spec.nnodes), "--node_rank", str(spec.node_rank),
                 "--master_addr", spec.master_addr, "--master_port", str(spec.master_port)]
    else:
        where = ["--standalone"]
    return [
        spec.python,
        "-m",
        "torch.distributed.run",
        *where,
        "--nproc_per_node",
        str(spec.nproc),
        resolve(spec.specforge_dir, workdir) + "/" + script,
    ]


def _check(spec: TrainSpec) -> None:
    if spec.nproc % spec.tp_size:
        raise InputError(
            None, None, "tp_size", f"{spec.tp_size} does not divide the {spec.nproc} trainer GPUs"
        )


def build_train_argv(
    spec: TrainSpec,
    era: Era,
    *,
    workdir: str,
    config_path: str | None = None,
    resume_from: str | None = None,
    resume: bool = False,
) -> list[str]:
    """The trainer command line. `resume` continues the run in `output_dir` (script eras: `--resume`);
    the CLI era needs `config_path` (see `cli_config_yaml`) and resumes from `resume_from`."""
    _check(spec)
    if era == "cli":
        if config_path is None:
            raise HarnessError("the CLI era needs the path of the generated config")
        argv = [spec.python, "-m", "specforge.cli", "train", "--config", config_path]
        if resume:
            if not resume_from:
                raise HarnessError("nothing to resume from: no checkpoint in the output directory yet")
            argv.append(f"training.resume_from={resume_from}")
        return argv + list(spec.extra_args)
    v01 = era == "script-v0.1"
    if v01 and spec.init_from:
        raise InputError(None, None, "init_from",
                         "SpecForge v0.1 cannot start from a checkpoint (no --ckpt-dir)")
    if v01 and not spec.draft_model_config:
        raise InputError(None, None, "draft_model_config", "SpecForge v0.1 needs --draft-model-config")
    argv = _launcher(spec, SCRIPT_V01 if v01 else SCRIPT, workdir) + [
        "--target-model-path",
        spec.target_model_path,
        "--train-data-path",
        spec.data_path,
        "--output-dir",
        spec.output_dir,
        "--num-epochs",
        str(spec.epochs),
        "--batch-size",
        str(spec.batch_size),
        "--learning-rate",
        f"{spec.learning_rate:g}",
        "--max-length",
        str(spec.max_length),
        "--chat-template",
        spec.chat_template,
        "--tp-size",
        str(spec.tp_size),
    ]
    if not v01:
        argv += ["--ttt-length", str(spec.ttt_length)]
    optional = [
        ("--draft-model-config", spec.draft_model_config),
        ("--eval-data-path", spec.eval_data_path),
        ("--save-interval", spec.save_interval),
        ("--ckpt-dir", spec.init_from),
    ]
    if not v01:
        optional += [
            ("--log-interval", spec.log_interval),
            ("--max-num-steps", spec.max_steps),
            ("--report-to", spec.report_to),
        ]
    for flag, value in optional:
        if value is not None:
            argv += [flag, str(value)]
    argv += list(spec.extra_args)
    if resume:
        argv.append("--resume")
    return argv


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def cli_config(spec: TrainSpec, *, run_id: str) -> dict[str, Any]:
    """The CLI era's run config: `base_config` (a full recipe: deployment, capture servers...) with the
    spec's fields written over it (REFERENCE §8.1, SpecForge examples/configs/README.md)."""
    _check(spec)
    base = spec.base_config or {}
    if spec.init_from:
        raise InputError(None, None, "init_from",
                         "the CLI era starts from a checkpoint through its recipe: give a "
                         "base config whose model section names it")
    if spec.tp_size != 1 and "deployment" not in base:
        raise InputError(
            None,
            None,
            "tp_size",
            "in the CLI era the target's TP belongs to the capture servers: "
            "give a base config with its deployment section",
        )
    training: dict[str, Any] = {
        "strategy": "eagle3",
        "num_epochs": spec.epochs,
        "batch_size": spec.batch_size,
        "learning_rate": spec.learning_rate,
        "ttt_length": spec.ttt_length,
    }
    for key, value in (
        ("save_interval", spec.save_interval),
        ("log_interval", spec.log_interval),
        ("max_steps", spec.max_steps),
    ):
        if value is not None:
            training[key] = value
    model: dict[str, Any] = {"target_model_path": spec.target_model_path}
    if spec.draft_model_config:
        model["draft_model_config"] = spec.draft_model_config
    over = {
        "run_id": run_id,
        "output_dir": spec.output_dir,
        "model": model,
        "data": {
            "train_data_path": spec.data_path,
            "max_length": spec.max_length,
            "chat_template": spec.chat_template,
        },
        "training": training,
        "deployment": {"trainer": {"nnodes": spec.nnodes, "nproc_per_node": spec.nproc}},
    }
    if "deployment" not in base:
        over["deployment"]["mode"] = "local_colocated"
    if spec.report_to:
        over["tracking"] = {"report_to": spec.report_to}
    return _merge(base, over)


def cli_config_yaml(spec: TrainSpec, *, run_id: str) -> str:
    return yaml.safe_dump(cli_config(spec, run_id=run_id), sort_keys=False)
