"""What the TUI reads and writes, without textual: run directories, their tables (through
harness.analysis.summary and harness.analysis.report only, so the numbers are the CLI's), comparisons,
drafters, exports, plan narrowing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from harness.analysis import table_notes
from harness.analysis.columns import is_false, is_true
from harness.analysis.completeness import Missing, missing_parts
from harness.analysis.csv_tail import read_records_csv
from harness.analysis.failures import failure_reason
from harness.analysis.forced import forced_note, is_forced
from harness.analysis.report import TABLE_COLUMNS, best_variant, table_cell, verdict_notes
from harness.analysis.summary import by_category, load_summary, read_variants, summarise_run
from harness.common.errors import InputError
from harness.inputs.config import Plan, Resolver, load_drafter

SKIP_DIRS = {"servers"}  # the fleet's session logs live under results/servers/
@dataclass(frozen=True)
class RunInfo:
    run_id: str
    run_dir: str
    plan: str
    started_at: str
    status: str  # from provenance.json: running | complete | incomplete | ?; failed when every variant failed
    simulated: bool


@dataclass(frozen=True)
class ResultRow:
    key: str  # "<variant>@<concurrency>": the DataTable row key
    cells: tuple[str, ...]
    winner: bool
    slower: bool
    failed: bool
    note: str


@dataclass(eq=False)  # DataFrames have no truth value: compared by identity (the TUI's reactive compares)
class LoadedRun:
    info: RunInfo
    summary: pd.DataFrame
    categories: pd.DataFrame
    # variant -> why it did not finish (variant_failures)
    failures: dict[str, str] = field(default_factory=dict)
    rates: pd.DataFrame = field(default_factory=pd.DataFrame)  # summary_by_rate.csv: speedup against load
    missing: Missing | None = None  # an incomplete run: what its plan asked for without rows (completeness)
    contexts: pd.DataFrame = field(default_factory=pd.DataFrame)  # summary_by_context.csv (by_context_report)


@dataclass(frozen=True)
class DrafterInfo:
    name: str
    algorithm: str
    path: str
    trained_for: str
    file: str
    results: tuple[
        tuple[str, str, int, float | None, float | None], ...
    ]  # run, variant, conc, accept, speedup: the drafter's own results (never a forced-acceptance row)
    forced: tuple[
        tuple[str, str, int, float | None, float | None], ...
    ] = ()  # the same for its forced-acceptance rows (breakeven's copies): shown labelled, never counted


# ---- runs ------------------------------------------------------------------------------------------------


def run_info(run_dir: str | Path) -> RunInfo:
    run_dir = Path(run_dir)
    prov: dict[str, Any] = {}
    path = run_dir / "provenance.json"
    if path.exists():
        try:
            prov = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            prov = {}
    return RunInfo(
        run_id=run_dir.name,
        run_dir=str(run_dir),
        plan=str(prov.get("plan", "?")),
        started_at=str(prov.get("started_at", "")),
        status=_status(run_dir, str(prov.get("status", "?"))),
        simulated=bool(prov.get("simulated", False)),
    )


def _status(run_dir: Path, status: str) -> str:
    """A run where every variant failed measured nothing: failed, not partial."""
    metas = read_variants(run_dir) if status == "incomplete" else {}
    return "failed" if metas and all(m.get("status") == "failed" for m in metas.values()) else status


def list_runs(results_dir: str | Path) -> list[RunInfo]:
    """Run directories under results/, newest first (their names start with the start time)."""
    base = Path(results_dir)
    if not base.is_dir():
        return []
    dirs = [
        d
        for d in base.iterdir()
        if d.is_dir()
        and not d.name.startswith(".")
        and d.name not in SKIP_DIRS
        and ((d / "summary.csv").exists() or (d / "requests.csv").exists())
    ]
    return [run_info(d) for d in sorted(dirs, key=lambda d: d.name, reverse=True)]


def load_run(run_dir: str | Path) -> LoadedRun:
    """The run's summary.csv (summarised first if the run never got that far) and its category drill-down."""
    run_dir = Path(run_dir)
    if not (run_dir / "summary.csv").exists():
        if not (run_dir / "requests.csv").exists():
            raise InputError(str(run_dir), None, None, "not a run directory (no summary.csv or requests.csv)")
        summarise_run(run_dir, complete=False)
    categories = _csv(run_dir / "summary_by_category.csv")
    if categories is None:
        requests = _csv(run_dir / "requests.csv")
        categories = by_category(requests) if requests is not None else pd.DataFrame()
    rates = _csv(run_dir / "summary_by_rate.csv")
    contexts = _csv(run_dir / "summary_by_context.csv")
    return LoadedRun(run_info(run_dir), load_summary(run_dir), categories, variant_failures(run_dir),
                     rates if rates is not None else pd.DataFrame(), missing_parts(run_dir),
                     contexts if contexts is not None else pd.DataFrame())


