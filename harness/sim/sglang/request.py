"""One request in the stand-in's scheduler: what the endpoints fill in, what the engine fills as it decodes
(harness.sim.sglang.engine), and what the token and logprob helpers read (harness.sim.sglang.tokens)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field


@dataclass(eq=False)
class Req:
    rid: str
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    ignore_eos: bool = False
    stream: bool = False
    log_metrics: bool = True
    # filled by the engine
    prompt_key: int = 0
    sample_key: int | None = None
    output_ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    finish: dict | None = None
    cached_tokens: int = 0
    verify_ct: int = 0
    correct_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    wall_received: float = field(default_factory=time.time)
    t_received: float = field(default_factory=time.perf_counter)
    t_dispatch: float = 0.0
    t_first: float = 0.0
    t_finished: float = 0.0
    t_last: float = 0.0
    aborted: bool = False
    event: asyncio.Event = field(default_factory=asyncio.Event)
    rng: random.Random | None = None
    per_position: tuple[float, ...] | None = None  # this request's own profile (a by_content rule matched)
    # the lossless audit's interface (harness.sim.sglang.tokens): logprobs, continue_final_message, structure
    # the ids the prompt key comes from, when not prompt_ids (a continuation)
    key_ids: list[int] | None = None
    start_index: int = 0  # the answer's position of the first output token (a continuation: after its prefix)
    path: int = 0  # which path the answer is on after near-tie flips and wrong tokens (numerics.content_key)
    structured: list[str] | None = None  # a structured answer's tokens (response_format)
    logprob_top: int | None = None  # logprobs asked for: the number of alternatives (None: no logprobs)
    token_logprobs: list[tuple[int, str, float, tuple]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.finish is not None

    def text(self) -> str:
        return "".join(self.texts)
