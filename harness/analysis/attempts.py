"""Attempts of a phase: a resumed run reruns an unfinished phase whole, and only its last attempt counts.

Why whole phases, not the unfinished prompts: a phase's figures (tok/s over its wall time, the in-flight
profile and steady state of the verdicts, the server's counters after its cache flush, the decode windows)
describe N prompts replayed at concurrency c from one start. The remainder of an interrupted phase replayed
on its own is another measurement (one prompt left at c4 is a c1 figure), and the pieces of a phase run by
two processes cannot be joined: their perf_counter clocks differ and the ramp-up and tail of each piece
would be counted twice. So a phase is done when, and only when, phases.csv has its row (written after its
last record); a phase without one is replayed again from its first prompt, and the records of the earlier
attempt stay on disk (append-only) but are superseded.

attempts.csv (one row per start of a phase) says where each attempt's rows begin in requests.csv,
server_windows.csv and outputs.csv: rows of (variant, phase) written before its last attempt began belong to
an earlier attempt and are dropped from every table (`final_rows`). A run directory without attempts.csv
(written before this file existed) keeps every row.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.store import CsvAppender, read_phases, read_rows

ATTEMPTS_FILE = "attempts.csv"
ATTEMPT_COLUMNS = ["variant", "phase", "attempt", "requests_row", "windows_row", "outputs_row", "wall_start"]
# which column of attempts.csv holds the first row of an attempt in each file
ROW_COLUMN = {"requests.csv": "requests_row", "server_windows.csv": "windows_row",
              "outputs.csv": "outputs_row"}


def count_rows(path: Path) -> int:
    """Data rows of a CSV file as csv and pandas read it (quoted newlines inside a row, blank lines
    skipped)."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with open(path, newline="", encoding="utf-8") as fh:
        return max(sum(1 for row in csv.reader(fh) if row) - 1, 0)


class CountingAppender(CsvAppender):
    """A CsvAppender that knows how many data rows its file holds (the start of the next attempt)."""

    def __init__(self, path: str | Path, columns: list[str]):
        super().__init__(path, columns)
        self.rows = count_rows(self.path)  # after opening: whatever the opening repaired is what counts

    def append(self, row: dict[str, Any]) -> None:
        super().append(row)
        self.rows += 1


@dataclass
class DonePhases:
    """What a run directory has finished: (variant, phase) with a phases.csv row, and its records."""

    phases: frozenset[tuple[str, str]]
    requests: int  # records of those phases (ok and errors)
    attempts: dict[tuple[str, str], int]  # attempts started so far per (variant, phase), finished or not


def done_phases(run_dir: Path) -> DonePhases:
    done: set[tuple[str, str]] = set()
    requests = 0
    for ph in read_phases(run_dir):
        key = (ph.variant, ph.phase)
        if key not in done:
            done.add(key)
            requests += ph.requests + ph.errors
    started: dict[tuple[str, str], int] = {}
    for row in read_rows(run_dir / ATTEMPTS_FILE):
        key = (row.get("variant", ""), row.get("phase", ""))
        started[key] = started.get(key, 0) + 1
    return DonePhases(frozenset(done), requests, started)


def start_attempt(log: CsvAppender, done: DonePhases, variant: str, phase: str, records: CountingAppender,
                  windows: CountingAppender, outputs: CountingAppender | None) -> int:
    """Append the attempt's row to attempts.csv (before the phase's first request): where its rows begin.
    Returns the attempt's number (1 for a phase's first start)."""
    n = done.attempts.get((variant, phase), 0) + 1
    done.attempts[(variant, phase)] = n
    log.append({"variant": variant, "phase": phase, "attempt": n, "requests_row": records.rows,
                "windows_row": windows.rows, "outputs_row": outputs.rows if outputs is not None else None,
                "wall_start": round(time.time(), 3)})
    return n


def attempt_starts(run_dir: Path) -> dict[str, dict[tuple[str, str], int]]:
    """file name -> (variant, phase) -> first row of the phase's last attempt in that file."""
    out: dict[str, dict[tuple[str, str], int]] = {name: {} for name in ROW_COLUMN}
    for row in read_rows(run_dir / ATTEMPTS_FILE):
        key = (row.get("variant", ""), row.get("phase", ""))
        for name, col in ROW_COLUMN.items():
            value = row.get(col, "")
            if value not in ("", None):
                out[name][key] = int(value)  # later rows are later attempts: the last one wins
    return out


def final_rows(df: pd.DataFrame, starts: dict[tuple[str, str], int]) -> pd.DataFrame:
    """The rows of `df` (read whole, in file order) that belong to the last attempt of their phase."""
    if df is None or df.empty or not starts or "variant" not in df or "phase" not in df:
        return df
    first = [starts.get((str(v), str(p)), 0) for v, p in zip(df["variant"], df["phase"], strict=True)]
    keep = pd.Series(range(len(df)), index=df.index) >= pd.Series(first, index=df.index)
    return df[keep] if not keep.all() else df


def final_tables(run_dir: Path, tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """{file name: table} with every superseded row dropped (tables as read, file name as key)."""
    starts = attempt_starts(run_dir)
    return {name: final_rows(df, starts.get(name, {})) for name, df in tables.items()}

