"""Step time per running batch size, from the server's decode windows (server_windows.csv).

A decode window covers `decode_log_interval` decode (or verify) steps; its gen throughput is the tokens
committed in the window over the wall time since the previous Decode line, and its accept len the
tokens per request per step. With a constant batch of `running_req` requests:

    step_ms = running_req * (accept_len or 1) / gen_throughput * 1000

The wall time of a window also holds any prefill (and idle time) since the previous Decode line, and the
batch only stays constant when no request joined (a join needs a prefill) or left. So a window counts as
clean when the stats line just before it, on the same server, is a Decode line with the same running
batch. Per batch size the step time is the median over clean windows; where a batch size has none, the
20th percentile over all its windows (contamination only lengthens a window; the engine's own
step-time benchmark takes the same percentile of its recorded step times).
"""

from __future__ import annotations

import math

import pandas as pd

CLEAN_QUANTILE = 0.5
FALLBACK_QUANTILE = 0.2


def _window_step_ms(row: pd.Series) -> float | None:
    gen = pd.to_numeric(row.get("gen_throughput"), errors="coerce")
    bs = pd.to_numeric(row.get("running_req"), errors="coerce")
    if pd.isna(gen) or pd.isna(bs) or gen <= 0 or bs <= 0:
        return None
    acc = pd.to_numeric(row.get("accept_len"), errors="coerce")
    acc = 1.0 if pd.isna(acc) or acc <= 0 else float(acc)
    return float(bs) * acc / float(gen) * 1000.0


def decode_steps(windows: pd.DataFrame, variant: str) -> pd.DataFrame:
    """One row per decode window of `variant`: phase, running_req, step_ms, clean (see the module doc)."""
    cols = ["phase", "running_req", "step_ms", "clean"]
    if windows is None or windows.empty or "variant" not in windows:
        return pd.DataFrame(columns=cols)
    w = windows[windows["variant"].astype(str) == variant].copy()
    if w.empty:
        return pd.DataFrame(columns=cols)
    if "line" in w:
        w["_line"] = pd.to_numeric(w["line"], errors="coerce")
        w = w.sort_values("_line", kind="stable")
    # a column of empty cells reads back as float NaN: strings first, then the blanks
    w["phase"] = w["phase"].astype("string").fillna("").astype(str) if "phase" in w else ""
    out = []
    prev_kind, prev_bs = None, None
    for _, row in w.iterrows():
        kind = str(row.get("kind"))
        bs = pd.to_numeric(row.get("running_req"), errors="coerce")
        if kind == "decode":
            step = _window_step_ms(row)
            if step is not None:
                clean = prev_kind == "decode" and prev_bs == bs
                out.append({"phase": row["phase"], "running_req": int(bs), "step_ms": step, "clean": clean})
        prev_kind, prev_bs = kind, bs
    return pd.DataFrame(out, columns=cols)


def step_ms_by_batch(windows: pd.DataFrame, variant: str, phases: set[str] | None = None) -> dict[int, float]:
    """Per running batch size, the decode (baseline) or verify (speculative) step time in ms of `variant`,
    from its Decode windows; only windows tagged with one of `phases` when given."""
    steps = decode_steps(windows, variant)
    if phases is not None:
        steps = steps[steps["phase"].isin(phases)]
    out: dict[int, float] = {}
    for bs, g in steps.groupby("running_req"):
        clean = g[g["clean"].astype(bool)]["step_ms"]
        value = clean.quantile(CLEAN_QUANTILE) if len(clean) else g["step_ms"].quantile(FALLBACK_QUANTILE)
        if not math.isnan(value):
            out[int(bs)] = float(value)
    return dict(sorted(out.items()))


def windows_by_batch(windows: pd.DataFrame, variant: str, phases: set[str] | None = None) -> dict[int, int]:
    """How many decode windows of `variant` ran at each batch size (a proxy for decode time spent there)."""
    steps = decode_steps(windows, variant)
    if phases is not None:
        steps = steps[steps["phase"].isin(phases)]
    return {int(k): int(v) for k, v in steps.groupby("running_req").size().items()}
