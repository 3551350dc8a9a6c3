"""The loop's derived inputs: the run whose weak spots it retrains on, the training spec, and the paired
evaluation plan (baseline, current drafter, candidate on the held-out prompts at the plan's concurrencies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.common.errors import InputError
from harness.inputs.config import Plan, Variant
from harness.inputs.plan_parts import Drafter
from harness.retrain.dataset import Manifest, held_out_suites
from harness.retrain.loop_state import LoopRecord, RetrainSettings

STAND_IN_TRAINER = ["{python}", "-m", "harness.retrain.fake_trainer"]  # simulated plans: SpecForge's stand-in
EVAL_SUFFIX = "-retrain-eval"


def spec_variant(plan: Plan, variant: str) -> Variant:
    v = plan.variant(variant)
    if v.is_baseline or v.drafter is None:
        raise InputError(str(plan.source_path or ""), None, "variant",
                         f"{variant} has no drafter: retrain a speculative variant with a drafter")
    if v.is_existing:
        raise InputError(str(plan.source_path or ""), None, "variant",
                         f"{variant} is a server draftbench did not "
                         "start (endpoint:): its drafter cannot be swapped for the evaluation")
    return v


def source_run(results_dir: str | Path, plan: Plan, variant: str) -> str:
    """The newest finished run of this plan (not a loop's own evaluation) whose variant served the drafter the
    plan names now (after a promotion, the runs of the drafter it replaced no longer count)."""
    from harness.analysis.runs import list_runs
    from harness.analysis.summary import read_variants

    drafter = plan.variant(variant).drafter
    path = str(drafter.path) if drafter is not None else ""
    for info in list_runs(results_dir):
        if info.plan != plan.name or info.status not in ("complete", "incomplete"):
            continue
        meta = read_variants(Path(info.run_dir)).get(variant)
        if meta and meta.get("status") == "ok" and not meta.get("forced_acceptance") \
                and str(meta.get("drafter_path") or "") == path:
            return info.run_dir
    raise InputError(str(results_dir), None, "source_run",
                     f"no finished run of plan {plan.name!r} whose {variant} "
                     f"served its drafter as it is now ({path}) under {results_dir}: run the plan first, or "
                     "give --from-run")


def train_fields(plan: Plan, variant: str, s: RetrainSettings, *, data: str, output_dir: str,
                 workdir: str) -> dict[str, Any]:
    """harness.retrain.train.spec_from_plan's fields for the loop's job."""
    from harness.checks.remote import target_path

    v = plan.variant(variant)
    launcher = s.launcher
    env = dict(s.env)
    era = s.era
    if launcher is None and plan.target.simulated:
        launcher = list(STAND_IN_TRAINER)
        era = "script"
        # the stand-in is this checkout's
        env.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    fields: dict[str, Any] = {"data_path": data, "output_dir": output_dir, "epochs": s.epochs, "era": era,
                              "env": env, "max_steps": s.max_steps, "save_interval": s.save_interval,
                              "ttt_length": s.ttt_length, "learning_rate": s.learning_rate,
                              "batch_size": s.batch_size, "specforge_dir": s.specforge_dir,
                              "launcher": launcher, "run_id": None}
    if s.gpus is not None:
        fields["gpus"] = s.gpus
    if s.fine_tune and v.drafter is not None:
        fields["init_from"] = target_path(str(v.drafter.path), workdir)
    return fields


def candidate_name(plan: Plan, variant: str, rec: LoopRecord) -> str:
    names = {v.name.lower() for v in plan.variants}
    name = f"{variant}-{rec.retrain_id.rsplit('-', 1)[-1]}"
    while name.lower() in names:
        name += "-new"
    return name


def first_repeats(plan: Plan, settings: RetrainSettings) -> int:
    """The evaluation's first look: the plan's repeats, and at least 2 when a concurrency is above 1 (the
    interval there comes from repeats)."""
    if settings.repeats:
        return settings.repeats
    return max(int(plan.run.repeats or 1), 2 if any(int(c) > 1 for c in plan.run.concurrency) else 1)


def eval_plan(plan: Plan, variant: str, rec: LoopRecord, run_dir: str, manifest: Manifest, *, repeats: int,
              concurrency: list[int]) -> Plan:
    """The plan's baseline, the variant as it is (current drafter) and the candidate (the variant's settings,
    the new checkpoint), on the source run's held-out prompts, `repeats` repeats at `concurrency` (the gate's
    looks add repeats at the concurrencies still undecided: harness.retrain.loop). A fixed design: the gate
    has its own stopping rule, against the current drafter."""
    suites = held_out_suites(run_dir, manifest)
    if not suites:
        raise InputError(rec.manifest, None, "held_out", "no held-out prompt left for the evaluation")
    data = plan.resolved_dict()
    base = plan.baseline_of(plan.variant(variant))
    current = next(v for v in data["variants"] if v["name"] == variant)
    current_drafter = plan.variant(variant).drafter
    assert current_drafter is not None and rec.candidate_path and rec.candidate
    drafter = Drafter(name=f"{current_drafter.name}-{rec.retrain_id.rsplit('-', 1)[-1]}",
                      path=rec.candidate_path, algorithm=current_drafter.algorithm,
                      trained_for=current_drafter.trained_for, training_data=rec.regen_output)
    cand = {**current, "name": rec.candidate, "drafter": drafter.model_dump(mode="json")}
    data["variants"] = [v for v in data["variants"] if v["name"] == base.name] + [current, cand]
    data["suites"] = [s.model_dump(mode="json", exclude_none=True) for s in suites]
    data["name"] = plan.name + EVAL_SUFFIX
    run = dict(data.get("run") or {})
    run.update(repeats=repeats, max_repeats=max(int(run.get("max_repeats") or repeats), repeats),
               stop="fixed", until_ci_pct=None, concurrency=list(concurrency))
    data["run"] = run
    data.pop("targets", None)  # one node: the evaluation is a pair of arms on the same machine
    out = Plan.model_validate(data)
    out._source_path = plan.source_path
    return out

