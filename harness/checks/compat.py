"""Drafter against target beyond tensor shapes: trained context length, rope settings, and the target the
drafters/ record says it was trained for (pure functions on config dicts)."""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Any

from harness.checks.checkpoint import text_config
from harness.common.findings import Finding, warning
from harness.inputs.drafter_record import TrainedAgainst

if TYPE_CHECKING:
    from harness.inputs.plan_parts import Drafter

DEFAULT_ROPE_THETA = 10000.0  # transformers' LlamaConfig default when a config names none


def check_positions(
    variant: str, cfg: dict[str, Any] | None, needed: int | None, longest: str = ""
) -> list[Finding]:
    """The drafter's trained context against the longest request of the suites (sglang #6783)."""
    mpe = (cfg or {}).get("max_position_embeddings")
    if not mpe or not needed or needed <= mpe:
        return []
    return [
        warning(
            variant,
            "max-position",
            f"drafter max_position_embeddings {mpe} < ~{needed} tokens the suites reach{longest}",
            "acceptance drops once a sequence runs past the drafter's trained context (sglang #6783)",
            "use a drafter trained on longer sequences, or shorten the prompts / max_tokens",
        )
    ]


def _rope(cfg: dict[str, Any]) -> tuple[float, Any]:
    """(theta, scaling) with transformers' defaults filled in; scaling None when it is the default rope."""
    params = cfg.get("rope_parameters")
    theta = cfg.get("rope_theta") or DEFAULT_ROPE_THETA
    if isinstance(params, dict):  # transformers ≥ 5 keeps theta and scaling together
        rest = {k: v for k, v in params.items() if k != "rope_theta"}
        scaling = None if rest in ({}, {"rope_type": "default"}) else rest
        return float(params.get("rope_theta") or theta), scaling
    scaling = cfg.get("rope_scaling")
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) == "default":
        scaling = None
    return float(theta), scaling or None


def check_rope(variant: str, cfg: dict[str, Any] | None, target_cfg: dict[str, Any] | None) -> list[Finding]:
    if not cfg or not target_cfg:
        return []
    (dt, ds), (tt, ts) = _rope(cfg), _rope(text_config(target_cfg))
    if dt == tt and ds == ts:
        return []
    return [
        warning(
            variant,
            "rope-mismatch",
            f"drafter rope (theta {dt:g}, scaling {ds}) ≠ target rope (theta {tt:g}, scaling {ts})",
            "the drafter attends with different positions than it was trained with, lowering acceptance",
            "copy rope_theta / rope_scaling (or rope_parameters) from the target's config.json",
        )
    ]


def _name_key(text: str) -> str:
    last = text.rstrip("/").split("/")[-1]
    last = last.split("--")[-1]  # HF cache folders: models--org--Name
    return re.sub(r"[^a-z0-9]", "", last.lower())


def retrain_command(plan_path: str | None, variant: str) -> str:
    """The command that regenerates data with this target and retrains the variant's drafter."""
    return f"draftbench retrain {shlex.quote(plan_path or 'PLAN')} --variant {shlex.quote(variant)}"


def check_trained_for(
    variant: str, drafter: Drafter | None, model_path: str, served_name: str | None,
    target_cfg: dict[str, Any] | None, *, plan_path: str | None = None,
) -> list[Finding]:
    """The drafter's recorded target against the plan's: its config facts (architecture, hidden size, vocab,
    layers, the hash of the config it was trained against) where recorded, else the `trained_for` name."""
    if drafter is None:
        return []
    fix = f"regenerate data with this target and retrain: {retrain_command(plan_path, variant)}"
    why = ("a drafter predicts the hidden states and tokens of the model it was trained with; on another "
           "model (another generation of it too) acceptance falls even when every shape matches")
    recorded = drafter.trained_against
    if recorded is not None and target_cfg:
        diffs = recorded.differences(TrainedAgainst.of(target_cfg))
        if diffs:
            return [warning(variant, "trained-for-other-target",
                            f"drafter '{drafter.name}' was trained for another target: {'; '.join(diffs)}",
                            why, fix)]
        return []  # the recorded config matches: the name it was trained for is only a label
    trained_for = drafter.trained_for
    if not trained_for:
        return []
    names = [model_path, served_name or "", str((target_cfg or {}).get("_name_or_path") or "")]
    keys = {_name_key(n) for n in names if n}
    if _name_key(trained_for) in keys:
        return []
    return [
        warning(
            variant,
            "trained-for-other-target",
            f"drafter '{drafter.name}' was trained for another target ({trained_for}); "
            f"the target is {model_path}",
            why,
            fix,
        )
    ]
