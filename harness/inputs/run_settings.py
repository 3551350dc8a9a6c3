"""`run:` of a plan: how the suites are replayed and measured (typed, documented where declared)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from harness.inputs.yamlio import FieldProblem, StrictModel


class RunSettings(StrictModel):
    """How the suites are replayed against each variant."""

    concurrency: list[int] = Field(default_factory=lambda: [1], min_length=1, description="concurrency levels")
    max_tokens: int = Field(default=256, gt=0, description="output cap per request (a prompt may override)")
    temperature: float = Field(default=0.0, ge=0, description="sampling temperature (0 = greedy)")
    warmup_requests: int = Field(default=2, ge=0, description="requests discarded before measuring "
                                 "(at least, and as many at a time as, the highest concurrency)")
    repeats: int = Field(default=1, ge=1, description="times each suite is replayed per concurrency level")
    request_timeout_s: float = Field(default=600, gt=0, description="per-request timeout")
    retries: int = Field(
        default=1, ge=0, le=10,
        description="re-sends of a request after a server-side failure (5xx, reset, timeout); only the last is recorded",
    )
    endpoint: Literal["chat", "completions"] = Field(default="chat", description="OpenAI endpoint to replay on")
    connections: Literal["keep-alive", "per-request"] = Field(
        default="keep-alive", description="reuse connections (as SDK clients do), or open a new one for every "
        "request (as sglang.bench_serving does); on a real server the choice moves TTFT (docs/real-gpu.md)")
    per_request_spec: Literal["auto", "off"] = Field(
        default="auto", description="ask the server for per-request accept stats where it offers them"
    )
    order: Literal["suite", "shuffled"] = Field(
        default="suite",
        description="request order within a phase; 'shuffled' (seeded) mixes prompt lengths like bench_serving",
    )
    seed: int = Field(default=1, description="seed of the shuffled order (the same for every variant)")
    ignore_eos: bool = Field(
        default=False, description="generate exactly max_tokens (SGLang's ignore_eos; bench_serving's default)"
    )

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, levels: list[int]) -> list[int]:
        seen: set[int] = set()
        for i, level in enumerate(levels):
            if level <= 0:
                raise FieldProblem(f"must be greater than 0, got {level}", (i,))
            if level in seen:
                raise FieldProblem(f"concurrency {level} is listed twice", (i,))
            seen.add(level)
        return levels
