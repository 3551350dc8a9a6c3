"""`draftbench retrain PLAN --variant V`: the whole loop, as one async generator of events.

  select    the weak spots of a finished run -> a regeneration input (harness.retrain.dataset), prompts
            held out;
  regen     the target answers every user turn of it (harness.retrain.regen);
  train     a SpecForge job on the target, fine-tuning the current drafter (harness.retrain.jobs), followed
            live;
  export    its last checkpoint made servable (`specforge export` in the CLI era);
  evaluate  baseline, current drafter and candidate on the held-out prompts at the plan's concurrencies;
  gate      the candidate against the current drafter (harness.retrain.gate);
  promote   only when the gate passed: the variant's drafters/ file points at the new checkpoint, with
            lineage.
Each stage is recorded in results/retrain/<id>/state.json when it ends; the same command resumes the newest
unfinished loop of the plan and variant at the stage it stopped in. Yields LoopStep events, the regen and
training progress inside them, and the evaluation run's own events (harness.common.events) as they come.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common.errors import HarnessError, InputError
from harness.retrain import loop_eval as le
from harness.retrain import loop_looks
from harness.retrain.dataset import REGEN_INPUT, build_input
from harness.retrain.loop_state import (
    LoopRecord,
    RetrainSettings,
    loop_dir,
    new_record,
    save_record,
    unfinished,
)

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.retrain.progress import TrainProgress
    from harness.targets.base import Target


@dataclass(frozen=True)
class LoopStep:
    retrain_id: str
    stage: str
    state: str  # "started" | "progress" | "done" | "skipped" | "promoted" | "refused"
    text: str  # one line (the CLI prints it, the TUI shows it)
    lines: tuple[str, ...] = ()  # a table or the gate's rows

    @property
    def retrain_note(self) -> str:
        return "\n".join((self.text, *self.lines))


async def retrain_loop(plan: Plan, variant: str, *, settings: RetrainSettings | None = None,
                       results_dir: str | Path = "results", resume: str | None = None, new: bool = False,
                       target: Target | None = None) -> AsyncIterator[Any]:
    """Run (or resume) the loop for `variant`; see the module. `resume`: a loop id; else the newest unfinished
    loop of this plan and variant is resumed unless `new`."""
    from harness.retrain.loop_state import find_record
    from harness.targets import open_target

    le.spec_variant(plan, variant)
    if resume:
        rec = find_record(results_dir, resume)
    elif not new and (rec := unfinished(results_dir, plan.name, variant)) is not None:
        pass
    else:  # the run to learn from is found first: a loop that cannot start leaves no record behind
        settings = settings or RetrainSettings()
        source = settings.source_run or le.source_run(results_dir, plan, variant)
        rec = new_record(plan, variant, settings, results_dir)
        rec.source_run = str(source)
        save_record(rec, results_dir)
    if rec.finished:
        yield LoopStep(rec.retrain_id, "done", "skipped", f"{rec.retrain_id} already ended: {rec.outcome}"
                       + (f" ({rec.reason})" if rec.reason else ""), tuple(rec.gate))
        return
    resumed = bool(rec.done)
    yield LoopStep(rec.retrain_id, rec.next_stage() or "done", "started",
                   f"{'resuming' if resumed else 'starting'} {rec.retrain_id}: {variant} of {plan.name}"
                   + (f" at {rec.next_stage()}" if resumed else ""))
    own = target is None
    if own:
        target = open_target(plan.target.host, ssh_port=plan.target.ssh_port)
    loop = _Loop(plan, variant, rec, Path(results_dir), target)
    try:
        async with contextlib.aclosing(loop.run()) as events:  # closing us closes every stage inside
            async for event in events:
                yield event
    finally:
        if own:
            with contextlib.suppress(Exception):
                await target.close()


class _Loop:
    def __init__(self, plan: Plan, variant: str, rec: LoopRecord, results_dir: Path, target: Target):
        self.plan, self.variant, self.rec = plan, variant, rec
        self.results_dir, self.target = results_dir, target
        self.s = rec.settings
        self.dir = loop_dir(rec, results_dir)

    def step(self, stage: str, state: str, text: str, lines: tuple[str, ...] = ()) -> LoopStep:
        return LoopStep(self.rec.retrain_id, stage, state, text, lines)

    def finish(self, stage: str) -> None:
        if stage not in self.rec.done:
            self.rec.done.append(stage)
        save_record(self.rec, self.results_dir)

    async def run(self) -> AsyncIterator[Any]:
        stages = {"select": self.select, "regen": self.regen, "train": self.train, "export": self.export,
                  "evaluate": self.evaluate, "gate": self.gate, "promote": self.promote}
        while (stage := self.rec.next_stage()) is not None and not self.rec.finished:
            async with contextlib.aclosing(stages[stage]()) as events:
                async for event in events:
                    yield event
            if stage not in self.rec.done and not self.rec.finished:
                raise HarnessError(f"{stage} did not finish")  # a stage ends by finishing or deciding

    # ---- select -------------------------------------------------------------------------------------------
    async def select(self) -> AsyncIterator[Any]:
        from harness.retrain import weak_spots as ws

        run_dir = str(self.rec.source_run)
        rq = ws.variant_requests(run_dir, self.variant)
        found, ref = ws.spots(rq, self.s.level), ws.overall(rq)
        chosen = ws.pick(found, lowest=self.s.lowest, below=self.s.below, position=self.s.position, ref=ref)
        if not chosen:
            raise HarnessError(f"{run_dir}: no weak spot of {self.variant} (level "
                               f"{self.s.level}) to retrain on")
        manifest = build_input(run_dir, self.variant, chosen, self.s.level, self.dir / "data",
                               rest_share=self.s.rest_share, holdout=self.s.holdout, seed=self.s.seed,
                               position=self.s.position, traffic=self.s.traffic,
                               traffic_sample=self.s.traffic_sample)
        if not manifest.rows:
            raise HarnessError("the regeneration input has no row (every weak prompt is held out): "
                               + "; ".join(manifest.notes or ["add a traffic log (--traffic)"]))
        self.rec.manifest = str(self.dir / "data" / "manifest.json")
        counts = {src: sum(r.source == src for r in manifest.rows) for src in ("weak", "rest", "traffic")}
        self.finish("select")
        yield self.step("select", "done", f"weak spots of {self.variant} in {run_dir}: "
                        + ", ".join(f"{s.key} (accept len {s.accept_len or 0:.2f})" for s in chosen)
                        + f"; {len(manifest.rows)} rows to regenerate ({counts['weak']} weak, "
                        f"{counts['rest']} rest, {counts['traffic']} traffic), "
                        f"{len(manifest.held_out)} prompts held out",
                        tuple(ws.spot_lines(found, chosen, ref)) + tuple(manifest.notes))

    # ---- regen --------------------------------------------------------------------------------------------
    async def regen(self) -> AsyncIterator[Any]:
        from harness.retrain.regen import regen

        out = self.dir / "data" / "regen.jsonl"
        self.rec.regen_output = str(out)
        final, last = None, 0.0
        temperature = self.s.regen_temperature if self.s.regen_temperature is not None \
            else float(self.plan.run.temperature)
        progress = regen(self.plan, self.dir / "data" / REGEN_INPUT, out,
                         concurrency=self.s.regen_concurrency, endpoints=self.s.endpoints or None,
                         max_tokens=self.s.regen_max_tokens or int(self.plan.run.max_tokens),
                         temperature=temperature, results_dir=self.results_dir, workers=self.s.workers,
                         target=self.target if not self.s.endpoints else None)
        async with contextlib.aclosing(progress):
            async for p in progress:
                final = p
                if p.state != "running" or time.monotonic() - last >= 1.0:
                    last = time.monotonic()
                    yield self.step("regen", "progress", f"regen [{p.state}] {p.note()}")
        rows = sum(1 for line in out.read_text(encoding="utf-8").splitlines() if line.strip()) \
            if out.exists() else 0
        if not rows:
            raise HarnessError(f"regeneration wrote no row to {out}"
                               + (f": {final.last_error}" if final else ""))
        if final is not None and (final.deferred or final.remaining):
            raise HarnessError(f"regeneration left {final.deferred + final.remaining} rows unanswered: run "
                               "the same command again to resume")
        self.finish("regen")
        yield self.step("regen", "done", f"regenerated {rows} rows through the target -> {out}")

    # ---- train --------------------------------------------------------------------------------------------
    async def train(self) -> AsyncIterator[Any]:
        from harness.retrain import jobs as J
        from harness.retrain.train import spec_from_plan

        await self.target.connect()
        if self.rec.job_id is None:
            root = await self.target.makedirs_private(str(self.plan.target.workdir))
            remote = await self.target.makedirs_private(f"{root}/retrain/{self.rec.retrain_id}")
            data = f"{remote}/train.jsonl"
            await self.target.write_private(data, Path(str(self.rec.regen_output)).read_bytes())
            self.rec.remote_data = data
            spec = spec_from_plan(self.plan, **le.train_fields(self.plan, self.variant, self.s, data=data,
                                                               output_dir=f"{remote}/checkpoints",
                                                               workdir=root))
            job = await J.launch_training(self.target, spec, workdir=str(self.plan.target.workdir),
                                          results_dir=self.results_dir, ssh_port=self.plan.target.ssh_port)
            self.rec.job_id = job.job_id
            save_record(self.rec, self.results_dir)
            yield self.step("train", "started",
                            f"training job {job.job_id} ({job.era} era) on {self.target.name}, "
                            f"log {job.log_path}")
        else:
            job = await J.refresh_job(self.target, J.load_job(self.rec.job_id, self.results_dir),
                                      self.results_dir)
            if job.state in ("failed", "lost", "cancelled"):
                job = await J.resume_job(self.target, job, self.results_dir)
                yield self.step("train", "started",
                                f"training job {job.job_id} resumed from its last checkpoint")
        last, state = 0.0, job.state
        if job.state == "running":
            follow = J.follow_job(self.target, job, results_dir=self.results_dir)
            async with contextlib.aclosing(follow):
                async for p in follow:
                    state = p.state
                    if p.state != "running" or time.monotonic() - last >= 1.0:
                        last = time.monotonic()
                        yield self.step("train", "progress", _train_line(p))
        if state != "finished":
            raise HarnessError(f"training job {job.job_id} ended {state}: run the same command again to "
                               f"resume it from its last checkpoint (log: {job.log_path})")
        self.finish("train")
        yield self.step("train", "done", f"training job {job.job_id} finished")

    # ---- export -------------------------------------------------------------------------------------------
    async def export(self) -> AsyncIterator[Any]:
        from harness.retrain import jobs as J
        from harness.retrain.checkpoints import discover_checkpoints, export_checkpoint

        job = J.load_job(str(self.rec.job_id), self.results_dir)
        await self.target.connect()
        found = await discover_checkpoints(self.target, job.output_dir)
        if not found:
            raise HarnessError(f"training job {job.job_id} saved no checkpoint in {job.output_dir}")
        ckpt = found[-1]
        self.rec.checkpoint = ckpt.path
        path = ckpt.path
        if ckpt.needs_export:
            from harness.checks.remote import target_path

            v = self.plan.variant(self.variant)
            cfg = self.s.draft_config \
                or f"{target_path(str(v.drafter.path), str(self.plan.target.workdir))}/config.json"
            path = await export_checkpoint(self.target, ckpt, draft_config=cfg,
                                           python=str(self.plan.target.python))
        self.rec.candidate_path = path
        self.rec.candidate = le.candidate_name(self.plan, self.variant, self.rec)
        self.finish("export")
        yield self.step("export", "done", f"checkpoint {ckpt.name} -> drafter {self.rec.candidate} at {path}")

    # ---- evaluate: the gate's own stopping rule (harness.retrain.loop_looks) -------------------------------
    def evaluate(self) -> AsyncIterator[Any]:
        return loop_looks.evaluate(self)

    # ---- gate ---------------------------------------------------------------------------------------------
    async def gate(self) -> AsyncIterator[Any]:
        from harness.retrain.gate import judge

        looks = {int(c): v for c, v in self.rec.looks.items()}
        result = judge(str(self.rec.eval_run), str(self.rec.candidate), self.variant,
                       [int(c) for c in self.plan.run.concurrency], self.s.rule, looks=looks)
        self.rec.gate = result.lines()
        if not result.passed:
            self.rec.outcome, self.rec.reason = "refused", result.reason
            self.finish("gate")
            yield self.step("gate", "refused", f"not promoted: {result.reason}; {self.variant}'s drafter is "
                            "unchanged", tuple(result.lines()))
            return
        self.finish("gate")
        yield self.step("gate", "done", "the gate passed", tuple(result.lines()))

    # ---- promote ------------------------------------------------------------------------------------------
    async def promote(self) -> AsyncIterator[Any]:
        from harness.checks.remote import read_json, target_path
        from harness.inputs.config import load_drafter
        from harness.inputs.drafter_record import LineageEntry
        from harness.retrain.profile import write_profile
        from harness.retrain.promote import drafter_file, promote

        path = drafter_file(self.plan, self.variant)
        self.rec.drafter_file = str(path)
        profile = write_profile(str(self.rec.eval_run), str(self.rec.candidate))
        # not before a kill
        if not any(e.retrain_id == self.rec.retrain_id for e in load_drafter(path).lineage):
            await self.target.connect()
            model_dir = target_path(str(self.plan.model.path), str(self.plan.target.workdir))
            cfg, _ = await read_json(self.target, f"{model_dir}/config.json")
            entry = LineageEntry(promoted_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                 path=str(self.rec.candidate_path), data_manifest=_local(self.rec.manifest),
                                 training_data=_local(self.rec.regen_output), job=self.rec.job_id,
                                 checkpoint=self.rec.checkpoint, evaluation_run=_local(self.rec.eval_run),
                                 profile=_local(str(profile)), rule=self.s.rule,
                                 verdicts=[line.strip() for line in self.rec.gate[1:]],
                                 retrain_id=self.rec.retrain_id)
            promote(path, new_path=str(self.rec.candidate_path), entry=entry, target_cfg=cfg,
                    trained_for=str(self.plan.model.path))
        self.rec.outcome = "promoted"
        self.finish("promote")
        yield self.step("promote", "promoted",
                        f"promoted: {path} now points at {self.rec.candidate_path} (lineage "
                        f"entry {self.rec.retrain_id}; profile {profile})")


def _local(path: str | None) -> str | None:
    """Absolute: the drafter file outlives the working directory the loop ran in."""
    return str(Path(path).resolve()) if path else None


def _train_line(p: TrainProgress) -> str:
    def f(v: object, spec: str = "{}") -> str:
        return "-" if v is None else spec.format(v)

    return (f"train [{p.state}] epoch {f(p.epoch)}/{f(p.num_epochs)} step "
            f"{f(p.global_step)}/{f(p.total_steps)} loss {f(p.loss, '{:.3f}')} acc {f(p.acc, '{:.3f}')} "
            f"checkpoints {len(p.checkpoints)}")


__all__ = ["LoopStep", "RetrainSettings", "retrain_loop", "InputError"]
