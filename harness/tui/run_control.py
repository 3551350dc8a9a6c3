"""The App's run half: a run asked for in the Run section (or a checkpoint's evaluation) goes to its own
process (RunProcess; RunThread for an injected event source in tests); its messages become the run state,
the live progress and, at the end, the Results section's table."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App
from textual.reactive import var

from harness.bench.arrivals import load_label
from harness.common.errors import InputError
from harness.tui import messages as msg
from harness.tui.runproc import RUN_MULTI, RUN_PLAN, RunProcess
from harness.tui.runthread import RunEvents, RunThread
from harness.tui.state import ProgressSnapshot

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


class RunControl(App[int]):
    run_state: var[str] = var("idle")  # idle | preparing | running | cancelling | done | failed | cancelled
    run_status: var[str] = var("idle: choose suites, variants, concurrency and max tokens, then ctrl+r")
    progress: var[ProgressSnapshot | None] = var(None)
    run_failures: var[dict[str, str]] = var(dict)  # variant -> why it failed, this run (analysis.failures)
    nodes: var[dict[str, tuple[str, tuple[str, ...], str]]] = var(dict)  # node -> (state, variants, detail)
    run_verdicts: var[dict[str, str]] = var(dict)  # finished variant -> its verdicts so far (verdict_lines)
    run_decides = False  # the run going uses the stopping rule (run.stop: decided): verdicts come at its looks
    _verdict_seq = 0

    # set by the App
    results_dir: Path
    run_events: RunEvents | None
    target_factory: Callable[[], Any] | None
    flush_interval: float
    clock: Callable[[], float]
    run_thread: RunThread | RunProcess | None
    run_variants: tuple[str, ...]
    tune_active: Callable[[], bool]  # TuneControl's

    @on(msg.RunRequested)
    def _run_requested(self, m: msg.RunRequested) -> None:
        from harness.analysis.runs import narrow_plan

        if self.plan is None:
            self.notify("the plan is not loaded yet", severity="warning")
            return
        try:
            plan = narrow_plan(self.plan, m.choice)
        except InputError as exc:
            self.notify(describe(exc), title="Cannot start the run", severity="error")
            return
        keep = m.choice.keep_servers
        self.run_decides = plan.run.stop == "decided"
        if self.run_events is None:  # the real runner: in its own process, out of reach of the UI's GIL
            multi = bool(plan.targets)  # every node opens its own target, as `draftbench run` does
            self.start_run(
                RunProcess(
                    RUN_MULTI if multi else RUN_PLAN,
                    (plan,),
                    {"results_dir": str(self.results_dir), "keep_servers": keep},
                    post=self.post_message,
                    target_factory=None if multi else self.target_factory,
                    flush_interval=self.flush_interval,
                )
            )
        else:
            self.start_run(
                RunThread(
                    self.run_events,
                    plan,
                    results_dir=self.results_dir,
                    keep_servers=keep,
                    post=self.post_message,
                    target_factory=self.target_factory,
                    flush_interval=self.flush_interval,
                )
            )

    @on(msg.ResumeRequested)
    def _resume_requested(self, m: msg.ResumeRequested) -> None:
        """The run's plan again (cut to what it measured), its finished phases skipped: `run --resume`."""
        from functools import partial

        from harness.analysis.runs import run_info
        from harness.bench.resume import resume_plan

        if run_info(m.run_dir).status == "complete":
            self.notify("that run is complete: nothing to resume", severity="warning")
            return
        try:
            plan = resume_plan(m.run_dir).plan  # its own plan.resolved.json
        except InputError as exc:
            self.notify(describe(exc), title="Cannot resume", severity="error")
            return
        self.run_decides = plan.run.stop == "decided"
        kwargs = {"results_dir": str(self.results_dir), "keep_servers": False, "resume_dir": m.run_dir}
        multi = bool(plan.targets) or (Path(m.run_dir) / "nodes.json").exists()
        if self.run_events is None:
            run: RunThread | RunProcess = RunProcess(RUN_MULTI if multi else RUN_PLAN, (plan,), kwargs,
                                                     post=self.post_message,
                                                     target_factory=None if multi else self.target_factory,
                                                     flush_interval=self.flush_interval)
        else:
            run = RunThread(partial(self.run_events, resume_dir=m.run_dir), plan, results_dir=self.results_dir,
                            keep_servers=False, post=self.post_message, target_factory=self.target_factory,
                            flush_interval=self.flush_interval)
        self.start_run(run)

    def start_run(self, run: RunThread | RunProcess) -> None:
        """Every run the TUI starts goes through here (a plan's comparison, a checkpoint's evaluation)."""
        if self.run_state in ACTIVE_RUN:
            self.notify("a run is already going", severity="warning")
            return
        if self.tune_active():
            self.notify("a tune owns the servers now: let it finish or cancel it first", severity="warning")
            return
        self.run_thread = run
        self.progress = ProgressSnapshot()
        self.nodes = {}
        self.run_verdicts = {}
        self._set_run("preparing", "preparing: stopping the Servers section's servers, then starting the run")
        self._run(run)

    @work(group="run", exclusive=True, exit_on_error=False)
    async def _run(self, thread: RunThread | RunProcess) -> None:
        if self.fleet is not None and any(
            v.source == "fleet" and v.state != "stopped" for v in self.servers.values()
        ):
            await self.fleet.stop_all()  # the run starts its own servers (ports, GPU memory)
        await asyncio.to_thread(thread.run)

    @on(msg.CancelRequested)
    def _cancel(self) -> None:
        if self.run_thread is not None and self.run_state in ("preparing", "running"):
            self._set_run(
                "cancelling",
                "cancelling: stopping the run's servers"
                + (" (kept running)" if self.run_thread.keep_servers else ""),
            )
            self.run_thread.cancel()

    def _set_run(self, state: str, text: str) -> None:
        self.run_status = text
        self.run_state = state

    @on(msg.RunLaunched)
    def _run_launched(self, m: msg.RunLaunched) -> None:
        self.run_dir = m.run_dir
        self.run_variants = m.variants
        self.run_failures = {}
        sim = "  SIMULATED" if m.simulated else ""
        if self.run_state != "cancelling":
            self._set_run(
                "running", f"running {m.run_id}: {len(m.variants)} variants, {m.total} requests{sim}"
            )

    @on(msg.NodeStateChanged)
    def _node_state(self, m: msg.NodeStateChanged) -> None:
        self.nodes = {**self.nodes, m.node: (m.state, m.variants, m.detail)}
        if m.state in ("lost", "moved"):
            self.notify(f"{m.node}: {m.state}" + (f": {m.detail}" if m.detail else ""), title="node",
                        severity="error" if m.state == "lost" else "warning", timeout=12)

    @on(msg.PhaseBegan)
    def _phase(self, m: msg.PhaseBegan) -> None:
        if self.run_state == "running":
            self.run_status = (
                f"running: {m.variant} {m.phase} ({m.requests} request{'s' if m.requests != 1 else ''} "
                f"{load_label(m.phase, m.concurrency)})"
            )

    @on(msg.ServerStateChanged)
    def _run_server_state(self, m: msg.ServerStateChanged) -> None:
        """The status line follows the run's servers between phases (a start takes minutes on a GPU)."""
        if m.source != "run" or self.run_state != "running":
            return
        words = {"starting": f"starting {m.variant}'s server", "adopted": f"{m.variant}: taking over a kept server",
                 "ready": f"{m.variant}'s server is ready: warming up", "stopping": f"stopping {m.variant}'s server"}
        if m.state in words:
            self.run_status = f"running: {words[m.state]}"

    @on(msg.RunNote)
    def _run_note(self, m: msg.RunNote) -> None:
        if self.run_state == "running":
            self.run_status = f"running: {m.text}"
        if m.look and self.run_dir:
            self._judge(self.run_dir, None)

    @on(msg.ProgressUpdated)
    def _progress(self, m: msg.ProgressUpdated) -> None:
        self.progress = m.snapshot

    # ---- the live verdict: the summary's own rule on the records so far ------------------------------------
    def _judge(self, run_dir: str, variant: str | None) -> None:
        """After a look of the stopping rule (every finished row), or a finished variant of a fixed design:
        summarise the run directory as `draftbench summary` would and show those verdicts. Not for a run over
        several nodes (its summary is stacked from the nodes' at the end)."""
        if (Path(run_dir) / "nodes.json").exists():
            return
        self._verdict_seq += 1
        self._summarise_verdicts(run_dir, variant, self._verdict_seq)

    @work(thread=True, group="verdicts", exit_on_error=False)
    def _summarise_verdicts(self, run_dir: str, variant: str | None, seq: int) -> None:
        from harness.analysis.summary import summarise_dir
        from harness.tui.state import verdict_lines

        try:
            rows = summarise_dir(run_dir).to_dict("records")
        except Exception:  # noqa: BLE001 (records mid-write; the final table, summarised at the end, says it)
            return
        self.post_message(msg.VerdictsUpdated(verdict_lines(rows, None if variant is None else [variant]), seq))

    @on(msg.VerdictsUpdated)
    def _verdicts(self, m: msg.VerdictsUpdated) -> None:
        if m.seq >= getattr(self, "_verdicts_shown", 0):
            self._verdicts_shown = m.seq
            self.run_verdicts = {**self.run_verdicts, **m.verdicts}

    @on(msg.VariantFinished)
    def _variant_finished(self, m: msg.VariantFinished) -> None:
        if m.ok:
            bases = {v.name for v in getattr(self.plan, "variants", ()) if v.is_baseline}  # nothing to judge
            if not self.run_decides and self.run_dir and m.variant in self.run_variants and m.variant not in bases:
                self._judge(self.run_dir, m.variant)
            return
        view = self.servers.get(m.variant)
        from harness.analysis.failures import describe_failure

        lines = (view.detail if view else "").splitlines()
        self.run_failures = {**self.run_failures, m.variant: describe_failure(m.detail or "failed", lines)}
        self.notify(f"{m.variant}: {self.run_failures[m.variant]}", title="variant failed", severity="error")

    @on(msg.RunFinished)
    def _run_finished(self, m: msg.RunFinished) -> None:
        ok = m.complete
        failures = self.run_failures
        every = bool(failures) and len(failures) >= max(len(self.run_variants), 1)
        head = "every variant failed" if every else f"{m.failures} variant(s) failed"
        reasons = "".join(f"\n  {v}: {why}" for v, why in failures.items())
        self._set_run("done" if ok else "failed", f"finished: {m.run_dir}" if ok else f"{head}: {m.run_dir}{reasons}")
        self.notify(
            "run complete: press 3 for the results" if ok else "run finished with failures",
            severity="information" if ok else "warning",
        )
        self._after_run(m.run_dir)

    @on(msg.RunCancelled)
    def _run_cancelled(self, m: msg.RunCancelled) -> None:
        keep = self.run_thread is not None and self.run_thread.keep_servers
        # the runner stops (or keeps) its servers while unwinding; its last ServerState events are not
        # delivered once the event stream is closed, so the rows are settled here
        self.servers = {
            n: (
                v.with_state("kept" if keep else "stopped", None, None, "", "run", self.clock())
                if v.source == "run" and v.state not in ("stopped", "failed")
                else v
            )
            for n, v in self.servers.items()
        }
        self._set_run(
            "cancelled",
            "cancelled" + (_where(p) if (p := self.progress) is not None and p.variant else "")
            + ": finished requests are kept" + (f" in {m.run_dir}; R in Results resumes it" if m.run_dir else ""),
        )
        if m.run_dir:
            self._after_run(m.run_dir)

    @on(msg.RunCrashed)
    def _run_crashed(self, m: msg.RunCrashed) -> None:
        self._set_run("failed", f"the run stopped with an error: {m.error}")
        self.notify(m.error, title="Run failed", severity="error", timeout=15)
        if m.run_dir:
            self._after_run(m.run_dir)

    def _after_run(self, run_dir: str) -> None:
        self.action_refresh_runs()
        self._load_run(run_dir)
        self.action_refresh_drafters()  # Retrain's drafters: their runs and best numbers include this one
