"""Everything that happens during a run, as small frozen events (an index, like toolong's messages.py).

The runner yields these; the CLI prints them and the TUI turns them into messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from harness.common import logwindow


class FinishedRequest(Protocol):
    """What a consumer of RequestDone reads of its record (harness.analysis.records.RequestRecord, a layer
    above this one, implements it)."""

    variant: str
    phase: str
    prompt_id: str
    ok: bool
    error: str
    output_tokens: int | None
    t_send: float
    t_end: float


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    run_dir: str
    plan_name: str
    variants: tuple[str, ...]
    total_requests: int  # measured requests (warmup excluded) over all variants
    simulated: bool


@dataclass(frozen=True)
class ServerState:
    variant: str
    # "starting" | "adopted" (another run kept it) | "ready" | "failed" | "stopping" | "stopped" | "kept"
    state: str
    port: int | None = None
    pgid: int | None = None
    detail: str = ""  # e.g. the last log lines when it failed


@dataclass(frozen=True)
class ServerLog:
    variant: str
    lines: tuple[str, ...]  # a batch of complete log lines, in order


@dataclass(frozen=True)
class LogWindow:
    variant: str
    window: logwindow.LogWindow
    phase: str | None  # phase id the window was tagged with, or None (outside any measured phase)


@dataclass(frozen=True)
class PhaseStarted:
    variant: str
    phase: str  # "<suite>@c<concurrency>#r<repeat>"
    suite: str
    concurrency: int
    requests: int


@dataclass(frozen=True)
class RequestDone:
    record: FinishedRequest  # a harness.analysis.records.RequestRecord
    done: int  # requests finished in this run so far
    total: int


@dataclass(frozen=True)
class PhaseDone:
    variant: str
    phase: str
    wall_s: float
    server_accept_len: float | None
    passes: int = 1  # passes over the suite (phase sizing)


@dataclass(frozen=True)
class PhaseSized:
    """A phase whose suite is too short to decide in one pass cycles it (harness.bench.sizing)."""

    variant: str
    phase: str
    concurrency: int
    prompts: int  # requests of one pass
    one_pass_steady_s: float  # steady state one pass gives (measured on the phase's first pass)
    passes: int  # planned passes
    planned_s: float  # the steady state they give
    capped: bool  # run.max_phase_s stopped it short of run.min_steady_s


@dataclass(frozen=True)
class Look:
    """One look of the stopping rule (run.stop: decided; harness.bench.decide)."""

    look: int
    looks: int
    level: float  # the interval level at this look
    repeats: int
    decided: tuple[str, ...]  # "variant@cN verdict" decided at this look
    undecided: tuple[str, ...]  # "variant@cN" still open
    detail: str = ""  # why the rule stopped (budget, cap) or what the next look adds


@dataclass(frozen=True)
class Alarm:
    variant: str
    severity: str  # "error" | "warning" | "info"
    code: str  # stable identifier, e.g. "drafter-inert"
    message: str


@dataclass(frozen=True)
class VariantDone:
    variant: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class RunDone:
    run_dir: str
    complete: bool  # False when interrupted or a variant failed
    failures: int
    summary_csv: str
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class NodeState:
    """One node of a plan with several targets (harness.bench.multinode)."""

    node: str  # the target's name ("local", an ssh destination, with :port when one is set)
    state: str  # "assigned" | "running" | "done" | "lost" | "moved"
    variants: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class TuneStage:
    stage: str  # "wide" | "preflight" | "step-cost" | "verify" | "report"
    message: str
    spent_s: float
    budget_s: float


@dataclass(frozen=True)
class TuneCandidate:
    config: str  # e.g. "s3-k1-d4-g"
    status: str  # "measuring" | "measured" | "failed" | "rejected" | "skipped" | "verifying" | "verified"
    expected_speedup: float | None = None
    est_cost_s: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class TuneDone:
    tune_dir: str
    complete: bool
    stop_reason: str  # "confirmed" | "budget" | "grid-exhausted" | "failed"
    tune_csv: str
    starts: int  # server starts the tune made
    grid_size: int
    answered: bool = False  # an answer per concurrency (measured, or predicted from what the budget bought)


Event = (
    RunStarted
    | NodeState
    | ServerState
    | ServerLog
    | LogWindow
    | PhaseStarted
    | RequestDone
    | PhaseDone
    | Alarm
    | VariantDone
    | RunDone
    | TuneStage
    | TuneCandidate
    | TuneDone
)
