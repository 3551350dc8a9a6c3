"""Release versions as tuples, for version-dependent flags and formats of any engine."""

from __future__ import annotations

import re


def parse_version(text: str | None) -> tuple[int, int, int, int]:
    """'0.5.15.post1' -> (0, 5, 15, 1); unknown or empty -> a very new version."""
    if not text:
        return (99, 0, 0, 0)
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?post(\d+))?", text)
    if not m:
        return (99, 0, 0, 0)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), int(m.group(4) or 0))


def version_at_least(version: str | None, minimum: str) -> bool:
    return parse_version(version) >= parse_version(minimum)


def version_lt(version: str | None, bound: str) -> bool:
    """True only when the version is known and older than `bound` (unknown versions skip window checks)."""
    return version is not None and parse_version(version) < parse_version(bound)
