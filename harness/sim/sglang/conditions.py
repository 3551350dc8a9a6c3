"""Where the stand-in's acceptance depends on how it is served: the context length and the sampler.

Every verify step draws its accepted drafts from the drafter's per-position profile (acceptance.json), first
boosted by top-k and lowered by sampling (``model.effective_profile``), then lowered by the context:

    temperature  each position's chance is multiplied by 1 - 0.3 x min(T x top_p, 1): greedy (T 0) keeps the
                 profile, T 0.7 with top_p 1 keeps 79 % of it, T 0.7 with top_p 0.95 80 % (nucleus sampling
                 cuts the tail the drafter cannot guess, so top_p scales the temperature's effect);
    context      with c = the prompt's tokens plus the tokens generated so far (at the step's start), each
                 position's chance is multiplied by
                     f(c) = 1                                       for c <= knee (2048)
                     f(c) = max(floor, 1 - per_doubling x log2(c / knee))   beyond it
                 per_doubling 0.12, floor 0.4: 0.88 at 4k, 0.76 at 8k, 0.64 at 16k, 0.52 at 32k.

So short chats (prompt and answer under 2k tokens) accept as before, and a drafter's accept length decays
with every doubling of the context past 2k, as vLLM RFC #48627 and vllm#47602 report for real drafters.
``DRAFTBENCH_SIM_CONTEXT_DECAY`` changes it: ``off``, or ``KNEE:PER_DOUBLING[:FLOOR]`` (``4096:0.2``).
The per-request stats the stand-in returns (spec_verify_ct, spec_correct_drafts_histogram, ...) count these
draws, so they show both dependencies; ``expected_accept_length_at`` is the mean they converge to. The vLLM
stand-in (harness.sim.vllm) draws its steps through ``step_profile`` too (topk 1).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.sim.sglang import model

ENV = "DRAFTBENCH_SIM_CONTEXT_DECAY"


@dataclass(frozen=True)
class ContextDecay:
    knee: int = 2048  # tokens of context up to which acceptance does not depend on it
    # the fall of every position's acceptance per doubling of context past the knee
    per_doubling: float = 0.12
    floor: float = 0.4  # the factor never goes below this

    def factor(self, context: int) -> float:
        if self.per_doubling <= 0 or context <= self.knee:
            return 1.0
        return max(self.floor, 1.0 - self.per_doubling * math.log2(context / self.knee))

    @classmethod
    def from_env(cls) -> ContextDecay:
        """The decay ``DRAFTBENCH_SIM_CONTEXT_DECAY`` sets (unset: the defaults; ``off``: none)."""
        raw = os.environ.get(ENV, "").strip().lower()
        if not raw:
            return cls()
        if raw in ("off", "0", "none"):
            return cls(per_doubling=0.0)
        parts = raw.split(":")
        try:
            knee, per = int(parts[0]), float(parts[1])
            floor = float(parts[2]) if len(parts) > 2 else cls.floor
        except (IndexError, ValueError):
            raise ValueError(f"{ENV}={raw!r}: expected 'off' or KNEE:PER_DOUBLING[:FLOOR], e.g. 2048:0.12") \
                from None
        if knee < 1 or not 0 <= per < 1 or not 0 < floor <= 1:
            raise ValueError(f"{ENV}={raw!r}: KNEE >= 1, 0 <= PER_DOUBLING < 1, 0 < FLOOR <= 1")
        return cls(knee, per, floor)


NO_DECAY = ContextDecay(per_doubling=0.0)


def top_p_of(value: Any) -> float:
    """A request's top_p (the engines' default 1.0 when absent or not a number in (0, 1])."""
    try:
        top_p = float(value)
    except (TypeError, ValueError):
        return 1.0
    return top_p if 0.0 < top_p <= 1.0 else 1.0


def step_profile(per_position: Sequence[float], topk: int = 1, temperature: float = 0.0, top_p: float = 1.0,
                 context: int = 0, decay: ContextDecay = NO_DECAY) -> list[float]:
    """Per-position conditional acceptance of one verify step served under these conditions."""
    effective_t = max(temperature, 0.0) * min(max(top_p, 0.0), 1.0)
    f = decay.factor(context)
    return [min(1.0, max(0.0, p * f)) for p in model.effective_profile(per_position, topk, effective_t)]


def expected_accept_length_at(per_position: Sequence[float], shape: model.SpecShape, *,
                              temperature: float = 0.0, top_p: float = 1.0, context: int = 0,
                              decay: ContextDecay | None = None) -> float:
    """Mean committed tokens per verify step at a context length (accepted drafts + the bonus token)."""
    profile = step_profile(per_position, shape.topk, temperature, top_p, context, decay or ContextDecay())
    return 1.0 + model.expected_accepted(profile, shape.max_accepted)
