"""`draftbench tune`'s options, and the tune directory's record of them (tune_plan.json: the plan and the
options it started with, so that `--resume` replays the same decisions)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.inputs.config import Plan

PLAN_FILE = "tune_plan.json"


@dataclass
class TuneOptions:
    variant: str | None = None  # the plan's speculative variant whose drafter is tuned (default: the first)
    budget_s: float = 7200.0
    concurrency: list[int] | None = None  # default: the plan's run.concurrency
    steps: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5, 6, 7])
    topk: list[int] = field(default_factory=lambda: [1])
    draft_tokens: list[int] = field(default_factory=lambda: [8, 16])  # trees only (topk > 1)
    graphs: list[bool] = field(default_factory=lambda: [True, False])
    cost_tokens: int = 96  # output tokens per request in a step-cost phase
    verify_top: int = 1  # winners per concurrency that get a full paired run
    margin: float = 0.02  # stop when no unmeasured config is expected to beat the best by more
    preflight: bool = True
    # --concurrency auto: step costs at a ladder of batches up to max_batch (default: the server's max running
    # requests), the crossover found by bisection and verified on each side (harness.studies.tune_crossover)
    auto: bool = False
    max_batch: int | None = None
    mix: str | None = None  # "1:0.5,8:0.3,32:0.2": a mixed load the schedule meets every single config on
    load: bool = True  # auto: goodput against request rate for the baseline and the pick


def read_tune_plan(tune_dir: str | Path) -> tuple[Plan, TuneOptions]:
    from harness.inputs.config import Plan

    data = json.loads((Path(tune_dir) / PLAN_FILE).read_text(encoding="utf-8"))
    return Plan.model_validate(data["plan"]), TuneOptions(**data["options"])
