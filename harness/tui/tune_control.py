"""The App's tune half: `draftbench tune` (harness.studies.tune) in the run's own child process, like a run
(runchild.py / runproc.py): its events become the tune state, the sub-runs' servers show in Servers, and the
tune directory is re-read (harness.studies.tune_view) as configs are measured, so the grid fills as it goes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App
from textual.reactive import var

from harness.common import events as ev
from harness.tui import messages as msg
from harness.tui.feed import FLUSH_INTERVAL_S, EventFeed
from harness.tui.runproc import RunProcess
from harness.tui.state import ProgressSnapshot

TUNE = "harness.studies.tune:tune"
ACTIVE_TUNE = ("preparing", "running", "cancelling")
RELOAD_ON = ("measured", "failed", "verified", "skipped")  # candidate states after which the files changed


@dataclass(frozen=True)
class TuneChoice:
    """What the Tune form asks for; the rest of TuneOptions keeps the CLI's defaults."""

    variant: str | None
    budget_s: float
    concurrency: list[int] | None  # None: the plan's
    steps: list[int]
    graphs: list[bool]  # CUDA graphs: [True, False] tries both
    cost_tokens: int = 96


def tune_options(choice: TuneChoice) -> Any:
    from harness.studies.tune import TuneOptions

    return TuneOptions(
        variant=choice.variant,
        budget_s=choice.budget_s,
        concurrency=choice.concurrency,
        steps=list(choice.steps),
        graphs=list(choice.graphs),
        cost_tokens=choice.cost_tokens,
    )


class TuneFeed(EventFeed):
    """A tune's events as messages: its own three as Tune messages; the sub-runs' servers and logs as a run's
    (source "tune"), their requests as TuneProgressed. Sub-run boundaries stay inside: a tune is not a Run."""

    QUIET = (ev.RunStarted, ev.RunDone, ev.PhaseStarted, ev.PhaseDone, ev.VariantDone)

    def push(self, event: Any) -> None:
        if isinstance(event, ev.TuneStage | ev.TuneCandidate | ev.TuneDone):
            self.flush()
            self.post(self._message(event))
        elif isinstance(event, self.QUIET):
            if isinstance(event, ev.RunStarted) and self.run_dir is None:
                self.run_dir = str(Path(event.run_dir).parent)  # tune_dir/wide or tune_dir/cost
                self.post(msg.TuneLaunched(self.run_dir))
            self._dirty = self.progress.observe(event) or self._dirty
        elif isinstance(event, ev.Alarm) and event.severity != "error":
            return  # a slower config is what a search expects to find; its answer says so
        else:
            super().push(event)

    def _message(self, e: Any) -> Any:
        if isinstance(e, ev.TuneStage):
            return msg.TuneStaged(e.stage, e.message, e.spent_s, e.budget_s)
        if isinstance(e, ev.TuneCandidate):
            return msg.TuneCandidateChanged(e.config, e.status, e.expected_speedup, e.est_cost_s, e.detail)
        self.run_dir = e.tune_dir
        return msg.TuneFinished(e.tune_dir, e.complete, e.stop_reason, e.starts, e.grid_size)

    def flush(self) -> None:
        dirty, self._dirty = self._dirty, False
        super().flush()  # the servers' log lines
        if dirty:
            self.post(msg.TuneProgressed(self.progress.snapshot()))


class TuneProcess(RunProcess):
    """harness.studies.tune:tune in runchild; ends with TuneEnded. SIGTERM stops every server the tune started."""

    def __init__(
        self,
        plan: Any,
        options: Any,
        *,
        results_dir: str,
        resume_dir: str | None,
        post: Callable[[Any], Any],
        target_factory: Callable[[], Any] | None = None,
        flush_interval: float = FLUSH_INTERVAL_S,
    ) -> None:
        kwargs: dict[str, Any] = {"results_dir": results_dir}
        if resume_dir:
            kwargs["resume_dir"] = resume_dir
        super().__init__(
            TUNE,
            (plan, options),
            kwargs,
            post=post,
            target_factory=target_factory,
            flush_interval=flush_interval,
        )
        self.feed = TuneFeed(post, source="tune")

    def ended(self, status: str, detail: str) -> None:
        self.post(msg.TuneEnded(status, detail, self.feed.run_dir))


