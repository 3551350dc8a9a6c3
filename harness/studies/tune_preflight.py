"""The tune's preflight: every grid config through `draftbench check` before the search starts one, so a
config the checks reject (a draft-token count its top-k cannot fill, a flag the engine version lacks) is
recorded with the reason and never started."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.analysis.tune_types import TuneSearch
    from harness.targets.base import Target


async def tune_preflight(t: TuneSearch, target: Target | None) -> list[str]:
    """Findings into t.state: `rejected` per config (the first error), `warnings` (phases too short).
    Returns the lines to say before the search spends its budget: for a crossover search (auto), batches of
    its ladder above the CUDA graphs the servers capture (their decode steps run eagerly: on the H200 the
    plan's --cuda-graph-max-bs-decode 16 made c32 and c64 eager step costs, said only in the report)."""
    from harness.checks import run_checks
    from harness.targets import open_target

    # auto: judged at the ladder's batches (the wide run's c1 alone would hide the graph cap)
    plan = t.derived([t.variant_dict(c) for c in t.grid], cost=False, conc=t.conc if t.opts.auto else None)
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
    said: dict[tuple[str, str, str], list[str]] = {}
    for f in findings:
        if f.code == "cuda-graph-max-bs-low" and f.severity == "warning":
            said.setdefault((f.what, f.why, f.fix), []).append(f.variant)
    return [f"{what} ({', '.join(names)}): {why}; {fix}" for (what, why, fix), names in said.items()]
