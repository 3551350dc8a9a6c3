"""Serving engines behind one interface (`base.Engine`): one package per engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.engines.base import Engine

if TYPE_CHECKING:
    from harness.inputs.config import Plan, Variant

ENGINE_NAMES = ("sglang", "vllm")


def get_engine(name: str = "sglang") -> Engine:
    """The engine object for a plan's (or a variant's) `engine:` name."""
    if name == "sglang":
        from harness.engines.sglang import SGLANG

        return SGLANG
    if name == "vllm":
        from harness.engines.vllm import VLLM

        return VLLM
    raise ValueError(f"unknown engine {name!r} (known: {', '.join(ENGINE_NAMES)})")


def engine_of(plan: Plan, variant: Variant | None = None) -> Engine:
    """The variant's engine when it names one, else the plan's (default SGLang)."""
    name = (variant.engine if variant is not None else None) or plan.engine or "sglang"
    return get_engine(name)


def phase_columns() -> list[str]:
    """The server-side per-phase columns of every engine, in order (one phases.csv serves a mixed plan)."""
    out: list[str] = []
    for name in ENGINE_NAMES:
        out += [c for c in get_engine(name).phase_columns if c not in out]
    return out
