"""The Tune screen's messages: what the tune in the run's child process did (harness.studies.tune's events,
turned into messages by harness.tui.tune_control) and what the screen asks for. Read through the index,
harness.tui.messages, like every other message."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.tui.half import AppMessage
from harness.tui.state import ProgressSnapshot, TuneChoice

if TYPE_CHECKING:
    from harness.studies.tune_view import TuneView


# ---- tune (harness.studies.tune in the run's child process) ------------------------------------------------


class TuneLaunched(AppMessage):
    """The tune's first sub-run started: its directory is known (new or resumed)."""

    def __init__(self, tune_dir: str) -> None:
        super().__init__()
        self.tune_dir = tune_dir


class TuneStaged(AppMessage):
    def __init__(self, stage: str, text: str, spent_s: float, budget_s: float) -> None:
        super().__init__()
        self.stage, self.text, self.spent_s, self.budget_s = stage, text, spent_s, budget_s


class TuneCandidateChanged(AppMessage):
    def __init__(self, config: str, status: str, expected_speedup: float | None, est_cost_s: float | None,
                 detail: str) -> None:
        super().__init__()
        self.config, self.status, self.detail = config, status, detail
        self.expected_speedup, self.est_cost_s = expected_speedup, est_cost_s


class TuneProgressed(AppMessage):
    """The current sub-run's requests (coalesced like ProgressUpdated)."""

    def __init__(self, snapshot: ProgressSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class TuneFinished(AppMessage):
    def __init__(self, tune_dir: str, complete: bool, stop_reason: str, starts: int, grid_size: int) -> None:
        super().__init__()
        self.tune_dir, self.complete, self.stop_reason = tune_dir, complete, stop_reason
        self.starts, self.grid_size = starts, grid_size


class TuneEnded(AppMessage):
    """The tune's process ended: status "done" | "cancelled" | "crashed" (after TuneFinished when done)."""

    def __init__(self, status: str, detail: str, tune_dir: str | None) -> None:
        super().__init__()
        self.status, self.detail, self.tune_dir = status, detail, tune_dir


class TuneLoaded(AppMessage):
    def __init__(self, view: TuneView) -> None:
        super().__init__()
        self.view = view


class TunesListed(AppMessage):
    def __init__(self, dirs: tuple[str, ...]) -> None:
        super().__init__()
        self.dirs = dirs  # tune directories, newest first


class WinnerWritten(AppMessage):
    def __init__(self, plan_path: str, variant: str | None) -> None:
        super().__init__()
        self.plan_path, self.variant = plan_path, variant


# ---- tune intents (Tune screen -> App) ----------------------------------------------------------------


class TuneRequested(AppMessage):
    def __init__(self, choice: TuneChoice) -> None:
        super().__init__()
        self.choice = choice


class TuneResumeRequested(AppMessage):
    def __init__(self, tune_dir: str, budget_s: float | None) -> None:
        super().__init__()
        self.tune_dir = tune_dir
        self.budget_s = budget_s  # None: the budget the tune was started with


class TuneOpenRequested(AppMessage):
    def __init__(self, tune_dir: str) -> None:
        super().__init__()
        self.tune_dir = tune_dir


class TuneCancelRequested(AppMessage):
    pass


class WriteWinnerRequested(AppMessage):
    pass
