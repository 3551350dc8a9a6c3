"""The tune's predicted speedup over num_steps x num_draft_tokens at one concurrency: as text (the report,
the TUI's Tune view) and as a PNG when matplotlib is installed."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def heatmap_text(rows: pd.DataFrame, concurrency: int) -> str:
    """Predicted speedup over num_steps (rows) x num_draft_tokens (columns), best topk / graph setting per
    cell; '*' marks a measured step cost, '~' one from the prior."""
    r = rows[(rows["concurrency"] == concurrency)
             & pd.to_numeric(rows["speedup_pred"], errors="coerce").notna()]
    if r.empty:
        return f"c{concurrency}: nothing predicted"
    steps = sorted(r["num_steps"].unique())
    ndts = sorted(r["num_draft_tokens"].unique())
    lines = [f"predicted speedup at concurrency {concurrency} (rows num_steps, columns num_draft_tokens)",
             "steps " + "".join(f"{d:>8}" for d in ndts)]
    for s in steps:
        cells = []
        for d in ndts:
            g = r[(r["num_steps"] == s) & (r["num_draft_tokens"] == d)]
            if g.empty:
                cells.append(f"{'':>8}")
                continue
            best = g.loc[pd.to_numeric(g["speedup_pred"]).idxmax()]
            mark = "*" if best["measured"] else "~"
            cells.append(f"{float(best['speedup_pred']):>7.2f}{mark}")
        lines.append(f"{s:>5} " + "".join(cells))
    return "\n".join(lines)


def heatmap_png(rows: pd.DataFrame, concurrency: int, path: Path) -> Path | None:
    try:
        from matplotlib.figure import Figure  # no pyplot: no global figure or backend to switch
    except ImportError:
        return None
    # a 1 x 1 grid's singular axis limits: no library warning reaches the terminal
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _heatmap(Figure, rows, concurrency, path)


def _heatmap(figure: type[Figure], rows: pd.DataFrame, concurrency: int, path: Path) -> Path | None:
    r = rows[rows["concurrency"] == concurrency].copy()
    r["speedup_pred"] = pd.to_numeric(r["speedup_pred"], errors="coerce")
    grid = r.pivot_table(index="num_steps", columns="num_draft_tokens", values="speedup_pred", aggfunc="max")
    if grid.empty:
        return None
    fig = figure(figsize=(6, 4))
    ax = fig.subplots()
    im = ax.imshow(grid.values, cmap="RdYlGn", vmin=0.5, vmax=max(1.5, float(grid.max().max() or 1.5)))
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    ax.set_yticks(range(len(grid.index)), [str(i) for i in grid.index])
    ax.set_xlabel("num_draft_tokens")
    ax.set_ylabel("num_steps")
    ax.set_title(f"predicted speedup, concurrency {concurrency}")
    fig.colorbar(im, ax=ax)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return path
