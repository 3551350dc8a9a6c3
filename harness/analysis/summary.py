"""Records -> the comparison table. One code path for the CLI, the TUI and summary.csv.

Accept length comes from three independent sources, all kept:
  requests: Σ (completion tokens − 1) / Σ verify steps over per-request server stats (token-weighted;
            the first token of each request comes from prefill, not from a verify step);
  server:   /get_server_info avg_spec_accept_length after a /flush_cache, per phase;
  log:      the `Decode batch` windows tagged with the phase, weighted by running requests.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import acceptance, engines_table, outputs, store
from harness.analysis.attempts import final_tables
from harness.analysis.breakeven import step_break_even, ttft_cost_ms
from harness.analysis.csv_tail import read_records_csv
from harness.analysis.failures import failure_reason
from harness.analysis.goodput import closed_loop, write_load_tables
from harness.analysis.records import token_itls_ms
from harness.analysis.verdicts import DEFAULT_EQUIVALENCE, DEFAULT_MIN_STEADY_S, VERDICT_COLUMNS, add_verdicts

REQUIRED_COLUMNS = ["variant", "algorithm", "requests", "errors", "output_tokens", "accept_len",
                    "accept_rate", "tok_s", "ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms", "speedup",
                    "break_even_accept_len"]
SUMMARY_COLUMNS = ["variant", "concurrency", *REQUIRED_COLUMNS[1:], "status", "simulated", "baseline",
                   "drafter", "num_steps", "eagle_topk", "num_draft_tokens", "cuda_graph",
                   "accept_len_requests", "accept_len_server", "accept_len_log", "accept_sources_agree",
                   "accept_rate_log", "decode_tok_s", "step_ms", "e2e_p50_ms", "tokens_per_chunk",
                   "cuda_graph_false_windows", "output_match", "slower_than_baseline", "ttft_mean_ms",
                   "server_ttft_mean_ms", "server_queue_mean_ms", "accept_len_source", "accept_len_probe",
                   "break_even_batch", "step_ms_ratio", "verify_step_ms", "decode_step_ms", "ttft_cost_ms",
                   "first_divergence", "flush_failed", "forced_acceptance", *VERDICT_COLUMNS,
                   "engine", "compared_with", "failure_reason"]
AGREE_TOLERANCE = 0.05  # sources within 5% of each other agree
DECISIONS_FILE = "decisions.jsonl"  # the stopping rule's looks (harness.run.decide)


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    return read_records_csv(path)


def read_variants(run_dir: Path) -> dict[str, dict[str, Any]]:
    """variants.jsonl as the table reads it, a dict per variant (harness.analysis.store.read_variants)."""
    return {name: meta.as_dict() for name, meta in store.read_variants(run_dir).items()}


def _effective_draft_tokens(meta: dict[str, Any]) -> int | None:
    """Draft tokens per verify step, from the server's resolved parameters where it reported them."""
    def pick(key: str) -> Any:
        resolved = meta.get(f"server_speculative_{key}")
        return resolved if resolved is not None else meta.get(key)

    steps, topk, ndt = pick("num_steps"), pick("eagle_topk"), pick("num_draft_tokens")
    if steps is None:
        return None
    return int(steps) + 1 if topk == 1 else int(ndt)


def _pct(series: pd.Series, q: float) -> float | None:
    s = pd.to_numeric(series, errors="coerce").dropna()
    return float(s.quantile(q)) if len(s) else None


def _pooled_itl_p50(rows: pd.DataFrame) -> float | None:
    samples: list[float] = []
    for offs, toks in zip(rows.get("chunk_offsets_ms", []), rows.get("chunk_tokens", []), strict=False):
        if not isinstance(offs, str) or not isinstance(toks, str):
            continue
        times = [float(x) / 1000.0 for x in offs.split()]
        samples.extend(token_itls_ms(times, [int(x) for x in toks.split()]))
    return float(pd.Series(samples).median()) if samples else None


def _agree(values: list[float | None]) -> bool | None:
    vals = [v for v in values if v is not None and v == v]
    if len(vals) < 2:
        return None
    return max(vals) / min(vals) - 1.0 <= AGREE_TOLERANCE


