"""Is a speedup real? The interval, the verdict and the minimum-measurement guard of each summary row.

Per phase (one replay `suite@cN#rR`), from the requests' [t_send, t_end] intervals (harness.analysis.stats):
  mean_in_flight  time-averaged requests in flight over the phase (first send to last end);
  steady state    from the first instant all N slots are busy to the instant the tail starts;
  steady_tok_s    output tokens that arrived inside the steady state / its length.
Per row (variant, concurrency) against the baseline row at the same concurrency, one interval method:
  bootstrap-prompts  concurrency 1: paired bootstrap over prompts (each prompt's tokens and
                     e2e time summed over repeats, in both arms);
  t-repeats          concurrency > 1, >= 2 repeats in both arms: t interval of the mean log ratio of the
                     per-repeat tok/s, paired by repeat (same prompts, same order);
  bootstrap-windows  concurrency > 1, one repeat: bootstrap of steady-state window tok/s, arms drawn
                     independently; it sees only noise within a run, never between runs.
Verdict: faster when the interval's low end is above 1, slower when its high end is below 1, else
within-noise; a row whose phases (or the baseline's) are too short to decide is within-noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import stats
from harness.inputs.run_settings import MIN_REQUESTS_PER_SLOT

DEFAULT_MIN_STEADY_S = 10.0
VERDICT_COLUMNS = ["repeats", "mean_in_flight", "steady_s", "steady_tok_s", "too_short", "speedup_ci_low",
                   "speedup_ci_high", "ci_method", "verdict", "verdict_reason"]


def _arrivals(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Every output token's arrival time (perf_counter seconds) in these requests, one entry per chunk."""
    times: list[float] = []
    tokens: list[float] = []
    for t0, offs, toks, first, end, n in zip(rows["t_send"], rows.get("chunk_offsets_ms", [None] * len(rows)),
                                              rows.get("chunk_tokens", [None] * len(rows)), rows["t_first"],
                                              rows["t_end"], rows["output_tokens"], strict=True):
        if isinstance(offs, str) and isinstance(toks, str) and offs.strip():
            times += [float(t0) + float(x) / 1000.0 for x in offs.split()]
            tokens += [float(x) for x in toks.split()]
        elif n == n and n and first == first and first is not None:  # no chunk data: tokens spread evenly
            k = int(n)
            times += list(np.linspace(float(first), float(end), k))
            tokens += [1.0] * k
    return np.array(times), np.array(tokens)


def phase_profiles(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, phase): concurrency, repeat, requests, the in-flight profile, steady tokens
    and the steady-state window rates."""
    cols = ["variant", "phase", "concurrency", "repeat", "requests", "span_s", "busy_s", "mean_in_flight",
            "max_in_flight", "steady_s", "steady_tokens", "window_tok_s"]
    if requests.empty or "t_send" not in requests:
        return pd.DataFrame(columns=cols)
    rq = requests.copy()
    for c in ("t_send", "t_first", "t_end", "output_tokens"):
        rq[c] = pd.to_numeric(rq[c], errors="coerce")
    out = []
    for (variant, phase), g in rq.groupby(["variant", "phase"], sort=False):
        g = g[g["t_send"].notna() & g["t_end"].notna()]
        conc = int(g["concurrency"].iloc[0]) if len(g) else 0
        prof = stats.in_flight(g["t_send"].to_numpy(), g["t_end"].to_numpy(), conc)
        ok = g[g["ok"].astype(str) == "True"]
        at, tok = _arrivals(ok)
        steady_tokens, rates = 0.0, np.array([])
        if prof.steady_s > 0:
            steady_tokens = stats.tokens_in(at, tok, prof.steady_start, prof.steady_end)
            rates = stats.window_rates(at, tok, prof.steady_start, prof.steady_end)
        out.append({"variant": str(variant), "phase": str(phase), "concurrency": conc,
                    "repeat": int(g["repeat"].iloc[0]) if len(g) else 0, "requests": len(g),
                    "span_s": prof.span_s, "busy_s": prof.mean_in_flight * prof.span_s,
                    "mean_in_flight": prof.mean_in_flight, "max_in_flight": prof.max_in_flight,
                    "steady_s": prof.steady_s, "steady_tokens": steady_tokens, "window_tok_s": rates})
    return pd.DataFrame(out, columns=cols)


def _too_short(prof: pd.DataFrame, conc: int, min_steady_s: float) -> str | None:
    """Why this arm's phases cannot decide, or None."""
    if prof.empty:
        return "no timed requests"
    if int(prof["max_in_flight"].max()) < conc:
        return f"never {conc} requests in flight (at most {int(prof['max_in_flight'].max())}): not a c{conc} load"
    few = prof[prof["requests"] < MIN_REQUESTS_PER_SLOT * conc]
    if not few.empty:
        return f"{int(few['requests'].min())} requests in a phase, fewer than {MIN_REQUESTS_PER_SLOT} x {conc}"
    short = prof[prof["steady_s"] < min_steady_s]
    if not short.empty:
        return f"steady state of {float(short['steady_s'].min()):.1f} s, under {min_steady_s:g} s"
    return None


