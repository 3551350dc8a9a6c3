"""Request-rate phases (`run.request_rate`): per (variant, rate) throughput, latency, goodput under the
plan's SLOs and the speedup against the baseline at the same rate (where speculation stops paying); and
acceptance by turn of live multi-turn conversations.

Closed-loop rows of summary.csv stay keyed by concurrency: the open-loop phases (`suite@r8#r1`) are taken
out of them here and tabled on their own (summary_by_rate.csv).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

RATE_COLUMNS = ["variant", "request_rate", "requests", "errors", "output_tokens", "wall_s", "tok_s",
                "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tpot_mean_ms", "e2e_p50_ms", "e2e_mean_ms",
                "slo_met", "goodput_req_s", "speedup", "e2e_speedup", "tok_s_ratio", "pays"]
TURN_COLUMNS = ["variant", "category", "turn", "requests", "prompt_tokens_mean", "output_tokens",
                "decode_tok_s", "accept_len_requests"]


def is_rate_phase(phase: object) -> bool:
    """`suite@r8#r1` (open loop) rather than `suite@c8#r1`: the part after the last '@' starts with 'r'."""
    return isinstance(phase, str) and "@" in phase and phase.rsplit("@", 1)[1].startswith("r")


def closed_loop(*frames: pd.DataFrame) -> tuple[pd.DataFrame, ...]:
    """Each frame without the rows of request-rate phases (frames without a phase column pass as they are)."""
    return tuple(f[~f["phase"].map(is_rate_phase)] if not f.empty and "phase" in f else f for f in frames)


def _num(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


def tpot_ms(rows: pd.DataFrame) -> pd.Series:
    """Time per output token after the first, per request (vLLM's and bench_serving's TPOT)."""
    out = _num(rows["output_tokens"])
    return ((_num(rows["e2e_ms"]) - _num(rows["ttft_ms"])) / (out - 1)).where(out > 1)


def meets(rows: pd.DataFrame, slo: dict[str, Any] | None) -> pd.Series:
    """Per request: True when it met every limit of `slo` (ttft_ms, tpot_ms, e2e_ms); no SLO: all do."""
    ok = pd.Series(True, index=rows.index)
    for key, series in (("ttft_ms", _num(rows["ttft_ms"])), ("tpot_ms", tpot_ms(rows)),
                        ("e2e_ms", _num(rows["e2e_ms"]))):
        limit = (slo or {}).get(key)
        if limit is not None:
            ok &= series.fillna(math.inf if key != "tpot_ms" else 0.0) <= float(limit)
    return ok


def by_rate(requests: pd.DataFrame, phases: pd.DataFrame, variants: dict[str, dict[str, Any]],
            slo: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per (variant, request rate) over every repeat of the open-loop phases."""
    if requests.empty or "request_rate" not in requests:
        return pd.DataFrame(columns=RATE_COLUMNS)
    rq = requests[requests["phase"].map(is_rate_phase)].copy()
    if rq.empty:
        return pd.DataFrame(columns=RATE_COLUMNS)
    rq["request_rate"] = _num(rq["request_rate"])
    ph = phases[phases["phase"].map(is_rate_phase)] if not phases.empty else phases
    rows = []
    for (name, rate), g in rq.groupby(["variant", "request_rate"], sort=True):
        ok = g[g["ok"].eq(True)]
        pids = set(g["phase"])
        wall = float(_num(ph[(ph["variant"] == name) & ph["phase"].isin(pids)]["wall_s"]).sum()) \
            if not ph.empty else 0.0
        tokens = int(_num(ok["output_tokens"]).fillna(0).sum())
        tp = tpot_ms(ok) if not ok.empty else pd.Series(dtype=float)
        good = int(meets(ok, slo).sum()) if not ok.empty else 0
        rows.append({
            "variant": name, "request_rate": rate, "requests": len(ok), "errors": len(g) - len(ok),
            "output_tokens": tokens, "wall_s": wall, "tok_s": tokens / wall if wall > 0 else None,
            "ttft_p50_ms": _q(ok["ttft_ms"], 0.5), "ttft_p90_ms": _q(ok["ttft_ms"], 0.9),
            "tpot_p50_ms": _q(tp, 0.5), "tpot_mean_ms": _mean(tp),
            "e2e_p50_ms": _q(ok["e2e_ms"], 0.5), "e2e_mean_ms": _mean(ok["e2e_ms"]),
            "slo_met": good / len(g) if len(g) else None,
            "goodput_req_s": good / wall if wall > 0 else None,
        })
    df = pd.DataFrame(rows)
    base = next((n for n, m in variants.items() if m.get("baseline")), None)
    for col in ("speedup", "e2e_speedup", "tok_s_ratio", "pays"):
        df[col] = None
    if base is not None:
        for i, row in df.iterrows():
            b = df[(df["variant"] == base) & (df["request_rate"] == row["request_rate"])]
            if b.empty or row["variant"] == base:
                continue
            b0 = b.iloc[0]
            df.at[i, "speedup"] = _ratio(b0["tpot_mean_ms"], row["tpot_mean_ms"])
            df.at[i, "e2e_speedup"] = _ratio(b0["e2e_mean_ms"], row["e2e_mean_ms"])
            df.at[i, "tok_s_ratio"] = _ratio(row["tok_s"], b0["tok_s"])
            sp = df.at[i, "speedup"]
            df.at[i, "pays"] = None if sp is None else bool(sp > 1.0)
    return df[RATE_COLUMNS]


