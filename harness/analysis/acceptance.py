"""Accept length: from the timed requests, the untimed probe, the server's counter and the log windows;
which one the table shows (`accept_len_source`), and acceptance and speed-up per category.

Definitions (docs/metrics.md):
  per-request stats, pooled:  Σ (completion tokens − 1) / Σ verify steps (the first token comes from
                              prefill, not from a verify step);
  server per phase, pooled:   verify-weighted, Σ t / Σ (t / AL) with t the phase's decode tokens (output
                              tokens − requests): a mean of ratios weighted by tokens would over-weight
                              the phases that accepted more;
  decode tok/s, pooled:       token-weighted mean of the per-request rates (weights: decode tokens).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

AGREE_TOLERANCE = 0.05  # the probe agrees with the timed pass within 5 %
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 20261201


def _num(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


def pooled_accept(verify: pd.Series, completion: pd.Series) -> float | None:
    """Σ (completion − 1) / Σ verify over rows with verify steps."""
    v, c = _num(verify), _num(completion)
    m = v.notna() & (v > 0) & c.notna()
    return float((c[m] - 1).sum() / v[m].sum()) if m.any() else None


def accept_from_records(ok: pd.DataFrame) -> float | None:
    if ok.empty or "spec_verify_ct" not in ok:
        return None
    return pooled_accept(ok["spec_verify_ct"], ok["output_tokens"])


def accept_from_probe(probe: pd.DataFrame | None, name: str, phase_ids: set) -> float | None:
    if probe is None or probe.empty:
        return None
    p = probe[(probe["variant"] == name) & (probe["phase"].isin(phase_ids))]
    return pooled_accept(p["spec_verify_ct"], p["completion_tokens"]) if not p.empty else None


def verify_weighted(accept: pd.Series, tokens: pd.Series) -> float | None:
    """Σ t / Σ (t / AL): the accept length of the pooled verify steps of several phases."""
    a, t = _num(accept), _num(tokens)
    m = a.notna() & (a > 0) & t.notna() & (t > 0)
    return float(t[m].sum() / (t[m] / a[m]).sum()) if m.any() else None


def server_accept(ph: pd.DataFrame) -> float | None:
    """The server's counter over the phases whose cache flush succeeded (a failed flush leaves earlier
    traffic in the counter)."""
    if ph.empty or "server_accept_len" not in ph:
        return None
    if "flush_ok" in ph:
        ph = ph[ph["flush_ok"].ne(False).fillna(True)]  # a missing cell: no failed flush
    tokens = _num(ph["output_tokens"]) - (_num(ph["requests"]).fillna(0) if "requests" in ph else 0)
    return verify_weighted(ph["server_accept_len"], tokens)


def decode_tokens(ok: pd.DataFrame) -> pd.Series:
    first = _num(ok["first_chunk_tokens"]).fillna(0) if "first_chunk_tokens" in ok else 0
    return (_num(ok["output_tokens"]) - first).clip(lower=0)


def decode_tok_s(ok: pd.DataFrame) -> float | None:
    """Token-weighted mean of the per-request decode rates."""
    if ok.empty:
        return None
    r, w = _num(ok["decode_tok_s"]), decode_tokens(ok)
    m = r.notna() & w.notna() & (w > 0)
    return float((r[m] * w[m]).sum() / w[m].sum()) if m.any() else None


def _close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a / b - 1.0) <= AGREE_TOLERANCE


def headline(timed: float | None, probe: float | None, server: float | None,
             log: float | None) -> tuple[float | None, str]:
    """(accept length, source). Timed per-request stats first; the untimed probe only where it agrees with
    the timed pass (server counter, else log windows); then the timed pass's server counter and log."""
    if timed is not None:
        return timed, "requests"
    check = server if server is not None else log
    if probe is not None and _close(probe, check):
        return probe, "probe"
    if server is not None:
        return server, "server"
    if log is not None:
        return log, "log"
    if probe is not None:
        return probe, "probe-unchecked"
    return None, ""


# --- per category -----------------------------------------------------------------------------------------

def _with_probe(ok: pd.DataFrame, probe: pd.DataFrame | None) -> pd.DataFrame:
    """Requests whose timed record has no verify steps take the probe's (same variant, phase, request)."""
    out = ok.copy()
    out["_verify"] = _num(out["spec_verify_ct"]) if "spec_verify_ct" in out else np.nan
    out["_completion"] = _num(out["output_tokens"])
    if probe is None or probe.empty:
        return out
    p = probe.drop_duplicates(["variant", "phase", "request_id"], keep="last").set_index(
        ["variant", "phase", "request_id"])
    key = pd.MultiIndex.from_frame(out[["variant", "phase", "request_id"]])
    pv = _num(p["spec_verify_ct"]).reindex(key).to_numpy()
    pc = _num(p["completion_tokens"]).reindex(key).to_numpy()
    missing = out["_verify"].isna().to_numpy() & ~np.isnan(pv)
    out.loc[missing, "_verify"] = pv[missing]
    out.loc[missing, "_completion"] = pc[missing]
    return out


with_probe = _with_probe  # summary_by_context places the same verify counts (harness.analysis.by_context)


