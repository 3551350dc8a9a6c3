"""What one `draftbench retrain` loop was asked (RetrainSettings) and how far it got (LoopRecord), kept in
`results/retrain/<id>/state.json` and rewritten atomically after every stage, so the same command resumes an
interrupted loop at the stage it stopped in (each stage is itself resumable: regen skips finished rows, the
training job resumes from its last checkpoint, the evaluation run resumes its unfinished phases)."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.common.errors import InputError
from harness.retrain.gate import Rule

if TYPE_CHECKING:
    from harness.inputs.config import Plan

STAGES = ("select", "regen", "train", "export", "evaluate", "gate", "promote")
Stage = Literal["select", "regen", "train", "export", "evaluate", "gate", "promote"]
STATE_FILE = "state.json"


class RetrainSettings(BaseModel):
    """Everything a loop was asked for; a resumed loop keeps its own."""

    model_config = ConfigDict(extra="forbid")

    source_run: str | None = Field(default=None, description="the run whose weak spots are retrained on "
                                   "(default: the newest run under the results directory with the variant)")
    level: Literal["category", "prompt", "turn"] = "category"
    position: int | None = Field(default=None, ge=1, description="rank spots by P(accept >= position), not "
                                 "by accept length")
    lowest: int = Field(default=1, ge=1, description="how many of the lowest spots are weak")
    below: float | None = Field(default=None, gt=0, description="instead: spots below this fraction of the "
                                "variant's own accept length")
    rest_share: float = Field(default=0.25, ge=0, le=1)
    holdout: float = Field(default=0.5, gt=0, lt=1)
    seed: int = 1
    traffic: list[str] = Field(default_factory=list, description="traffic logs added to the data")
    traffic_sample: int | None = Field(default=None, ge=1)
    # regeneration through the target
    endpoints: list[str] = Field(default_factory=list, description="existing servers of the target (default: "
                                 "the plan's baseline, started for it)")
    workers: int = Field(default=1, ge=1)
    regen_concurrency: int = Field(default=64, ge=1)
    regen_max_tokens: int | None = Field(default=None, ge=1, description="default: the plan's run.max_tokens")
    regen_temperature: float | None = Field(default=None, ge=0, description="default: the plan's temperature")
    # training
    epochs: int = Field(default=2, ge=1)
    max_steps: int | None = Field(default=None, ge=1)
    save_interval: int | None = Field(default=None, ge=1)
    ttt_length: int | None = Field(default=None, ge=1)
    learning_rate: float | None = Field(default=None, gt=0)
    batch_size: int | None = Field(default=None, ge=1)
    gpus: int | list[int] | None = None
    fine_tune: bool = Field(default=True, description="start from the current drafter (--ckpt-dir), not from "
                            "scratch")
    launcher: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    specforge_dir: str | None = None
    era: Literal["auto", "script", "script-v0.1", "cli"] = "auto"
    draft_config: str | None = Field(default=None,
                                     description="CLI era export: the draft config.json (default: "
                                     "the current drafter's)")
    # evaluation and gate
    repeats: int | None = Field(default=None, ge=1, description="evaluation repeats (default: the plan's, at "
                                "least 2 when a concurrency is above 1)")
    rule: Rule = "faster"


class LoopRecord(BaseModel):
    """state.json of a loop."""

    model_config = ConfigDict(extra="forbid")

    retrain_id: str
    plan: str  # the plan file
    plan_name: str
    variant: str
    created_at: str
    settings: RetrainSettings
    done: list[str] = Field(default_factory=list)  # stages finished, in order
    source_run: str | None = None
    manifest: str | None = None
    regen_output: str | None = None
    remote_data: str | None = None
    job_id: str | None = None
    checkpoint: str | None = None  # the checkpoint the job saved
    candidate_path: str | None = None  # servable (exported where needed)
    candidate: str | None = None  # the evaluation's variant name for it
    eval_run: str | None = None
    look_done: int = 0  # the gate's stopping rule: the last look judged
    # concurrency -> the look its row stopped at
    looks: dict[str, dict[str, Any]] = Field(default_factory=dict)
    gate: list[str] = Field(default_factory=list)  # GateResult.lines()
    outcome: Literal["promoted", "refused"] | None = None
    reason: str = ""
    drafter_file: str | None = None

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    def next_stage(self) -> str | None:
        return next((s for s in STAGES if s not in self.done), None)


def loops_dir(results_dir: str | Path) -> Path:
    return Path(results_dir) / "retrain"


def new_record(plan: Plan, variant: str, settings: RetrainSettings, results_dir: str | Path) -> LoopRecord:
    rid = f"retrain-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    rec = LoopRecord(retrain_id=rid, plan=str(plan.source_path or ""), plan_name=plan.name, variant=variant,
                     created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), settings=settings)
    save_record(rec, results_dir)
    return rec


def loop_dir(rec: LoopRecord, results_dir: str | Path) -> Path:
    return loops_dir(results_dir) / rec.retrain_id


def save_record(rec: LoopRecord, results_dir: str | Path) -> None:
    d = loop_dir(rec, results_dir)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / (STATE_FILE + ".tmp")
    tmp.write_text(rec.model_dump_json(indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, d / STATE_FILE)


def read_record(path: str | Path) -> LoopRecord:
    p = Path(path)
    try:
        return LoopRecord.model_validate_json(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(str(p), None, None, f"unreadable retrain state: {exc}") from None


def list_records(results_dir: str | Path) -> list[LoopRecord]:
    """Every loop under results/retrain, oldest first."""
    base = loops_dir(results_dir)
    if not base.is_dir():
        return []
    found = [read_record(d / STATE_FILE) for d in sorted(base.iterdir()) if (d / STATE_FILE).is_file()]
    return sorted(found, key=lambda r: (r.created_at, r.retrain_id))


def find_record(results_dir: str | Path, retrain_id: str) -> LoopRecord:
    found = [r for r in list_records(results_dir) if r.retrain_id.startswith(retrain_id)]
    exact = [r for r in found if r.retrain_id == retrain_id]
    if len(exact or found) != 1:
        known = ", ".join(r.retrain_id for r in list_records(results_dir)[-5:]) or "none"
        raise InputError(str(loops_dir(results_dir)), None, "retrain",
                         f"{len(found)} loops match {retrain_id!r} "
                         f"(latest: {known})")
    return (exact or found)[0]


def unfinished(results_dir: str | Path, plan_name: str, variant: str) -> LoopRecord | None:
    """The newest loop of this plan and variant that has not reached its outcome (the one to resume)."""
    mine = [r for r in list_records(results_dir) if r.plan_name == plan_name and r.variant == variant]
    return mine[-1] if mine and not mine[-1].finished else None