def _per_prompt(requests: pd.DataFrame, name: str, conc: int) -> pd.DataFrame:
    r = requests[(requests["variant"] == name) & (requests["concurrency"] == conc)
                 & (requests["ok"].astype(str) == "True")]
    r = r.assign(tok=pd.to_numeric(r["output_tokens"], errors="coerce"),
                 secs=pd.to_numeric(r["t_end"], errors="coerce") - pd.to_numeric(r["t_send"], errors="coerce"))
    key = ["suite", "prompt_id"] if "suite" in r else ["prompt_id"]
    return r.dropna(subset=["tok", "secs"]).groupby(key)[["tok", "secs"]].sum()


def _per_repeat_tok_s(phases: pd.DataFrame, name: str, conc: int) -> pd.Series:
    ph = phases[(phases["variant"] == name) & (phases["concurrency"] == conc)]
    g = ph.assign(tok=pd.to_numeric(ph["output_tokens"]), wall=pd.to_numeric(ph["wall_s"])).groupby("repeat")
    s = g["tok"].sum() / g["wall"].sum()
    return s[s.notna() & (s > 0)]


def _interval(requests: pd.DataFrame, phases: pd.DataFrame, prof_v: pd.DataFrame, prof_b: pd.DataFrame,
              name: str, base: str, conc: int) -> tuple[tuple[float, float, float] | None, str, str]:
    """(estimate, low, high) or None, the method, and what it rests on."""
    if conc == 1:
        v, b = _per_prompt(requests, name, conc), _per_prompt(requests, base, conc)
        common = v.index.intersection(b.index)
        v, b = v.loc[common], b.loc[common]
        est = stats.paired_bootstrap_ratio(v["tok"].to_numpy(), v["secs"].to_numpy(), b["tok"].to_numpy(),
                                           b["secs"].to_numpy())
        return est, "bootstrap-prompts", f"{len(common)} paired prompts"
    rv, rb = _per_repeat_tok_s(phases, name, conc), _per_repeat_tok_s(phases, base, conc)
    common = rv.index.intersection(rb.index)
    if len(common) >= 2:
        return stats.t_interval_log((rv.loc[common] / rb.loc[common]).to_numpy()), "t-repeats", \
            f"{len(common)} paired repeats"
    wv = np.concatenate([w for w in prof_v["window_tok_s"] if len(w)] or [np.array([])])
    wb = np.concatenate([w for w in prof_b["window_tok_s"] if len(w)] or [np.array([])])
    return stats.two_sample_bootstrap_ratio(wv, wb), "bootstrap-windows", \
        "steady-state windows of 1 repeat: noise between runs not included"