class TuneControl(App[int]):
    tune_state: var[str] = var("idle")  # idle | preparing | running | cancelling | done | failed | cancelled
    tune_status: var[str] = var("idle: choose the variant, concurrency and budget, then ctrl+r (r resumes)")
    tune_stage: var[tuple[str, float, float]] = var(("", 0.0, 0.0))  # stage, spent_s, budget_s
    tune_stage_at: float | None = None  # the clock when tune_stage's spent_s held (the view counts on from it)
    tune_dir: var[str | None] = var(None)
    tune_progress: var[ProgressSnapshot | None] = var(None)
    tune_candidates: var[dict[str, str]] = var(dict)  # config -> its latest TuneCandidate status
    tune_view: var[Any] = var(None)  # harness.studies.tune_view.TuneView of tune_dir
    tunes: var[tuple[str, ...]] = var(tuple)  # tune directories under results_dir, newest first

    # set by the App
    results_dir: Path
    plan_path: str | None
    target_factory: Callable[[], Any] | None
    flush_interval: float
    clock: Callable[[], float]
    tune_proc: TuneProcess | None = None

    def tune_active(self) -> bool:
        return self.tune_proc is not None and self.tune_state in ACTIVE_TUNE

    def action_refresh_tunes(self) -> None:
        self._list_tunes()

    @work(thread=True, group="tune-list", exclusive=True, exit_on_error=False)
    def _list_tunes(self) -> None:
        from harness.studies.tune_view import list_tunes

        self.post_message(msg.TunesListed(tuple(str(p) for p in list_tunes(self.results_dir))))

    @on(msg.TunesListed)
    def _tunes_listed(self, m: msg.TunesListed) -> None:
        self.tunes = m.dirs

    # ---- start, resume, cancel ---------------------------------------------------------------------------
    @on(msg.TuneRequested)
    def _tune_requested(self, m: msg.TuneRequested) -> None:
        if self.plan is None:
            self.notify("the plan is not loaded yet", severity="warning")
            return
        self._start_tune(self.plan, tune_options(m.choice), None)

    @on(msg.TuneResumeRequested)
    def _tune_resume(self, m: msg.TuneResumeRequested) -> None:
        from harness.studies.tune import read_tune_plan

        try:
            plan, opts = read_tune_plan(m.tune_dir)
        except (OSError, ValueError) as exc:
            self.notify(f"{m.tune_dir}: {exc}", title="Cannot resume", severity="error")
            return
        if m.budget_s is not None:
            opts.budget_s = m.budget_s
        self._start_tune(plan, opts, m.tune_dir)

    def _start_tune(self, plan: Any, opts: Any, resume_dir: str | None) -> None:
        if self.tune_active():
            self.notify("a tune is already going", severity="warning")
            return
        if getattr(self, "run_state", "idle") in ("preparing", "running", "cancelling"):
            self.notify("a run owns the servers now: let it finish or cancel it first", severity="warning")
            return
        self.tune_proc = TuneProcess(
            plan,
            opts,
            results_dir=str(self.results_dir),
            resume_dir=resume_dir,
            post=self.post_message,
            target_factory=self.target_factory,
            flush_interval=self.flush_interval,
        )
        self.tune_candidates, self.tune_progress, self.tune_view = {}, None, None
        self.tune_dir = resume_dir
        self.tune_stage_at = self.clock()  # the budget counts from the start, not from the first stage's word
        self.tune_stage = ("", 0.0, opts.budget_s)
        self._set_tune(
            "preparing",
            "preparing: stopping the Servers section's servers, then "
            + (f"resuming {resume_dir}" if resume_dir else f"tuning {opts.variant or 'the first drafter'}"),
        )
        self._tune(self.tune_proc)

    @work(group="tune", exclusive=True, exit_on_error=False)
    async def _tune(self, proc: TuneProcess) -> None:
        if self.fleet is not None and any(
            v.source == "fleet" and v.state != "stopped" for v in self.servers.values()
        ):
            await self.fleet.stop_all()  # the tune starts its own servers (ports, GPU memory)
        await asyncio.to_thread(proc.run)

    @on(msg.TuneCancelRequested)
    def _tune_cancel(self) -> None:
        if self.tune_proc is not None and self.tune_state in ("preparing", "running"):
            self._set_tune("cancelling", "cancelling: stopping every server the tune started")
            self.tune_proc.cancel()

    async def stop_tune(self) -> None:
        """On quit: cancel a tune going and wait until its process has stopped its servers."""
        if self.tune_active() and self.tune_proc is not None:
            self.tune_proc.cancel()
            await self.workers.wait_for_complete([w for w in self.workers if w.group == "tune"])

    def _set_tune(self, state: str, text: str) -> None:
        self.tune_status = text
        self.tune_state = state

    # ---- what the tune says --------------------------------------------------------------------------------
    @on(msg.TuneLaunched)
    def _tune_launched(self, m: msg.TuneLaunched) -> None:
        self.tune_dir = m.tune_dir
        if self.tune_state == "preparing":
            self._set_tune("running", f"tuning in {m.tune_dir}")
        self._load_tune(m.tune_dir)

    @on(msg.TuneStaged)
    def _tune_staged(self, m: msg.TuneStaged) -> None:
        self.tune_stage_at = self.clock()
        self.tune_stage = (m.stage, m.spent_s, m.budget_s)
        if self.tune_state in ("preparing", "running"):
            self._set_tune("running", f"{m.stage}: {m.text}")
        if self.tune_dir:
            self._load_tune(self.tune_dir)

    @on(msg.TuneCandidateChanged)
    def _tune_candidate(self, m: msg.TuneCandidateChanged) -> None:
        self.tune_candidates = {**self.tune_candidates, m.config: m.status}
        if m.status in RELOAD_ON and self.tune_dir:
            self._load_tune(self.tune_dir)

    @on(msg.TuneProgressed)
    def _tune_progressed(self, m: msg.TuneProgressed) -> None:
        self.tune_progress = m.snapshot

    @on(msg.TuneFinished)
    def _tune_finished(self, m: msg.TuneFinished) -> None:
        self.tune_dir = m.tune_dir
        self._set_tune(
            "done" if m.complete else "failed",
            f"{'finished' if m.complete else 'stopped'} ({m.stop_reason}): {m.starts} server starts "
            f"for a grid of {m.grid_size}; w adds the winner to the plan"
            + ("" if m.complete else ", r resumes"),
        )
        self._load_tune(m.tune_dir)
        self.action_refresh_tunes()

    @on(msg.TuneEnded)
    def _tune_ended(self, m: msg.TuneEnded) -> None:
        # the sub-runs stop their servers while unwinding; rows still up are settled here (as for a run)
        self.servers = {
            n: (
                v.with_state("stopped", None, None, "", "tune", self.clock())
                if v.source == "tune" and v.state not in ("stopped", "failed")
                else v
            )
            for n, v in self.servers.items()
        }
        if m.status == "cancelled":
            self._set_tune(
                "cancelled",
                "cancelled: servers stopped, measurements kept"
                + (f"; r resumes {m.tune_dir}" if m.tune_dir else ""),
            )
        elif m.status == "crashed":
            self._set_tune("failed", f"the tune stopped with an error: {m.detail}")
            self.notify(m.detail, title="Tune failed", severity="error", timeout=15)
        if m.tune_dir:
            self._load_tune(m.tune_dir)
        self.action_refresh_tunes()

    @on(msg.TaskFailed)
    def _tune_task_failed(self, m: msg.TaskFailed) -> None:
        if m.what == "tune":
            self._set_tune("failed", f"the tune could not start: {m.error}")

    @work(thread=True, group="tune-load", exclusive=True, exit_on_error=False)
    def _load_tune(self, tune_dir: str) -> None:
        from harness.studies.tune_view import is_tune_dir, load_tune

        if is_tune_dir(tune_dir):
            self.post_message(msg.TuneLoaded(load_tune(tune_dir)))

    @on(msg.TuneLoaded)
    def _tune_loaded(self, m: msg.TuneLoaded) -> None:
        if m.view.tune_dir == self.tune_dir or self.tune_dir is None:
            self.tune_dir = m.view.tune_dir
            self.tune_view = m.view

    @on(msg.TuneOpenRequested)
    def _tune_open(self, m: msg.TuneOpenRequested) -> None:
        if self.tune_active():
            self.notify("a tune is going: its own directory is on display", severity="warning")
            return
        self.tune_dir = m.tune_dir
        self._load_tune(m.tune_dir)

    # ---- --write-plan ------------------------------------------------------------------------------------------
    @on(msg.WriteWinnerRequested)
    def _write_winner(self) -> None:
        view = self.tune_view
        if view is None or not view.finished:
            self.notify("no finished tune on display to take a winner from", severity="warning")
        elif not self.plan_path:
            self.notify(
                "the demo plan has no file to add a variant to: start with a plan file", severity="warning"
            )
        else:
            self._write(self.plan_path, view.tune_dir)

    @work(thread=True, group="tune-write", exit_on_error=False)
    def _write(self, plan_path: str, tune_dir: str) -> None:
        from harness.studies.tune_view import write_winner

        self.post_message(msg.WinnerWritten(plan_path, write_winner(plan_path, tune_dir)))

    @on(msg.WinnerWritten)
    def _winner_written(self, m: msg.WinnerWritten) -> None:
        if m.variant:
            self.notify(f"added variant {m.variant} to {m.plan_path}", title="plan updated")
        else:
            self.notify("no measured winner to add to the plan", severity="warning")
