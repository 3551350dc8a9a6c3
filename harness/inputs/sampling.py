"""Sampling and reasoning as an axis of the comparison (`run.sampling`).

Acceptance under sampling differs sharply from greedy (SpecForge #465: data regenerated at T=0.8, evaluated at
T=0), and a reasoning model's thinking mode changes what it writes. Each arm of `run.sampling` measures every
variant at that sampler, paired with the baseline at the same sampler:

    run:
      sampling:
        - {temperature: 0}
        - {temperature: 0.7, top_p: 0.95}
        - {temperature: 0.6, top_p: 0.95, thinking: true}   # chat_template_kwargs.enable_thinking

The plan then holds one variant per (variant, arm), named `<variant>-<arm label>` (`eagle3-t0.7-p0.95`), each
with its own `sampling`; summary.csv's `sampling` column says which arm a row is, and a row's baseline is the
one at its own sampler. Requests carry the arm's fields in their body (temperature, top_p and, where thinking
is set, chat_template_kwargs), over run.temperature. The model's own recommendation (generation_config.json)
is suggested as an arm by `draftbench check` (harness.checks.realism).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from harness.inputs.yamlio import FieldProblem, StrictModel

LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class SamplingArm(StrictModel):
    """One sampler every variant is measured at."""

    temperature: float = Field(ge=0, le=2, description="sampling temperature (0 = greedy)")
    top_p: float | None = Field(default=None, gt=0, le=1, description="nucleus sampling; unset: the server's "
                                "default (1.0)")
    thinking: bool | None = Field(default=None, description="reasoning models: thinking on or off through "
                                  "the chat template's kwargs (chat_template_kwargs.enable_thinking); unset: "
                                  "the template's own default")
    name: str | None = Field(default=None, description="the arm's label in variant names and tables "
                             "(default: from the values, t0.7-p0.95-think)")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not LABEL_RE.fullmatch(value):
            raise ValueError(f"{value!r}: use letters, digits, '.', '_' and '-' (it becomes part of variant "
                             "names, and so of file names)")
        return value

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        out = f"t{self.temperature:g}"
        if self.top_p is not None:
            out += f"-p{self.top_p:g}"
        if self.thinking is not None:
            out += "-think" if self.thinking else "-nothink"
        return out

    def request_fields(self) -> dict[str, Any]:
        """What the arm puts in every request body (merged over the defaults the client sends)."""
        body: dict[str, Any] = {"temperature": float(self.temperature)}
        if self.top_p is not None:
            body["top_p"] = float(self.top_p)
        if self.thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": bool(self.thinking)}
        return body


def sampling_label(arm: SamplingArm | None, temperature: float = 0.0) -> str:
    """A variant's sampler in words for tables: its arm's label, else `t<run.temperature>`."""
    return arm.label if arm is not None else f"t{float(temperature):g}"


def unique_labels(arms: list[SamplingArm]) -> list[SamplingArm]:
    """run.sampling's validator: every arm's label once."""
    seen: dict[str, int] = {}
    for i, arm in enumerate(arms):
        if arm.label in seen:
            raise FieldProblem(f"arm {arm.label!r} is listed twice (also sampling[{seen[arm.label]}]); give "
                               "one of them a `name`", (i,))
        seen[arm.label] = i
    return arms


def expand(variants: list[Any], arms: list[SamplingArm]) -> list[Any]:
    """One variant per (variant, arm) for the variants without their own `sampling` (a plan read back from
    plan.resolved.json is already expanded: its variants keep theirs, so expanding is idempotent)."""
    if not arms:
        return variants
    out = []
    for v in variants:
        if v.sampling is not None:
            out.append(v)
            continue
        out += [v.model_copy(update={"name": f"{v.name}-{arm.label}", "sampling": arm}, deep=True)
                for arm in arms]
    return out


def suggested_arm(generation_config: dict[str, Any] | None) -> SamplingArm | None:
    """The model's recommended sampler (generation_config.json: do_sample, temperature, top_p) as an arm, or
    None where it recommends nothing beyond greedy."""
    cfg = generation_config or {}
    t, p = cfg.get("temperature"), cfg.get("top_p")
    if cfg.get("do_sample") is False or not isinstance(t, int | float) or isinstance(t, bool) \
            or not 0 < t <= 2:
        return None
    top_p = float(p) if isinstance(p, int | float) and not isinstance(p, bool) and 0 < p < 1 else None
    return SamplingArm(temperature=float(t), top_p=top_p)


def arm_yaml(arm: SamplingArm) -> str:
    """An arm as one YAML flow mapping, for a suggestion to paste."""
    parts = [f"temperature: {arm.temperature:g}"]
    if arm.top_p is not None:
        parts.append(f"top_p: {arm.top_p:g}")
    if arm.thinking is not None:
        parts.append(f"thinking: {'true' if arm.thinking else 'false'}")
    return "{" + ", ".join(parts) + "}"