def add_verdicts(df: pd.DataFrame, requests: pd.DataFrame, phases: pd.DataFrame, *,
                 min_steady_s: float = DEFAULT_MIN_STEADY_S) -> None:
    """Fill VERDICT_COLUMNS in the summary (its `speedup` and `baseline` are set) and make
    `slower_than_baseline` follow the verdict."""
    profiles = phase_profiles(requests)
    for col in VERDICT_COLUMNS:
        df[col] = None
    base = df[df["baseline"].astype(bool)]
    for i, row in df.iterrows():
        name, conc = str(row["variant"]), int(row["concurrency"])
        prof = profiles[(profiles["variant"] == name) & (profiles["concurrency"] == conc)]
        if prof.empty:
            continue
        steady = float(prof["steady_s"].sum())
        df.at[i, "repeats"] = int(prof["repeat"].nunique())
        df.at[i, "mean_in_flight"] = float(prof["busy_s"].sum() / prof["span_s"].sum()) \
            if prof["span_s"].sum() > 0 else None
        df.at[i, "steady_s"] = float(prof["steady_s"].min())
        df.at[i, "steady_tok_s"] = float(prof["steady_tokens"].sum()) / steady if steady > 0 else None
        short = _too_short(prof, conc, min_steady_s)
        df.at[i, "too_short"] = short is not None
        b = base[base["concurrency"] == conc]
        if row["baseline"] or b.empty or row["speedup"] is None or pd.isna(row["speedup"]):
            if row["baseline"]:
                df.at[i, "verdict"], df.at[i, "verdict_reason"] = "baseline", short or ""
            continue
        bname = str(b.iloc[0]["variant"])
        prof_b = profiles[(profiles["variant"] == bname) & (profiles["concurrency"] == conc)]
        short_b = _too_short(prof_b, conc, min_steady_s)
        est, method, basis = _interval(requests, phases, prof, prof_b, name, bname, conc)
        speedup = float(row["speedup"])
        df.at[i, "ci_method"] = method
        if est is not None and est[0] > 0:
            df.at[i, "speedup_ci_low"] = speedup * est[1] / est[0]
            df.at[i, "speedup_ci_high"] = speedup * est[2] / est[0]
        df.at[i, "verdict"], df.at[i, "verdict_reason"] = _verdict(
            df.at[i, "speedup_ci_low"], df.at[i, "speedup_ci_high"], method, basis, short, short_b)
    df["slower_than_baseline"] = [None if r["baseline"] or r["verdict"] is None else r["verdict"] == "slower"
                                  for _, r in df.iterrows()]


def _verdict(low: Any, high: Any, method: str, basis: str, short: str | None,
             short_b: str | None) -> tuple[str, str]:
    if short or short_b:
        return "within-noise", "too short to decide: " + (short or f"baseline: {short_b}")
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return "within-noise", f"no interval ({method}, {basis})"
    ci = f"95% CI {low:.2f}-{high:.2f}x ({method}, {basis})"
    if low > 1.0:
        return "faster", ci
    if high < 1.0:
        return "slower", ci
    return "within-noise", ci + " includes 1.00x"


def half_width_pct(row: Any) -> float | None:
    """Half the interval's width in percent of the speedup (what run.until_ci_pct compares)."""
    low, high, s = row.get("speedup_ci_low"), row.get("speedup_ci_high"), row.get("speedup")
    try:
        low, high, s = float(low), float(high), float(s)
    except (TypeError, ValueError):
        return None
    return None if any(math.isnan(x) for x in (low, high, s)) or s <= 0 else 50.0 * (high - low) / s


def needing_repeats(summary: pd.DataFrame, until_ci_pct: float) -> set[str]:
    """Variants with a row whose interval is missing, rests on one repeat above concurrency 1, or is wider
    than until_ci_pct. Rows too short to decide are left out: more repeats do not lengthen a phase."""
    out: set[str] = set()
    for _, r in summary.iterrows():
        if r.get("baseline") is True or str(r.get("baseline")) == "True" or r.get("verdict") is None:
            continue
        if r.get("too_short") is True or str(r.get("too_short")) == "True":
            continue
        width = half_width_pct(r)
        if width is None or r.get("ci_method") == "bootstrap-windows" or width > until_ci_pct:
            out.add(str(r["variant"]))
    return out
