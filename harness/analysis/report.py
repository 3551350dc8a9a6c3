"""Plain-text rendering of the summary DataFrame (the table the CLI prints; same data as summary.csv)."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import pandas as pd

from harness.analysis import summary_columns
from harness.analysis import table_notes as notes
from harness.analysis.columns import SummaryRow, fmt_cell
from harness.analysis.engines_table import engines_of, stand_ins
from harness.analysis.forced import without_forced
from harness.analysis.summary_columns import COLUMNS
from harness.common.errors import EXIT_BAD_INPUT, EXIT_OK, InputError, say

# (summary column, header, format), left to right: every column the tables show (`--wide`, the TUI's Results),
# from the column registry (harness.analysis.summary_columns); the default table: those it marks `default`
TABLE_COLUMNS = summary_columns.TABLE_COLUMNS
DEFAULT_KEYS = tuple(c.name for c in COLUMNS.shown() if c.shown and c.shown.default)
LEGEND_WIDTH = 110
MARKS_LEGEND = [
    "CI: 95% interval of the speedup (the stopping rule's look level when shown)",
    "verdict: faster/slower (CI above/below 1.00x), equivalent (CI inside the band), undecided (too wide: "
    "the reason says what decides it), too-short",
    "* fastest at that concurrency with a faster verdict   ! slower verdict",
    "break-even AL: accept length needed at this variant's measured step cost to match the baseline",
]


def table_cell(row: SummaryRow, col: str, spec: str) -> str:
    column = COLUMNS[col] if col in COLUMNS else None
    if column is not None and column.cell is not None:
        return column.cell(row)
    return fmt_cell(row.get(col), spec)


def verdict_notes(row: SummaryRow) -> list[str]:
    """What the verdict columns add to a row's note (the CLI table and the TUI share it)."""
    return [n.text for n in notes.verdict_notes(row)]


