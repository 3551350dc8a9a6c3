"""What `draftbench tune` reads back from its run directories: per-category histograms of the wide run,
step cost per config and batch from the step-cost run's decode windows, accept length and the verified
rows (speedup with its interval) from summary.csv. Files are the source of truth, so a resumed tune
re-reads them instead of trusting memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.steps import step_ms_by_batch
from harness.analysis.summary import load_summary, read_tables, read_variants, summarise_dir
from harness.analysis.tune_model import add_histograms, parse_histogram


def _read_csv(path: Path) -> pd.DataFrame:
    """A run directory's table as the summary reads it: a resumed phase's superseded rows left out."""
    return read_tables(path.parent, (path.name,))[0]


def histograms_by_category(run_dir: Path, variant: str, ids: set[str] | None = None) -> dict[str, list[int]]:
    """Summed `spec_correct_drafts_histogram` of `variant` per prompt category (streamed stats in
    requests.csv, or the meta_info probe's spec_probe.csv joined to the requests by phase and id);
    `ids`: only those requests (`<suite>/<prompt id>`)."""
    req = _read_csv(run_dir / "requests.csv")
    if req.empty:
        return {}
    req = req[(req["variant"].astype(str) == variant) & req["ok"].eq(True)]
    if ids is not None:
        req = req[req["request_id"].astype(str).isin(ids)]
    hists: dict[str, list[list[int]]] = {}
    if "spec_histogram" in req and req["spec_histogram"].notna().any():
        for cat, text in zip(req["category"].astype(str), req["spec_histogram"], strict=True):
            if parse_histogram(text):
                hists.setdefault(cat, []).append(parse_histogram(text))
    else:
        probe = _read_csv(run_dir / "spec_probe.csv")
        if probe.empty:
            return {}
        probe = probe[probe["variant"].astype(str) == variant]
        if ids is not None:
            probe = probe[probe["request_id"].astype(str).isin(ids)]
        cats = {(str(p), str(r)): str(c) for p, r, c in zip(req["phase"], req["request_id"], req["category"],
                                                              strict=True)}
        for p, r, text in zip(probe["phase"], probe["request_id"], probe["spec_histogram"], strict=True):
            if parse_histogram(text):
                hists.setdefault(cats.get((str(p), str(r)), "general"), []).append(parse_histogram(text))
    return {cat: add_histograms(hs) for cat, hs in sorted(hists.items())}


def per_request_accept_len(run_dir: Path, variant: str) -> float | None:
    """Mean over requests of each request's accept length (specdec_bench's per-request mean)."""
    vals = []
    for name in ("requests.csv", "spec_probe.csv"):
        df = _read_csv(run_dir / name)
        if not df.empty and "spec_accept_len" in df:
            s = pd.to_numeric(df[df["variant"].astype(str) == variant]["spec_accept_len"], errors="coerce")
            vals += [float(v) for v in s.dropna()]
        if vals:
            break
    return sum(vals) / len(vals) if vals else None


def step_costs(run_dir: Path, variant: str, concurrency: list[int]) -> dict[int, float]:
    """Measured step ms of `variant` at each concurrency: its decode windows at that running batch (the
    step-cost phases start all requests of a level together and run them to the same length)."""
    windows = _read_csv(run_dir / "server_windows.csv")
    if windows.empty:
        return {}
    out: dict[int, float] = {}
    for c in concurrency:
        phases = {p for p in windows["phase"].dropna().astype(str).unique() if f"@c{c}#" in p}
        by_batch = step_ms_by_batch(windows, variant, phases)
        if c in by_batch:
            out[c] = by_batch[c]
        elif by_batch:  # the batch never reached c (a request ended early): the nearest batch below it
            below = [b for b in by_batch if b <= c]
            out[c] = by_batch[max(below) if below else min(by_batch)]
    return out


def measured_accept_len(run_dir: Path, variant: str) -> dict[int, float]:
    """accept_len per concurrency of `variant` in that run's summary (the best of its three sources)."""
    df = load_summary(run_dir)
    if df.empty:
        return {}
    rows = df[df["variant"].astype(str) == variant]
    accept = pd.to_numeric(rows["accept_len"], errors="coerce")
    return {int(c): float(a) for c, a in zip(rows["concurrency"], accept, strict=True) if a == a}


def verified_rows(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(variant, concurrency) -> the summary row (tok_s, speedup and, where summary has them, the interval),
    judged from the records by today's rules (harness.analysis.verdicts), else summary.csv as stored."""
    df = summarise_dir(run_dir) if (Path(run_dir) / "requests.csv").exists() else load_summary(run_dir)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for row in df.to_dict("records") if not df.empty else []:
        out[(str(row["variant"]), int(row["concurrency"]))] = row
    return out


def variant_status(run_dir: Path) -> dict[str, str]:
    return {name: str(meta.get("status", "")) for name, meta in read_variants(run_dir).items()}


def startup_seconds(run_dir: Path) -> float | None:
    vals = [float(m["startup_s"]) for m in read_variants(run_dir).values() if m.get("startup_s") is not None]
    return max(vals) if vals else None
