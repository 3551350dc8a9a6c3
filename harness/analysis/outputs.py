"""Greedy output equality against the baseline: the share of prompts with identical output and where the
others first diverge.

Under greedy decoding (temperature 0) speculative decoding is lossless in exact arithmetic, so a speculative
arm should reproduce the baseline's output; a divergence early in the output points at a real
difference (a wrong draft/target pairing, forced acceptance), one late in a long output usually at
numerics (batch-dependent kernels). The run keeps each greedy request's text and reasoning text in
outputs.csv; output = reasoning text followed by text, compared character by character. Runs without
outputs.csv fall back to the hash of the text (no divergence position).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

OUTPUT_COLUMNS = ["variant", "phase", "request_id", "text", "reasoning"]


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first differing character, the shorter length when one is a prefix of the other,
    None when equal."""
    if a == b:
        return None
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _texts(outputs: pd.DataFrame, variant: str, phases: set[str] | None) -> pd.Series:
    o = outputs[outputs["variant"] == variant]
    if phases is not None:
        o = o[o["phase"].isin(phases)]
    o = o.drop_duplicates(["phase", "request_id"], keep="last").set_index(["phase", "request_id"])
    def text(col: str) -> pd.Series:  # an empty cell reads back as NaN
        return o[col].map(lambda x: x if isinstance(x, str) else "")

    return text("reasoning") + text("text")


def output_match(requests: pd.DataFrame, outputs: pd.DataFrame | None, base: str, name: str, conc: int,
                 greedy: bool = True) -> dict[str, Any]:
    """{'output_match': share of common prompts with identical output, 'first_divergence': median
    character index of the first divergence over the prompts that differ}; None unless greedy."""
    none = {"output_match": None, "first_divergence": None}
    if not greedy or base == name or requests.empty:
        return none
    r = requests[(requests["concurrency"] == conc) & requests["ok"].eq(True)]
    phases = set(r["phase"])
    if outputs is not None and not outputs.empty:
        a, b = _texts(outputs, base, phases), _texts(outputs, name, phases)
        common = a.index.intersection(b.index)
        if len(common):
            div = [first_divergence(a.loc[k], b.loc[k]) for k in common]
            differ = [d for d in div if d is not None]
            return {"output_match": 1.0 - len(differ) / len(common),
                    "first_divergence": float(pd.Series(differ).median()) if differ else None}
    a = r[r["variant"] == base].set_index(["phase", "request_id"])["text_sha"]
    b = r[r["variant"] == name].set_index(["phase", "request_id"])["text_sha"]
    common = a.index.intersection(b.index)
    if len(common) == 0:
        return none
    return {"output_match": float((a.loc[common] == b.loc[common]).mean()), "first_divergence": None}