def grid(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned text columns with a dashed rule under the header."""
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) if rows else len(headers[i])
              for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def best_variant(df: pd.DataFrame, concurrency: int) -> str | None:
    """The fastest variant whose verdict is `faster` (its interval above 1.00x); None when none is. Forced-
    acceptance rows are never it (harness.analysis.forced). A summary.csv from before verdicts has no such
    column: there the fastest tok/s, as it was then."""
    df = without_forced(df)
    rows = df[(df["concurrency"] == concurrency) & pd.to_numeric(df["tok_s"], errors="coerce").notna()]
    if "verdict" in df:
        rows = rows[rows["verdict"].astype(str) == "faster"]
    if rows.empty:
        return None
    return str(rows.loc[pd.to_numeric(rows["tok_s"]).idxmax(), "variant"])


def table_columns(df: pd.DataFrame, wide: bool = False) -> list[tuple[str, str, str]]:
    """(summary column, header, format) of the table: the deciding ones, or with `wide` all of them; a table
    across engines says each row's engine and baseline."""
    across = len(engines_of(df)) > 1
    return [(c.name, c.shown.header, c.shown.fmt) for c in COLUMNS.shown()
            if c.shown and (wide or c.shown.default) and (across or not c.shown.across_engines)]


def render_table(df: pd.DataFrame, wide: bool = False) -> str:
    """Variants as rows; the fastest variant with a `faster` verdict per concurrency marked '*', variants
    with a `slower` verdict marked '!' with their break-even accept length. The deciding columns (`wide`: all
    of them), a row's notes in plain words (one a line, the first on the row's own line), and under the table
    a legend of the marks, the CI and verdict words and each kind of note that appears."""
    if df.empty:
        return "(no results)"
    if "node" in df.columns and df["node"].nunique() > 1:  # a run over several nodes: name the node
        df = df.assign(variant=df["variant"].astype(str) + "@" + df["node"].astype(str))
    columns = table_columns(df, wide)
    headers = [h for _, h, _ in columns] + ["note"]
    body: list[list[str]] = []
    kinds: set[str] = set()
    for _, row in df.iterrows():
        cells = [table_cell(row, col, spec) for col, _, spec in columns]
        if str(row.get("status")) == "failed" and str(row.get("concurrency")) in ("0", "0.0"):
            cells[[c for c, _, _ in columns].index("concurrency")] = "-"  # it never measured: no concurrency
        if row.get("variant") == best_variant(df, row.get("concurrency")):
            cells[0] = "*" + cells[0]
        if notes.is_true(row.get("slower_than_baseline")):
            cells[0] = "!" + cells[0]
        row_notes = notes.row_notes(row) or [notes.Note("", "")]
        kinds.update(n.kind for n in row_notes)
        body.append(cells + [row_notes[0].text])
        body += [[""] * len(cells) + [n.text] for n in row_notes[1:]]  # one note a line, under the first
    out = [line.rstrip() for line in grid(headers, body).split("\n")]
    if bool(df.get("simulated", pd.Series([False])).eq(True).any()):
        out.insert(0, f"SIMULATED: numbers from draftbench's {stand_ins(engines_of(df))}, not a GPU")
    legend = list(MARKS_LEGEND)
    if "ci_method" in df and bool((df["ci_method"].astype(str) == "bootstrap-windows").any()):
        legend.append("1 repeat above concurrency 1: its CI sees only noise within that run, not between "
                      "runs, so it stays undecided (run.repeats >= 3, or run.stop: decided)")
    legend += notes.legend_lines(kinds)
    out.append("")
    for line in legend:  # wrapped to the width of a terminal, continuations indented
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out += textwrap.wrap(line, LEGEND_WIDTH, subsequent_indent=indent, break_on_hyphens=False)
    return "\n".join(out)


# --- README.md's sample table ------------------------------------------------------------------------------

# README.md's sample table is the fenced block right after the line ending with this
README_ANCHOR = "replays the seed's story:"


def readme_sample(readme_text: str) -> list[str]:
    """The lines of README.md's sample table (inside the fences after README_ANCHOR)."""
    lines = readme_text.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.rstrip().endswith(README_ANCHOR)), None)
    if at is None or at + 1 >= len(lines) or lines[at + 1].strip() != "" \
            or not lines[at + 2].startswith("```"):
        raise ValueError(f"README: no ``` block right after the line ending {README_ANCHOR!r}")
    end = next((i for i in range(at + 3, len(lines)) if lines[i].startswith("```")), None)
    if end is None:
        raise ValueError("README: the sample table's ``` block is not closed")
    return lines[at + 3:end]


def with_readme_sample(readme_text: str, table: str) -> str:
    """README.md's text with its sample table replaced by `table`."""
    old = "\n".join(readme_sample(readme_text))
    fence = f"{README_ANCHOR}\n\n```\n{{}}\n```"
    return readme_text.replace(fence.format(old), fence.format(table), 1)


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.analysis.report SUMMARY_CSV [--wide] [--readme] [--update-readme README.md]`: the
    table `draftbench summary` prints for that summary.csv; --readme fences it as README.md's sample (from a
    real demo's summary.csv: tests/fixtures/demo-summary.csv, which tests/test_report_table.py holds the
    README to); --update-readme writes it into README.md."""
    p = argparse.ArgumentParser(prog="python -m harness.analysis.report", description=main.__doc__)
    p.add_argument("summary_csv")
    p.add_argument("--wide", action="store_true", help="every column, not only those that decide")
    p.add_argument("--readme", action="store_true", help="fenced, as README.md's sample block")
    p.add_argument("--update-readme", metavar="README", help="replace README's sample block with the table")
    args = p.parse_args(argv)
    try:
        path = Path(args.summary_csv)
        if not path.is_file():
            raise InputError(str(path), None, None, "summary.csv not found")
        table = render_table(pd.read_csv(path), wide=args.wide)
        if args.update_readme:
            readme = Path(args.update_readme)
            try:
                readme.write_text(with_readme_sample(readme.read_text(), table))
            except (OSError, ValueError) as exc:
                raise InputError(str(readme), None, None, str(exc)) from None
            say(f"{readme}: sample table replaced")
    except InputError as exc:
        say(f"error: {exc}")
        return EXIT_BAD_INPUT
    print(f"```\n{table}\n```" if args.readme else table)
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
