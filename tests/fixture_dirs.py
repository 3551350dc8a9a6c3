"""The H200 fixtures are stored with their large records gzipped: a test reads a copy with them expanded."""

import gzip
import shutil
from pathlib import Path


def unpacked(src: Path, dst: Path) -> Path:
    """A copy of a fixture directory with every .gz file expanded (the records as the run wrote them)."""
    shutil.copytree(src, dst)
    for gz in dst.rglob("*.gz"):
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    return dst


def assert_same_columns(again, stored, cols, rtol: float = 1e-9) -> None:
    """Recomputed records against the stored ones, column by column (numbers, NaN where both have none)."""
    import numpy as np
    import pandas as pd

    for col in cols:
        a, b = pd.to_numeric(again[col]), pd.to_numeric(stored[col])
        assert np.allclose(a, b, equal_nan=True, rtol=rtol), col
