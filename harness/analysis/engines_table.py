"""One table across engines: each variant is compared with the baseline of its own engine, and where a plan
has a baseline on more than one engine, one cross-engine row per concurrency compares the baselines.

Accept length means the same on every engine (tokens committed per verify step, bonus token included,
prefill excluded); each engine converts its own counters (docs/vllm.md, "One accept length").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

import pandas as pd

from harness.analysis import verdicts
from harness.analysis.columns import SummaryRow
from harness.engines import get_engine


class Records(Protocol):
    """What a cross-engine row's interval reads of the summary being computed (summary_table.Table)."""

    requests: pd.DataFrame
    phases: pd.DataFrame
    equivalence: float
    min_steady_s: float

    @property
    def profiles(self) -> pd.DataFrame: ...


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




# what makes two speculative rows on different engines the same config (the baselines match on none)
SAME_CONFIG = ("algorithm", "drafter", "num_steps", "eagle_topk", "num_draft_tokens")


# the other row's columns that judge it against its own baseline: none of them holds for the cross row
CLEARED = ("speedup_ci_low", "speedup_ci_high", "ci_method", "ci_level", "verdict_reason", "needs_repeats",
           "needs_s", "decide_look", "decode_step_speedup", "output_match", "first_divergence",
           "lossless_verdict", "divergence_rate", "control_divergence_rate", "max_divergence_margin",
           "lossless_detail", "break_even_batch", "too_short")


def _config_key(row: pd.Series) -> tuple:
    return tuple("" if pd.isna(row.get(c)) else str(row.get(c)) for c in SAME_CONFIG)


def with_cross_engine_rows(df: pd.DataFrame, table: Records | None = None) -> pd.DataFrame:
    """Append, per concurrency and sampling arm, one row per further engine against the first engine (the
    plan's order): the baselines, and each speculative config (same drafter, algorithm, steps, top-k, draft
    tokens) that both engines ran. Variant "<other> vs <first>", speedup = tok/s(other) / tok/s(first);
    with the summary's `table` (summary_table.Table) also its interval and what it says
    (cross_engine_interval, by the speedup's own methods in verdicts)."""
    if "engine" not in df or df.empty or "status" not in df:
        return df
    ran = df[df["status"].astype(str) != CROSS_STATUS]
    arms = _filled(ran["sampling"]) if "sampling" in ran else pd.Series("", index=ran.index)
    groups: dict[tuple, list[int]] = {}
    for (i, r), arm in zip(ran.iterrows(), arms, strict=True):
        key = ("",) if bool(r["baseline"]) else _config_key(r)  # ("",) sorts the baselines first
        groups.setdefault((int(r["concurrency"]), arm, key), []).append(i)
    rows = []
    for (conc, _arm, _key), idx in sorted(groups.items()):
        g = ran.loc[idx]
        engines = list(dict.fromkeys(g["engine"]))
        if len(engines) < 2:
            continue
        ref = g[g["engine"] == engines[0]].iloc[0]
        for other in engines[1:]:
            o = g[g["engine"] == other].iloc[0]
            speed = None
            if ref["tok_s"] and o["tok_s"] and not pd.isna(ref["tok_s"]) and not pd.isna(o["tok_s"]):
                speed = float(o["tok_s"]) / float(ref["tok_s"])
            row = {c: o.get(c) for c in df.columns}
            row.update({"variant": f"{o['variant']} vs {ref['variant']}",
                        "engine": f"{other} vs {engines[0]}", "baseline": False, "status": CROSS_STATUS,
                        "speedup": speed, "verdict": CROSS_STATUS, "compared_with": str(ref["variant"]),
                        "slower_than_baseline": None, "break_even_accept_len": None})
            for col in CLEARED:
                if col in row:
                    row[col] = None
            if table is not None and speed is not None:
                row.update({k: v for k, v in cross_engine_interval(
                    table.requests, table.phases, table.profiles, str(o["variant"]), str(ref["variant"]),
                    conc, speed, equivalence=table.equivalence, min_steady_s=table.min_steady_s).items()
                    if k in df.columns})
            rows.append(row)
    if not rows:
        return df
    return pd.concat([df, pd.DataFrame(rows, columns=df.columns)], ignore_index=True)


def cross_engine_interval(requests: pd.DataFrame, phases: pd.DataFrame, profiles: pd.DataFrame, name: str,
                          ref: str, conc: int, ratio: float, *,
                          equivalence: float = verdicts.DEFAULT_EQUIVALENCE,
                          min_steady_s: float = verdicts.DEFAULT_MIN_STEADY_S) -> dict[str, Any]:
    """The interval of a cross-engine row (tok/s of `name` on one engine over `ref`'s on another, same
    prompts and concurrency), by the speedup's own methods, and what it says: `name`'s engine faster, slower,
    equivalent or undecided against `ref`'s. Its verdict column stays "cross-engine"; the word leads
    verdict_reason."""
    prof = profiles[(profiles["variant"] == name) & (profiles["concurrency"] == conc)]
    reps = set(prof["repeat"])
    prof_r = profiles[(profiles["variant"] == ref) & (profiles["concurrency"] == conc)
                      & profiles["repeat"].isin(reps)]
    if prof.empty or prof_r.empty or not ratio or math.isnan(ratio):
        return {}
    rq = verdicts._keep_repeats(requests, [name, ref], conc, reps)
    ph = verdicts._keep_repeats(phases, [name, ref], conc, reps)
    est, method, basis, _ = verdicts._interval(rq, ph, prof, prof_r, name, ref, conc)
    out: dict[str, Any] = {"ci_method": method, "ci_level": 0.95}
    low = high = None
    if est is not None and est[0] > 0:
        low = out["speedup_ci_low"] = ratio * est[1] / est[0]
        high = out["speedup_ci_high"] = ratio * est[2] / est[0]
    short = verdicts._too_short(prof, conc, min_steady_s)
    short_r = verdicts._too_short(prof_r, conc, min_steady_s)
    word, reason = verdicts._verdict(low, high, method, basis, short, short_r, equivalence=equivalence)
    out["verdict_reason"] = f"{word}: {reason}"
    return out


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
