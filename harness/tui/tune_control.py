"""The App's tune half: `draftbench tune` (harness.studies.tune) in the run's own child process, like a run
(runchild.py / runproc.py): its events become the tune state (the App's tune_state, tune_view, ...), the
sub-runs' servers show in Servers, and the
tune directory is re-read (harness.studies.tune_view) as configs are measured, so the grid fills as it goes.
harness.studies is imported where it is used: it loads the engines (aiohttp), which the TUI's start does
without."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message

from harness.common import events as ev
from harness.tui import messages as msg
from harness.tui.feed import FLUSH_INTERVAL_S, EventFeed
from harness.tui.half import Half, handles, work
from harness.tui.runproc import RunProcess
from harness.tui.state import TuneChoice

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.studies.tune import TuneOptions
    from harness.targets.base import Target

TUNE = "harness.studies.tune:tune"
ACTIVE_TUNE = ("preparing", "running", "cancelling")
RELOAD_ON = ("measured", "failed", "verified", "skipped")  # candidate states after which the files changed


def tune_options(choice: TuneChoice) -> TuneOptions:
    from harness.studies.tune import TuneOptions

    return TuneOptions(
        variant=choice.variant,
        budget_s=choice.budget_s,
        concurrency=choice.concurrency,
        steps=list(choice.steps),
        graphs=list(choice.graphs),
        cost_tokens=choice.cost_tokens,
        auto=choice.auto,
    )


class TuneFeed(EventFeed):
    """A tune's events as messages: its own three as Tune messages; the sub-runs' servers and logs as a run's
    (source "tune"), their requests as TuneProgressed. Sub-run boundaries stay inside: a tune is not a Run."""

    QUIET = (ev.RunStarted, ev.RunDone, ev.PhaseStarted, ev.PhaseDone, ev.VariantDone)

    def push(self, event: object) -> None:
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

    def _message(self, e: ev.TuneStage | ev.TuneCandidate | ev.TuneDone) -> msg.AppMessage:
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
    """harness.studies.tune:tune in runchild; ends with TuneEnded. SIGTERM stops every server the tune
    started."""

    def __init__(
        self,
        plan: Plan,
        options: TuneOptions,
        *,
        results_dir: str,
        resume_dir: str | None,
        post: Callable[[Message], Any],
        target_factory: Callable[[], Target] | None = None,
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


class TuneControl(Half):
    proc: TuneProcess | None = None  # the tune going or last gone

    def active(self) -> bool:
        return self.proc is not None and self.app.tune_state in ACTIVE_TUNE

    def refresh_tunes(self) -> None:
        self._list_tunes()

    @work(thread=True, group="tune-list", exclusive=True)
    def _list_tunes(self) -> None:
        from harness.studies.tune_view import list_tunes

        self.app.post_message(msg.TunesListed(tuple(str(p) for p in list_tunes(self.app.results_dir))))

    @handles(msg.TunesListed)
    def _tunes_listed(self, m: msg.TunesListed) -> None:
        self.app.tunes = m.dirs

    # ---- start, resume, cancel ---------------------------------------------------------------------------
    @handles(msg.TuneRequested)
    def _tune_requested(self, m: msg.TuneRequested) -> None:
        if self.app.plan is None:
            self.app.notify("the plan is not loaded yet", severity="warning")
            return
        self._start_tune(self.app.plan, tune_options(m.choice), None)

    @handles(msg.TuneResumeRequested)
    def _tune_resume(self, m: msg.TuneResumeRequested) -> None:
        from harness.studies.tune import read_tune_plan

        try:
            plan, opts = read_tune_plan(m.tune_dir)
        except (OSError, ValueError) as exc:
            self.app.notify(f"{m.tune_dir}: {exc}", title="Cannot resume", severity="error")
            return
        if m.budget_s is not None:
            opts.budget_s = m.budget_s
        self._start_tune(plan, opts, m.tune_dir)

    def _start_tune(self, plan: Plan, opts: TuneOptions, resume_dir: str | None) -> None:
        app = self.app
        if self.active():
            app.notify("a tune is already going", severity="warning")
            return
        if app.run_state in ("preparing", "running", "cancelling"):
            app.notify("a run owns the servers now: let it finish or cancel it first", severity="warning")
            return
        self.proc = TuneProcess(
            plan,
            opts,
            results_dir=str(app.results_dir),
            resume_dir=resume_dir,
            post=app.post_message,
            target_factory=app.target_factory,
            flush_interval=app.flush_interval,
        )
        app.tune_candidates, app.tune_progress, app.tune_view = {}, None, None
        app.tune_dir = resume_dir
        app.tune_stage_at = app.clock()  # the budget counts from the start, not from the first stage's word
        app.tune_stage = ("", 0.0, opts.budget_s)
        self._set_tune(
            "preparing",
            "preparing: stopping the Servers section's servers, then "
            + (f"resuming {resume_dir}" if resume_dir else f"tuning {opts.variant or 'the first drafter'}"),
        )
        self._tune(self.proc)

    @work(group="tune", exclusive=True)
    async def _tune(self, proc: TuneProcess) -> None:
        app = self.app
        if app.fleet is not None and any(
            v.source == "fleet" and v.state != "stopped" for v in app.servers.values()
        ):
            await app.fleet.stop_all()  # the tune starts its own servers (ports, GPU memory)
        await asyncio.to_thread(proc.run)

    @handles(msg.TuneCancelRequested)
    def _tune_cancel(self, m: msg.TuneCancelRequested) -> None:
        if self.proc is not None and self.app.tune_state in ("preparing", "running"):
            self._set_tune("cancelling", "cancelling: stopping every server the tune started")
            self.proc.cancel()

    async def stop_tune(self) -> None:
        """On quit: cancel a tune going and wait until its process has stopped its servers."""
        if self.active() and self.proc is not None:
            self.proc.cancel()
            workers = self.app.workers
            await workers.wait_for_complete([w for w in workers if w.group == "tune"])

    def _set_tune(self, state: str, text: str) -> None:
        self.app.tune_status = text
        self.app.tune_state = state

    # ---- what the tune says --------------------------------------------------------------------------------
    @handles(msg.TuneLaunched)
    def _tune_launched(self, m: msg.TuneLaunched) -> None:
        self.app.tune_dir = m.tune_dir
        if self.app.tune_state == "preparing":
            self._set_tune("running", f"tuning in {m.tune_dir}")
        self._load_tune(m.tune_dir)

    @handles(msg.TuneStaged)
    def _tune_staged(self, m: msg.TuneStaged) -> None:
        app = self.app
        app.tune_stage_at = app.clock()
        app.tune_stage = (m.stage, m.spent_s, m.budget_s)
        if app.tune_state in ("preparing", "running"):
            self._set_tune("running", f"{m.stage}: {m.text}")
        if app.tune_dir:
            self._load_tune(app.tune_dir)

    @handles(msg.TuneCandidateChanged)
    def _tune_candidate(self, m: msg.TuneCandidateChanged) -> None:
        app = self.app
        app.tune_candidates = {**app.tune_candidates, m.config: m.status}
        if m.status in RELOAD_ON and app.tune_dir:
            self._load_tune(app.tune_dir)

    @handles(msg.TuneProgressed)
    def _tune_progressed(self, m: msg.TuneProgressed) -> None:
        self.app.tune_progress = m.snapshot

    @handles(msg.TuneFinished)
    def _tune_finished(self, m: msg.TuneFinished) -> None:
        self.app.tune_dir = m.tune_dir
        self._set_tune(
            "done" if m.complete else "failed",
            f"{'finished' if m.complete else 'stopped'} ({m.stop_reason}): {m.starts} server starts "
            f"for a grid of {m.grid_size}; w adds the winner to the plan"
            + ("" if m.complete else ", r resumes"),
        )
        self._load_tune(m.tune_dir)
        self.refresh_tunes()

    @handles(msg.TuneEnded)
    def _tune_ended(self, m: msg.TuneEnded) -> None:
        app = self.app
        # the sub-runs stop their servers while unwinding; rows still up are settled here (as for a run)
        app.servers = {
            n: (
                v.with_state("stopped", None, None, "", "tune", app.clock())
                if v.source == "tune" and v.state not in ("stopped", "failed")
                else v
            )
            for n, v in app.servers.items()
        }
        if m.status == "cancelled":
            self._set_tune(
                "cancelled",
                "cancelled: servers stopped, measurements kept"
                + (f"; r resumes {m.tune_dir}" if m.tune_dir else ""),
            )
        elif m.status == "crashed":
            self._set_tune("failed", f"the tune stopped with an error: {m.detail}")
            app.notify(m.detail, title="Tune failed", severity="error", timeout=15)
        if m.tune_dir:
            self._load_tune(m.tune_dir)
        self.refresh_tunes()

    @handles(msg.TaskFailed)
    def _tune_task_failed(self, m: msg.TaskFailed) -> None:
        if m.what == "tune":
            self._set_tune("failed", f"the tune could not start: {m.error}")

    @work(thread=True, group="tune-load", exclusive=True)
    def _load_tune(self, tune_dir: str) -> None:
        from harness.studies.tune_view import is_tune_dir, load_tune

        if is_tune_dir(tune_dir):
            self.app.post_message(msg.TuneLoaded(load_tune(tune_dir)))

    @handles(msg.TuneLoaded)
    def _tune_loaded(self, m: msg.TuneLoaded) -> None:
        app = self.app
        if m.view.tune_dir == app.tune_dir or app.tune_dir is None:
            app.tune_dir = m.view.tune_dir
            app.tune_view = m.view

    @handles(msg.TuneOpenRequested)
    def _tune_open(self, m: msg.TuneOpenRequested) -> None:
        if self.active():
            self.app.notify("a tune is going: its own directory is on display", severity="warning")
            return
        self.app.tune_dir = m.tune_dir
        self._load_tune(m.tune_dir)

    # ---- --write-plan --------------------------------------------------------------------------------------
    @handles(msg.WriteWinnerRequested)
    def _write_winner(self, m: msg.WriteWinnerRequested) -> None:
        app = self.app
        view = app.tune_view
        if view is None or not view.finished:
            app.notify("no finished tune on display to take a winner from", severity="warning")
        elif not app.plan_path:
            app.notify(
                "the demo plan has no file to add a variant to: start with a plan file", severity="warning"
            )
        else:
            self._write(app.plan_path, view.tune_dir)

    @work(thread=True, group="tune-write")
    def _write(self, plan_path: str, tune_dir: str) -> None:
        from harness.studies.tune_view import write_winner

        self.app.post_message(msg.WinnerWritten(plan_path, write_winner(plan_path, tune_dir)))

    @handles(msg.WinnerWritten)
    def _winner_written(self, m: msg.WinnerWritten) -> None:
        if m.variant:
            self.app.notify(f"added variant {m.variant} to {m.plan_path}", title="plan updated")
        else:
            self.app.notify("no measured winner to add to the plan", severity="warning")
