"""Is a speedup real? The interval, the verdict and the minimum-measurement guard of each summary row.

Per phase (one replay `suite@cN#rR`), from the requests' [t_send, t_end] intervals (harness.analysis.stats):
  mean_in_flight  time-averaged requests in flight over the phase (first send to last end);
  steady state    from the first instant all N slots are busy to the instant the tail starts;
  steady_tok_s    output tokens that arrived inside the steady state / its length.
Per row (variant, concurrency) against the baseline row at the same concurrency, one interval method, over
the repeats both arms have (and, under run.stop: decided, those of the look the row stopped at):
  bootstrap-prompts  concurrency 1: paired bootstrap over prompts (each prompt's tokens and
                     e2e time summed over repeats and passes, in both arms);
  t-repeats          concurrency > 1, >= 2 repeats in both arms: t interval of the mean log ratio of the
                     per-repeat tok/s, paired by repeat (same prompts, same order);
  bootstrap-windows  concurrency > 1, one repeat: bootstrap of steady-state window tok/s, arms drawn
                     independently; it sees only noise within a run, never between runs, so it never decides.
The interval's level is 95 %, or the stopping rule's look level (harness.analysis.sequential).
Verdicts (docs/metrics.md):
  faster / slower  the interval lies wholly above / below 1.00x (and not wholly inside the band);
  equivalent       the whole interval lies inside 1.00x +- run.equivalence (3 %): decided, speculation
                   does not pay here;
  undecided        the interval is too wide for either; the reason says what would decide it;
  too-short        a phase of this row or of its baseline is too short to decide, whatever its interval.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import sequential, stats
from harness.analysis.columns import SummaryRow, is_true
from harness.inputs.run_settings import MIN_REQUESTS_PER_SLOT

DEFAULT_MIN_STEADY_S = 10.0
DEFAULT_EQUIVALENCE = 0.03
DECIDED = ("faster", "slower", "equivalent")
VERDICTS = (*DECIDED, "undecided", "too-short")
VERDICT_COLUMNS = ["repeats", "mean_in_flight", "steady_s", "steady_tok_s", "too_short", "speedup_ci_low",
                   "speedup_ci_high", "ci_method", "verdict", "verdict_reason", "ci_level", "decide_look",
                   "needs_repeats", "needs_s"]


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
        ok = g[g["ok"].eq(True)]
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
        most = int(prof["max_in_flight"].max())
        return f"never {conc} requests in flight (at most {most}): not a c{conc} load"
    few = prof[prof["requests"] < MIN_REQUESTS_PER_SLOT * conc]
    if not few.empty:
        least = int(few["requests"].min())
        return f"{least} requests in a phase, fewer than {MIN_REQUESTS_PER_SLOT} x {conc}"
    short = prof[prof["steady_s"] < min_steady_s]
    if not short.empty:
        return f"steady state of {float(short['steady_s'].min()):.1f} s, under {min_steady_s:g} s"
    return None


def _replays(requests: pd.DataFrame, name: str, conc: int) -> pd.DataFrame:
    r = requests[(requests["variant"] == name) & (requests["concurrency"] == conc) & requests["ok"].eq(True)]
    secs = pd.to_numeric(r["t_end"], errors="coerce") - pd.to_numeric(r["t_send"], errors="coerce")
    r = r.assign(tok=pd.to_numeric(r["output_tokens"], errors="coerce"), secs=secs)
    return r.dropna(subset=["tok", "secs"])


def _per_prompt_pair(requests: pd.DataFrame, name: str, base: str, conc: int
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both arms' tokens and seconds per prompt, over the replays (repeat, pass, turn) both arms made: a
    variant whose phases cycled the suite fewer times is paired with the same passes of the baseline."""
    v, b = _replays(requests, name, conc), _replays(requests, base, conc)
    key = ["suite", "prompt_id"] if "suite" in v else ["prompt_id"]
    replay = [c for c in ("repeat", "replay_pass", "request_id") if c in v and c in b]
    if replay:
        common = v.set_index(key + replay).index.intersection(b.set_index(key + replay).index)
        v = v.set_index(key + replay).loc[common].reset_index()
        b = b.set_index(key + replay).loc[common].reset_index()
    v, b = v.groupby(key)[["tok", "secs"]].sum(), b.groupby(key)[["tok", "secs"]].sum()
    common = v.index.intersection(b.index)
    return v.loc[common], b.loc[common]


