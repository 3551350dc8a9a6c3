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
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import acceptance, engines_table, nodes, store
from harness.analysis.attempts import final_tables
from harness.analysis.by_context_report import write_context_table
from harness.analysis.csv_tail import read_records_csv
from harness.analysis.goodput import closed_loop, write_load_tables
from harness.analysis.lossless import Audit, read_audit
from harness.analysis.records import RequestRecord
from harness.analysis.summary_columns import COLUMNS, SUMMARY_COLUMNS
from harness.analysis.summary_rows import Group
from harness.analysis.summary_table import Table
from harness.analysis.verdicts import DEFAULT_EQUIVALENCE, DEFAULT_MIN_STEADY_S

REQUIRED_COLUMNS = ["variant", "algorithm", "requests", "errors", "output_tokens", "accept_len",
                    "accept_rate", "tok_s", "ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms", "speedup",
                    "break_even_accept_len"]
DECISIONS_FILE = "decisions.jsonl"  # the stopping rule's looks (harness.bench.decide)
# the records' True/False columns, parsed once as they are read (a missing cell: <NA>, neither)
BOOL_COLUMNS = {"requests.csv": tuple(f.name for f in fields(RequestRecord) if f.type == "bool"),
                "phases.csv": ("flush_ok",), "server_windows.csv": ("cuda_graph",)}


def parse_bools(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """`df` with each of `columns` as pandas' nullable booleans: True/False (bools or their CSV spelling),
    anything else missing."""
    for col in columns:
        if col in df and df[col].dtype != "boolean":
            values = df[col].map(lambda v: v if isinstance(v, bool | np.bool_) else _BOOL_WORDS.get(v))
            df[col] = pd.array(values.tolist(), dtype="boolean")
    return df


_BOOL_WORDS = {"True": True, "False": False}


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    return parse_bools(read_records_csv(path), BOOL_COLUMNS.get(path.name, ()))


def read_variants(run_dir: Path) -> dict[str, dict[str, Any]]:
    """variants.jsonl as the table reads it, a dict per variant (harness.analysis.store.read_variants)."""
    return {name: meta.as_dict() for name, meta in store.read_variants(run_dir).items()}


def summarise(requests: pd.DataFrame, phases: pd.DataFrame, windows: pd.DataFrame,
              variants: dict[str, dict[str, Any]], probe: pd.DataFrame | None = None, *,
              min_steady_s: float = DEFAULT_MIN_STEADY_S, outputs_df: pd.DataFrame | None = None,
              equivalence: float = DEFAULT_EQUIVALENCE, looks: dict | None = None,
              audit: Audit | None = None) -> pd.DataFrame:
    """The comparison: one row per (variant, concurrency), its columns computed in the registry's dependency
    order (harness.analysis.summary_columns): first each row's own from its records, then those against
    its baseline row; then the cross-engine rows: each further engine's baseline and shared speculative
    configs against the first engine's, with their intervals (engines_table.with_cross_engine_rows)."""
    keys: list[tuple[str, int]] = []
    if not phases.empty:
        pairs = zip(phases["variant"], phases["concurrency"], strict=True)
        keys = sorted({(str(v), int(c)) for v, c in pairs})
    for name in variants:  # failed variants still get a row (not one that ran request-rate phases only)
        if not any(k[0] == name for k in keys) and variants[name].get("status") != "ok":
            keys.append((name, 0))
    rows = []
    for name, conc in keys:
        group, row = Group.of(name, conc, requests, phases, windows, variants, probe), {}
        for comp in COLUMNS.scope("records"):
            row.update(comp.values(comp.fn(group, row)))
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    table = Table(df, requests, phases, windows, variants, outputs_df, min_steady_s, equivalence, looks,
                  audit)
    for comp in COLUMNS.scope("table"):
        results = [comp.values(comp.fn(row, table)) for _, row in table.df.iterrows()]
        for col in comp.fills:  # object columns: each cell keeps its value's own type (an int stays an int)
            table.df[col] = pd.Series([res[col] for res in results], index=table.df.index, dtype=object)
    df = engines_table.with_cross_engine_rows(table.df, table)
    return df[[c for c in SUMMARY_COLUMNS if c in df.columns]]


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
    # request-rate phases have their own tables (goodput.py)
    requests, phases, windows, probe = closed_loop(requests, phases, windows, probe)
    settings = _run_settings(run_dir)
    outputs_df = read_tables(run_dir, ("outputs.csv",))[0]
    return summarise(requests, phases, windows, variants, probe, outputs_df=outputs_df,
                     min_steady_s=float(settings.get("min_steady_s", DEFAULT_MIN_STEADY_S)),
                     equivalence=float(settings.get("equivalence", DEFAULT_EQUIVALENCE)),
                     looks=read_looks(run_dir), audit=read_audit(run_dir))


def read_tables(run_dir: Path, names: tuple[str, ...] = ("requests.csv", "phases.csv", "server_windows.csv",
                                                          "variants.jsonl", "spec_probe.csv")) -> tuple:
    """The run directory's tables as the summary reads them: rows of a phase's superseded attempts (a
    resumed run reruns an unfinished phase whole) are left out (harness.analysis.attempts)."""
    tables = final_tables(run_dir, {n: _read_csv(run_dir / n) for n in names if n != "variants.jsonl"})
    return tuple(read_variants(run_dir) if n == "variants.jsonl" else tables[n] for n in names)


def summarise_run(run_dir: str | Path, *, complete: bool = True) -> Path:
    """Read the run directory's records and write summary.csv (+ summary_by_category.csv)."""
    run_dir = Path(run_dir)
    if (run_dir / nodes.NODES_FILE).exists():  # a run over several nodes: each node's summary, stacked
        for _, node_dir, metas in nodes.node_dirs(run_dir):
            summarise_run(node_dir, complete=all(m.get("status") == "ok" for m in metas.values()))
        return nodes.merge_node_summaries(run_dir)
    requests, phases, windows, variants, probe = read_tables(run_dir)
    df = summarise_dir(run_dir, (requests, phases, windows, variants, probe))
    out = run_dir / "summary.csv"
    df.to_csv(out, index=False)
    by_cat = by_category(*closed_loop(requests, probe), variants)
    by_cat.to_csv(run_dir / "summary_by_category.csv", index=False)
    write_load_tables(run_dir, requests, phases, variants)
    write_context_table(run_dir, *closed_loop(requests, probe), variants)  # summary_by_context.csv
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
