"""Serving engines behind one interface (`base.Engine`): one package per engine."""

from __future__ import annotations

from typing import Any

from harness.engines.base import Engine

ENGINE_NAMES = ("sglang",)


def get_engine(name: str = "sglang") -> Engine:
    """The engine object for a plan's (or a variant's) `engine:` name."""
    if name == "sglang":
        from harness.engines.sglang import SGLANG

        return SGLANG
    raise ValueError(f"unknown engine {name!r} (known: {', '.join(ENGINE_NAMES)})")


def engine_of(plan: Any) -> Engine:
    return get_engine(getattr(plan, "engine", None) or "sglang")


def phase_columns() -> list[str]:
    """The server-side per-phase columns of every engine, in order (one phases.csv serves a mixed plan)."""
    out: list[str] = []
    for name in ENGINE_NAMES:
        out += [c for c in get_engine(name).phase_columns if c not in out]
    return out