def _between_repeats(requests: pd.DataFrame, name: str, base: str, conc: int,
                     est: tuple[float, float, float] | None, prompts: int, level: float
                     ) -> tuple[tuple[float, float, float], float, int] | None:
    """The prompt bootstrap's interval widened by the spread between repeats (stats.between_repeat_variance),
    or None where there is nothing to add: one repeat, repeats that agree within their prompts' noise.

    Each repeat's paired ratio and its prompt-bootstrap sd give tau^2; the pooled log ratio's variance becomes
    sd_prompts^2 + tau^2 / repeats, at the same t quantile. Two repeats that disagree in direction (a load
    spike on the machine during one arm's phase) no longer decide a row their prompts alone would have."""
    if est is None or est[0] <= 0 or "repeat" not in requests or prompts < 2:
        return None
    rep = pd.to_numeric(requests["repeat"], errors="coerce")
    at = requests["concurrency"] == conc
    reps = sorted(set(rep[at & (requests["variant"] == name)].dropna())
                  & set(rep[at & (requests["variant"] == base)].dropna()))
    if len(reps) < 2:
        return None
    ys, vs = [], []
    for r in reps:
        v, b = _per_prompt_pair(requests[rep == r], name, base, conc)
        got = stats.paired_bootstrap_log_sd(v["tok"].to_numpy(), v["secs"].to_numpy(), b["tok"].to_numpy(),
                                            b["secs"].to_numpy())
        if got is None:
            return None
        ys.append(got[0])
        vs.append(got[1] ** 2)
    tau2 = stats.between_repeat_variance(ys, vs)
    if tau2 <= 0:
        return None
    q = stats.t_quantile(level, prompts - 1)
    sd = (math.log(est[2]) - math.log(est[1])) / (2 * q)
    half = q * math.sqrt(sd**2 + tau2 / len(reps))
    return (est[0], est[0] * math.exp(-half), est[0] * math.exp(half)), math.sqrt(tau2), len(reps)


def _per_repeat_tok_s(phases: pd.DataFrame, name: str, conc: int) -> pd.Series:
    ph = phases[(phases["variant"] == name) & (phases["concurrency"] == conc)]
    g = ph.assign(tok=pd.to_numeric(ph["output_tokens"]), wall=pd.to_numeric(ph["wall_s"])).groupby("repeat")
    s = g["tok"].sum() / g["wall"].sum()
    return s[s.notna() & (s > 0)]


def _interval(requests: pd.DataFrame, phases: pd.DataFrame, prof_v: pd.DataFrame, prof_b: pd.DataFrame,
              name: str, base: str, conc: int, level: float = 0.95
              ) -> tuple[tuple[float, float, float] | None, str, str, int]:
    """(estimate, low, high) or None, the method, what it rests on, and its units (prompts or repeats)."""
    if conc == 1:
        v, b = _per_prompt_pair(requests, name, base, conc)
        est = stats.paired_bootstrap_ratio(v["tok"].to_numpy(), v["secs"].to_numpy(), b["tok"].to_numpy(),
                                           b["secs"].to_numpy(), level=level)
        widened = _between_repeats(requests, name, base, conc, est, len(v), level)
        if widened is not None:
            est, tau, reps = widened
            basis = f"{len(v)} paired prompts over {reps} repeats that differ beyond their prompts' noise " \
                f"(tau {tau:.1%})"
            return est, "bootstrap-prompts+repeats", basis, reps
        return est, "bootstrap-prompts", f"{len(v)} paired prompts", len(v)
    rv, rb = _per_repeat_tok_s(phases, name, conc), _per_repeat_tok_s(phases, base, conc)
    common = rv.index.intersection(rb.index)
    if len(common) >= 2:
        return stats.t_interval_log((rv.loc[common] / rb.loc[common]).to_numpy(), level), "t-repeats", \
            f"{len(common)} paired repeats", len(common)
    wv = np.concatenate([w for w in prof_v["window_tok_s"] if len(w)] or [np.array([])])
    wb = np.concatenate([w for w in prof_b["window_tok_s"] if len(w)] or [np.array([])])
    return stats.two_sample_bootstrap_ratio(wv, wb, level=level), "bootstrap-windows", \
        "steady-state windows of 1 repeat: noise between runs not included", 1


def _only_repeats(frame: pd.DataFrame, repeats: int | None) -> pd.DataFrame:
    if repeats is None or frame.empty or "repeat" not in frame:
        return frame
    return frame[pd.to_numeric(frame["repeat"], errors="coerce") <= repeats]


