"""The tune's preflight: every grid config through `draftbench check` before the search starts one, so a
config the checks reject (a draft-token count its top-k cannot fill, a flag the engine version lacks) is
recorded with the reason and never started."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.analysis.tune_types import TuneSearch
    from harness.targets.base import Target


async def tune_preflight(t: TuneSearch, target: Target | None) -> None:
    """Findings into t.state: `rejected` per config (the first error), `warnings` (phases too short)."""
    from harness.checks import run_checks
    from harness.targets import open_target

    plan = t.derived([t.variant_dict(c) for c in t.grid], cost=False)
    own = target is None
    target = target or open_target(plan.target.host, ssh_port=plan.target.ssh_port)
    try:
        findings = await run_checks(plan, target)
    finally:
        if own:
            await target.close()
    t.state.warnings = [f.what for f in findings if f.code == "phase-too-short"]
    for f in findings:
        if f.severity == "error" and f.variant in {c.name for c in t.grid}:
            t.state.rejected.setdefault(f.variant, f"{f.code}: {f.message}")
    t.state.preflight_done = True
    t.save()
