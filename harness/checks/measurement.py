"""Phases too small to decide, found before the run: a closed-loop phase replays a suite once, one request
per prompt turn, and a phase of fewer than MIN_REQUESTS_PER_SLOT x concurrency requests is "too short to
decide" in every verdict (harness.analysis.verdicts), so hours of measurement at that level would end in
`within-noise` whatever the speedup. Repeats do not help: they replay the same small phase."""

from __future__ import annotations

from typing import Any

from harness.common.findings import PLAN_WIDE, Finding, warning
from harness.inputs.run_settings import MIN_REQUESTS_PER_SLOT


def phase_findings(plan: Any) -> list[Finding]:
    """One warning per suite that is too small for some of the plan's concurrency levels."""
    if not any(v.is_speculative for v in plan.variants):
        return []  # no verdict to decide
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
            f"suite {suite.name}: {n} requests per phase, fewer than {MIN_REQUESTS_PER_SLOT} x concurrency at "
            f"concurrency {levels}",
            "every verdict at that level stays within-noise (too short to decide), whatever the speedup; "
            "more repeats replay the same short phase",
            f"give the suite at least {MIN_REQUESTS_PER_SLOT * most} requests (import-suite --sample), or drop "
            f"concurrency {levels} from run.concurrency"))
    return out