def row_verdict(row: SummaryRow, baselines: pd.DataFrame, requests: pd.DataFrame, phases: pd.DataFrame,
                profiles: pd.DataFrame, *, min_steady_s: float = DEFAULT_MIN_STEADY_S,
                equivalence: float = DEFAULT_EQUIVALENCE,
                looks: dict[tuple[str, int], dict[str, Any]] | None = None) -> dict[str, Any]:
    """VERDICT_COLUMNS of one summary row (its `speedup` and `baseline` set) against the baseline row at its
    concurrency in `baselines`; `profiles`: phase_profiles(requests). `looks`: the stopping rule's record per
    (variant, concurrency) (decisions.jsonl: the look's level and the repeats it covered); without one a row
    is judged once, at 95 %, over every repeat. A column left out is None."""
    out: dict[str, Any] = {}
    name, conc = str(row["variant"]), int(row["concurrency"])
    look = (looks or {}).get((name, conc)) or {}
    upto = look.get("repeats")
    level = float(look.get("level", 0.95))
    prof = _only_repeats(profiles[(profiles["variant"] == name) & (profiles["concurrency"] == conc)], upto)
    if prof.empty:
        return out
    steady = float(prof["steady_s"].sum())
    out["repeats"] = int(prof["repeat"].nunique())
    span = prof["span_s"].sum()
    out["mean_in_flight"] = float(prof["busy_s"].sum() / span) if span > 0 else None
    out["steady_s"] = float(prof["steady_s"].min())
    out["steady_tok_s"] = float(prof["steady_tokens"].sum()) / steady if steady > 0 else None
    short = _too_short(prof, conc, min_steady_s)
    out["too_short"] = short is not None
    b = baselines[baselines["concurrency"] == conc]
    if row["baseline"] or b.empty or row["speedup"] is None or pd.isna(row["speedup"]):
        if row["baseline"]:
            out["verdict"], out["verdict_reason"] = "baseline", short or ""
        return out
    bname = str(b.iloc[0]["variant"])
    reps = set(prof["repeat"])  # the baseline's repeats this row pairs with
    prof_b = profiles[(profiles["variant"] == bname) & (profiles["concurrency"] == conc)
                      & profiles["repeat"].isin(reps)]
    short_b = _too_short(prof_b, conc, min_steady_s)
    rq = _keep_repeats(requests, [name, bname], conc, reps)
    ph = _keep_repeats(phases, [name, bname], conc, reps)
    est, method, basis, units = _interval(rq, ph, prof, prof_b, name, bname, conc, level)
    speedup = float(row["speedup"])
    out["ci_method"] = method
    out["ci_level"] = level
    if look:
        out["decide_look"] = f"{look.get('look')}/{look.get('looks')}"
    low = high = None
    if est is not None and est[0] > 0:
        low = out["speedup_ci_low"] = speedup * est[1] / est[0]
        high = out["speedup_ci_high"] = speedup * est[2] / est[0]
    verdict, reason = _verdict(low, high, method, basis, short, short_b, equivalence=equivalence, level=level)
    if verdict == "undecided":
        need = _need(low, high, speedup, method, units, equivalence)
        if need is not None:
            per_unit = _unit_seconds(ph, [name, bname], conc, method)
            out["needs_repeats"] = need.units if method != "bootstrap-prompts" else None
            out["needs_s"] = round(per_unit * need.more, 1) if per_unit and method != "bootstrap-prompts" \
                else None
            reason += "; " + _need_words(need, method, per_unit, look)
    elif verdict == "too-short":
        reason += "; " + _short_fix(short or short_b or "", conc)
    out["verdict"], out["verdict_reason"] = verdict, reason
    return out


def _keep_repeats(frame: pd.DataFrame, names: list[str], conc: int, reps: set) -> pd.DataFrame:
    """`frame` without the two arms' rows at `conc` from repeats outside `reps`."""
    if frame.empty or "repeat" not in frame:
        return frame
    out = (frame["variant"].isin(names) & (frame["concurrency"] == conc)
           & ~pd.to_numeric(frame["repeat"], errors="coerce").isin(reps))
    return frame[~out]


def _need(low: float | None, high: float | None, speedup: float, method: str, units: int, equivalence: float
          ) -> sequential.Need | None:
    if method == "bootstrap-windows":
        return sequential.Need(2, 1)  # a second repeat: the first interval that sees noise between runs
    if low is None or high is None or speedup <= 0:
        return None
    return sequential.units_needed(float(low), float(high), speedup, units, equivalence)


def _unit_seconds(phases: pd.DataFrame, names: list[str], conc: int, method: str) -> float | None:
    """Seconds one more repeat costs: both arms' mean phase wall time at this concurrency."""
    if phases.empty or method == "bootstrap-prompts":
        return None
    ph = phases[phases["variant"].isin(names) & (phases["concurrency"] == conc)]
    walls = pd.to_numeric(ph["wall_s"], errors="coerce").groupby(ph["variant"]).mean()
    return float(walls.sum()) if len(walls) else None


