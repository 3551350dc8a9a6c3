"""What an incomplete run lacks: the run's own plan (plan.resolved.json) says which phases each variant should
have measured, phases.csv which it did. `draftbench summary` and the TUI's Results list the difference for a
run whose provenance.json status is not `complete`."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.failures import failure_reason
from harness.analysis.summary import read_variants


@dataclass(frozen=True)
class Missing:
    status: str  # provenance.json's status ("incomplete", "running", "?" when it has none)
    variants: dict[str, str] = field(default_factory=dict)  # variant -> why it has no rows at all
    phases: dict[str, list[str]] = field(default_factory=dict)  # variant -> its phases without a row

    def lines(self) -> list[str]:
        """One line per variant that lacks something (what the CLI prints under its INCOMPLETE mark)."""
        out = [f"{name}: no rows ({why})" for name, why in self.variants.items()]
        out += [f"{name}: no rows for {', '.join(p)}" for name, p in self.phases.items()]
        return out

    def headline(self) -> str:
        n = len(self.variants) + len(self.phases)
        what = f"{n} variant(s) lack rows" if n else "every planned phase has rows"
        return f"INCOMPLETE run (provenance status: {self.status}): {what}"


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _planned(resolved: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(suite, level, repeat) of every phase the run's plan asks each variant for; level is "c4" for a
    concurrency and "rate" for a request-rate phase (those share concurrency 0 in phases.csv)."""
    run = resolved.get("run") or {}
    suites = [str(s.get("name")) for s in resolved.get("suites") or [] if isinstance(s, dict)]
    levels = [f"c{int(c)}" for c in run.get("concurrency") or []] \
        + ["rate"] * len(run.get("request_rate") or [])
    return [(s, lv, r) for r in range(1, int(run.get("repeats") or 1) + 1) for s in suites for lv in levels]


def _label(suite: str, level: str, repeat: int, n: int = 1) -> str:
    where = f"{n} request-rate phase(s)" if level == "rate" else f"concurrency {level[1:]}"
    return f"{suite} {where}, repeat {repeat}"


def missing_parts(run_dir: str | Path) -> Missing | None:
    """None for a complete run; else what its plan asked for that has no row (a run over several nodes, or
    one without plan.resolved.json, lists only the variants without rows)."""
    run_dir = Path(run_dir)
    status = str(_json(run_dir / "provenance.json").get("status") or "?")
    if status == "complete":
        return None
    resolved = _json(run_dir / "plan.resolved.json")
    names = [str(v.get("name")) for v in resolved.get("variants") or []] or list(read_variants(run_dir))
    path = run_dir / "phases.csv"
    phases = pd.read_csv(path) if path.exists() and path.stat().st_size else pd.DataFrame()
    metas = read_variants(run_dir)
    planned = _planned(resolved)
    no_rows: dict[str, str] = {}
    lacking: dict[str, list[str]] = {}
    for name in names:
        mine = phases[phases["variant"].astype(str) == name] if not phases.empty else phases
        if mine.empty:
            meta = metas.get(name)
            no_rows[name] = (failure_reason(meta) or "finished without rows") if meta else "never started"
            continue
        have = Counter((str(s), f"c{int(c)}" if int(c) else "rate", int(r))
                       for s, c, r in zip(mine["suite"], mine["concurrency"], mine["repeat"], strict=True))
        want = Counter(planned)
        gaps = [_label(s, lv, r, n - have[(s, lv, r)]) for (s, lv, r), n in want.items()
                if have[(s, lv, r)] < n]
        if gaps:
            lacking[name] = gaps
    return Missing(status, no_rows, lacking)
