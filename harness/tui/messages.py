"""Every message of the TUI, in one place: what happened (past tense, posted by workers to the App) and
what the user asked for (intents, posted by screens to the App). The App hands each to the half that handles
it (harness.tui.half.handles); the halves own every state change. The Tune screen's messages are written in
harness.tui.tune_messages and read from here like the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.tui.half import AppMessage
from harness.tui.state import ProgressSnapshot, RunChoice
from harness.tui.tune_messages import (  # noqa: F401  (the index: the Tune screen's messages from here too)
    TuneCancelRequested,
    TuneCandidateChanged,
    TuneEnded,
    TuneFinished,
    TuneLaunched,
    TuneLoaded,
    TuneOpenRequested,
    TuneProgressed,
    TuneRequested,
    TuneResumeRequested,
    TunesListed,
    TuneStaged,
    WinnerWritten,
    WriteWinnerRequested,
)

if TYPE_CHECKING:
    from harness.analysis.compare import Comparison
    from harness.analysis.runs import LoadedRun
    from harness.inputs.config import Plan
    from harness.retrain.jobs import Job
    from harness.retrain.progress import TrainProgress
    from harness.retrain.regen_rows import RegenProgress


# ---- plan -------------------------------------------------------------------------------------------


class PlanLoaded(AppMessage):
    def __init__(self, plan: Plan, path: str) -> None:
        super().__init__()
        self.plan = plan
        self.path = path


class PlanFailed(AppMessage):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


# ---- servers (from the fleet or from a run) -----------------------------------------------------------


class ServerStateChanged(AppMessage):
    def __init__(
        self, variant: str, state: str, port: int | None, pgid: int | None, detail: str, source: str
    ) -> None:
        super().__init__()
        self.variant, self.state, self.port, self.pgid = variant, state, port, pgid
        self.detail = detail
        self.source = source  # "fleet" | "run"


class ServerLogLines(AppMessage):
    """A coalesced batch of one server's log lines (a few per second at most)."""

    def __init__(self, variant: str, lines: tuple[str, ...]) -> None:
        super().__init__()
        self.variant = variant
        self.lines = lines


class AlarmRaised(AppMessage):
    def __init__(self, variant: str, severity: str, code: str, text: str) -> None:
        super().__init__()
        self.variant, self.severity, self.code, self.text = variant, severity, code, text


class ServersAdopted(AppMessage):
    """Servers an earlier draftbench left running, now the Servers section's: seconds each has been up."""

    def __init__(self, uptimes: dict[str, float]) -> None:
        super().__init__()
        self.uptimes = uptimes


class GpuMemorySampled(AppMessage):
    def __init__(self, mib: dict[str, int]) -> None:
        super().__init__()
        self.mib = mib


# ---- run --------------------------------------------------------------------------------------------


class RunLaunched(AppMessage):
    def __init__(self, run_id: str, run_dir: str, variants: tuple[str, ...], total: int, simulated: bool):
        super().__init__()
        self.run_id, self.run_dir, self.variants = run_id, run_dir, variants
        self.total, self.simulated = total, simulated


class NodeStateChanged(AppMessage):
    """One node of a plan with several targets: running | done | lost | moved, with its variants."""

    def __init__(self, node: str, state: str, variants: tuple[str, ...], detail: str) -> None:
        super().__init__()
        self.node, self.state, self.variants, self.detail = node, state, variants, detail


class PhaseBegan(AppMessage):
    def __init__(self, variant: str, phase: str, concurrency: int, requests: int) -> None:
        super().__init__()
        self.variant, self.phase, self.concurrency, self.requests = variant, phase, concurrency, requests


