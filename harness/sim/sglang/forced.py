"""Forced acceptance, as SGLang's speculative workers do it for benchmarking
(`srt/speculative/spec_utils.py`).

Environment (read once at start, as SGLang reads them at import):
  SGLANG_SIMULATE_ACC_LEN        float, default -1: off unless > 0; the accept length to force
  SGLANG_SIMULATE_ACC_METHOD     "multinomial" (default): round(N(mean=ACC_LEN, sd=1)) clamped to
                                 [1, speculative_num_steps + 1]; "match-expected": ACC_LEN clamped to that
                                 range, then its floor or ceiling with the fractional part as the ceiling's
                                 probability (the mean then equals ACC_LEN); anything else is an error
  SGLANG_SIMULATE_ACC_TOKEN_MODE "real-draft-token" commits the draft chain and the target's bonus token;
                                 otherwise every committed token of a verify step is token id 100
One draw per verify step for the whole batch: every request in it accepts the same number of tokens
(correct drafts = draw − 1). The outputs are not the model's.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

METHODS = ("multinomial", "match-expected")
FIXED_TOKEN_ID = 100  # "some legit token id" in SGLang
FIXED_TOKEN_TEXT = " value"  # what the stand-in's tokenizer shows for it


@dataclass(frozen=True)
class Forced:
    accept_len: float
    method: str = "multinomial"
    real_draft_tokens: bool = False

    def draw(self, rng: random.Random, num_steps: int) -> int:
        """Tokens committed per request in this verify step, 1..num_steps + 1."""
        max_len = num_steps + 1
        if self.method == "multinomial":
            return int(round(min(max(rng.gauss(self.accept_len, 1.0), 1.0), float(max_len))))
        target = max(1.0, min(float(max_len), self.accept_len))
        lower = int(target // 1)
        upper = lower + 1 if lower < max_len else lower
        if lower == upper:
            return lower
        return upper if rng.random() < target - lower else lower


def from_env(env: dict[str, str] | None = None) -> Forced | None:
    """The forced-acceptance setting, None when off; ValueError names a bad method or value."""
    env = os.environ if env is None else env
    raw = env.get("SGLANG_SIMULATE_ACC_LEN", "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"SGLANG_SIMULATE_ACC_LEN={raw!r} is not a number") from exc
    if value <= 0:
        return None
    method = env.get("SGLANG_SIMULATE_ACC_METHOD", "multinomial") or "multinomial"
    if method not in METHODS:
        raise ValueError(f"Invalid simulate_acc_method: {method}")
    mode = env.get("SGLANG_SIMULATE_ACC_TOKEN_MODE", "")
    return Forced(value, method, mode == "real-draft-token")