def by_turn(requests: pd.DataFrame, probe: pd.DataFrame | None = None) -> pd.DataFrame:
    """Acceptance by turn within each category (closed-loop and open-loop phases together). Per-request
    stats come from the stream (SGLang >= 0.5.19) or from the non-streaming probe (0.5.13-0.5.18), which
    replays first turns only: there later turns have no acceptance of their own."""
    if requests.empty or "turn" not in requests:
        return pd.DataFrame(columns=TURN_COLUMNS)
    ok = requests[requests["ok"].eq(True)].copy()
    if ok.empty:
        return pd.DataFrame(columns=TURN_COLUMNS)
    if probe is not None and not probe.empty and "spec_verify_ct" in ok:
        keyed = probe.drop_duplicates(["variant", "phase", "request_id"], keep="last").set_index(
            ["variant", "phase", "request_id"])["spec_verify_ct"]
        idx = pd.MultiIndex.from_frame(ok[["variant", "phase", "request_id"]])
        ok["spec_verify_ct"] = _num(ok["spec_verify_ct"]).fillna(
            pd.Series(_num(keyed.reindex(idx)).to_numpy(), index=ok.index))
    for col in ("turn", "prompt_tokens", "output_tokens", "decode_tok_s", "spec_verify_ct"):
        ok[col] = _num(ok[col]) if col in ok else float("nan")
    ok["spec_tokens"] = (ok["output_tokens"] - 1).where(ok["spec_verify_ct"] > 0)
    g = ok.groupby(["variant", "category", "turn"])
    out = g.agg(requests=("request_id", "count"), prompt_tokens_mean=("prompt_tokens", "mean"),
                output_tokens=("output_tokens", "sum"), decode_tok_s=("decode_tok_s", "mean"),
                spec_tokens=("spec_tokens", "sum"), verify=("spec_verify_ct", "sum")).reset_index()
    out["accept_len_requests"] = (out["spec_tokens"] / out["verify"]).where(out["verify"] > 0)
    out["turn"] = out["turn"].astype(int)
    return out[TURN_COLUMNS]


def write_load_tables(run_dir: Path, requests: pd.DataFrame, phases: pd.DataFrame,
                      variants: dict[str, dict[str, Any]]) -> None:
    """summary_by_rate.csv and summary_by_turn.csv next to summary.csv."""
    by_rate(requests, phases, variants, run_slo(run_dir)).to_csv(run_dir / "summary_by_rate.csv", index=False)
    probe_path = run_dir / "spec_probe.csv"
    probe = pd.read_csv(probe_path) if probe_path.exists() and probe_path.stat().st_size else None
    by_turn(requests, probe).to_csv(run_dir / "summary_by_turn.csv", index=False)


def run_slo(run_dir: Path) -> dict[str, Any] | None:
    try:
        resolved = json.loads((run_dir / "plan.resolved.json").read_text(encoding="utf-8"))
        return (resolved.get("run") or {}).get("slo")
    except (OSError, ValueError, AttributeError):
        return None


def _q(s: pd.Series, q: float) -> float | None:
    v = _num(s).dropna()
    return float(v.quantile(q)) if len(v) else None


def _mean(s: pd.Series) -> float | None:
    v = _num(s).dropna()
    return float(v.mean()) if len(v) else None


def _ratio(a: object, b: object) -> float | None:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return None
    return a / b if b > 0 and a == a else None
