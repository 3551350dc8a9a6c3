"""The H200 fixtures are stored with their large records compressed (gzip; xz for the lossless audit's
logprobs, 0.93 MB against gzip's 1.27): a test reads a copy with them expanded."""

import gzip
import lzma
import shutil
from pathlib import Path

EXPAND = {".gz": gzip.decompress, ".xz": lzma.decompress}


def unpacked(src: Path, dst: Path) -> Path:
    """A copy of a fixture directory with every .gz and .xz file expanded (the records as written)."""
    shutil.copytree(src, dst)
    for path in [p for p in dst.rglob("*") if p.suffix in EXPAND]:
        path.with_suffix("").write_bytes(EXPAND[path.suffix](path.read_bytes()))
        path.unlink()
    return dst


def assert_same_columns(again, stored, cols, rtol: float = 1e-9) -> None:
    """Recomputed records against the stored ones, column by column (numbers, NaN where both have none)."""
    import numpy as np
    import pandas as pd

    for col in cols:
        a, b = pd.to_numeric(again[col]), pd.to_numeric(stored[col])
        assert np.allclose(a, b, equal_nan=True, rtol=rtol), col


def docs_lines_missing(docs: Path, marker: str, report: Path) -> tuple[list[str], list[str]]:
    """The first fenced block after `marker` in `docs`, without blank lines, and those of its lines that the
    report (a rebuilt tune_report.txt) does not have: a doc's figures must be what the report says."""
    import re

    text = docs.read_text(encoding="utf-8")
    block = re.search(r"```\n(.*?)```", text[text.index(marker):], re.S)
    assert block is not None, marker
    lines = [ln for ln in block.group(1).splitlines() if ln.strip()]
    have = set(report.read_text(encoding="utf-8").splitlines())
    return lines, [ln for ln in lines if ln not in have]
