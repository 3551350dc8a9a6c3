"""The App's run half: a run asked for in the Run section (or a checkpoint's evaluation) goes to its own
process (RunProcess; RunThread for an injected event source in tests); its messages become the run state
(the App's run_state, run_status, progress, ...), the live progress and, at the end, the Results section's
table."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

from harness.analysis.failures import describe_failure
from harness.analysis.runs import narrow_plan, run_info
from harness.analysis.summary import summarise_dir
from harness.bench.arrivals import load_label
from harness.common.errors import InputError
from harness.tui import messages as msg
from harness.tui.half import Half, handles, work
from harness.tui.runproc import RUN_MULTI, RUN_PLAN, RunProcess
from harness.tui.runthread import RunThread
from harness.tui.state import ProgressSnapshot, verdict_lines

ACTIVE_RUN = ("preparing", "running", "cancelling")


def describe(exc: BaseException) -> str:
    if isinstance(exc, InputError) and not exc.path:
        return f"{exc.field}: {exc.message}" if exc.field else exc.message
    return str(exc) or type(exc).__name__


def _where(p: ProgressSnapshot) -> str:
    """Where a cancelled run stopped: inside a phase, or after the last one that finished."""
    if p.phase_total and p.phase_done >= p.phase_total:
        return f" after {p.variant} {p.phase}"
    return f" during {p.variant} {p.phase} ({p.phase_done}/{p.phase_total} of that phase)"


class RunControl(Half):
    # the run going uses the stopping rule (run.stop: decided): verdicts come at its looks
    run_decides = False
    _verdict_seq = 0
    _verdicts_shown = 0

    @handles(msg.RunRequested)
    def _run_requested(self, m: msg.RunRequested) -> None:
        app = self.app
        if app.plan is None:
            app.notify("the plan is not loaded yet", severity="warning")
            return
        try:
            plan = narrow_plan(app.plan, m.choice)
        except InputError as exc:
            app.notify(describe(exc), title="Cannot start the run", severity="error")
            return
        keep = m.choice.keep_servers
        self.run_decides = plan.run.stop == "decided"
        if app.run_events is None:  # the real runner: in its own process, out of reach of the UI's GIL
            multi = bool(plan.targets)  # every node opens its own target, as `draftbench run` does
            self.start_run(
                RunProcess(
                    RUN_MULTI if multi else RUN_PLAN,
                    (plan,),
                    {"results_dir": str(app.results_dir), "keep_servers": keep},
                    post=app.post_message,
                    target_factory=None if multi else app.target_factory,
                    flush_interval=app.flush_interval,
                )
            )
        else:
            self.start_run(
                RunThread(
                    app.run_events,
                    plan,
                    results_dir=app.results_dir,
                    keep_servers=keep,
                    post=app.post_message,
                    target_factory=app.target_factory,
                    flush_interval=app.flush_interval,
                )
            )

    @handles(msg.ResumeRequested)
    def _resume_requested(self, m: msg.ResumeRequested) -> None:
        """The run's plan again (cut to what it measured), its finished phases skipped: `run --resume`."""
        from harness.bench.resume import resume_plan  # loads the engines (aiohttp): not at the TUI's start

        app = self.app
        if run_info(m.run_dir).status == "complete":
            app.notify("that run is complete: nothing to resume", severity="warning")
            return
        try:
            plan = resume_plan(m.run_dir).plan  # its own plan.resolved.json
        except InputError as exc:
            app.notify(describe(exc), title="Cannot resume", severity="error")
            return
        self.run_decides = plan.run.stop == "decided"
        kwargs = {"results_dir": str(app.results_dir), "keep_servers": False, "resume_dir": m.run_dir}
        multi = bool(plan.targets) or (Path(m.run_dir) / "nodes.json").exists()
        if app.run_events is None:
            run: RunThread | RunProcess = RunProcess(RUN_MULTI if multi else RUN_PLAN, (plan,), kwargs,
                                                     post=app.post_message,
                                                     target_factory=None if multi else app.target_factory,
                                                     flush_interval=app.flush_interval)
        else:
            run = RunThread(partial(app.run_events, resume_dir=m.run_dir), plan, results_dir=app.results_dir,
                            keep_servers=False, post=app.post_message, target_factory=app.target_factory,
                            flush_interval=app.flush_interval)
        self.start_run(run)

    def start_run(self, run: RunThread | RunProcess) -> None:
        """Every run the TUI starts goes through here (a plan's comparison, a checkpoint's evaluation)."""
        app = self.app
        if app.run_state in ACTIVE_RUN:
            app.notify("a run is already going", severity="warning")
            return
        if app.tune_control.active():
            app.notify("a tune owns the servers now: let it finish or cancel it first", severity="warning")
            return
        app.run_thread = run
        app.progress = ProgressSnapshot()
        app.nodes = {}
        app.run_verdicts = {}
        self.set_state("preparing",
                       "preparing: stopping the Servers section's servers, then starting the run")
        self._run(run)

    @work(group="run", exclusive=True)
    async def _run(self, thread: RunThread | RunProcess) -> None:
        app = self.app
        if app.fleet is not None and any(
            v.source == "fleet" and v.state != "stopped" for v in app.servers.values()
        ):
            await app.fleet.stop_all()  # the run starts its own servers (ports, GPU memory)
        await asyncio.to_thread(thread.run)

    @handles(msg.CancelRequested)
    def _cancel(self, m: msg.CancelRequested) -> None:
        app = self.app
        if app.run_thread is not None and app.run_state in ("preparing", "running"):
            self.set_state(
                "cancelling",
                "cancelling: stopping the run's servers"
                + (" (kept running)" if app.run_thread.keep_servers else ""),
            )
            app.run_thread.cancel()

    def set_state(self, state: str, text: str) -> None:
        self.app.run_status = text
        self.app.run_state = state

    @handles(msg.RunLaunched)
    def _run_launched(self, m: msg.RunLaunched) -> None:
        app = self.app
        app.run_dir = m.run_dir
        app.run_variants = m.variants
        app.run_failures = {}
        sim = "  SIMULATED" if m.simulated else ""
        if app.run_state != "cancelling":
            self.set_state(
                "running", f"running {m.run_id}: {len(m.variants)} variants, {m.total} requests{sim}"
            )

    @handles(msg.NodeStateChanged)
    def _node_state(self, m: msg.NodeStateChanged) -> None:
        app = self.app
        app.nodes = {**app.nodes, m.node: (m.state, m.variants, m.detail)}
        if m.state in ("lost", "moved"):
            app.notify(f"{m.node}: {m.state}" + (f": {m.detail}" if m.detail else ""), title="node",
                       severity="error" if m.state == "lost" else "warning", timeout=12)

    @handles(msg.PhaseBegan)
    def _phase(self, m: msg.PhaseBegan) -> None:
        if self.app.run_state == "running":
            self.app.run_status = (
                f"running: {m.variant} {m.phase} ({m.requests} request{'s' if m.requests != 1 else ''} "
                f"{load_label(m.phase, m.concurrency)})"
            )

    @handles(msg.ServerStateChanged)
    def _run_server_state(self, m: msg.ServerStateChanged) -> None:
        """The status line follows the run's servers between phases (a start takes minutes on a GPU)."""
        if m.source != "run" or self.app.run_state != "running":
            return
        words = {"starting": f"starting {m.variant}'s server",
                 "adopted": f"{m.variant}: taking over a kept server",
                 "ready": f"{m.variant}'s server is ready: warming up",
                 "stopping": f"stopping {m.variant}'s server"}
        if m.state in words:
            self.app.run_status = f"running: {words[m.state]}"

    @handles(msg.RunNote)
    def _run_note(self, m: msg.RunNote) -> None:
        if self.app.run_state == "running":
            self.app.run_status = f"running: {m.text}"
        if m.look and self.app.run_dir:
            self._judge(self.app.run_dir, None)

    @handles(msg.ProgressUpdated)
    def _progress(self, m: msg.ProgressUpdated) -> None:
        self.app.progress = m.snapshot

    # ---- the live verdict: the summary's own rule on the records so far ------------------------------------
    def _judge(self, run_dir: str, variant: str | None) -> None:
        """After a look of the stopping rule (every finished row), or a finished variant of a fixed design:
        summarise the run directory as `draftbench summary` would and show those verdicts. Not for a run over
        several nodes (its summary is stacked from the nodes' at the end)."""
        if (Path(run_dir) / "nodes.json").exists():
            return
        self._verdict_seq += 1
        self._summarise_verdicts(run_dir, variant, self._verdict_seq)

    @work(thread=True, group="verdicts")
    def _summarise_verdicts(self, run_dir: str, variant: str | None, seq: int) -> None:
        try:
            rows = summarise_dir(run_dir).to_dict("records")
        except Exception:  # noqa: BLE001 (records mid-write; the final table, summarised at the end, says it)
            return
        self.app.post_message(msg.VerdictsUpdated(verdict_lines(rows, None if variant is None else [variant]),
                                                  seq))

    @handles(msg.VerdictsUpdated)
    def _verdicts(self, m: msg.VerdictsUpdated) -> None:
        if m.seq >= self._verdicts_shown:
            self._verdicts_shown = m.seq
            self.app.run_verdicts = {**self.app.run_verdicts, **m.verdicts}

    @handles(msg.VariantFinished)
    def _variant_finished(self, m: msg.VariantFinished) -> None:
        app = self.app
        if m.ok:
            variants = app.plan.variants if app.plan is not None else []
            bases = {v.name for v in variants if v.is_baseline}  # nothing to judge
            if not self.run_decides and app.run_dir and m.variant in app.run_variants \
                    and m.variant not in bases:
                self._judge(app.run_dir, m.variant)
            return
        view = app.servers.get(m.variant)
        lines = (view.detail if view else "").splitlines()
        app.run_failures = {**app.run_failures, m.variant: describe_failure(m.detail or "failed", lines)}
        app.notify(f"{m.variant}: {app.run_failures[m.variant]}", title="variant failed", severity="error")

    @handles(msg.RunFinished)
    def _run_finished(self, m: msg.RunFinished) -> None:
        app = self.app
        ok = m.complete
        failures = app.run_failures
        every = bool(failures) and len(failures) >= max(len(app.run_variants), 1)
        head = "every variant failed" if every else f"{m.failures} variant(s) failed"
        reasons = "".join(f"\n  {v}: {why}" for v, why in failures.items())
        self.set_state("done" if ok else "failed",
                       f"finished: {m.run_dir}" if ok else f"{head}: {m.run_dir}{reasons}")
        app.notify(
            "run complete: press 3 for the results" if ok else "run finished with failures",
            severity="information" if ok else "warning",
        )
        self._after_run(m.run_dir)

    @handles(msg.RunCancelled)
    def _run_cancelled(self, m: msg.RunCancelled) -> None:
        app = self.app
        keep = app.run_thread is not None and app.run_thread.keep_servers
        # the runner stops (or keeps) its servers while unwinding; its last ServerState events are not
        # delivered once the event stream is closed, so the rows are settled here
        app.servers = {
            n: (
                v.with_state("kept" if keep else "stopped", None, None, "", "run", app.clock())
                if v.source == "run" and v.state not in ("stopped", "failed")
                else v
            )
            for n, v in app.servers.items()
        }
        self.set_state(
            "cancelled",
            "cancelled" + (_where(p) if (p := app.progress) is not None and p.variant else "")
            + ": finished requests are kept"
            + (f" in {m.run_dir}; R in Results resumes it" if m.run_dir else ""),
        )
        if m.run_dir:
            self._after_run(m.run_dir)

    @handles(msg.RunCrashed)
    def _run_crashed(self, m: msg.RunCrashed) -> None:
        self.set_state("failed", f"the run stopped with an error: {m.error}")
        self.app.notify(m.error, title="Run failed", severity="error", timeout=15)
        if m.run_dir:
            self._after_run(m.run_dir)

    def _after_run(self, run_dir: str) -> None:
        results = self.app.results_control
        results.refresh_runs()
        results.open_run(run_dir)
        results.refresh_drafters()  # Retrain's drafters: their runs and best numbers include this one
