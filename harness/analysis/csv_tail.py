"""The end of a records CSV before more rows are appended to it (a resume, the next phase).

Every row is written whole and fsynced (store.CsvAppender), so a file that does not end in a line end
was cut while a row was being written: by a kill, a crash or a full disk. Appending to it would glue the
next row onto the cut one (an 80-field line that no summary can read), so the cut row is dropped and the
caller says so. A complete row with the wrong number of fields cannot be repaired safely: refused, with
its line.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from harness.common.errors import InputError

if TYPE_CHECKING:  # imported where it is used: pandas is slow to load
    import pandas as pd


def _rows(data: bytes) -> Iterator[tuple[int, int, list[str]]]:
    """(byte offset where the row starts, its first line number, its fields) of every CSV row in `data`."""
    lines = data.splitlines(keepends=True)
    pos = {"offset": 0, "line": 0}

    def feed() -> Iterator[str]:
        for raw in lines:
            pos["offset"] += len(raw)
            pos["line"] += 1
            yield raw.decode("utf-8", "replace")

    start, first_line = 0, 1
    for fields in csv.reader(feed()):
        yield start, first_line, fields
        start, first_line = pos["offset"], pos["line"] + 1


def repair_tail(path: str | Path, columns: list[str]) -> str | None:
    """Make `path` safe to append rows of `columns` to. Returns what was done (for the user), or None when
    nothing was needed. Raises InputError (FILE:LINE) on a row that is whole but has the wrong width."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return None
    data = path.read_bytes()
    cut = not data.endswith(b"\n")
    rows = list(_rows(data))
    whole = rows[:-1] if cut else rows
    for _start, line, fields in whole:
        if len(fields) != len(columns):
            raise InputError(str(path), line, None,
                             f"{len(fields)} fields where the header has {len(columns)}: the file was cut "
                             "and then appended to; remove that line (and any cut line) to resume")
    if not cut:
        return None
    start, line, _fields = rows[-1]
    with open(path, "r+b") as fh:
        fh.truncate(start)
        fh.flush()
        os.fsync(fh.fileno())
    kept = max(0, len(whole) - 1)  # the header is not a record
    return (f"{path}:{line}: the last line was cut mid-row ({len(data) - start} bytes): removed it, "
            f"kept the {kept} complete rows")


def read_records_csv(path: str | Path) -> pd.DataFrame:
    """pandas.read_csv of a run's CSV, a malformed file being an InputError that names the file and line
    (not a pandas traceback)."""
    import pandas as pd

    try:
        return pd.read_csv(path, keep_default_na=True)
    except pd.errors.ParserError as exc:
        m = re.search(r"line (\d+)", str(exc))
        found = re.search(r"Expected (\d+) fields in line \d+, saw (\d+)", str(exc))
        why = (f"{found.group(2)} fields where the header has {found.group(1)}" if found
               else " ".join(str(exc).split())[:200])
        raise InputError(str(path), int(m.group(1)) if m else None, None,
                         f"malformed CSV: {why} (a line cut and appended to?)") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(path), None, None, f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