def _weighted(values: pd.Series, weights: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce")
    w = pd.to_numeric(weights, errors="coerce").fillna(0)
    mask = v.notna() & (w > 0)
    if not mask.any():
        return None
    return float((v[mask] * w[mask]).sum() / w[mask].sum())


def _server_mean(ph: pd.DataFrame, column: str) -> float | None:
    """A server-side per-phase mean over all phases, weighted by the requests the server counted."""
    if ph.empty or column not in ph or "server_requests" not in ph:
        return None
    return _weighted(ph[column], ph["server_requests"])


def summarise(requests: pd.DataFrame, phases: pd.DataFrame, windows: pd.DataFrame,
              variants: dict[str, dict[str, Any]], probe: pd.DataFrame | None = None, *,
              min_steady_s: float = DEFAULT_MIN_STEADY_S, outputs_df: pd.DataFrame | None = None,
              equivalence: float = DEFAULT_EQUIVALENCE, looks: dict | None = None) -> pd.DataFrame:
    """The comparison: one row per (variant, concurrency); intervals and verdicts: harness.analysis.verdicts."""
    rows: list[dict[str, Any]] = []
    keys: list[tuple[str, int]] = []
    if not phases.empty:
        keys = sorted({(str(v), int(c)) for v, c in zip(phases["variant"], phases["concurrency"], strict=True)})
    for name in variants:  # failed variants still get a row (not one that ran request-rate phases only)
        if not any(k[0] == name for k in keys) and variants[name].get("status") != "ok":
            keys.append((name, 0))
    for name, conc in keys:
        meta = variants.get(name, {})
        ph = phases[(phases["variant"] == name) & (phases["concurrency"] == conc)] if not phases.empty else phases
        rq = requests[(requests["variant"] == name) & (requests["concurrency"] == conc)] \
            if not requests.empty else requests
        ok = rq[rq["ok"].astype(str) == "True"] if not rq.empty else rq
        tokens = int(pd.to_numeric(ph["output_tokens"]).sum()) if not ph.empty else 0
        wall = float(pd.to_numeric(ph["wall_s"]).sum()) if not ph.empty else 0.0
        phase_ids = set(ph["phase"]) if not ph.empty else set()
        acc_req = acceptance.accept_from_records(ok)
        acc_probe = acceptance.accept_from_probe(probe, name, phase_ids)
        acc_srv = acceptance.server_accept(ph)
        win = windows[(windows["variant"] == name) & (windows["phase"].isin(phase_ids))] \
            if not windows.empty else windows
        dec = win[win["kind"] == "decode"] if not win.empty else win
        acc_log = _weighted(dec["accept_len"], engines_table.window_weights(dec)) if not dec.empty else None
        spec = bool(meta.get("algorithm"))
        accept, source = acceptance.headline(acc_req, acc_probe, acc_srv, acc_log) if spec else (None, "")
        ndt = _effective_draft_tokens(meta)
        decode = acceptance.decode_tok_s(ok)
        rows.append({
            "variant": name, "concurrency": conc, "algorithm": meta.get("algorithm", ""),
            "requests": len(ok), "errors": len(rq) - len(ok), "output_tokens": tokens,
            "accept_len": accept,
            "accept_rate": (accept - 1.0) / (ndt - 1) if accept is not None and ndt and ndt > 1 else None,
            "tok_s": tokens / wall if wall > 0 else None,
            "ttft_p50_ms": _pct(ok["ttft_ms"], 0.5) if not ok.empty else None,
            "ttft_p90_ms": _pct(ok["ttft_ms"], 0.9) if not ok.empty else None,
            "itl_p50_ms": _pooled_itl_p50(ok) if not ok.empty else None,
            "status": meta.get("status", "unknown"), "failure_reason": failure_reason(meta),
            "simulated": bool(meta.get("simulated", False)),
            "baseline": bool(meta.get("baseline", False)), "drafter": meta.get("drafter", ""),
            "num_steps": meta.get("num_steps"), "eagle_topk": meta.get("eagle_topk"),
            "num_draft_tokens": ndt, "cuda_graph": meta.get("cuda_graph"),
            "accept_len_requests": acc_req, "accept_len_server": acc_srv, "accept_len_log": acc_log,
            "accept_len_probe": acc_probe, "accept_len_source": source,
            "accept_sources_agree": _agree([acc_req if acc_req is not None else acc_probe, acc_srv, acc_log])
            if spec else None,
            "flush_failed": int((ph["flush_ok"].astype(str) == "False").sum()) if "flush_ok" in ph else 0,
            "forced_acceptance": meta.get("forced_acceptance") or None,
            "accept_rate_log": _weighted(dec["accept_rate"], dec["running_req"]) if not dec.empty else None,
            "decode_tok_s": decode,
            "step_ms": (1000.0 * (accept or 1.0) / decode) if decode else None,
            "e2e_p50_ms": _pct(ok["e2e_ms"], 0.5) if not ok.empty else None,
            "tokens_per_chunk": float(pd.to_numeric(ok["tokens_per_chunk"], errors="coerce").mean())
            if not ok.empty else None,
            "cuda_graph_false_windows": int((dec["cuda_graph"].astype(str) == "False").sum()) if not dec.empty else 0,
            # the client's TTFT next to the server's own for the same phases (harness.engines.sglang.prom)
            "ttft_mean_ms": float(pd.to_numeric(ok["ttft_ms"], errors="coerce").mean()) if not ok.empty else None,
            "server_ttft_mean_ms": _server_mean(ph, "server_ttft_ms_mean"),
            "server_queue_mean_ms": _server_mean(ph, "server_queue_ms_mean"),
        })
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    engines_table.tag(df, variants)
    _relative_to_baseline(df, requests)
    _step_costs(df, requests, phases, windows, variants, outputs_df)
    add_verdicts(df, requests, phases, min_steady_s=min_steady_s, equivalence=equivalence, looks=looks)
    engines_table.break_even_fallback(df)
    engines_table.compared_with(df)
    df = engines_table.with_cross_engine_rows(df)
    return df[[c for c in SUMMARY_COLUMNS if c in df.columns]]


def _relative_to_baseline(df: pd.DataFrame, requests: pd.DataFrame) -> None:
    """speedup, break-even accept length and the greedy output check, against the baseline row at the
    same concurrency. Break-even: the accept length at which this variant's measured time per verify
    step would give the baseline's tok/s: accept_len * tok_s(baseline) / tok_s(variant)."""
    df["speedup"] = None
    df["break_even_accept_len"] = None
    df["output_match"] = None
    df["slower_than_baseline"] = None
    base = df[df["baseline"]]
    for i, row in df.iterrows():
        b = engines_table.own_baseline(base, row)
        if b.empty or not b.iloc[0]["tok_s"] or row["tok_s"] is None or pd.isna(row["tok_s"]):
            continue
        btok = float(b.iloc[0]["tok_s"])
        df.at[i, "speedup"] = float(row["tok_s"]) / btok


def _step_costs(df: pd.DataFrame, requests: pd.DataFrame, phases: pd.DataFrame, windows: pd.DataFrame,
                variants: dict[str, dict[str, Any]], outputs_df: pd.DataFrame | None) -> None:
    """Break-even from step costs, TTFT cost and the greedy output check against the baseline row at the
    same concurrency (harness.analysis.breakeven, harness.analysis.outputs)."""
    for col in ("break_even_batch", "step_ms_ratio", "verify_step_ms", "decode_step_ms", "ttft_cost_ms",
                "first_divergence"):
        df[col] = None
    base = df[df["baseline"]]

    def phase_set(name: str, conc: int) -> set[str]:
        if phases.empty:
            return set()
        return set(phases[(phases["variant"] == name) & (phases["concurrency"] == conc)]["phase"])

    for i, row in df.iterrows():
        b = engines_table.own_baseline(base, row)
        if b.empty or row["baseline"]:
            continue
        bname, conc = str(b.iloc[0]["variant"]), int(row["concurrency"])
        if row["algorithm"]:
            for k, v in step_break_even(windows, row["variant"], phase_set(row["variant"], conc), bname,
                                        phase_set(bname, conc)).items():
                df.at[i, k] = v
        df.at[i, "ttft_cost_ms"] = ttft_cost_ms(requests, row["variant"], bname, conc)
        greedy = all(float(variants.get(n, {}).get("temperature") or 0.0) == 0.0 for n in (bname, row["variant"]))
        for k, v in outputs.output_match(requests, outputs_df, bname, row["variant"], conc, greedy).items():
            df.at[i, k] = v


def by_category(requests: pd.DataFrame, probe: pd.DataFrame | None = None,
                variants: dict[str, dict[str, Any]] | None = None) -> pd.DataFrame:
    """Per-category drill-down (harness.analysis.acceptance.by_category)."""
    baselines = {n for n, m in (variants or {}).items() if m.get("baseline")}
    return acceptance.by_category(requests, probe, baselines)


def summarise_dir(run_dir: str | Path, read: tuple | None = None) -> pd.DataFrame:
    """The summary of a run directory's records as they stand (also mid-run: every row is flushed);
    `read`: (requests, phases, windows, variants, probe) the caller already has."""
    run_dir = Path(run_dir)
    requests, phases, windows, variants, probe = read or read_tables(run_dir)
    requests, phases, windows, probe = closed_loop(requests, phases, windows, probe)  # rate phases: goodput.py
    settings = _run_settings(run_dir)
    return summarise(requests, phases, windows, variants, probe, outputs_df=read_tables(run_dir, ("outputs.csv",))[0],
                     min_steady_s=float(settings.get("min_steady_s", DEFAULT_MIN_STEADY_S)),
                     equivalence=float(settings.get("equivalence", DEFAULT_EQUIVALENCE)),
                     looks=read_looks(run_dir))


def read_tables(run_dir: Path, names: tuple[str, ...] = ("requests.csv", "phases.csv", "server_windows.csv",
                                                          "variants.jsonl", "spec_probe.csv")) -> tuple:
    """The run directory's tables as the summary reads them: rows of a phase's superseded attempts (a
    resumed run reruns an unfinished phase whole) are left out (harness.analysis.attempts)."""
    tables = final_tables(run_dir, {n: _read_csv(run_dir / n) for n in names if n != "variants.jsonl"})
    return tuple(read_variants(run_dir) if n == "variants.jsonl" else tables[n] for n in names)


def summarise_run(run_dir: str | Path, *, complete: bool = True) -> Path:
    """Read the run directory's records and write summary.csv (+ summary_by_category.csv)."""
    run_dir = Path(run_dir)
    if (run_dir / "nodes.json").exists():  # a run over several nodes: each node's summary, stacked
        from harness.analysis.nodes import merge_node_summaries

        return merge_node_summaries(run_dir)
    requests, phases, windows, variants, probe = read_tables(run_dir)
    df = summarise_dir(run_dir, (requests, phases, windows, variants, probe))
    out = run_dir / "summary.csv"
    df.to_csv(out, index=False)
    by_category(*closed_loop(requests, probe), variants).to_csv(run_dir / "summary_by_category.csv", index=False)
    write_load_tables(run_dir, requests, phases, variants)
    prov = run_dir / "provenance.json"
    if prov.exists():
        data = json.loads(prov.read_text(encoding="utf-8"))
        data["status"] = "complete" if complete else "incomplete"
        prov.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return out


def _run_settings(run_dir: Path) -> dict[str, Any]:
    """The run's own `run:` settings that judge a verdict (plan.resolved.json: min_steady_s, equivalence),
    so a re-summary judges as the run did."""
    path = run_dir / "plan.resolved.json"
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        run = json.loads(path.read_text(encoding="utf-8")).get("run", {})
        return {k: run[k] for k in ("min_steady_s", "equivalence") if run.get(k) is not None}
    return {}


def read_looks(run_dir: str | Path) -> dict[tuple[str, int], dict[str, Any]] | None:
    """decisions.jsonl (run.stop: decided): the stopping rule's looks, in order; per (variant, concurrency)
    the look it stopped at (the last one that included it). None when the run used a fixed design."""
    path = Path(run_dir) / DECISIONS_FILE
    if not path.exists():
        return None
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            d = json.loads(line)
            for row in d["rows"]:
                out[(str(row["variant"]), int(row["concurrency"]))] = {
                    "look": int(d["look"]), "looks": int(d["looks"]), "level": float(d["level"]),
                    "repeats": int(row["repeats"])}
    return out or None


def load_summary(run_dir: str | Path) -> pd.DataFrame:
    return _read_csv(Path(run_dir) / "summary.csv")