def variant_failures(run_dir: str | Path) -> dict[str, str]:
    """Why each failed or interrupted variant did not finish: the cause its server's log names and the
    runner's reason (harness.analysis.failures, as summary.csv's failure_reason)."""
    out = {}
    for name, meta in read_variants(Path(run_dir)).items():
        if meta.get("status") in ("failed", "interrupted"):
            out[name] = failure_reason(meta) or str(meta["status"])
    return out


def _csv(path: Path) -> pd.DataFrame | None:
    """None when missing or without columns (an empty table is written as a lone newline)."""
    try:
        return read_records_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return None


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def by_node(df: pd.DataFrame) -> pd.DataFrame:
    """A run over several nodes names each row's node as the CLI table does: `variant@node`."""
    if "node" in df.columns and df["node"].nunique() > 1:
        return df.assign(variant=df["variant"].astype(str) + "@" + df["node"].astype(str))
    return df


def result_rows(df: pd.DataFrame, failures: dict[str, str] | None = None) -> list[ResultRow]:
    """The CLI table's rows (same columns, same formats), with winner / slower / failed flags for styling;
    a variant that never measured shows its reason (`failures`) instead of a concurrency-0 row."""
    rows: list[ResultRow] = []
    if df.empty:
        return rows
    df = by_node(df)
    winners = {c: best_variant(df, c) for c in df["concurrency"].unique()}
    for _, row in df.iterrows():
        cells = tuple(table_cell(row, col, spec) for col, _, spec in TABLE_COLUMNS)
        failed = str(row.get("status")) == "failed"
        slower = is_true(row.get("slower_than_baseline"))
        name = str(row["variant"])
        # a row of a run over several nodes is named variant@node (its failure: by the variant, or as the row)
        why = (failures or {}).get(name) or (failures or {}).get(name.rpartition("@")[0]) \
            or (None if _missing(row.get("failure_reason")) else str(row.get("failure_reason")))
        if failed and why:
            notes = [f"FAILED: {why}"]
        else:
            notes = ["FAILED"] if failed else []
        if failed and str(row.get("concurrency")) in ("0", "0.0"):
            cells = tuple("-" if col == "concurrency" else c
                          for (col, _, _), c in zip(TABLE_COLUMNS, cells, strict=True))
        forced = forced_note(row)
        if forced:  # first: a forced row's numbers are speed only
            notes.insert(0, forced)
        synthetic = table_notes.synthetic_note(row)
        if synthetic:  # then: generated prompts, not real traffic
            notes.insert(1 if forced else 0, synthetic)
        if slower:
            notes.append(table_notes.SLOWER)
        notes += verdict_notes(row)
        # with its worst cases
        notes += [n.text for n in table_notes.lossless_notes(row) if n.kind == "suspect"]
        al = row.get("accept_len")
        if not _missing(al) and float(al) <= 1.005:
            notes.append(table_notes.INERT)
        if is_false(row.get("accept_sources_agree")):
            notes.append(table_notes.DISAGREE)
        rows.append(
            ResultRow(
                key=f"{row['variant']}@{row['concurrency']}",
                cells=cells,
                winner=winners.get(row["concurrency"]) == row["variant"],
                slower=slower,
                failed=failed,
                note="; ".join(notes),
            )
        )
    return rows


def result_headers() -> list[str]:
    return [h for _, h, _ in TABLE_COLUMNS] + ["note"]


