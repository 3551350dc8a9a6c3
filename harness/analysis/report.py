"""Plain-text rendering of the summary DataFrame (the table the CLI prints; same data as summary.csv)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from harness.analysis.engines_table import engines_of, stand_ins
from harness.analysis.forced import forced_note, without_forced

TABLE_COLUMNS = [
    ("variant", "variant", "{}"),
    ("concurrency", "conc", "{:.0f}"),
    ("algorithm", "algo", "{}"),
    ("requests", "reqs", "{:.0f}"),
    ("errors", "err", "{:.0f}"),
    ("accept_len", "accept len", "{:.2f}"),
    ("accept_rate", "accept rate", "{:.2f}"),
    ("tok_s", "tok/s", "{:.1f}"),
    ("decode_tok_s", "decode tok/s", "{:.1f}"),
    ("ttft_p50_ms", "TTFT p50 ms", "{:.0f}"),
    ("itl_p50_ms", "ITL p50 ms", "{:.1f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("speedup_ci", "CI", "{}"),  # derived from speedup_ci_low/high and ci_level (table_cell)
    ("verdict", "verdict", "{}"),
    ("break_even_accept_len", "break-even AL", "{:.2f}"),
    ("output_match", "same output", "{:.2f}"),
]


def fmt_cell(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "-"
    if isinstance(value, str) and value == "":
        return "-"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


def table_cell(row: Any, col: str, spec: str) -> str:
    if col == "speedup_ci":
        low, high = row.get("speedup_ci_low"), row.get("speedup_ci_high")
        if fmt_cell(low, "{}") == "-" or fmt_cell(high, "{}") == "-":
            return "-"
        level = row.get("ci_level")
        tail = "" if fmt_cell(level, "{}") == "-" or abs(float(level) - 0.95) < 1e-9 else \
            f" ({100 * float(level):.4g}%)"
        return f"{float(low):.2f}-{float(high):.2f}{tail}"
    return fmt_cell(row.get(col), spec)


def verdict_notes(row: Any) -> list[str]:
    """What the verdict columns add to a row's note (the CLI table and the TUI share it)."""
    notes = []
    if row.get("too_short") is True or str(row.get("too_short")) == "True" \
            or str(row.get("verdict_reason")).startswith("too short to decide"):  # this row's or its baseline's
        notes.append("too short to decide")
    mif, conc = row.get("mean_in_flight"), row.get("concurrency")
    if fmt_cell(mif, "{}") != "-" and conc and float(mif) < 0.75 * float(conc):
        notes.append(f"{float(mif):.1f} in flight on average, not {float(conc):.0f}")
    return notes


def spec_notes(row: Any) -> list[str]:
    """Where the accept length came from, forced acceptance, the batch the break-even holds for, output
    divergence and failed cache flushes (the CLI table and the TUI share it)."""
    forced = forced_note(row)
    notes = [forced] if forced else []
    source = str(row.get("accept_len_source") or "")
    if source == "probe":
        notes.append("accept len: untimed replay, checked")
    elif source == "probe-unchecked":
        notes.append("accept len: untimed replay, unchecked")
    batch, conc = row.get("break_even_batch"), row.get("concurrency")
    if fmt_cell(batch, "{}") != "-" and conc and float(conc) > 1:
        notes.append(f"break-even at batch {float(batch):.0f}")
    match, first = row.get("output_match"), row.get("first_divergence")
    if fmt_cell(match, "{}") != "-" and float(match) < 1.0:
        where = f", first at char {float(first):.0f} (median)" if fmt_cell(first, "{}") != "-" else ""
        notes.append(f"output differs from the baseline{where}")
    flush = row.get("flush_failed")
    if fmt_cell(flush, "{}") != "-" and float(flush) > 0:
        notes.append(f"cache flush failed before {float(flush):.0f} phase(s)")
    return notes


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


def render_table(df: pd.DataFrame) -> str:
    """Variants as rows; the fastest variant with a `faster` verdict per concurrency marked '*', variants
    with a `slower` verdict marked '!' with their break-even accept length."""
    if df.empty:
        return "(no results)"
    if "node" in df.columns and df["node"].nunique() > 1:  # a run over several nodes: name the node
        df = df.assign(variant=df["variant"].astype(str) + "@" + df["node"].astype(str))
    columns = list(TABLE_COLUMNS)
    if len(engines_of(df)) > 1:  # a table across engines says each row's engine and baseline
        columns[1:1] = [("engine", "engine", "{}"), ("compared_with", "vs", "{}")]
    headers = [h for _, h, _ in columns] + ["note"]
    body: list[list[str]] = []
    for _, row in df.iterrows():
        cells = [table_cell(row, col, spec) for col, _, spec in columns]
        note = []
        if str(row.get("status")) == "failed":
            if str(row.get("concurrency")) in ("0", "0.0"):  # it never measured: no concurrency to show
                cells[[c for c, _, _ in columns].index("concurrency")] = "-"
            why = row.get("failure_reason")
            note.append("FAILED" + (f": {why}" if fmt_cell(why, "{}") != "-" else ""))
        if row.get("variant") == best_variant(df, row.get("concurrency")):
            cells[0] = "*" + cells[0]
        if row.get("slower_than_baseline") is True or str(row.get("slower_than_baseline")) == "True":
            cells[0] = "!" + cells[0]
            note.append("slower than baseline")
        note += verdict_notes(row)
        note += spec_notes(row)
        al = row.get("accept_len")
        if al is not None and not (isinstance(al, float) and math.isnan(al)) and float(al) <= 1.005:
            note.append("drafter inert (accept len 1.00)")
        agree = row.get("accept_sources_agree")
        if agree is False or str(agree) == "False":
            note.append("accept-len sources disagree")
        body.append(cells + ["; ".join(note)])
    out = grid(headers, body).split("\n")
    if bool(df.get("simulated", pd.Series([False])).astype(str).eq("True").any()):
        out.insert(0, f"SIMULATED: numbers from draftbench's {stand_ins(engines_of(df))}, not a GPU")
    out.append("")
    out.append("CI: 95% interval of the speedup (the stopping rule's look level when shown)   "
               "verdict: faster/slower (CI above/below 1.00x), equivalent (CI inside the band), undecided "
               "(too wide: the reason says what decides it), too-short")
    out.append("* fastest at that concurrency with a faster verdict   ! slower verdict   "
               "break-even AL: accept length needed at this variant's measured step cost to match the baseline")
    if "ci_method" in df and bool((df["ci_method"].astype(str) == "bootstrap-windows").any()):
        out.append("1 repeat above concurrency 1: its CI sees only noise within that run, not between runs, so "
                   "it stays undecided (run.repeats >= 3, or run.stop: decided)")
    return "\n".join(out)
