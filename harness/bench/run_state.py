"""What the run's helpers (decide, run_phases, run_record, run_servers, audit) read and change of a run in
progress: harness.bench.runner's `_Run`, which they cannot import (it imports them). One protocol, so that
each helper's `run` parameter is typed and `_Run` is checked against it where it hands itself over."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from harness.analysis.alarms import AlarmTracker
    from harness.analysis.attempts import CountingAppender, DonePhases
    from harness.analysis.store import VariantMeta
    from harness.common.aio import Emit
    from harness.inputs.config import Plan, Variant
    from harness.serve.existing import ExistingServer
    from harness.serve.kept import KeptServer, VariantServer
    from harness.serve.server import Server
    from harness.targets.base import Target


class RunState(Protocol):
    plan: Plan
    emit: Emit
    run_id: str
    remote_id: str  # the run's directory under <workdir>/runs/ on the target (harness.bench.runner)
    run_dir: Path
    resume_dir: Path | None  # set when the run resumes an earlier run's directory
    deadline: float | None  # time.monotonic() at which run.budget_s is spent
    alarms: AlarmTracker
    versions: dict[str, str | None]  # engine name -> version, asked once per engine
    done: DonePhases  # what the run directory had finished when the run started
    windows: CountingAppender  # server_windows.csv
    phase_tag: dict[str, str | None]  # variant -> the phase its log lines belong to now
    phase_rate: dict[str, float]  # request-rate phases: phase id -> arrivals per second
    pass_count: dict[tuple[str, str, int], int]  # (variant, suite, conc) -> passes its phases run
    metas: dict[str, VariantMeta]  # a variant's metadata as last recorded
    parked: dict[str, Server | ExistingServer]  # servers kept up between the stopping rule's looks
    _log_owner: dict[str, Server | ExistingServer]  # variant -> the server whose log lines arrive for it
    target: Target
    servers: list[Server | ExistingServer]  # up (or starting) now: each is stopped or kept at the end
    keep: bool  # keep servers running at the end (--keep-servers, server.keep_running)
    kept: list[VariantServer]  # this run's kept servers, oldest first
    offered: list[KeptServer]  # other runs' kept servers, not adopted yet (harness.serve.adopt)
    failed: set[str]
    failures: int
    total_requests: int

    async def _run_variant(self, variant: Variant, version: str | None, repeats: list[int] | None = None,
                           only: set[int] | None = None, park: bool = False) -> None: ...
