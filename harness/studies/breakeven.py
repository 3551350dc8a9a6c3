"""`draftbench breakeven`: run one variant at forced accept lengths next to the baseline and find the
accept length at which it matches the baseline's tok/s, measured end to end.

The plan is derived from the user's: the baseline and one copy of the variant per forced accept length,
each copy's server started with the engine's forcing environment (`Engine.forced_env`), at the plan's
concurrencies (or the ones asked for). It runs through `run_plan` like any plan, so the run directory
holds every record; forced runs are labelled in variants.jsonl and in the summary (`forced_acceptance`),
since their outputs are not the model's. breakeven.csv in the run directory holds the points and, per
concurrency, the interpolated break-even next to the step-cost estimate (harness.analysis.breakeven).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common import events as ev
from harness.common.errors import InputError
from harness.engines import engine_of

if TYPE_CHECKING:
    import pandas as pd

    from harness.inputs.config import Plan
    from harness.targets.base import Target

DEFAULT_ACCEPT_LENS = (1.5, 2.5, 3.5)


def forced_name(variant: str, accept_len: float) -> str:
    return f"{variant}-al{accept_len:g}"


def derive_plan(plan: Plan, variant: str, accept_lens: Sequence[float],
                concurrency: Sequence[int] | None = None) -> Plan:
    """The baseline plus `variant` once per forced accept length (its env over the variant's own)."""
    by_name = {v.name: v for v in plan.variants}
    if variant not in by_name:
        raise InputError(str(plan.source_path or ""), None, "--variant",
                         f"no variant {variant!r} in the plan (have: {', '.join(by_name)})")
    spec = by_name[variant]
    if spec.is_baseline or not spec.spec_algorithm:
        raise InputError(str(plan.source_path or ""), None, "--variant",
                         f"{variant!r} does not speculate: nothing to force")
    lens = sorted({float(a) for a in accept_lens})
    if len(lens) < 2 or any(a < 1.0 for a in lens):
        raise InputError(None, None, "--accept-lens", "give at least two accept lengths, each >= 1")
    engine = engine_of(plan)
    base = plan.baseline_of(spec)  # its engine's, at its sampling arm
    copies = [spec.model_copy(update={"name": forced_name(variant, a),
                                      "env": {**(spec.env or {}), **engine.forced_env(a)}}) for a in lens]
    # a forced copy's answers are not the model's: no lossless audit of them
    run = plan.run.model_copy(update={"lossless_audit": False,
                                      **({"concurrency": list(concurrency)} if concurrency else {})})
    return plan.model_copy(update={"name": f"{plan.name}-breakeven-{variant}", "variants": [base, *copies],
                                   "run": run})


async def run_breakeven(plan: Plan, variant: str, accept_lens: Sequence[float] = DEFAULT_ACCEPT_LENS, *,
                        concurrency: Sequence[int] | None = None, results_dir: str | Path = "results",
                        target: Target | None = None) -> AsyncIterator[Any]:
    """run_plan's events for the derived plan; breakeven.csv is written before RunDone is passed on."""
    from harness.bench.runner import run_plan

    derived = derive_plan(plan, variant, accept_lens, concurrency)
    async with contextlib.aclosing(run_plan(derived, results_dir=results_dir, target=target)) as events:
        async for event in events:
            if isinstance(event, ev.RunDone):
                with contextlib.suppress(Exception):  # the records are on disk whatever happens here
                    write_breakeven(event.run_dir, variant, derived.baseline.name)
            yield event


def write_breakeven(run_dir: str | Path, variant: str, baseline: str) -> Path:
    import pandas as pd

    from harness.analysis.breakeven import forced_table
    from harness.analysis.summary import load_summary

    def read(name: str) -> pd.DataFrame | None:
        path = Path(run_dir) / name
        return pd.read_csv(path) if path.exists() and path.stat().st_size else None

    table = forced_table(load_summary(run_dir), variant, baseline, windows=read("server_windows.csv"),
                         phases=read("phases.csv"))
    out = Path(run_dir) / "breakeven.csv"
    table.to_csv(out, index=False)
    return out


def read_forced_table(path: str | Path) -> pd.DataFrame:
    """breakeven.csv as write_breakeven wrote it, its bool column parsed once as read
    (harness.analysis.summary.parse_bools)."""
    import pandas as pd

    from harness.analysis.summary import parse_bools

    return parse_bools(pd.read_csv(path), ("break_even_extrapolated",))
