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


def _numbers(w: pd.DataFrame, column: str) -> pd.Series:
    """A column as numbers (blanks and words: NaN), all NaN when the file has no such column."""
    if column not in w:
        return pd.Series(math.nan, index=w.index, dtype=float)
    return pd.to_numeric(w[column], errors="coerce")


def decode_steps(windows: pd.DataFrame, variant: str) -> pd.DataFrame:
    """One row per decode window of `variant`: phase, running_req, step_ms, clean (see the module doc) and
    graph (the log line's `cuda graph:` flag, None where the line has none).
    Column at a time: a tune summarises its runs after every look, and a loop over rows cost most of it."""
    cols = ["phase", "running_req", "step_ms", "clean", "graph"]
    if windows is None or windows.empty or "variant" not in windows:
        return pd.DataFrame(columns=cols)
    w = windows[windows["variant"].astype(str) == variant]
    if w.empty:
        return pd.DataFrame(columns=cols)
    if "line" in w:
        w = w.assign(_line=pd.to_numeric(w["line"], errors="coerce")).sort_values("_line", kind="stable")
    kind = w["kind"].astype(str) if "kind" in w else pd.Series("None", index=w.index)
    bs, gen, acc = _numbers(w, "running_req"), _numbers(w, "gen_throughput"), _numbers(w, "accept_len")
    acc = acc.where(acc > 0, 1.0)  # no accept length (the baseline) or a nonsense one: one token a step
    step = bs * acc / gen * 1000.0
    # clean: the stats line before it on the server is a Decode line with the same running batch
    clean = (kind.shift(1) == "decode") & (bs.shift(1) == bs)
    keep = (kind == "decode") & (gen > 0) & (bs > 0)  # NaN compares False
    if not keep.any():
        return pd.DataFrame(columns=cols)
    # a column of empty cells reads back as float NaN: strings first, then the blanks
    phase = w["phase"].astype("string").fillna("").astype(str) if "phase" in w else \
        pd.Series("", index=w.index)
    graph = w["cuda_graph"].map(lambda v: v if isinstance(v, bool) else None) if "cuda_graph" in w else \
        pd.Series(None, index=w.index, dtype=object)
    return pd.DataFrame({"phase": phase[keep], "running_req": bs[keep].astype(int), "step_ms": step[keep],
                         "clean": clean[keep].astype(bool), "graph": graph[keep].astype(object)},
                        columns=cols).reset_index(drop=True)


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
