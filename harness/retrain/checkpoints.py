"""Training checkpoints on the target -> drafters you can benchmark (REFERENCE §8.4). The checkpoints
themselves (layouts, discovery, `specforge export`) are harness.retrain.checkpoint_dirs, read from here too.
`evaluate_checkpoint` is the one action: register as a drafter, preflight, benchmark against the baseline;
`accept_len_across` compares the checkpoints a run measured.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import yaml

from harness.common.errors import HarnessError, InputError
from harness.inputs.config import Plan, load_drafter
from harness.inputs.plan_parts import NAME_RE, Drafter
from harness.retrain.checkpoint_dirs import (  # noqa: F401  (the discovery names: read from here by others)
    Checkpoint,
    build_export_argv,
    checkpoint_step,
    discover_checkpoints,
    export_checkpoint,
    parse_listing,
)

if TYPE_CHECKING:
    from typing import Unpack

    import pandas as pd

    from harness.common.findings import Finding
    from harness.targets.base import Target

DEFAULT_SPEC = {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}


def drafter_name(prefix: str, ckpt: Checkpoint) -> str:
    name = f"{prefix}-{ckpt.label}"
    if not NAME_RE.fullmatch(name):
        raise InputError(None, None, "name", f"{name!r} is not a valid drafter name (letters, digits, . _ -)")
    return name


class DrafterFields(TypedDict, total=False):
    """What a drafter file records beside its path and name (register_checkpoint's keywords)."""

    algorithm: str
    trained_for: str | None
    training_data: str | None
    notes: str | None
    overwrite: bool


def register_checkpoint(
    checkpoint: Checkpoint | str,
    *,
    name: str,
    drafters_dir: str | Path = "drafters",
    algorithm: str = "EAGLE3",
    trained_for: str | None = None,
    training_data: str | None = None,
    notes: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `drafters/<name>.yaml` for a servable checkpoint directory (a path on the target)."""
    if isinstance(checkpoint, Checkpoint):
        if checkpoint.needs_export:
            raise HarnessError(
                f"{checkpoint.path} is not servable as is (no config.json + safetensors): "
                "export it with `specforge export --to sglang` first"
            )
        path = checkpoint.path
    else:
        path = checkpoint
    if not NAME_RE.fullmatch(name):
        raise InputError(None, None, "name", f"{name!r} is not a valid drafter name (it becomes a file name)")
    drafter = Drafter(
        name=name,
        path=path,
        algorithm=algorithm,
        trained_for=trained_for,
        training_data=training_data,
        notes=notes,
    )
    out = Path(drafters_dir) / f"{name}.yaml"
    if out.exists() and not overwrite:
        raise InputError(str(out), None, None, "a drafter with this name exists (choose another name)")
    out.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump(
        drafter.model_dump(mode="json", exclude_none=True), sort_keys=False, allow_unicode=True
    )
    out.write_text(
        f"# Registered by draftbench from a training checkpoint on {time.strftime('%Y-%m-%d')}.\n" + body,
        encoding="utf-8",
    )
    load_drafter(out)  # what we wrote must load like any drafter file
    return out


def _template(plan: Plan, template: str | None) -> dict[str, Any]:
    if template is not None:
        v = plan.variant(template)
    else:
        v = next((v for v in plan.variants if v.is_speculative and v.spec_algorithm == "EAGLE3"), None)
    if v is None:
        return dict(DEFAULT_SPEC)
    keys = ("num_steps", "eagle_topk", "num_draft_tokens", "cuda_graph", "extra_args")
    return {k: getattr(v, k) for k in keys if getattr(v, k) is not None}


def checkpoint_plan(
    plan: Plan, drafters: list[Drafter], *, template: str | None = None, keep_existing: bool = True
) -> Plan:
    """The plan with one EAGLE-3 variant per drafter (speculative settings copied from `template`, else the
    plan's first EAGLE-3 variant), next to the baseline and, with `keep_existing`, the earlier drafters."""
    data = plan.resolved_dict()
    spec = _template(plan, template)
    kept = [v for v in data["variants"] if keep_existing or plan.variant(v["name"]).is_baseline]
    names = {v["name"].lower() for v in kept}
    for d in drafters:
        name = d.name
        while name.lower() in names:
            name += "-new"
        names.add(name.lower())
        kept.append({"name": name, "drafter": d.model_dump(mode="json"), "algorithm": d.algorithm, **spec})
    data["variants"] = kept
    out = Plan.model_validate(data)
    out._source_path = plan.source_path
    return out


@dataclass(frozen=True)
class CheckpointExported:
    checkpoint: str  # the CLI-era checkpoint directory
    exported: str  # the SGLang draft directory `specforge export --to sglang` wrote


@dataclass(frozen=True)
class CheckpointRegistered:
    drafter_file: str
    drafter: Drafter


@dataclass(frozen=True)
class PreflightDone:
    findings: tuple[Finding, ...]
    ok: bool  # no errors: the benchmark follows


async def preflight_drafter(
    plan: Plan, drafter: Drafter, target: Target, *, template: str | None = None
) -> list[Finding]:
    """harness.checks on a plan of the baseline and this drafter (reads headers only, starts nothing)."""
    from harness.checks import run_checks

    return await run_checks(checkpoint_plan(plan, [drafter], template=template, keep_existing=False), target)


async def evaluate_checkpoint(
    plan: Plan,
    checkpoint: Checkpoint | str,
    *,
    name: str,
    target: Target | None = None,
    drafters_dir: str | Path = "drafters",
    results_dir: str | Path = "results",
    template: str | None = None,
    keep_existing: bool = True,
    draft_config: str | None = None,
    vocab_mapping: str | None = None,
    python: str | None = None,
    **drafter_fields: Unpack[DrafterFields],
) -> AsyncIterator[Any]:
    """[export ->] register -> preflight -> benchmark against the baseline (and the earlier drafters).
    Yields CheckpointExported (CLI-era checkpoints, which need `draft_config`), CheckpointRegistered,
    PreflightDone, then harness.common.events from run_plan (none when preflight found errors). `python` runs
    the
    export (the interpreter with SpecForge; default: the plan's target python)."""
    from harness.bench.runner import run_plan
    from harness.checks import has_errors
    from harness.targets import open_target

    if isinstance(checkpoint, Checkpoint) and checkpoint.needs_export and not draft_config:
        raise InputError(
            None,
            None,
            "draft_config",
            f"{checkpoint.path} must be exported for SGLang first: "
            "give the draft model config.json it was trained with",
        )
    own = target is None
    if target is None:
        target = open_target(plan.target.host, ssh_port=plan.target.ssh_port)
    try:
        await target.connect()
        if isinstance(checkpoint, Checkpoint) and checkpoint.needs_export:
            exported = await export_checkpoint(
                target,
                checkpoint,
                draft_config=str(draft_config),
                vocab_mapping=vocab_mapping,
                python=python or str(plan.target.python),
            )
            yield CheckpointExported(checkpoint.path, exported)
            checkpoint = exported
        path = register_checkpoint(checkpoint, name=name, drafters_dir=drafters_dir, **drafter_fields)
        drafter = load_drafter(path)
        yield CheckpointRegistered(str(path), drafter)
        findings = await preflight_drafter(plan, drafter, target, template=template)
        ok = not has_errors(findings)
        yield PreflightDone(tuple(findings), ok)
        if not ok:
            return
        bench = checkpoint_plan(plan, [drafter], template=template, keep_existing=keep_existing)
        async for event in run_plan(bench, results_dir=results_dir, target=target):
            yield event
    finally:
        if own:
            await target.close()


def accept_len_across(run_dir: str | Path) -> pd.DataFrame:
    """A finished run -> accept length per variant with the checkpoint's epoch/step (from the drafter path
    recorded in variants.jsonl): earlier drafters first, then checkpoints in training order. This is the
    retrain pane's comparison table."""
    import pandas as pd

    from harness.analysis.columns import is_true
    from harness.analysis.summary import load_summary, read_variants

    summary = load_summary(run_dir)
    meta = read_variants(Path(run_dir))
    cols = ["variant", "drafter", "kind", "epoch", "step", "concurrency", "accept_len", "speedup"]
    if summary.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for r in summary.to_dict("records"):
        if is_true(r.get("baseline")):
            continue
        path = str(meta.get(r["variant"], {}).get("drafter_path") or "")
        epoch, step = checkpoint_step(path)
        kind = "checkpoint" if epoch is not None or step is not None else "drafter"
        rows.append(
            {
                "variant": r["variant"],
                "drafter": r.get("drafter"),
                "kind": kind,
                "epoch": epoch,
                "step": step,
                "concurrency": r.get("concurrency"),
                "accept_len": r.get("accept_len"),
                "speedup": r.get("speedup"),
            }
        )
    df = pd.DataFrame(rows, columns=cols)
    df["_k"] = (df["kind"] == "checkpoint").astype(int)
    df = df.sort_values(["_k", "epoch", "step", "variant", "concurrency"], na_position="first", kind="stable")
    return df.drop(columns="_k").reset_index(drop=True)
