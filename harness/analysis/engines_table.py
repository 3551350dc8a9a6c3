"""One table across engines: each variant is compared with the baseline of its own engine, and where a plan
has a baseline on more than one engine, one cross-engine row per concurrency compares the baselines.

Accept length means the same on every engine (tokens committed per verify step, bonus token included,
prefill excluded); each engine converts its own counters (docs/vllm.md, "One accept length").
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from harness.analysis.columns import SummaryRow
from harness.engines import get_engine

DEFAULT_ENGINE = "sglang"  # runs recorded before variants.jsonl named the engine
CROSS_STATUS = "cross-engine"




def own_baseline(base: pd.DataFrame, row: SummaryRow) -> pd.DataFrame:
    """The baseline rows a row is compared with: same concurrency, same engine, same sampling arm."""
    same = base["concurrency"] == row["concurrency"]
    for key in ("engine", "sampling"):
        if key in base and key in row:
            same &= _filled(base[key]) == ("" if pd.isna(row[key]) else row[key])
    return base[same]


def _filled(col: pd.Series) -> pd.Series:
    """A label column with its missing cells as "" (an all-empty column reads back from CSV as floats)."""
    return col.map(lambda v: "" if pd.isna(v) else v)


def window_weights(dec: pd.DataFrame) -> pd.Series:
    """Weights of decode windows for the log accept length: running requests where the line has them
    (SGLang), one per window where it has none (vLLM's SpecDecoding lines cover equal time intervals)."""
    return pd.to_numeric(dec["running_req"], errors="coerce").fillna(1)




def with_cross_engine_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Append, per concurrency, one row per further engine's baseline against the first engine's baseline
    (the plan's order): variant "<other> vs <first>", speedup = tok/s(other) / tok/s(first)."""
    if "engine" not in df or df.empty:
        return df
    base = df[df["baseline"].astype(bool)]
    arms = _filled(base["sampling"]) if "sampling" in base else pd.Series("", index=base.index)
    rows = []
    for conc, arm in sorted(set(zip(base["concurrency"], arms, strict=True))):  # per sampling arm too
        b = base[(base["concurrency"] == conc) & (arms == arm)]
        engines = list(dict.fromkeys(b["engine"]))
        if len(engines) < 2:
            continue
        ref = b[b["engine"] == engines[0]].iloc[0]
        for other in engines[1:]:
            o = b[b["engine"] == other].iloc[0]
            speed = None
            if ref["tok_s"] and o["tok_s"] and not pd.isna(ref["tok_s"]) and not pd.isna(o["tok_s"]):
                speed = float(o["tok_s"]) / float(ref["tok_s"])
            row = {c: o.get(c) for c in df.columns}
            row.update({"variant": f"{o['variant']} vs {ref['variant']}",
                        "engine": f"{other} vs {engines[0]}", "baseline": False, "status": CROSS_STATUS,
                        "speedup": speed, "verdict": CROSS_STATUS,
                        "compared_with": str(ref["variant"]), "slower_than_baseline": None,
                        "break_even_accept_len": None})
            rows.append(row)
    if not rows:
        return df
    return pd.concat([df, pd.DataFrame(rows, columns=df.columns)], ignore_index=True)


def engines_of(df: pd.DataFrame) -> list[str]:
    """The engines of a summary's variant rows, in order (the cross-engine rows left out)."""
    if "engine" not in df or df.empty:
        return [DEFAULT_ENGINE]
    rows = df[df["status"].astype(str) != CROSS_STATUS] if "status" in df else df
    names = [str(e) for e in dict.fromkeys(rows["engine"]) if isinstance(e, str) and e]
    return names or [DEFAULT_ENGINE]




def stand_ins(engines: Iterable[object] | None) -> str:
    """'SGLang stand-in', 'SGLang and vLLM stand-ins': what produced a simulated run's numbers."""
    names = [get_engine(str(e)).display_name for e in dict.fromkeys(engines or [DEFAULT_ENGINE])]
    return f"{' and '.join(names)} stand-in{'s' if len(names) > 1 else ''}"
