"""AGENTS.md's module map against the tree: every module it names exists, and every module in harness/ is in
it, so the map cannot go stale unnoticed.

How the map names modules (its table under "## Module map"): a row's package (`common/`) is where its
modules (`errors.py`) live; a directory named inside a row (`sglang/`:) is where the modules after it
live, until the next one. A directory followed by its own modules is described module by module (each
must be named); a directory named alone (`tui/`, `sim/sglang/`) stands for every module under it.
`__init__.py` and `__main__.py` need no entry."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "harness"
AGENTS = ROOT / "AGENTS.md"
TOKEN = re.compile(r"`([A-Za-z0-9_./]+(?:\.py|/))`")


def map_rows(text: str) -> list[tuple[str, str]]:
    """(package cell, owns cell) of each row of the module map's table."""
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("|") and len(cells) == 3 and cells[0].isdigit():
            rows.append((cells[1], cells[2]))
    return rows


def named(text: str) -> tuple[set[Path], set[Path], set[Path], list[str]]:
    """(modules named, directories named, directories described module by module, names found nowhere)."""
    files: set[Path] = set()
    dirs: set[Path] = set()
    by_module: set[Path] = set()
    missing: list[str] = []
    for package, owns in map_rows(text):
        pkg = TOKEN.findall(package)
        base = HARNESS / pkg[0] if len(pkg) == 1 and pkg[0].endswith("/") else HARNESS
        context = base
        for token in pkg + TOKEN.findall(owns):
            if token.endswith("/"):
                found = next((p for p in (base / token, HARNESS / token) if p.is_dir()), None)
                if found is None:
                    missing.append(token)
                    continue
                dirs.add(found)
                context = found
                continue
            found = next((p for p in (context / token, base / token, HARNESS / token) if p.is_file()), None)
            if found is None:
                missing.append(f"{token} (in {context.relative_to(ROOT)}/)")
                continue
            files.add(found)
            if found.parent == context and context != HARNESS:
                by_module.add(context)
    return files, dirs, by_module, missing


def unmapped(text: str) -> list[str]:
    files, dirs, by_module, _ = named(text)
    whole = {d for d in dirs if d not in by_module}
    out = []
    for path in sorted(HARNESS.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py") or path in files:
            continue
        if path.parent in by_module or path.parent == HARNESS or not any(d in path.parents for d in whole):
            out.append(str(path.relative_to(ROOT)))
    return out


def test_every_module_the_map_names_exists():
    assert map_rows(AGENTS.read_text(encoding="utf-8")), "no module map table in AGENTS.md"
    assert named(AGENTS.read_text(encoding="utf-8"))[3] == []


def test_every_module_in_harness_is_in_the_map():
    assert unmapped(AGENTS.read_text(encoding="utf-8")) == []


def test_the_check_sees_a_stale_entry_and_a_missing_module():
    text = AGENTS.read_text(encoding="utf-8")
    stale = text.replace("`summary.py`", "`summary.py`, `gone_module.py`", 1)
    assert named(stale)[3] == ["gone_module.py (in harness/analysis/)"]
    dropped = text.replace("`verdicts.py`", "verdicts", 1)
    assert unmapped(dropped) == ["harness/analysis/verdicts.py"]
    # a module of a package described module by module (engines/sglang/) must be named; one under a
    # directory named alone (tui/) need not
    assert "harness/engines/sglang/spec.py" in unmapped(text.replace("`spec.py`", "spec", 1))
    assert not any(m.startswith("harness/tui/") for m in unmapped(text))