def export_csv(df: pd.DataFrame, path: str | Path) -> int:
    """Write the table exactly as summary.csv has it; returns the number of rows."""
    out = Path(path).expanduser()
    if out.is_dir():
        raise InputError(str(out), None, None, "is a directory: give a file name ending in .csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    return len(df)


# ---- plan --------------------------------------------------------------------------------------------


def suite_names(plan: Plan) -> list[str]:
    """The plan's suites first, then every other suite in the suites/ directories the plan's config
    searches."""
    src = plan.source_path
    dirs = Resolver(plan_dir=Path(src).parent if src else None).search_dirs("suites")
    names = [s.name for s in plan.suites]
    for d in dirs:
        if d.name == "suites" and d.is_dir():
            names += sorted(p.stem for p in d.glob("*.yaml") if p.stem not in names)
    return list(dict.fromkeys(names))


class PlanChoice(Protocol):
    """What a front end's form chose of a plan (the TUI's RunChoice)."""

    @property
    def suites(self) -> tuple[str, ...]: ...
    @property
    def variants(self) -> tuple[str, ...]: ...
    @property
    def concurrency(self) -> tuple[int, ...]: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def repeats(self) -> int | None: ...  # None: the plan's run.repeats


def narrow_plan(plan: Plan, choice: PlanChoice) -> Plan:
    """The plan restricted to the chosen variants and concurrency levels, with the chosen suites (the plan's
    or any under suites/), max_tokens and repeats."""
    variants = [v for v in plan.variants if v.name in choice.variants]
    own = {s.name: s for s in plan.suites}
    src = plan.source_path
    resolver = Resolver(plan_dir=Path(src).parent if src else None)
    suites = [own[n] if n in own else resolver.suite(n) for n in choice.suites]
    if not variants:
        raise InputError(None, None, "variants", "choose at least one variant")
    if not suites:
        raise InputError(None, None, "suites", "choose at least one suite")
    if not choice.concurrency or any(c <= 0 for c in choice.concurrency):
        raise InputError(None, None, "concurrency", "give one or more concurrency levels above 0, e.g. 1,4")
    if choice.max_tokens <= 0:
        raise InputError(None, None, "max_tokens", "must be greater than 0")
    update: dict[str, Any] = {"concurrency": list(choice.concurrency), "max_tokens": choice.max_tokens}
    repeats = choice.repeats
    if repeats is not None:
        if repeats <= 0:
            raise InputError(None, None, "repeats", "must be at least 1")
        update["repeats"] = repeats
        if plan.run.max_repeats < repeats:
            update["max_repeats"] = repeats
    run = plan.run.model_copy(update=update)
    return plan.model_copy(update={"variants": variants, "suites": suites, "run": run})


def parse_concurrency(text: str) -> tuple[int, ...]:
    """'1, 4 8' -> (1, 4, 8); raises InputError with what was wrong."""
    parts = [p for p in text.replace(",", " ").split() if p]
    try:
        levels = tuple(int(p) for p in parts)
    except ValueError:
        raise InputError(None, None, "concurrency", f"not a list of whole numbers: {text!r}") from None
    if not levels or any(c <= 0 for c in levels) or len(set(levels)) != len(levels):
        raise InputError(None, None, "concurrency", f"give distinct levels above 0, e.g. 1,4 (got {text!r})")
    return levels


# ---- drafters ------------------------------------------------------------------------------------------


def drafter_dirs(plan: Plan) -> list[Path]:
    """Where drafters are looked up for this plan, in the config's own order."""
    src = plan.source_path
    dirs = Resolver(plan_dir=Path(src).parent if src else None).search_dirs("drafters")
    return [d for d in dirs if d.name == "drafters" and d.is_dir()]  # not the plan's own directory


def list_drafters(dirs: list[Path], runs: list[RunInfo]) -> list[DrafterInfo]:
    """Every drafter file with the results of the runs that served it (from their summary.csv)."""
    used: dict[str, list[tuple[str, str, int, float | None, float | None]]] = {}
    forced: dict[str, list[tuple[str, str, int, float | None, float | None]]] = {}
    for run in runs:
        run_dir = Path(run.run_dir)
        if not (run_dir / "summary.csv").exists():
            continue
        meta = read_variants(run_dir)
        df = load_summary(run_dir)
        for _, row in df.iterrows():
            drafter = str(meta.get(str(row["variant"]), {}).get("drafter") or "")
            if drafter:
                (forced if is_forced(row) else used).setdefault(drafter, []).append(
                    (
                        run.run_id,
                        str(row["variant"]),
                        int(row["concurrency"]),
                        None if _missing(row.get("accept_len")) else float(row["accept_len"]),
                        None if _missing(row.get("speedup")) else float(row["speedup"]),
                    )
                )
    out: dict[str, DrafterInfo] = {}
    for d in dirs:
        for f in sorted(d.glob("*.yaml")):
            try:
                dr = load_drafter(f)
            except Exception:  # a broken drafter file is listed by name; `draftbench check` explains it
                out.setdefault(f.stem, DrafterInfo(f.stem, "?", "?", "", str(f), tuple(used.get(f.stem, [])),
                                                   tuple(forced.get(f.stem, []))))
                continue
            out.setdefault(
                dr.name,
                DrafterInfo(
                    dr.name, dr.algorithm, dr.path, dr.trained_for or "", str(f),
                    tuple(used.get(dr.name, [])), tuple(forced.get(dr.name, [])),
                ),
            )
    return sorted(out.values(), key=lambda x: x.name)

