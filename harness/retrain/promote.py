"""Promotion: the variant's drafters/ file is rewritten to point at the new checkpoint, recording the target
it was trained against and a lineage entry (data manifest, job, checkpoint, evaluation run, the gate's
verdicts, the profile `watch` compares with). The plan keeps naming the same drafter, so its next run serves
the new one. Only `draftbench retrain` calls this, and only after the gate passed."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import yaml

from harness.common.errors import InputError
from harness.inputs.config import Plan, Resolver, load_drafter
from harness.inputs.drafter_record import LineageEntry, TrainedAgainst
from harness.inputs.plan_parts import Drafter
from harness.inputs.yamlio import load_yaml


def drafter_file(plan: Plan, variant: str) -> Path:
    """The drafters/ file the plan's variant names (found as the plan found it). A drafter written inline in
    the plan has no file of its own: promotion refuses it, with what to do."""
    source = plan.source_path
    if source is None:
        raise InputError(None, None, "plan",
                         "the plan was not loaded from a file: its drafter files are unknown")
    data, lines = load_yaml(source)
    found = [(i, v) for i, v in enumerate(data.get("variants") or [])
             if isinstance(v, dict) and v.get("name") == variant]
    if not found:
        raise InputError(str(source), None, "variants", f"no variant {variant!r}")
    i, v = found[0]
    ref = v.get("drafter")
    if not isinstance(ref, str):
        raise InputError(str(source), lines.line_of(("variants", i, "drafter")),
                         f"variants[{i}].drafter", "the drafter is written inline in the plan: move it to "
                         "drafters/<name>.yaml and name it here, so a promotion can record its lineage there")
    try:
        return Resolver(plan_dir=Path(source).parent).find(ref, "drafters")
    except ValueError as exc:
        raise InputError(str(source), None, f"variants[{i}].drafter", str(exc)) from None


def promote(path: str | Path, *, new_path: str, entry: LineageEntry, target_cfg: dict[str, Any] | None,
            trained_for: str | None = None) -> Drafter:
    """Rewrite the drafter file at `path` (atomically): new checkpoint path, trained_against from the target's
    config, the lineage entry appended; the file's leading comments are kept."""
    path = Path(path)
    old = load_drafter(path)
    if entry.previous_path is None:
        entry = entry.model_copy(update={"previous_path": old.path})
    data = old.model_dump(mode="json", exclude_none=True)
    data["path"] = new_path
    data["lineage"] = [e.model_dump(mode="json", exclude_none=True) for e in old.lineage] + \
        [entry.model_dump(mode="json", exclude_none=True)]
    if target_cfg:
        data["trained_against"] = TrainedAgainst.of(target_cfg).model_dump(mode="json", exclude_none=True)
    if trained_for:
        data["trained_for"] = trained_for
    data["training_data"] = entry.training_data or data.get("training_data")
    head = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        head.append(line)
    head.append(f"# Promoted by draftbench retrain on {time.strftime('%Y-%m-%d')}: "
                "earlier paths are in lineage.")
    body = yaml.safe_dump({k: v for k, v in data.items() if v not in (None, [])}, sort_keys=False,
                          allow_unicode=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(head) + "\n" + body, encoding="utf-8")
    try:
        load_drafter(tmp)  # what we wrote must load like any drafter file
    except Exception:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return load_drafter(path)
