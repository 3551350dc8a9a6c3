"""summary_by_context.csv written next to summary.csv, its tables as the CLI prints them (and the TUI shows
them: `context_grid`), and acceptance_by_context.png when matplotlib is installed and a line has two buckets
or more."""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.by_context import ALL, by_context, uncovered
from harness.inputs.run_settings import DEFAULT_CONTEXT_BUCKETS

CONTEXT_FILE = "summary_by_context.csv"
PNG_FILE = "acceptance_by_context.png"
FEW_STEPS = 30  # a cell with fewer verify steps is marked: too few to read much into
COVER_STEPS = 20  # a deployment bucket with fewer verify steps than this counts as not covered
TITLES = {"context": "Accept length by context length (tokens of prompt + output so far, all categories)",
          "position": "Accept length by output position (tokens generated so far, all categories)"}


def context_edges(run_dir: Path) -> list[int]:
    """The run's run.context_buckets (plan.resolved.json), else the defaults."""
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        run = json.loads((run_dir / "plan.resolved.json").read_text(encoding="utf-8")).get("run") or {}
        edges = run.get("context_buckets")
        if isinstance(edges, list) and edges and all(isinstance(e, int) for e in edges):
            return edges
    return list(DEFAULT_CONTEXT_BUCKETS)


def write_context_table(run_dir: Path, requests: pd.DataFrame, probe: pd.DataFrame | None,
                        variants: dict[str, dict[str, Any]]) -> pd.DataFrame:
    table = by_context(requests, variants, probe, context_edges(run_dir))
    table.to_csv(run_dir / CONTEXT_FILE, index=False)
    context_png(table, run_dir / PNG_FILE)
    return table


def read_context_table(run_dir: str | Path) -> pd.DataFrame:
    path = Path(run_dir) / CONTEXT_FILE
    if not path.exists() or path.stat().st_size <= 1:
        return pd.DataFrame()
    with contextlib.suppress(pd.errors.EmptyDataError):
        return pd.read_csv(path)
    return pd.DataFrame()


def _cell(row: pd.Series) -> str:
    al = pd.to_numeric(row["accept_len"], errors="coerce")
    if pd.isna(al):
        return "-"
    return f"{al:.2f}" + ("?" if float(row["verify_steps"]) < FEW_STEPS else "")


def context_grid(table: pd.DataFrame, axis: str) -> tuple[list[str], list[list[str]]]:
    """(headers, rows): a row per (variant, concurrency), a column per bucket any of them reached, each cell
    the bucket's accept length ('?': fewer than FEW_STEPS verify steps)."""
    if table.empty:
        return [], []
    t = table[(table["axis"] == axis) & (table["category"] == ALL)]
    if t.empty:
        return [], []
    order = t.drop_duplicates("bucket").sort_values("lo")["bucket"].tolist()
    headers = ["variant", "conc", *order]
    rows = []
    for (variant, conc), g in t.groupby(["variant", "concurrency"], sort=False):
        by = {r["bucket"]: _cell(r) for _, r in g.iterrows()}
        rows.append([str(variant), f"{int(conc)}", *(by.get(b, "-") for b in order)])
    return headers, rows


def coverage_line(table: pd.DataFrame, edges: list[int]) -> str | None:
    """The deployment's buckets the suites did not reach, in a line with what would fill them."""
    if table.empty:
        return None
    missing = uncovered(table, edges, COVER_STEPS)
    if not missing:
        return None
    return (f"not covered: no suite reached the deployment's context buckets {', '.join(missing)} "
            f"(run.context_buckets {edges}) with {COVER_STEPS} verify steps: longer prompts fill them "
            "(SPEED-Bench's throughput splits, or import-suite --synthetic --tokens N)")


def render_context_tables(run_dir: str | Path) -> str:
    """Text for the CLI after the main table; empty when the run has no speculative per-request stats."""
    from harness.analysis.report import grid

    run_dir = Path(run_dir)
    table = read_context_table(run_dir)
    parts: list[str] = []
    for axis in ("context", "position"):
        headers, rows = context_grid(table, axis)
        if rows:
            parts += ["", TITLES[axis], "\n".join(line.rstrip() for line in grid(headers, rows).split("\n"))]
    if parts:
        parts.append(f"?: fewer than {FEW_STEPS} verify steps in the bucket; per category: {CONTEXT_FILE}")
        line = coverage_line(table, context_edges(run_dir))
        if line:
            parts.append(line)
    return "\n".join(parts)


def context_png(table: pd.DataFrame, path: Path) -> Path | None:
    """Accept length against the buckets' mean context and output position, a line per (variant,
    concurrency); None without matplotlib, or when no line reaches a second bucket on either axis: then
    every line is one point, the table's numbers, and the chart is not drawn (a chart left from before is
    removed)."""
    t = table[table["category"] == ALL] if not table.empty else table
    if t.empty or t.groupby(["axis", "variant", "concurrency"])["bucket"].nunique().max() < 2:
        path.unlink(missing_ok=True)
        return None
    try:
        from matplotlib.figure import Figure  # no pyplot: no global figure or backend to switch
    except ImportError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig = Figure(figsize=(11, 4))
        axes = fig.subplots(1, 2)
        for ax, axis in zip(axes, ("context", "position"), strict=True):
            a = t[t["axis"] == axis]
            xs: list[float] = []
            for (variant, conc), g in a.groupby(["variant", "concurrency"], sort=False):
                g = g.sort_values("lo")
                x = [_mid(r) for _, r in g.iterrows()]
                xs += x
                ax.plot(x, pd.to_numeric(g["accept_len"], errors="coerce"), marker="o",
                        label=f"{variant} c{conc}")
            if xs and max(xs) > 4 * min(xs):  # buckets double: a log axis spaces them evenly
                ax.set_xscale("log", base=2)
            ax.set_xlabel("context (tokens)" if axis == "context" else "output position (tokens)")
            ax.set_ylabel("accept length")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        fig.suptitle("accept length where it is served")
        fig.savefig(path, dpi=100, bbox_inches="tight")
    return path


def _mid(row: pd.Series) -> float:
    mean = pd.to_numeric(row.get("context_mean"), errors="coerce")
    if not pd.isna(mean) and mean > 0:
        return float(mean)
    lo, hi = float(row["lo"]), float(row["hi"])
    return max(1.0, 2 * lo if math.isinf(hi) else (lo + hi) / 2)
