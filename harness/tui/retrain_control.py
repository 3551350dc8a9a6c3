"""The App's retrain half: training jobs, their checkpoints and data regeneration, all through the core's
harness.retrain functions (the same ones the CLI calls). A checkpoint's evaluation is a run like any other:
it goes through the run half in its own process and ends in the Results section.
harness.retrain and the targets are imported where they are used, as the Retrain section is, not at the
TUI's start (harness.retrain.regen loads the openai SDK).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from harness.common.errors import InputError
from harness.tui import messages as msg
from harness.tui.half import Half, handles, work
from harness.tui.runproc import RunProcess

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.retrain.checkpoints import Checkpoint
    from harness.retrain.jobs import Job
    from harness.retrain.train import TrainSpec
    from harness.targets.base import Target

EVALUATE = "harness.retrain.checkpoints:evaluate_checkpoint"


DEMO_LAUNCHER = "{python} -m harness.retrain.fake_trainer"  # the stand-in for SpecForge, same flags and logs


def train_fields(plan: Plan) -> list[tuple[str, str, str]]:
    """The train dialog; on a simulated plan the stand-in trainer and the shipped demo conversations are
    filled in, so the demo trains without typing a launcher."""
    from harness.cli.demo import DEMO_PLAN

    stamp = time.strftime("%Y%m%d-%H%M%S")
    sim = bool(plan.target.simulated)
    data = str(DEMO_PLAN.parent / "demo-conversations.jsonl") if sim else ""
    return [
        ("data_path", "training data (SpecForge JSONL on the target)", data),
        (
            "output_dir",
            "checkpoint directory on the target (relative: under the work directory)",
            f"checkpoints/{plan.name}-{stamp}",
        ),
        ("target_model_path", "target model on the target", str(plan.model.path)),
        ("epochs", "epochs", "1"),
        ("max_steps", "max steps (empty: all epochs)", ""),
        ("save_interval", "steps between checkpoints (empty: SpecForge's default)", "50" if sim else ""),
        ("learning_rate", "learning rate", "1e-4"),
        ("batch_size", "batch size per GPU", "1"),
        ("gpus", "GPUs (a count, or ids like 0,1)", str(plan.model.tp_size)),
        ("python", "python with torch + SpecForge on the target", plan.target.python),
        ("specforge_dir", "SpecForge checkout on the target (script era; empty: auto)", ""),
        ("launcher", "launcher argv replacing torchrun + script (empty: default; the demo: the stand-in)",
         DEMO_LAUNCHER if sim else ""),
    ]


def train_spec(values: dict[str, str]) -> TrainSpec:
    """The dialog's text -> TrainSpec; pydantic's errors name the field."""
    from harness.retrain.train import TrainSpec, parse_gpus

    numbers = {"epochs": int, "max_steps": int, "save_interval": int, "batch_size": int,
               "learning_rate": float}
    data: dict[str, Any] = {k: v for k, v in values.items() if v and k not in ("gpus", "launcher", *numbers)}
    data["gpus"] = parse_gpus(values.get("gpus") or "1")
    values = {**values, "epochs": values.get("epochs") or "1"}
    for key, kind in numbers.items():
        text = (values.get(key) or "").strip()
        if not text:
            continue
        try:
            data[key] = kind(text)
        except ValueError:
            whole = "a whole number" if kind is int else "a number"
            raise InputError(None, None, key, f"{whole}, got {text!r}") from None
    if values.get("launcher"):
        data["launcher"] = shlex.split(values["launcher"])
    return TrainSpec.model_validate(data)


class RetrainControl(Half):
    followed: str | None = None  # the job whose progress and checkpoints are on display

    def _target(self, job: Job | None = None) -> Target:
        app = self.app
        if app.target_factory is not None:
            return app.target_factory()
        if job is not None:
            from harness.retrain.jobs import open_job_target

            return open_job_target(job)
        from harness.targets import open_target

        return open_target(app.plan.target.host, ssh_port=app.plan.target.ssh_port)

    # ---- jobs --------------------------------------------------------------------------------------------
    def refresh_jobs(self) -> None:
        self._list_jobs()

    @work(thread=True, group="retrain")
    def _list_jobs(self) -> None:
        from harness.retrain.jobs import list_jobs

        self.app.post_message(msg.JobsListed(tuple(list_jobs(self.app.results_dir))))

    @handles(msg.JobsListed)
    def _jobs_listed(self, m: msg.JobsListed) -> None:
        self.app.jobs = m.jobs

    @handles(msg.JobUpdated)
    def _job_updated(self, m: msg.JobUpdated) -> None:
        jobs = self.app.jobs
        others = tuple(j for j in jobs if j.job_id != m.job.job_id)
        self.app.jobs = (
            (m.job, *others)
            if m.job.job_id not in {j.job_id for j in jobs}
            else tuple(m.job if j.job_id == m.job.job_id else j for j in jobs)
        )

    def train(self, values: dict[str, str]) -> None:
        if self.app.plan is None:
            self.app.notify("the plan is not loaded yet", severity="warning")
            return
        try:
            spec = train_spec(values)
        except (
            InputError,
            ValueError,
        ) as exc:  # pydantic's ValidationError is a ValueError; both name the field
            self.app.notify(str(exc), title="Cannot start training", severity="error", timeout=15)
            return
        self._launch(spec)

    @work(group="retrain")
    async def _launch(self, spec: TrainSpec) -> None:
        from harness.retrain.jobs import launch_training

        app = self.app
        target = self._target()
        try:
            job = await launch_training(
                target,
                spec,
                workdir=app.plan.target.workdir,
                results_dir=app.results_dir,
                ssh_port=app.plan.target.ssh_port,
            )
        finally:
            await target.close()
        app.post_message(msg.JobUpdated(job))
        self.follow(job)

    def job_action(self, action: str, job_id: str) -> None:
        self._job_action(action, job_id)

    @work(group="retrain")
    async def _job_action(self, action: str, job_id: str) -> None:
        from harness.retrain.jobs import cancel_job, load_job, refresh_job, resume_job

        results_dir = self.app.results_dir
        job = load_job(job_id, results_dir)
        target = self._target(job)
        try:
            await target.connect()
            fn = {"refresh": refresh_job, "cancel": cancel_job, "resume": resume_job}[action]
            job = await fn(target, job, results_dir)
        finally:
            await target.close()
        self.app.post_message(msg.JobUpdated(job))
        if action == "resume":
            self.follow(job)

    def follow(self, job: Job) -> None:
        self.followed = job.job_id
        self.app.job_progress = None
        self.app.checkpoints = ()
        self._follow(job)

    @work(group="follow", exclusive=True)
    async def _follow(self, job: Job) -> None:
        """Progress from the job's log until its process group is gone; checkpoints as they are saved."""
        from harness.retrain.checkpoints import discover_checkpoints
        from harness.retrain.jobs import follow_job

        post = self.app.post_message
        target = self._target(job)
        try:
            await target.connect()
            post(msg.CheckpointsListed(job.job_id, tuple(await discover_checkpoints(target, job.output_dir))))
            seen = 0
            async for p in follow_job(target, job, results_dir=self.app.results_dir):
                post(msg.JobProgressed(p))
                if len(p.checkpoints) != seen or p.state != "running":
                    seen = len(p.checkpoints)
                    found = await discover_checkpoints(target, job.output_dir)
                    post(msg.CheckpointsListed(job.job_id, tuple(found)))
        finally:
            await target.close()
        self._list_jobs()

    @handles(msg.JobProgressed)
    def _job_progressed(self, m: msg.JobProgressed) -> None:
        app = self.app
        p = m.progress
        if p.job_id == self.followed:
            app.job_progress = p
        # the log saw the job end before the job list is read again: show it at once
        if p.state != "running" and any(j.job_id == p.job_id and j.state != p.state for j in app.jobs):
            app.jobs = tuple(
                replace(j, state=p.state, exit_code=p.exit_code) if j.job_id == p.job_id else j
                for j in app.jobs
            )

    @handles(msg.CheckpointsListed)
    def _checkpoints_listed(self, m: msg.CheckpointsListed) -> None:
        if m.job_id == self.followed:
            self.app.checkpoints = m.checkpoints

    # ---- evaluation: a run -------------------------------------------------------------------------------
    def evaluate(self, checkpoint: Checkpoint, name: str) -> None:
        from harness.inputs.config import user_dir

        app = self.app
        # registered where the user keeps their own drafters, never inside the checkout; benchmarked
        # against the baseline only: two server loads, not the whole plan again
        kwargs = {"name": name, "drafters_dir": str(user_dir("drafters")),
                  "results_dir": str(app.results_dir), "keep_existing": False}
        app.run_control.start_run(
            RunProcess(
                EVALUATE,
                (app.plan, checkpoint),
                kwargs,
                post=app.post_message,
                target_factory=app.target_factory,
                flush_interval=app.flush_interval,
            )
        )

    @handles(msg.RetrainNote)
    def _retrain_note(self, m: msg.RetrainNote) -> None:
        app = self.app
        app.retrain_note = m.text
        app.run_status = m.text
        app.notify(m.text, severity="information" if m.ok else "error")
        app.results_control.refresh_drafters()

    # ---- data regeneration ------------------------------------------------------------------------------
    def regenerate(self, values: dict[str, str]) -> None:
        if self.app.plan is None:
            self.app.notify("the plan is not loaded yet", severity="warning")
            return
        try:
            concurrency, max_tokens = (
                int(values.get("concurrency") or 64),
                int(values.get("max_tokens") or 2048),
            )
        except ValueError:
            self.app.notify("concurrency and max tokens are whole numbers", severity="error")
            return
        self._regen(values.get("input", ""), values.get("output", ""), concurrency, max_tokens)

    @work(group="regen", exclusive=True)
    async def _regen(self, input_path: str, output_path: str, concurrency: int, max_tokens: int) -> None:
        from harness.retrain.regen import regen

        app = self.app
        # a baseline already up in the Servers section serves the regeneration; else regen starts one
        base = app.plan.baseline.name
        url = app.fleet.base_url(base) if app.fleet is not None else None
        target = app.target_factory() if app.target_factory is not None and not url else None
        try:
            async for p in regen(
                app.plan,
                input_path,
                output_path,
                concurrency=concurrency,
                max_tokens=max_tokens,
                endpoints=[url] if url else None,
                target=target,
                results_dir=app.results_dir,
            ):
                app.post_message(msg.RegenProgressed(p))
        finally:
            if target is not None:  # regen closes only a target it opened itself
                await target.close()

    def stop_regen(self) -> None:
        self.app.workers.cancel_group(self.app, "regen")

    @handles(msg.RegenProgressed)
    def _regen_progressed(self, m: msg.RegenProgressed) -> None:
        self.app.regen_progress = m.progress
