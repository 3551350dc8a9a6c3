"""Training checkpoints on the target -> drafters you can benchmark (REFERENCE §8.4).

Layouts: `epoch_E_step_S/` (script era, directly servable: config.json + model.safetensors),
`epoch_E/` (v0.1.0), `{run_id}-stepN/` with `{run_id}-latest` / `{run_id}-best` links (CLI era; holds
`training_state.pt` only and needs `specforge export --to sglang` before SGLang can load it).
`evaluate_checkpoint` is the one action: register as a drafter, preflight, benchmark against the baseline.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import yaml

from harness.common.errors import HarnessError, InputError
from harness.inputs.config import Plan, load_drafter
from harness.inputs.plan_parts import NAME_RE, Drafter

if TYPE_CHECKING:
    from typing import Unpack

    import pandas as pd

    from harness.common.findings import Finding
    from harness.targets.base import Target

_EPOCH_STEP = re.compile(r"^epoch_(?P<e>\d+)_step_(?P<s>\d+)$")
_EPOCH = re.compile(r"^epoch_(?P<e>\d+)$")
_RUN_STEP = re.compile(r"^(?P<run>.+)-step(?P<s>\d+)$")
_ALIAS = re.compile(r"^(?P<run>.+)-(?P<kind>latest|best)$")
DEFAULT_SPEC = {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}

# One line per entry of the output directory: type, what it holds, mtime, link target, name.
LIST_SH = r"""cd "$1" 2>/dev/null || { echo MISSING; exit 0; }
for f in * ; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  if [ -L "$f" ]; then t=l; l=$(readlink "$f"); elif [ -d "$f" ]; then t=d; l=; else continue; fi
  s=
  [ -f "$f/config.json" ] && s="${s}c"
  for w in "$f"/*.safetensors; do [ -e "$w" ] && s="${s}w"; break; done
  for w in "$f"/training_state*; do [ -e "$w" ] && s="${s}t"; break; done
  m=$(stat -c %Y "$f" 2>/dev/null || echo 0)
  printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$s" "$m" "$l" "$f"
done"""


@dataclass(frozen=True)
class Checkpoint:
    name: str  # directory name
    path: str  # on the target
    layout: str  # "epoch_step" | "epoch" | "run_step"
    epoch: int | None
    step: int | None
    servable: bool  # config.json + safetensors: usable as --speculative-draft-model-path as is
    has_training_state: bool
    mtime: float | None
    run_id: str | None = None
    aliases: tuple[str, ...] = ()  # "latest" / "best" when a run link points here

    @property
    def needs_export(self) -> bool:
        return not self.servable

    @property
    def label(self) -> str:
        """Short name for tables and drafter names: e1-s400, e2, s1200."""
        if self.layout == "epoch_step":
            return f"e{self.epoch}-s{self.step}"
        return f"e{self.epoch}" if self.layout == "epoch" else f"s{self.step}"


def parse_listing(output: str, output_dir: str) -> list[Checkpoint]:
    """LIST_SH's output -> checkpoints sorted by (epoch, step); links become aliases of their target."""
    if output.strip() == "MISSING":
        return []
    entries = [line.split("\t", 4) for line in output.splitlines() if line.count("\t") >= 4]
    aliases: dict[str, list[str]] = {}
    for kind, _has, _m, link, name in entries:
        a = _ALIAS.match(name)
        if kind == "l" and a and link:
            aliases.setdefault(link.rstrip("/").rsplit("/", 1)[-1], []).append(a["kind"])
    found = []
    for kind, has, mtime, _link, name in entries:
        if kind != "d":
            continue
        run_id = None
        if m := _EPOCH_STEP.match(name):
            layout, epoch, step = "epoch_step", int(m["e"]), int(m["s"])
        elif m := _EPOCH.match(name):
            layout, epoch, step = "epoch", int(m["e"]), None
        elif m := _RUN_STEP.match(name):
            layout, epoch, step, run_id = "run_step", None, int(m["s"]), m["run"]
        else:
            continue
        found.append(
            Checkpoint(
                name=name,
                path=f"{output_dir.rstrip('/')}/{name}",
                layout=layout,
                epoch=epoch,
                step=step,
                servable="c" in has and "w" in has,
                has_training_state="t" in has,
                mtime=float(mtime) if mtime.isdigit() else None,
                run_id=run_id,
                aliases=tuple(sorted(aliases.get(name, []))),
            )
        )
    return sorted(
        found,
        key=lambda c: (c.epoch if c.epoch is not None else -1, c.step if c.step is not None else -1, c.name),
    )


async def discover_checkpoints(target: Target, output_dir: str) -> list[Checkpoint]:
    """The checkpoints in a training output directory on the target (empty while none is saved)."""
    res = await target.run(["sh", "-c", LIST_SH, "sh", output_dir], timeout=60)
    if res.rc != 0:
        raise HarnessError(f"{target.name}: cannot list {output_dir}: {res.stderr.strip()[:300]}")
    return parse_listing(res.stdout, output_dir)


def build_export_argv(
    checkpoint: str,
    *,
    draft_config: str,
    output_dir: str,
    vocab_mapping: str | None = None,
    python: str = "python3",
) -> list[str]:
    """`specforge export --to sglang ...` (CLI era), through the target's python like the trainer."""
    argv = [
        python,
        "-m",
        "specforge.cli",
        "export",
        "--to",
        "sglang",
        "--checkpoint",
        checkpoint,
        "--draft-config",
        draft_config,
        "--output-dir",
        output_dir,
    ]
    return argv + (["--vocab-mapping", vocab_mapping] if vocab_mapping else [])


async def export_checkpoint(
    target: Target,
    ckpt: Checkpoint,
    *,
    draft_config: str,
    output_dir: str | None = None,
    vocab_mapping: str | None = None,
    python: str = "python3",
) -> str:
    """Export a CLI-era checkpoint to an SGLang draft directory; returns that directory."""
    out = output_dir or f"{ckpt.path}-sglang"
    argv = build_export_argv(
        ckpt.path, draft_config=draft_config, output_dir=out, vocab_mapping=vocab_mapping, python=python
    )
    res = await target.run(argv, timeout=3600)
    if res.rc != 0 or "exported sglang draft to" not in res.stdout:
        raise HarnessError(
            f"{target.name}: export of {ckpt.path} failed (exit {res.rc}): "
            f"{(res.stderr or res.stdout).strip()[-500:]}"
        )
    return out


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


def checkpoint_step(path: str) -> tuple[int | None, int | None]:
    """(epoch, step) from a checkpoint path's last component, (None, None) for other drafters."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if m := _EPOCH_STEP.match(name):
        return int(m["e"]), int(m["s"])
    if m := _EPOCH.match(name):
        return int(m["e"]), None
    if m := _RUN_STEP.match(name.removesuffix("-sglang")):
        return None, int(m["s"])
    return None, None


def accept_len_across(run_dir: str | Path) -> pd.DataFrame:
    """A finished run -> accept length per variant with the checkpoint's epoch/step (from the drafter path
    recorded in variants.jsonl): earlier drafters first, then checkpoints in training order. This is the
    retrain pane's comparison table."""
    import pandas as pd

    from harness.analysis.summary import load_summary, read_variants

    summary = load_summary(run_dir)
    meta = read_variants(Path(run_dir))
    cols = ["variant", "drafter", "kind", "epoch", "step", "concurrency", "accept_len", "speedup"]
    if summary.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for r in summary.to_dict("records"):
        if r.get("baseline") in (True, "True", 1):
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
