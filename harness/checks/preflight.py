"""`run_checks`: gather facts on the target (no model loaded), then run every check on every variant."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.checks import algorithm as al
from harness.checks import checkpoint as ck
from harness.checks import compat, context, measurement, realism
from harness.checks import environment as envc
from harness.checks.expected import apply_expectations
from harness.checks.remote import EnvFacts, gather_env, gather_gpus, read_drafter, read_json, target_path
from harness.common.findings import PLAN_WIDE, Finding, error, sort_findings, warning
from harness.engines import engine_of
from harness.engines.base import DrafterCheck, Engine, LaunchCheck, PreflightInput

if TYPE_CHECKING:
    from harness.inputs.config import Plan, Variant
    from harness.targets.base import Target


async def run_checks(plan: Plan, target: Target, *, versions: Mapping[str, str | None] | None = None
                     ) -> list[Finding]:
    """Every preflight finding for the plan, errors first. Reads configs and safetensors headers over
    the target, asks each engine in use to build and judge its variants' launch argv (SGLang's own parser,
    or the stand-in's copy of it); starts no server. `versions`: engine name -> the version the caller
    already knows (a fleet asked the node); an engine not named uses the plan's pin or asks the node."""
    t = plan.target
    try:
        await target.connect()
    except Exception as exc:
        return [
            error(
                PLAN_WIDE,
                "target-unreachable",
                f"cannot reach target {t.host}",
                str(exc),
                "check the destination with `ssh` by hand (keys and ports belong in ~/.ssh/config)",
            )
        ]
    simulated = bool(t.simulated)
    workdir, python = str(t.workdir), str(t.python)
    env_vars = {str(k): str(v) for k, v in (t.env or {}).items()}
    port = plan.server.port if isinstance(plan.server.port, int) else None
    model_dir = target_path(str(plan.model.path), workdir)
    paths: dict[str, tuple[str, str, str]] = {model_dir: (PLAN_WIDE, "model", str(plan.model.path))}
    drafter_dirs: dict[str, str] = {}  # variant -> drafter dir on the target
    for v in plan.variants:
        if v.drafter is not None:
            d = target_path(str(v.drafter.path), workdir)
            drafter_dirs[v.name] = d
            paths.setdefault(d, (v.name, f"drafter '{v.drafter.name}'", str(v.drafter.path)))

    env, gpus, (target_cfg, target_problem), drafter_list, (gen_cfg, _) = await asyncio.gather(
        gather_env(target, python, list(paths), workdir, str(plan.server.host), port, env_vars),
        gather_gpus(target, env_vars) if not simulated else _none(),
        read_json(target, f"{model_dir}/config.json"),
        asyncio.gather(*(read_drafter(target, d) for d in dict.fromkeys(drafter_dirs.values()))),
        read_json(target, f"{model_dir}/generation_config.json"),  # the model's own sampler, if it has one
    )
    facts = {f.path: f for f in drafter_list}
    findings: list[Finding] = envc.python_findings(target.name, python, env)
    findings += envc.path_findings(env, paths)
    findings += envc.port_findings(env, str(plan.server.host), port)
    findings += envc.disk_findings(env)
    if not simulated:
        findings += envc.gpu_findings(gpus[0], gpus[1], int(plan.model.tp_size), env_vars)
    if target_cfg is None and _exists(env, model_dir):
        findings.append(
            warning(
                PLAN_WIDE,
                "target-config",
                "cannot read the target's config.json",
                target_problem or "",
                "shape checks against the target are skipped",
            )
        )

    findings += context.target_findings(plan, target_cfg)
    findings += measurement.phase_findings(plan)
    findings += realism.plan_findings(plan, gen_cfg)  # raw text, synthetic suites, training data, sampler
    arch = (ck.text_config(target_cfg).get("architectures") or [None])[0] if target_cfg else None
    ctxs: dict[str, _Context] = {}
    for v in plan.variants:  # each engine builds and judges the argv of its own variants
        engine = engine_of(plan, v)
        if engine.name not in ctxs:
            answer = await engine.ask_parser(PreflightInput(
                plan, target, arch, env.python_ok, bool(env.data.get("workdir_exists")),
                (versions or {}).get(engine.name)))
            findings += answer.findings
            ctxs[engine.name] = _Context(plan, engine, answer.argvs, answer.parsed, answer.version, arch,
                                         target_cfg, env, drafter_dirs, facts)
        findings += _variant_findings(ctxs[engine.name], v)
    return sort_findings(apply_expectations(plan, findings), [v.name for v in plan.variants])


