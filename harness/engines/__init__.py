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
