"""Drafter and suite references resolved: a plan names a drafter or a suite by name or path, and
`Resolver` finds its file in the documented order (the plan's directory, the working directory, the user's
own directory, the built-in data) and loads each file once; `load_drafter` reads one drafter file. Where the
built-in data lives (`data_dir`: a wheel's copy, else the checkout's) and the user's own (`user_dir`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import harness
from harness.inputs.plan_parts import Drafter
from harness.inputs.suites import Suite, load_suite
from harness.inputs.yamlio import load_yaml, validate

REPO_ROOT = Path(harness.__file__).resolve().parent.parent
PACKAGED_DATA = Path(harness.__file__).resolve().parent / "_data"  # plans/, suites/, drafters/ inside a wheel


def data_dir(kind: str) -> Path:
    """The built-in `kind` directory ("plans", "suites", "drafters"): a wheel's copy, else the checkout's."""
    packaged = PACKAGED_DATA / kind
    return packaged if packaged.is_dir() else REPO_ROOT / kind


def user_dir(kind: str) -> Path:
    """The user's own `kind` directory ($XDG_CONFIG_HOME/draftbench/<kind>, default ~/.config/...): drafters
    the TUI registers for an evaluated checkpoint go there, never into the checkout."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "draftbench" / kind


@dataclass
class Resolver:
    """Finds drafters/ and suites/ files by name or path, in the documented order, loading each once."""

    plan_dir: Path | None = None
    _drafters: dict[Path, Drafter] = field(default_factory=dict)
    _suites: dict[Path, Suite] = field(default_factory=dict)

    def search_dirs(self, kind: str) -> list[Path]:
        """Directories searched for `kind` ("drafters" or "suites"), first match wins."""
        dirs = [self.plan_dir, self.plan_dir.parent / kind] if self.plan_dir is not None else []
        dirs += [Path.cwd() / kind, data_dir(kind)]
        dirs.insert(len(dirs) - 1, user_dir(kind))  # before the built-in ones
        return list(dict.fromkeys(d.resolve() for d in dirs))

    def find(self, ref: str, kind: str) -> Path:
        if not ref.strip():
            raise ValueError(f"empty {kind[:-1]} reference")
        names = [ref] if ref.endswith((".yaml", ".yml")) else [ref, f"{ref}.yaml", f"{ref}.yml"]
        given = Path(ref).expanduser()
        dirs = [Path("/")] if given.is_absolute() else self.search_dirs(kind)
        for d in dirs:
            for name in names:
                candidate = d / Path(name).expanduser()
                if candidate.is_file():
                    return candidate
        where = str(given) if given.is_absolute() else ", ".join(f"{d}/" for d in dirs)
        raise ValueError(f"{kind[:-1]} {ref!r} not found (looked for {' / '.join(names)} in {where})")

    def drafter(self, ref: str) -> Drafter:
        return _once(self._drafters, self.find(ref, "drafters"), load_drafter)

    def suite(self, ref: str) -> Suite:
        return _once(self._suites, self.find(ref, "suites"), load_suite)


_Loaded = TypeVar("_Loaded")


def _once(cache: dict[Path, _Loaded], path: Path, loader: Callable[[Path], _Loaded]) -> _Loaded:
    """Each file loaded once per plan (a suite named by two variants' arms is one object)."""
    key = path.resolve()
    if key not in cache:
        cache[key] = loader(path)
    return cache[key]


def load_drafter(path: str | Path) -> Drafter:
    """Load one drafter YAML; `name` defaults to the file's stem."""
    data, lines = load_yaml(path)
    if isinstance(data, dict) and "name" not in data:
        data = {"name": Path(path).stem, **data}
    return validate(Drafter, data, path, lines)
