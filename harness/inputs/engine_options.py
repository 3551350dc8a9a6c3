"""Each engine's own options in a plan (`target.sglang:`, `target.vllm:`): how that engine is started on the
node and which release's flags to speak. The core's `Target` only holds one model per engine name; the engine
reads its own (`Engine.options(target)`) and owns every rule about the values (version thresholds, defaults).

They sit in the inputs layer, below the engines, because the plan validates them when it is loaded (with
the same FILE:LINE: field: message errors as the rest of the plan); `Engine.options_model` names each
engine's class and tests/test_engine_contract.py keeps the two in step.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from harness.inputs.yamlio import ArgStr, StrictModel

VERSION_RE = re.compile(r"auto|\d+(\.\d+){1,3}([.-]?(post|rc|dev)\d*)?")


class EngineOptions(StrictModel):
    """What every engine's options hold: its launcher and the release it speaks."""

    launcher: list[ArgStr] | None = Field(
        default=None, min_length=1,
        description="argv prefix that starts this engine's server on the target (default: the engine's own); "
        "'{python}' is replaced by target.python",
    )
    version: str = Field(
        default="auto", description="'auto' (asked on the target) or a release such as '0.5.15'; decides the "
        "flag spellings and the version rules of the preflight",
    )

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not VERSION_RE.fullmatch(value):
            raise ValueError(
                f"expected 'auto' or a version such as '0.5.15' or '0.5.15.post1', got {value!r}"
            )
        return value

    @property
    def pinned(self) -> str | None:
        """The version the plan pins, None for 'auto'."""
        return None if self.version == "auto" else self.version


class SGLangOptions(EngineOptions):
    """SGLang on this node. `launcher` replaces [python, -m, sglang.launch_server] (the stand-in:
    ["{python}", "-m", "harness.sim"]); was `target.launcher` / `target.sglang_version`."""


class VLLMOptions(EngineOptions):
    """vLLM on this node. `launcher` replaces [vllm, serve] (the stand-in: ["{python}", "-m",
    "harness.sim.vllm", "serve"]); was `target.vllm_launcher` / `target.vllm_version`."""


# the plan's keys from before the engines owned their options: old key -> (engine, field); still accepted
TARGET_ALIASES: dict[str, tuple[str, str]] = {
    "launcher": ("sglang", "launcher"),  # a plain `launcher` always meant SGLang's
    "sglang_version": ("sglang", "version"),
    "vllm_launcher": ("vllm", "launcher"),
    "vllm_version": ("vllm", "version"),
}

# each engine's options model by engine name (`Target.sglang`, `Target.vllm`)
ENGINE_OPTIONS: dict[str, type[EngineOptions]] = {"sglang": SGLangOptions, "vllm": VLLMOptions}