def _need_words(need: sequential.Need, method: str, per_unit: float | None,
                look: dict[str, Any] | None = None) -> str:
    """What would decide the row, and the setting that gets it: under the stopping rule (`look`, the row's
    decisions.jsonl record) that ended at its last look, the cap it ran into, not the rule it already ran."""
    if method == "bootstrap-prompts":
        return (f"needs ~{need.units} paired prompts ({need.more} more prompts in the suite; repeats replay "
                "the same ones)")
    cost = f", ~{per_unit * need.more:.0f} s" if per_unit else ""
    if look and look.get("looks") and look.get("look") == look.get("looks"):
        how = f"the stopping rule ended at its last look, run.max_repeats {look.get('repeats')}: " \
            f"raise it to {need.units}"
    elif look:
        how = "the stopping rule's next looks add them"
    else:
        how = "run.stop: decided adds them"
    return f"needs ~{need.units} repeats ({need.more} more{cost}; {how})"


def _short_fix(why: str, conc: int) -> str:
    if "requests in a phase" in why:
        return (f"needs >= {MIN_REQUESTS_PER_SLOT * conc} requests per phase (phase sizing cycles the suite; "
                "raise run.max_phase_s)")
    if "never" in why:
        return f"needs {conc} requests in flight: more prompts than {conc} (or a lower concurrency)"
    return "needs a longer steady state: raise run.max_phase_s (phase sizing cycles the suite) or add prompts"


def level_label(level: object) -> str:
    try:
        pct = 100.0 * float(level)
    except (TypeError, ValueError):
        return "95%"
    return f"{pct:.1f}".rstrip("0").rstrip(".") + "%"


def _verdict(low: float | None, high: float | None, method: str, basis: str, short: str | None,
             short_b: str | None, *, equivalence: float = DEFAULT_EQUIVALENCE, level: float = 0.95
             ) -> tuple[str, str]:
    if short or short_b:
        return "too-short", "too short to decide: " + (short or f"baseline: {short_b}")
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return "undecided", f"no interval ({method}, {basis})"
    ci = f"{level_label(level)} CI {low:.2f}-{high:.2f}x ({method}, {basis})"
    if method == "bootstrap-windows":
        return "undecided", ci + ": one repeat cannot see the noise between runs"
    if 1.0 - equivalence <= low and high <= 1.0 + equivalence:
        return "equivalent", ci + f" lies inside the +-{equivalence:.0%} band"
    if low > 1.0:
        return "faster", ci
    if high < 1.0:
        return "slower", ci
    return "undecided", ci + f" includes 1.00x and leaves the +-{equivalence:.0%} band"


def is_decided(verdict: object) -> bool:
    return str(verdict) in DECIDED


def half_width_pct(row: SummaryRow) -> float | None:
    """Half the interval's width in percent of the speedup (what run.until_ci_pct compares)."""
    low, high, s = row.get("speedup_ci_low"), row.get("speedup_ci_high"), row.get("speedup")
    try:
        low, high, s = float(low), float(high), float(s)
    except (TypeError, ValueError):
        return None
    return None if any(math.isnan(x) for x in (low, high, s)) or s <= 0 else 50.0 * (high - low) / s


def undecided_rows(summary: pd.DataFrame) -> dict[tuple[str, int], int]:
    """(variant, concurrency) of every speculative row the stopping rule may still decide -> the repeats its
    reason says would decide it (0: unknown). too-short rows are left out: more repeats do not lengthen a
    phase (phase sizing already ran to run.max_phase_s)."""
    out: dict[tuple[str, int], int] = {}
    for _, r in summary.iterrows():
        if str(r.get("verdict")) != "undecided" or is_true(r.get("baseline")):
            continue
        need = r.get("needs_repeats")
        key = (str(r["variant"]), int(r["concurrency"]))
        out[key] = int(need) if need is not None and need == need else 0
    return out


def needing_repeats(summary: pd.DataFrame, until_ci_pct: float) -> set[str]:
    """Variants with a row whose interval is missing, rests on one repeat above concurrency 1, or is wider
    than until_ci_pct. Rows too short to decide are left out: more repeats do not lengthen a phase."""
    out: set[str] = set()
    for _, r in summary.iterrows():
        if is_true(r.get("baseline")) or r.get("verdict") is None or is_true(r.get("too_short")):
            continue
        width = half_width_pct(r)
        if width is None or r.get("ci_method") == "bootstrap-windows" or width > until_ci_pct:
            out.add(str(r["variant"]))
    return out
