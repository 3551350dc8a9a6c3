"""The summary of a run over several nodes: each node's own summary (its variants against its own
baseline, written by harness.analysis.summary.summarise_run), stacked with the node and its hardware named
on every row (harness.bench.multinode)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import store
from harness.analysis.summary_columns import SUMMARY_COLUMNS

NODES_DIR = "nodes"
NODES_FILE = "nodes.json"


def _variants(node_dir: Path) -> dict[str, dict[str, Any]]:
    """variants.jsonl as the table reads it (harness.analysis.summary.read_variants)."""
    if not node_dir.is_dir():
        return {}
    return {name: meta.as_dict() for name, meta in store.read_variants(node_dir).items()}


def node_dirs(run_dir: str | Path) -> list[tuple[str, Path, dict[str, dict[str, Any]]]]:
    """(node, its run directory, its variants) of every node in nodes.json that has records or variants:
    those are the nodes with a summary of their own."""
    state = json.loads((Path(run_dir) / NODES_FILE).read_text(encoding="utf-8"))
    out = []
    for entry in state["nodes"]:
        node_dir = Path(run_dir) / entry["dir"]
        metas = _variants(node_dir)
        if (node_dir / "requests.csv").exists() or metas:
            out.append((entry["node"], node_dir, metas))
    return out


def variant_ok(node_dir: Path, name: str) -> bool:
    """True when the node's last record of the variant says it finished."""
    return _variants(node_dir).get(name, {}).get("status") == "ok"


def hardware(meta: dict[str, Any]) -> str:
    """What a speedup depends on besides the config: the GPUs and the engine version."""
    gpus = meta.get("gpus") or []
    counted = f"{len(gpus)}x {gpus[0]}" if gpus else "unknown GPUs"
    version = meta.get("sglang_version") or meta.get("engine_version") or "?"
    return f"{counted} | {meta.get('engine', 'sglang')} {version}"


def merge_node_summaries(run_dir: str | Path) -> Path:
    """Write <run>/summary.csv (and summary_by_category.csv) from every node's summary
    (harness.analysis.summary writes them first: summarise_run of the run directory does both)."""
    run_dir = Path(run_dir)
    state = json.loads((run_dir / NODES_FILE).read_text(encoding="utf-8"))
    frames, cats = [], []
    ok_somewhere: set[str] = set()
    per_node: list[tuple[dict[str, Any], pd.DataFrame, dict[str, dict[str, Any]]]] = []
    for entry in state["nodes"]:
        node_dir = run_dir / entry["dir"]
        metas = _variants(node_dir)
        df = pd.DataFrame(columns=SUMMARY_COLUMNS)
        if (node_dir / "requests.csv").exists() or metas:
            df = pd.read_csv(node_dir / "summary.csv")
            cat = node_dir / "summary_by_category.csv"
            if cat.exists() and cat.stat().st_size > 1:
                with_node = pd.read_csv(cat)
                with_node.insert(0, "node", entry["node"])
                cats.append(with_node)
        ok_somewhere |= {n for n, m in metas.items() if m.get("status") == "ok" and not m.get("baseline")}
        per_node.append((entry, df, metas))
    for entry, df, metas in per_node:
        moved_out = [v for v in df.get("variant", pd.Series(dtype=str)) if v in ok_somewhere
                     and metas.get(v, {}).get("status") != "ok"]
        df = df[~df["variant"].isin(moved_out)] if moved_out else df
        missing = [v for v in entry["variants"] if v not in metas and v not in ok_somewhere]
        if missing:  # the node went before these ever started
            df = pd.concat([df, pd.DataFrame([{"variant": v, "concurrency": 0, "status": "failed"}
                                              for v in missing])], ignore_index=True)
        df = df.copy()
        df.insert(0, "node", entry["node"])
        df["hardware"] = [hardware(metas.get(v, {})) for v in df["variant"]]
        frames.append(df)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["node", *SUMMARY_COLUMNS])
    path = run_dir / "summary.csv"
    out.to_csv(path, index=False)
    (pd.concat(cats, ignore_index=True) if cats else pd.DataFrame()).to_csv(
        run_dir / "summary_by_category.csv", index=False)
    return path
