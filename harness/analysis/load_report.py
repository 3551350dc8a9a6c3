"""The tables after the comparison: speedup against load (request-rate phases, where speculation stops
paying), acceptance by turn of live conversations, and the note on servers draftbench did not start."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from harness.analysis.report import fmt_cell, grid

RATE_TABLE = [("variant", "variant", "{}"), ("request_rate", "req/s", "{:g}"), ("requests", "req", "{:.0f}"),
              ("tok_s", "tok/s", "{:.1f}"), ("ttft_p50_ms", "TTFT p50", "{:.0f}"),
              ("tpot_p50_ms", "TPOT p50", "{:.1f}"),
              ("e2e_p50_ms", "e2e p50", "{:.0f}"), ("slo_met", "SLO met", "{:.0%}"),
              ("goodput_req_s", "goodput req/s", "{:.2f}"), ("speedup", "speedup (TPOT)", "{:.2f}x")]
TURN_TABLE = [("variant", "variant", "{}"), ("category", "category", "{}"), ("turn", "turn", "{:.0f}"),
              ("requests", "req", "{:.0f}"), ("prompt_tokens_mean", "prompt tok", "{:.0f}"),
              ("accept_len_requests", "accept len", "{:.2f}"), ("decode_tok_s", "decode tok/s", "{:.1f}")]


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.exists() and path.stat().st_size else pd.DataFrame()


def _rows(df: pd.DataFrame, columns: list[tuple[str, str, str]]) -> list[list[str]]:
    out = []
    for _, row in df.iterrows():
        cells = []
        for col, _, spec in columns:
            value = row.get(col)
            if col == "request_rate" and isinstance(value, float) and math.isinf(value):
                cells.append("inf")
            else:
                cells.append(fmt_cell(value, spec))
        out.append(cells)
    return out


def rate_rows(rates: pd.DataFrame) -> list[list[str]]:
    """summary_by_rate.csv as the CLI prints it (RATE_TABLE's columns and formats), for the TUI."""
    return _rows(rates, RATE_TABLE)


def rate_label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def stops_paying(rates: pd.DataFrame) -> list[str]:
    """Per variant, the lowest rate at which its TPOT speedup is at or below 1.00x."""
    lines = []
    for name, g in rates.dropna(subset=["speedup"]).groupby("variant", sort=False):
        g = g.sort_values("request_rate")
        losing = g[pd.to_numeric(g["speedup"], errors="coerce") <= 1.0]
        if not losing.empty:
            rate = float(losing.iloc[0]["request_rate"])
            lines.append(f"{name}: speculation stops paying at {rate_label(rate)} req/s")
        else:
            lines.append(f"{name}: faster than the baseline at every rate measured")
    return lines


def render_load_tables(run_dir: str | Path) -> str:
    """Text for the CLI after the main table; empty when the run had none of these."""
    run_dir = Path(run_dir)
    parts: list[str] = []
    rates = _read(run_dir / "summary_by_rate.csv")
    if not rates.empty:
        parts += ["",
                  "Request-rate phases (open loop; speedup = baseline TPOT / variant TPOT at the same rate)",
                  grid([h for _, h, _ in RATE_TABLE], _rows(rates, RATE_TABLE)), *stops_paying(rates)]
    turns = _read(run_dir / "summary_by_turn.csv")
    if not turns.empty and pd.to_numeric(turns["turn"], errors="coerce").max() > 1:
        parts += ["", "By turn (live multi-turn: each turn follows the variant's own earlier answers)",
                  grid([h for _, h, _ in TURN_TABLE], _rows(turns, TURN_TABLE))]
    from harness.analysis.by_context_report import render_context_tables

    by_context = render_context_tables(run_dir)  # acceptance by context length and output position
    if by_context:
        parts.append(by_context)
    not_started = _not_started(run_dir)
    if not_started:
        parts += ["", f"Measured against servers draftbench did not start: {', '.join(not_started)} "
                  "(settings read from /get_server_info; left running)"]
    return "\n".join(parts)


def _not_started(run_dir: Path) -> list[str]:
    try:
        provenance = json.loads((run_dir / "provenance.json").read_text(encoding="utf-8"))
        return list(provenance.get("servers_not_started") or [])
    except (OSError, ValueError, AttributeError):
        return []
