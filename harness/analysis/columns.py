"""A registry of the summary's columns: each declared once, with its meaning, its source, its compute
function, the columns it needs and how the tables show it (the declarations: summary_columns.py).

In the spirit of aiperf's metric classes: a registry orders the compute functions by what they need and
refuses a column that needs one nobody declares, or a cycle. Two scopes, computed in this order:
  records  a (variant, concurrency) row's own records, before the table exists: fn(group, row) where `row`
           holds the columns computed so far (summary_rows.py);
  table    a row of the table, which may read other rows (its baseline): fn(row, table) (summary_table.py).
One function may fill several columns (a verdict and its interval): it returns {column: value}; a function
that fills one column returns the value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

# A summary row as the tables read it: a DataFrame row (iterrows) or one of its records (to_dict("records")).
SummaryRow = pd.Series | Mapping[str, Any]

KINDS = ("str", "int", "float", "bool")
SCOPES = ("records", "table")


@dataclass(frozen=True)
class Shown:
    """How the results tables (the CLI's, the TUI's Results) show a column."""

    priority: int  # left to right, lowest first
    header: str
    fmt: str = "{}"
    default: bool = False  # in the default table; every shown column is in `--wide` and the TUI
    across_engines: bool = False  # only in a table whose rows span more than one engine


@dataclass(frozen=True)
class Column:
    name: str
    unit: str  # "" for a label, a flag or a plain count
    kind: str  # one of KINDS
    definition: str  # one sentence: docs/metrics.md's column table prints it
    source: str  # the run directory's records it derives from
    compute: Callable[..., Any] | None  # None: a table-only column drawn from `needs` by `cell`
    needs: tuple[str, ...] = ()  # the columns its compute reads
    scope: str = "records"  # one of SCOPES
    shown: Shown | None = None  # None: summary.csv only
    cell: Callable[[Any], str] | None = None  # the table cell of a row, where not `shown.fmt` of the value

    @property
    def in_csv(self) -> bool:
        return self.compute is not None


@dataclass(frozen=True)
class Compute:
    """One compute function and the columns it fills, needs (from other functions) and its scope."""

    fn: Callable[..., Any]
    fills: tuple[str, ...]
    needs: tuple[str, ...]
    scope: str

    def values(self, result: object) -> dict[str, Any]:
        """The function's result as {column: value}; a column a multi-column function leaves out is None."""
        if len(self.fills) == 1:
            return {self.fills[0]: result}
        if not isinstance(result, Mapping) or not set(result) <= set(self.fills):
            extra = sorted(set(result) - set(self.fills)) if isinstance(result, Mapping) else result
            raise ValueError(f"{self.fn.__qualname__} returned {extra!r}: not among its columns {self.fills}")
        return {c: result.get(c) for c in self.fills}


class Registry:
    """The columns in summary.csv's order (table-only columns after them, in any order)."""

    def __init__(self, columns: Iterable[Column]) -> None:
        self.columns = tuple(columns)
        self._by_name: dict[str, Column] = {}
        for c in self.columns:
            if c.name in self._by_name:
                raise ValueError(f"column {c.name!r} declared twice")
            if c.kind not in KINDS or c.scope not in SCOPES:
                raise ValueError(f"column {c.name!r}: kind {c.kind!r} / scope {c.scope!r} unknown")
            if c.compute is None and (c.shown is None or c.cell is None):
                raise ValueError(f"column {c.name!r}: no compute function and no table cell")
            if "|" in c.definition or "\n" in c.definition:
                raise ValueError(f"column {c.name!r}: its definition is one line of docs/metrics.md's table")
            self._by_name[c.name] = c
        for c in self.columns:
            for need in c.needs:
                if need not in self._by_name or not self._by_name[need].in_csv:
                    raise ValueError(f"column {c.name!r} needs {need!r}, which no computed column declares")
                if c.scope == "records" and self._by_name[need].scope == "table":
                    raise ValueError(f"column {c.name!r} is computed from its records but needs {need!r}, "
                                     "a column of the table")
        self.computes = self._in_dependency_order()

    def __getitem__(self, name: str) -> Column:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def csv_columns(self) -> list[str]:
        """summary.csv's columns, in order."""
        return [c.name for c in self.columns if c.in_csv]

    def shown(self) -> list[Column]:
        """The columns the tables show, left to right."""
        return sorted((c for c in self.columns if c.shown), key=lambda c: c.shown.priority if c.shown else 0)

    def scope(self, scope: str) -> list[Compute]:
        return [c for c in self.computes if c.scope == scope]

    def _in_dependency_order(self) -> tuple[Compute, ...]:
        """One Compute per function, each after those it needs; ties keep the declaration order."""
        groups: dict[Callable[..., Any], list[Column]] = {}
        for c in self.columns:
            if c.compute is not None:
                groups.setdefault(c.compute, []).append(c)
        computes = []
        for fn, cols in groups.items():
            if len({c.scope for c in cols}) > 1:
                raise ValueError(f"{fn.__qualname__} fills columns of both scopes")
            fills = tuple(c.name for c in cols)
            needs = tuple(dict.fromkeys(n for c in cols for n in c.needs if n not in fills))
            computes.append(Compute(fn, fills, needs, cols[0].scope))
        filled_by = {name: comp for comp in computes for name in comp.fills}
        order: list[Compute] = []
        done: set[str] = set()
        waiting = list(computes)
        while waiting:
            ready = [c for c in waiting if all(n in done for n in c.needs)
                     and (c.scope == "records" or not any(w.scope == "records" for w in waiting))]
            if not ready:
                stuck = {c.fn.__qualname__: [filled_by[n].fn.__qualname__ for n in c.needs if n not in done]
                         for c in waiting}
                raise ValueError(f"the column computes wait on each other: {stuck}")
            order.append(ready[0])
            done.update(ready[0].fills)
            waiting.remove(ready[0])
        return tuple(order)


def fmt_cell(value: object, spec: str) -> str:
    """A value in a table cell: '-' when missing, else `spec` of it (str() when it does not fit)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "-"
    if isinstance(value, str) and value == "":
        return "-"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


def is_true(value: object) -> bool:
    """A bool cell that holds True (a missing cell is neither true nor false)."""
    return isinstance(value, bool | np.bool_) and bool(value)


def is_false(value: object) -> bool:
    return isinstance(value, bool | np.bool_) and not bool(value)


def docs_table(registry: Registry) -> list[str]:
    """docs/metrics.md's column table: one line per column, in summary.csv's order (table-only last)."""
    lines = ["| column | table header | unit | definition | from | computed by |",
             "|---|---|---|---|---|---|"]
    for c in sorted(registry.columns, key=lambda c: not c.in_csv):
        header = f"{c.shown.header}" if c.shown else ""
        origin = ", ".join([c.source] if c.source else []) + ("; " if c.source and c.needs else "") \
            + ", ".join(f"`{n}`" for n in c.needs)
        fn = c.compute or c.cell
        by = f"`{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}`" if fn else ""
        name = f"`{c.name}`" + ("" if c.in_csv else " (table only)")
        lines.append(f"| {name} | {header} | {c.unit} | {c.definition} | {origin} | {by} |")
    return lines
