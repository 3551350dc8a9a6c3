"""What the crossover search (`draftbench tune --concurrency auto`) reads back from a tune directory: step
costs with their spread from every step-cost run (`cost/` at the ladder's batches, `cost-c<N>/` at each
bisection batch), the paired verdicts at the crossover's sides (`verify-c<N>/`), the mixed load's phases
(`mix/`) and the request-rate table (`load/`). Files are the source of truth, as for the rest of tune.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import tune_data as td
from harness.analysis.crossover import Step
from harness.analysis.steps import FALLBACK_QUANTILE, decode_steps
from harness.analysis.summary import read_tables, read_variants

LEVEL = re.compile(r"@c(\d+)#")
COST_DIR = re.compile(r"cost(-c\d+)?$")
VERIFY_DIR = re.compile(r"verify-c(\d+)$")


def _dirs(tune_dir: Path, pattern: re.Pattern[str]) -> list[Path]:
    d = Path(tune_dir)
    return sorted(p for p in d.iterdir() if p.is_dir() and pattern.fullmatch(p.name)) if d.is_dir() else []


def cost_dirs(tune_dir: Path) -> list[Path]:
    return _dirs(tune_dir, COST_DIR)


def verify_dirs(tune_dir: Path) -> list[Path]:
    """The crossover's paired runs, `verify-c<N>/`, by name."""
    return _dirs(tune_dir, VERIFY_DIR)


def _level_steps(windows: pd.DataFrame, variant: str) -> dict[int, Step]:
    """Step ms per level of `variant`'s step-cost phases: at the level's own running batch (the nearest batch
    below when no window ran full), the geometric mean of its clean windows' step times with the standard
    error of their mean log (no clean window: the 20th percentile of all, as harness.analysis.steps). A mean,
    not tune.csv's median: a window's length moves with where the timer's ticks fall, and the clean windows
    of one batch average out to its step time where their median need not."""
    steps = decode_steps(windows, variant)
    if steps.empty:
        return {}
    steps = steps.assign(level=steps["phase"].map(lambda p: int(m.group(1)) if (m := LEVEL.search(p)) else 0))
    out: dict[int, Step] = {}
    for level, g in steps[steps["level"] > 0].groupby("level"):
        below = g[g["running_req"] <= level]
        if below.empty:
            continue
        at = below[below["running_req"] == below["running_req"].max()]
        clean = at[at["clean"].astype(bool)]["step_ms"]
        use = clean if len(clean) else at["step_ms"]
        logs = pd.Series([math.log(v) for v in use if v > 0])
        if logs.empty:
            continue
        ms = math.exp(logs.mean()) if len(clean) else float(use.quantile(FALLBACK_QUANTILE))
        se = float(logs.std(ddof=1) / math.sqrt(len(logs))) if len(logs) >= 2 else None
        flags = [g for g in at["graph"] if isinstance(g, bool)]
        eager = bool(flags) and sum(not g for g in flags) > len(flags) / 2
        out[int(level)] = Step(ms, se if se is not None and se == se else None, eager)
    return out


def step_costs(tune_dir: Path, variant: str) -> dict[int, Step]:
    """Every level `variant` has a step cost at, over all the tune's step-cost runs (a later run's level
    replaces an earlier one's)."""
    out: dict[int, Step] = {}
    for d in cost_dirs(tune_dir):
        (windows,) = read_tables(d, ("server_windows.csv",))
        if not windows.empty:
            out.update(_level_steps(windows, variant))
    return dict(sorted(out.items()))


def step_ms(tune_dir: Path, variant: str, levels: list[int]) -> dict[int, float]:
    """step_costs' ms at `levels` alone: what a crossover search's grid predicts from, so that its heatmaps
    and answer say what its crossover says (tune_data.step_costs' median put 2.53x against the crossover's
    2.32x for one config at c8 in one H200 report)."""
    return {b: s.ms for b, s in step_costs(tune_dir, variant).items() if b in levels}


def graph_cap(tune_dir: Path) -> int | None:
    """The CUDA graph batch cap the servers of the step-cost runs resolved (variants.jsonl's
    `server_cuda_graph_max_bs_decode`, older SGLang `server_cuda_graph_max_bs`), the smallest; None:
    not recorded."""
    caps = []
    for d in cost_dirs(tune_dir):
        for meta in read_variants(d).values():
            for key in ("server_cuda_graph_max_bs_decode", "server_cuda_graph_max_bs"):
                v = meta.get(key)
                if isinstance(v, int | float) and v > 0:
                    caps.append(int(v))
                    break
    return min(caps) if caps else None


def phase_requests(tune_dir: Path, kind: str) -> dict[tuple[str, int], int]:
    """(variant, concurrency) -> the fewest requests (answered or not) in a finished phase at that level,
    over the tune's step-cost runs (`kind` "cost": `cost/`, `cost-c<N>/`) or its paired runs ("verify":
    `verify-c<N>/`): what each level's phase held against its batch (docs/tune.md: 4 x it at least)."""
    out: dict[tuple[str, int], int] = {}
    for d in _dirs(tune_dir, COST_DIR if kind == "cost" else VERIFY_DIR):
        path = d / "phases.csv"
        if not path.exists() or not path.stat().st_size:
            continue
        phases = pd.read_csv(path)
        if phases.empty or "concurrency" not in phases:
            continue
        n = pd.to_numeric(phases["requests"], errors="coerce").fillna(0) \
            + pd.to_numeric(phases.get("errors", 0), errors="coerce").fillna(0)
        for (variant, c), got in n.groupby([phases["variant"].astype(str), phases["concurrency"]]):
            if int(c) > 0:
                key = (str(variant), int(c))
                out[key] = min(int(got.min()), out.get(key, int(got.min())))
    return out


def side_rows(tune_dir: Path, variant: str) -> dict[int, dict[str, Any]]:
    """The paired runs at the crossover's sides: level -> the summary row of `variant` (speedup, interval,
    verdict, verdict_reason), judged from its records by today's rules."""
    out: dict[int, dict[str, Any]] = {}
    for d in _dirs(tune_dir, VERIFY_DIR):
        for (name, c), row in td.verified_rows(d).items():
            if name == variant:
                out[int(c)] = row
    return dict(sorted(out.items()))


def mix_phases(tune_dir: Path) -> pd.DataFrame:
    """phases.csv of the mixed-load run with each phase's tok/s (output tokens over its wall time)."""
    d = Path(tune_dir) / "mix"
    if not (d / "phases.csv").exists():
        return pd.DataFrame()
    (phases,) = read_tables(d, ("phases.csv",))
    if phases.empty:
        return phases
    wall = pd.to_numeric(phases["wall_s"], errors="coerce")
    return phases.assign(tok_s=pd.to_numeric(phases["output_tokens"], errors="coerce") / wall.where(wall > 0))


def rate_table(tune_dir: Path) -> pd.DataFrame:
    path = Path(tune_dir) / "load" / "summary_by_rate.csv"
    return pd.read_csv(path) if path.exists() and path.stat().st_size else pd.DataFrame()
