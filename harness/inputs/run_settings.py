"""`run:` of a plan: how the suites are replayed and measured (typed, documented where declared)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from harness.inputs.sampling import SamplingArm, unique_labels
from harness.inputs.yamlio import FieldProblem, StrictModel


def _rate(value: object) -> object:
    # YAML reads `inf` as a string (`.inf` is its float); bench_serving spells it inf
    return float("inf") if isinstance(value, str) and value.strip().lower() in ("inf", ".inf") else value



MIN_REQUESTS_PER_SLOT = 4  # a closed-loop phase with fewer than 4 x concurrency requests cannot decide
DEFAULT_CONTEXT_BUCKETS = [1024, 4096, 16384, 65536]  # the contexts a chat deployment serves, up to 64k

class SLO(StrictModel):
    """Service-level limits for goodput (as guidellm's `slo`, vLLM's --goodput)."""

    ttft_ms: float | None = Field(default=None, gt=0, description="time to first token, at most")
    tpot_ms: float | None = Field(default=None, gt=0,
                                  description="time per output token after the first, at most")
    e2e_ms: float | None = Field(default=None, gt=0, description="whole request, at most")


class RunSettings(StrictModel):
    """How the suites are replayed against each variant."""

    concurrency: list[int] = Field(default_factory=lambda: [1], description="closed-loop concurrency levels; "
                                   "[] with request_rate: open-loop phases only; auto: `draftbench run` "
                                   "finds where each speculative variant stops paying (docs/tune.md)")
    max_tokens: int = Field(default=256, gt=0, description="output cap per request (a prompt may override)")
    temperature: float = Field(default=0.0, ge=0, description="sampling temperature (0 = greedy)")
    warmup_requests: int = Field(default=2, ge=0, description="requests discarded before measuring "
                                 "(at least, and as many at a time as, the highest concurrency)")
    repeats: int | None = Field(
        default=None, ge=1, description="times each suite is replayed per concurrency level; unset: 3 when "
        "any level is above 1 (the speedup's interval there is over repeats), else 1")
    min_steady_s: float = Field(
        default=10.0, ge=0, description="a phase whose steady state (all slots busy) is shorter, or that has "
        "fewer than 4 x concurrency requests, is too short to decide (verdict too-short); phases cycle the "
        "suite until they reach it (up to max_phase_s)")
    phase_sizing: bool = Field(
        default=True, description="cycle a suite too short to decide in one pass (off: tune's decode-only "
        "step-cost phases, whose length is their output tokens)")
    requests_per_slot: int | None = Field(
        default=None, ge=1, description="closed-loop phases of exactly this many x concurrency requests (the "
        "suite's first prompts, cycled where it holds fewer; no phase sizing): tune's decode-only step-cost "
        "phases run 4, so that a large batch's phase holds four waves of it and a small one's is not the "
        "largest batch's count sent one after another (docs/tune.md); unset: each phase replays its suite")
    max_phase_s: float = Field(
        default=180.0, gt=0, description="the longest a phase may grow by cycling its suite to reach "
        "min_steady_s and 4 x concurrency requests (docs/metrics.md, phase sizing)")
    stop: Literal["fixed", "decided"] = Field(
        default="fixed", description="fixed: run.repeats, one 95 % interval per row; decided: more repeats "
        "of the rows still undecided, at looks fixed in advance (repeats, then doubling up to max_repeats), "
        "each look's interval at its group-sequential level (docs/metrics.md, the stopping rule)")
    equivalence: float = Field(
        default=0.03, gt=0, lt=0.5, description="a speedup whose whole interval lies within 1.00x +- this "
        "is equivalent (decided: speculation does not pay here)")
    budget_s: float | None = Field(
        default=None, gt=0, description="wall-clock budget of the run (draftbench run --budget): planned "
        "before any server starts, and no look is started that it cannot pay for")
    until_ci_pct: float | None = Field(
        default=None, gt=0, description="add repeats (up to max_repeats) while a speedup's 95 % interval "
        "is wider than this many percent either side")
    max_repeats: int = Field(default=10, ge=1, description="the most repeats until_ci_pct or stop: decided "
                             "may run")
    request_timeout_s: float = Field(default=600, gt=0, description="per-request timeout")
    retries: int = Field(
        default=1, ge=0, le=10,
        description="re-sends of a request after a server-side failure (5xx, reset, timeout); only the last "
        "is recorded",
    )
    endpoint: Literal["chat", "completions"] = Field(default="chat",
                                                     description="OpenAI endpoint to replay on")
    connections: Literal["keep-alive", "per-request"] = Field(
        default="keep-alive", description="reuse connections (as SDK clients do), or open a new one for "
        "every request (as sglang.bench_serving does); on a real server the choice moves TTFT "
        "(docs/real-gpu.md)")
    per_request_spec: Literal["auto", "off"] = Field(
        default="auto", description="ask the server for per-request accept stats where it offers them"
    )
    lossless_audit: bool = Field(
        default=True, description="greedy runs: after the baseline's timed phases, an untimed pass on its "
        "server (logprobs, a control at another concurrency) that tells each variant's divergences from the "
        "baseline as near-ties or not (lossless_verdict; docs/metrics.md, lossless audit)")
    lossless_margin: float = Field(
        default=0.5, gt=0, description="nats: a divergence whose logprob margin under the baseline is below "
        "this is a near-tie, bf16 numerics (docs/metrics.md says why 0.5)")
    order: Literal["suite", "shuffled"] = Field(
        default="suite",
        description="request order within a phase; 'shuffled' (seeded) mixes prompt lengths like "
        "bench_serving",
    )
    seed: int = Field(default=1, description="seed of the shuffled order (the same for every variant)")
    ignore_eos: bool = Field(
        default=False,
        description="generate exactly max_tokens (SGLang's ignore_eos; bench_serving's default)"
    )
    request_rate: list[Annotated[float, BeforeValidator(_rate)]] = Field(
        default_factory=list, description="open-loop phases besides the closed-loop ones: requests per "
        "second (inf = all at once), arrivals seeded by `seed` (docs/workloads.md)")
    burstiness: float = Field(
        default=1.0, gt=0, description="gamma shape of the gaps between arrivals: 1 = Poisson, "
        "below 1 burstier, above 1 steadier (bench_serving's --burstiness)")
    slo: SLO | None = Field(default=None, description="goodput counts the requests that meet every limit")
    sampling: list[SamplingArm] = Field(
        default_factory=list, description="sampling arms (harness.inputs.sampling): every variant is "
        "measured at each, paired with the baseline at the same; empty: run.temperature alone")
    context_buckets: list[int] = Field(
        default_factory=lambda: list(DEFAULT_CONTEXT_BUCKETS), description="upper edges (tokens of prompt "
        "plus output so far) of the context buckets the deployment serves: acceptance is reported per bucket "
        "(summary_by_context.csv), tune picks per bucket and warns when the suites leave one empty")
    concurrency_auto: bool = Field(default=False, description="set by `concurrency: auto` (the levels are "
                                   "then the crossover search's, not a list)")

    @field_validator("sampling")
    @classmethod
    def _arms(cls, arms: list[SamplingArm]) -> list[SamplingArm]:
        return unique_labels(arms)

    @field_validator("context_buckets")
    @classmethod
    def _buckets(cls, edges: list[int]) -> list[int]:
        if not edges:
            raise FieldProblem("is empty: give at least one upper edge, e.g. [4096, 32768]")
        for i, edge in enumerate(edges):
            if edge <= 0 or (i and edge <= edges[i - 1]):
                raise FieldProblem(f"must be positive and increasing, got {edge} after "
                                   f"{edges[i - 1] if i else 'nothing'}", (i,))
        return edges

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(data.get("concurrency"), str) \
                and data["concurrency"].strip().lower() == "auto":
            return {**data, "concurrency": [1], "concurrency_auto": True}
        return data

    @field_validator("request_rate")
    @classmethod
    def _rates(cls, rates: list[float]) -> list[float]:
        for i, rate in enumerate(rates):
            if not rate > 0:  # also NaN
                raise FieldProblem(f"must be greater than 0 (or inf), got {rate}", (i,))
            if rates.index(rate) != i:
                raise FieldProblem(f"request rate {rate} is listed twice", (i,))
        return rates

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

    @model_validator(mode="after")
    def _resolve_repeats(self) -> RunSettings:
        if not self.concurrency and not self.request_rate:
            raise FieldProblem("is empty, and there is no request_rate: a run needs a concurrency level or a "
                               "request rate", ("concurrency",))
        if self.sampling and "temperature" in self.model_fields_set and self.temperature != 0.0:
            raise FieldProblem("is set together with run.sampling: give each arm its own temperature",
                               ("temperature",))
        thinking = [i for i, arm in enumerate(self.sampling) if arm.thinking is not None]
        if thinking and self.endpoint == "completions":  # chat_template_kwargs need a chat template
            raise FieldProblem("is set, and run.endpoint is completions: raw text goes through no chat "
                               "template, so enable_thinking switches nothing; use run.endpoint: chat",
                               ("sampling", thinking[0], "thinking"))
        if self.repeats is None:  # resolved here, so plan.resolved.json records what ran
            self.repeats = 3 if max(self.concurrency, default=1) > 1 else 1
        if (self.until_ci_pct is not None or self.stop == "decided") and self.max_repeats < self.repeats:
            raise FieldProblem(f"is {self.max_repeats}, below repeats ({self.repeats})", ("max_repeats",))
        return self
