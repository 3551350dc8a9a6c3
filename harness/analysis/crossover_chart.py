"""The crossover as a picture: predicted speedup against concurrency per config, with its interval, the
paired runs at the crossover's sides and the crossover marked. As text (the CLI's report and the TUI's Tune
view: no library needed) and as crossover.png when matplotlib is installed."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from harness.analysis.crossover import Crossing, Point
    from harness.analysis.tune_model import Config

HEIGHT = 11
CELL = 7  # characters per batch column
MARKS = "abcdefghijklmnopqrstuvwxyz"


class Crossover(Protocol):
    """What the chart draws of a crossover (harness.analysis.crossover_report.Result, whose module imports
    this one)."""

    @property
    def levels(self) -> list[int]: ...  # every batch with a step cost
    @property
    def curves(self) -> dict[Config, list[Point]]: ...
    @property
    def crossings(self) -> dict[Config, Crossing]: ...
    @property
    def cross(self) -> Crossing | None: ...  # the pick's: where speculation as a whole stops paying
    @property
    def sides(self) -> dict[int, dict[str, Any]]: ...  # the pick's paired runs at the crossover's sides


def _bounds(res: Crossover) -> tuple[float, float]:
    vals = [v for pts in res.curves.values() for p in pts for v in (p.speedup, p.low, p.high)
            if v is not None]
    vals += [float(r["speedup"]) for r in res.sides.values() if _num(r.get("speedup")) is not None]
    lo, hi = min([0.9, *vals]), max([1.1, *vals])
    return lo, hi


def _num(v: object) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def chart_text(res: Crossover, height: int = HEIGHT) -> str:
    """Rows of speedup (top: the highest), a column per batch tried; each config's letter at its predicted
    speedup, '#' the pick's paired run where one was made, '-' the 1.00x line, '^' under the crossover."""
    levels = res.levels
    if not levels or not res.curves:
        return "crossover chart: nothing measured yet"
    lo, hi = _bounds(res)
    width = CELL * len(levels)
    grid = [[" "] * width for _ in range(height)]

    def row_of(v: float) -> int:
        return max(0, min(height - 1, round((hi - v) / (hi - lo) * (height - 1))))

    one = row_of(1.0)
    grid[one] = ["-"] * width
    names = sorted(res.curves, key=lambda c: c.name)
    for k, cfg in enumerate(names):
        mark = MARKS[k % len(MARKS)]
        for p in res.curves[cfg]:
            if p.batch not in levels:
                continue
            col = levels.index(p.batch) * CELL + CELL // 2
            r = row_of(p.speedup)
            grid[r][col] = mark if grid[r][col] in (" ", "-") else "+"
    for level, row in res.sides.items():
        spd = _num(row.get("speedup"))
        if spd is not None and level in levels:
            grid[row_of(spd)][levels.index(level) * CELL + CELL // 2 + 1] = "#"
    labels = [hi - (hi - lo) * i / (height - 1) for i in range(height)]
    labels[one] = 1.0  # the row the 1.00x line is drawn on says so
    out = ["predicted speedup against concurrency ('-' 1.00x; '#' a paired run; '^' where speculation stops "
           "paying)"]
    out += [f"{labels[i]:5.2f}x |{''.join(grid[i])}" for i in range(height)]
    out.append("       +" + "-" * width)
    out.append("        " + "".join(f"c{b}".center(CELL) for b in levels))
    if res.cross is not None and res.cross.at is not None:
        pos = _column(res.cross.at, levels)
        out.append("        " + " " * pos + f"^ c{res.cross.at:.1f}")
    for k, cfg in enumerate(names):
        c = res.crossings.get(cfg)
        out.append(f"  {MARKS[k % len(MARKS)]} {cfg.name}: {c.words() if c is not None else ''}")
    return "\n".join(out)


def _column(x: float, levels: list[int]) -> int:
    """The character column of batch x (linear between the columns of the batches tried around it)."""
    centres = [i * CELL + CELL // 2 for i in range(len(levels))]
    pairs = list(zip(levels, centres, strict=True))
    for (b0, c0), (b1, c1) in zip(pairs, pairs[1:], strict=False):
        if b0 <= x <= b1:
            return round(c0 + (c1 - c0) * (x - b0) / (b1 - b0))
    return centres[0] if x < levels[0] else centres[-1]


def chart_png(res: Crossover, path: Path) -> Path | None:
    try:
        from matplotlib.figure import Figure  # no pyplot: no global figure or backend to switch
    except ImportError:
        return None
    if not res.curves:
        return None
    with warnings.catch_warnings():  # one batch tried: singular limits are set by hand below, no warning
        warnings.simplefilter("ignore")
        return _png(Figure(figsize=(7, 4.2)), res, path)


def _png(fig: Figure, res: Crossover, path: Path) -> Path:
    ax = fig.subplots()
    for cfg in sorted(res.curves, key=lambda c: c.name):
        pts = res.curves[cfg]
        xs = [p.batch for p in pts]
        ys = [p.speedup for p in pts]
        lows = [p.speedup - p.low if p.low is not None else 0.0 for p in pts]
        highs = [p.high - p.speedup if p.high is not None else 0.0 for p in pts]
        ax.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3, label=cfg.name)
    for level, row in res.sides.items():
        spd = _num(row.get("speedup"))
        low, high = _num(row.get("speedup_ci_low")), _num(row.get("speedup_ci_high"))
        if spd is not None:
            err = [[spd - low], [high - spd]] if low is not None and high is not None else None
            ax.errorbar([level], [spd], yerr=err, marker="s", color="black", capsize=4, linestyle="none")
    ax.axhline(1.0, color="grey", linewidth=1)
    if res.cross is not None and res.cross.at is not None:
        ax.axvline(res.cross.at, color="red", linestyle="--", linewidth=1,
                   label=f"stops paying: c{res.cross.at:.1f}")
    levels = res.levels
    ax.set_xscale("log", base=2)
    lo, hi = (levels[0], levels[-1]) if levels[0] != levels[-1] else (levels[0] / 1.5, levels[0] * 1.5)
    ax.set_xlim(lo / 1.2, hi * 1.2)
    ax.set_xticks(levels, [str(b) for b in levels])
    ax.set_xlabel("concurrency (running batch)")
    ax.set_ylabel("speedup over the baseline")
    ax.set_title("predicted speedup (95% interval); squares: paired runs")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return path
