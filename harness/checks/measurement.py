"""Phases too small to decide, found before the run: a phase of fewer than MIN_REQUESTS_PER_SLOT x concurrency
requests is "too short to decide" in every verdict (harness.analysis.verdicts). Phase sizing
(run.phase_sizing, on by default: harness.bench.sizing) cycles such a suite until the phase is long enough, so
this warns only where it is off, as in tune's decode-only step-cost phases. Repeats do not help: they replay
the same phase."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.common.findings import PLAN_WIDE, Finding, warning
from harness.inputs.run_settings import MIN_REQUESTS_PER_SLOT

if TYPE_CHECKING:
    from harness.inputs.config import Plan


def phase_findings(plan: Plan) -> list[Finding]:
    """One warning per suite that is too small for some of the plan's concurrency levels."""
    per_slot = plan.run.requests_per_slot  # a phase of per_slot x concurrency, whatever the suite holds
    if not any(v.is_speculative for v in plan.variants) or (plan.run.phase_sizing and not per_slot):
        return []  # no verdict to decide, or phase sizing cycles the suite until it can
    if per_slot:
        return [] if per_slot >= MIN_REQUESTS_PER_SLOT else [warning(
            PLAN_WIDE, "phase-too-short",
            f"run.requests_per_slot is {per_slot}: every phase has fewer than {MIN_REQUESTS_PER_SLOT} x "
            "concurrency requests",
            "every verdict is too-short, whatever the speedup; more repeats replay the same short phase",
            f"give run.requests_per_slot {MIN_REQUESTS_PER_SLOT} or more, or leave it unset (phase sizing)")]
    out = []
    for suite in plan.suites:
        n = sum(int(p.turns) for p in suite.prompts)
        short = [c for c in plan.run.concurrency if n < MIN_REQUESTS_PER_SLOT * int(c)]
        if not short:
            continue
        levels = ", ".join(str(c) for c in short)
        most = max(short)
        out.append(warning(
            PLAN_WIDE, "phase-too-short",
            f"suite {suite.name}: {n} requests per phase, fewer than {MIN_REQUESTS_PER_SLOT} x concurrency "
            f"at concurrency {levels}",
            "with run.phase_sizing off, every verdict at that level is too-short, whatever the speedup; "
            "more repeats replay the same short phase",
            "turn run.phase_sizing on (it cycles the suite), give the suite at least "
            f"{MIN_REQUESTS_PER_SLOT * most} requests (import-suite --sample), or drop concurrency {levels} "
            "from run.concurrency"))
    return out