@dataclass
class _Context:
    """What the per-variant checks need, gathered once for the plan."""

    plan: Plan
    engine: Engine
    argvs: dict[str, list[str]]
    parsed: dict[str, Any]  # the real (or stand-in) parser's answer per variant
    version: str | None
    arch: str | None
    target_cfg: dict[str, Any] | None
    env: EnvFacts
    drafter_dirs: dict[str, str]
    facts: dict[str, ck.DrafterFacts]


def _variant_findings(ctx: _Context, v: Variant) -> list[Finding]:
    plan, argv = ctx.plan, ctx.argvs.get(v.name)
    if argv is None or v.is_existing:
        # a server draftbench did not start (`endpoint:`): no argv of ours to judge and no drafter to read;
        # what it runs is checked against its own /get_server_info when the run connects
        return []
    out: list[Finding] = []
    # open-loop phases only: arrivals may fill every slot the server has
    max_batch = min(max(plan.run.concurrency, default=int(plan.server.max_running_requests)),
                    int(plan.server.max_running_requests))
    base = plan.baseline_of(v)
    base_argv = ctx.argvs.get(base.name) if v is not base else None
    out += ctx.engine.launch_findings(LaunchCheck(plan, v, argv, base_argv, ctx.parsed.get(v.name),
                                                  ctx.version, ctx.arch, max_batch))
    if not v.spec_algorithm:
        return out
    d = ctx.drafter_dirs.get(v.name)
    f = ctx.facts.get(d) if d else None
    out += al.check_algorithm(v.name, v.spec_algorithm, v.drafter, f, ctx.target_cfg,
                              ctx.engine.algorithm_flag, ctx.engine.display_name)
    if f is None:
        return out
    if f.problem and _exists(ctx.env, d):
        out.append(
            error(
                v.name,
                "drafter-unreadable",
                f"cannot read drafter '{v.drafter.name}'",
                f.problem,
                "check the checkpoint directory (config.json + *.safetensors)",
            )
        )
    if str(v.spec_algorithm).upper() != "EAGLE3":
        return out
    head = DrafterCheck(v.name, argv, f.config, ck.aux_layer_ids(f.config),
                        ck.text_config(ctx.target_cfg).get("num_hidden_layers"), ctx.version)
    out += ck.check_shapes(v.name, f, ctx.target_cfg)
    if ck.is_eagle3_head(f):  # the engine's own version rules on the checkpoint, with the shapes
        out += ctx.engine.checkpoint_findings(head)
    out += context.drafter_findings(v.name, f.config, plan)  # per suite, every turn of a conversation
    out += compat.check_rope(v.name, f.config, ctx.target_cfg)
    out += compat.check_trained_for(
        v.name, v.drafter, str(plan.model.path), plan.model.served_model_name, ctx.target_cfg,
        plan_path=str(plan.source_path) if plan.source_path else None)
    out += ctx.engine.drafter_findings(head)
    return out


async def _none() -> tuple[None, str]:
    return None, ""


def _exists(env: EnvFacts, path: str | None) -> bool:
    """True unless the target said the path is missing (unknown counts as present)."""
    got = env.data.get("paths", {}).get(path or "", {}) if env.python_ok else {}
    return bool(got.get("exists", True))


