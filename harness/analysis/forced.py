"""Forced-acceptance rows (`draftbench breakeven`'s `V-al3.5` copies: `forced_acceptance` in variants.jsonl
and summary.csv) measure speed at an accept length the server was told to produce; their outputs are not the
model's. They are labelled FORCED wherever they appear and never count as a drafter's results: no "best", no
drafter summary and no comparison takes them unless asked for."""

from __future__ import annotations

import math

import pandas as pd

from harness.analysis.columns import SummaryRow

LABEL = "FORCED"


def forced_value(value: object) -> float | None:
    """The forced accept length of a row's `forced_acceptance` cell (None: not forced)."""
    if value is None or value is False or isinstance(value, str) and value.strip() in ("", "False", "None"):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) or v == 0 else v


def is_forced(row: SummaryRow) -> bool:
    return forced_value(row.get("forced_acceptance")) is not None


def forced_note(row: SummaryRow) -> str | None:
    v = forced_value(row.get("forced_acceptance"))
    return None if v is None else f"{LABEL} accept len {v:g}: outputs are not the model's"


def without_forced(df: pd.DataFrame) -> pd.DataFrame:
    """The rows that are a drafter's own results (every row of a summary from before forced runs)."""
    if df.empty or "forced_acceptance" not in df.columns:
        return df
    return df[[forced_value(v) is None for v in df["forced_acceptance"]]]