class ProgressUpdated(AppMessage):
    """Coalesced RequestDone and LogWindow events: one immutable snapshot per flush."""

    def __init__(self, snapshot: ProgressSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class PhaseFinished(AppMessage):
    def __init__(self, variant: str, phase: str, wall_s: float, server_accept_len: float | None) -> None:
        super().__init__()
        self.variant, self.phase, self.wall_s = variant, phase, wall_s
        self.server_accept_len = server_accept_len


class RunNote(AppMessage):
    """A line about where the run is, for its status line: a phase sized (harness.bench.sizing) or a look of
    the stopping rule (harness.bench.decide), in the CLI's own words (harness.cli.progress)."""

    def __init__(self, variant: str, text: str, look: bool = False) -> None:
        super().__init__()
        self.variant, self.text, self.look = variant, text, look


class VerdictsUpdated(AppMessage):
    """Each finished variant's verdicts so far, as the summary judges them (harness.tui.state.verdict_lines);
    `seq` orders the workers that computed them (a late one is stale)."""

    def __init__(self, verdicts: dict[str, str], seq: int) -> None:
        super().__init__()
        self.verdicts, self.seq = verdicts, seq


class VariantFinished(AppMessage):
    def __init__(self, variant: str, ok: bool, detail: str) -> None:
        super().__init__()
        self.variant, self.ok, self.detail = variant, ok, detail


class RunFinished(AppMessage):
    def __init__(self, run_dir: str, complete: bool, failures: int, summary_csv: str) -> None:
        super().__init__()
        self.run_dir, self.complete, self.failures, self.summary_csv = (
            run_dir,
            complete,
            failures,
            summary_csv,
        )


class RunCancelled(AppMessage):
    def __init__(self, run_dir: str | None) -> None:
        super().__init__()
        self.run_dir = run_dir


class RunCrashed(AppMessage):
    def __init__(self, error: str, run_dir: str | None) -> None:
        super().__init__()
        self.error = error
        self.run_dir = run_dir


# ---- results and drafters ------------------------------------------------------------------------------


class RunsListed(AppMessage):
    def __init__(self, runs: tuple[Any, ...]) -> None:
        super().__init__()
        self.runs = runs  # harness.analysis.runs.RunInfo, newest first


class ResultsLoaded(AppMessage):
    def __init__(self, result: LoadedRun) -> None:
        super().__init__()
        self.result = result


class ComparisonLoaded(AppMessage):
    def __init__(self, comparison: Comparison) -> None:
        super().__init__()
        self.comparison = comparison


class Exported(AppMessage):
    def __init__(self, path: str, rows: int) -> None:
        super().__init__()
        self.path, self.rows = path, rows


class DraftersListed(AppMessage):
    def __init__(self, drafters: tuple[Any, ...]) -> None:
        super().__init__()
        self.drafters = drafters  # harness.analysis.runs.DrafterInfo


class TaskFailed(AppMessage):
    """A worker outside the run failed (loading a run, exporting, a server action): shown, never fatal."""

    def __init__(self, what: str, error: str) -> None:
        super().__init__()
        self.what, self.error = what, error


# ---- intents (screens -> App) ------------------------------------------------------------------------------


class ServerActionRequested(AppMessage):
    def __init__(self, action: str, variants: tuple[str, ...]) -> None:
        super().__init__()
        self.action = action  # "start" | "stop" | "restart"
        self.variants = variants


class RunRequested(AppMessage):
    def __init__(self, choice: RunChoice) -> None:
        super().__init__()
        self.choice = choice


class CancelRequested(AppMessage):
    pass


class OpenRunRequested(AppMessage):
    def __init__(self, run_dir: str) -> None:
        super().__init__()
        self.run_dir = run_dir


class CompareRequested(AppMessage):
    def __init__(self, run_a: str, run_b: str) -> None:
        super().__init__()
        self.run_a, self.run_b = run_a, run_b


class PreflightReported(AppMessage):
    """`draftbench check` from the palette: the findings (harness.common.findings.Finding), and as the CLI
    prints them."""

    def __init__(self, text: str, errors: int, findings: tuple = ()) -> None:
        super().__init__()
        self.text, self.errors, self.findings = text, errors, findings


class ResumeRequested(AppMessage):
    """Resume an interrupted run (its directory) from the Results section."""

    def __init__(self, run_dir: str) -> None:
        super().__init__()
        self.run_dir = run_dir


class ExportRequested(AppMessage):
    """Write a table as CSV: "summary" (summary.csv as is), "categories" or "compare"."""

    def __init__(self, path: str, what: str = "summary") -> None:
        super().__init__()
        self.path, self.what = path, what


# ---- retrain ---------------------------------------------------------------------------------------------


class JobsListed(AppMessage):
    def __init__(self, jobs: tuple[Any, ...]) -> None:
        super().__init__()
        self.jobs = jobs  # harness.retrain.jobs.Job, newest first


class JobUpdated(AppMessage):
    def __init__(self, job: Job) -> None:
        super().__init__()
        self.job = job


class JobProgressed(AppMessage):
    def __init__(self, progress: TrainProgress) -> None:
        super().__init__()
        self.progress = progress


class CheckpointsListed(AppMessage):
    def __init__(self, job_id: str, checkpoints: tuple[Any, ...]) -> None:
        super().__init__()
        self.job_id = job_id
        self.checkpoints = checkpoints  # harness.retrain.checkpoints.Checkpoint


class RegenProgressed(AppMessage):
    def __init__(self, progress: RegenProgress) -> None:
        super().__init__()
        self.progress = progress


class LoopEnded(AppMessage):
    """A retrain loop's or drift check's process ended: "done" | "cancelled" | "crashed"
    (harness.tui.loop_control)."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__()
        self.status, self.detail = status, detail


class RetrainNote(AppMessage):
    """A step of a checkpoint's evaluation before its benchmark starts (registered, preflight done)."""

    def __init__(self, text: str, ok: bool = True) -> None:
        super().__init__()
        self.text = text
        self.ok = ok