def _ratio_ci(num_r: np.ndarray, num_w: np.ndarray, den_r: np.ndarray, den_w: np.ndarray,
              rng: np.random.Generator) -> tuple[float | None, float | None]:
    """95 % bootstrap interval of (token-weighted rate of A) / (token-weighted rate of B) over paired
    prompts (rows aligned), resampling prompts with replacement."""
    n = len(num_r)
    if n < 2:
        return None, None
    idx = rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
    a = (num_r[idx] * num_w[idx]).sum(1) / num_w[idx].sum(1)
    b = (den_r[idx] * den_w[idx]).sum(1) / den_w[idx].sum(1)
    ratio = a / b
    ratio = ratio[np.isfinite(ratio)]
    if not len(ratio):
        return None, None
    return float(np.quantile(ratio, 0.025)), float(np.quantile(ratio, 0.975))


def by_category(requests: pd.DataFrame, probe: pd.DataFrame | None = None,
                baselines: set[str] | None = None) -> pd.DataFrame:
    """Per (variant, concurrency, category): requests, tokens, token-weighted decode tok/s, TTFT p50,
    accept length from per-request stats (timed, else the probe's), and the decode speed-up over the
    baseline at the same concurrency with a 95 % bootstrap interval over the category's paired prompts."""
    if requests.empty:
        return pd.DataFrame()
    ok = requests[requests["ok"].eq(True)].copy()
    if ok.empty:
        return pd.DataFrame()
    ok = _with_probe(ok, probe)
    ok["_dtok"] = decode_tokens(ok)
    ok["_rate"] = _num(ok["decode_tok_s"])
    ok["ttft_ms"] = _num(ok["ttft_ms"])
    rows = []
    for (variant, conc, cat), g in ok.groupby(["variant", "concurrency", "category"], sort=True):
        rows.append({"variant": variant, "concurrency": conc, "category": cat, "requests": len(g),
                     "output_tokens": int(_num(g["output_tokens"]).sum()), "decode_tok_s": decode_tok_s(g),
                     "ttft_p50_ms": float(g["ttft_ms"].median()) if g["ttft_ms"].notna().any() else None,
                     "accept_len_requests": pooled_accept(g["_verify"], g["_completion"])})
    out = pd.DataFrame(rows)
    out["speedup"] = None
    out["speedup_ci_low"] = None
    out["speedup_ci_high"] = None
    base_names = baselines if baselines is not None else set()
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    for i, row in out.iterrows():
        base = next((b for b in sorted(base_names) if b != row["variant"]), None)
        if base is None:
            continue
        a = ok[(ok["variant"] == row["variant"]) & (ok["concurrency"] == row["concurrency"])
               & (ok["category"] == row["category"])]
        b = ok[(ok["variant"] == base) & (ok["concurrency"] == row["concurrency"])
               & (ok["category"] == row["category"])]
        pa = a.set_index(["phase", "request_id"])[["_rate", "_dtok"]].dropna()
        pb = b.set_index(["phase", "request_id"])[["_rate", "_dtok"]].dropna()
        common = pa.index.intersection(pb.index)
        pa, pb = pa.loc[common], pb.loc[common]
        pa, pb = pa[(pa["_dtok"] > 0).to_numpy() & (pb["_dtok"] > 0).to_numpy()], \
            pb[(pa["_dtok"] > 0).to_numpy() & (pb["_dtok"] > 0).to_numpy()]
        if pa.empty:
            continue
        ra = float((pa["_rate"] * pa["_dtok"]).sum() / pa["_dtok"].sum())
        rb = float((pb["_rate"] * pb["_dtok"]).sum() / pb["_dtok"].sum())
        out.at[i, "speedup"] = ra / rb if rb > 0 else None
        lo, hi = _ratio_ci(pa["_rate"].to_numpy(float), pa["_dtok"].to_numpy(float),
                           pb["_rate"].to_numpy(float), pb["_dtok"].to_numpy(float), rng)
        out.at[i, "speedup_ci_low"], out.at[i, "speedup_ci_high"] = lo, hi
    return out


PROBE_SPEC_COLUMNS = ("spec_verify_ct", "spec_accept_len", "spec_correct_drafts", "spec_proposed_drafts",
                      "spec_histogram")


def requests_with_spec(requests: pd.DataFrame, probe: pd.DataFrame | None) -> pd.DataFrame:
    """requests.csv with every record that has no per-request spec stats of its own (servers that send them
    only non-streaming) taking the untimed probe's for the same (variant, phase, request), `spec_source`
    "probe"; the correct-drafts histogram included. Timed stats are never replaced."""
    out = requests.copy()
    if out.empty or probe is None or probe.empty:
        return out
    p = probe.drop_duplicates(["variant", "phase", "request_id"], keep="last").set_index(
        ["variant", "phase", "request_id"])
    key = pd.MultiIndex.from_frame(out[["variant", "phase", "request_id"]])
    missing = _num(out["spec_verify_ct"]).isna().to_numpy() if "spec_verify_ct" in out else \
        np.ones(len(out), dtype=bool)
    found = missing & _num(p["spec_verify_ct"]).reindex(key).notna().to_numpy()
    for col in PROBE_SPEC_COLUMNS:
        if col in p:
            values = p[col].reindex(key).to_numpy()
            out[col] = out[col].astype(object) if col in out else None
            out.loc[found, col] = values[found]
    out["spec_source"] = out["spec_source"].astype(object) if "spec_source" in out else ""
    out.loc[found, "spec_source"] = "probe"
    return out
