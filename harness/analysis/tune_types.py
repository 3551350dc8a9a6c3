"""A tune in progress as its helpers see it: what tune_report, tune_context, crossover_report (analysis) and
tune_budget, tune_crossover (studies) read and call of harness.studies.tune's search object, typed as
Protocols so that none of them imports the module that imports them (harness.studies.tune)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from harness.analysis.store import TuneState
    from harness.analysis.tune_model import Config
    from harness.common.events import TuneStage
    from harness.inputs.config import Plan, Variant


class TuneOpts(Protocol):
    """The options of the tune that its helpers read (harness.studies.tune.TuneOptions)."""

    @property
    def budget_s(self) -> float: ...
    @property
    def max_batch(self) -> int | None: ...
    @property
    def mix(self) -> str | None: ...
    @property
    def load(self) -> bool: ...


class TuneRun(Protocol):
    """What the tune's report reads of the search: the plan, the grid and what the files gave so far."""

    @property
    def plan(self) -> Plan: ...
    @property
    def opts(self) -> TuneOpts: ...
    @property
    def tuned(self) -> Variant: ...  # the plan's speculative variant whose drafter is tuned
    @property
    def dir(self) -> Path: ...  # the tune directory
    @property
    def grid(self) -> list[Config]: ...
    @property
    def wide(self) -> Config: ...  # the wide run's config: the longest chain
    @property
    def wide_name(self) -> str: ...
    @property
    def conc(self) -> list[int]: ...
    @property
    def wide_conc(self) -> list[int]: ...
    @property
    def state(self) -> TuneState: ...
    @property
    def hists(self) -> dict[str, list[int]]: ...  # the wide run's per-request histograms by category
    @property
    def hist(self) -> list[int] | None: ...  # their sum
    @property
    def step_source(self) -> dict[Config, str]: ...  # where a config's step cost came from, if not its phases

    def accept(self, cfg: Config) -> float | None: ...
    def cost_sources(self, level: int | None = None) -> set[str]: ...  # the step-cost phases' wide prompts
    def spent(self) -> float: ...


class TuneSearch(TuneRun, Protocol):
    """What the budget's plan and the crossover's stages also call: the bookkeeping and the sub-runs."""

    def save(self) -> None: ...
    def stage(self, name: str, message: str) -> TuneStage: ...
    def est_cost(self) -> float: ...
    def verify_cost(self) -> float: ...
    def variant_dict(self, cfg: Config, name: str | None = None) -> dict[str, Any]: ...
    def derived(self, variants: list[dict[str, Any]], *, cost: bool, baseline_last: bool = False,
                budget_s: float | None = None, conc: list[int] | None = None,
                rates: list[float] | None = None, fixed_repeats: int | None = None) -> Plan: ...
    def sub_run(self, plan: Plan, sub: str) -> AsyncIterator[Any]: ...
