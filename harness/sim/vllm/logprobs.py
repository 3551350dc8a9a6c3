"""Logprobs as vLLM 0.33's OpenAI server returns them, and the tokens behind them (pure).

The vLLM stand-in decides its tokens with the SGLang stand-in's numerics (harness.sim.sglang.numerics:
near-ties that follow the batch shape, DRAFTBENCH_SIM_BROKEN_VERIFY's wrong drafts) and answers:
- chat, `logprobs: true` (+ `top_logprobs`): choices[i].logprobs = {"content": [{"token", "logprob", "bytes",
  "top_logprobs": [{"token", "logprob", "bytes"}]}]} (serving_chat's _create_chat_logprobs: logprobs floored
  at -9999.0, bytes the token's UTF-8 with errors replaced, the first `top_logprobs` of the step's dict);
- completions, `logprobs: N`: CompletionLogProbs {"text_offset" (running offsets), "token_logprobs",
  "tokens", "top_logprobs": [{token: logprob}] (the sampled token and N more: "num_output_top_logprobs >=
  i")}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.sim.sglang import numerics
from harness.sim.sglang.logprobs import decoded

FLOOR = -9999.0


@dataclass
class Tokens:
    """One request's token choices: its prompt key, path and position, and the logprobs entries asked for."""

    key: int
    num: numerics.Numerics
    vocab: int
    top: int | None = None  # alternatives asked for (None: no logprobs)
    path: int = 0
    entries: list[tuple[str, float, tuple]] = field(default_factory=list)

    def next(self, index: int, shape: tuple, wrong: bool = False) -> str:
        k = 0 if self.top is None else self.top + 1
        got = numerics.wrong_pick(self.num, self.key, self.path, index, self.vocab, k) if wrong \
            else numerics.pick(self.num, self.key, self.path, index, self.vocab, None, shape, k)
        self.path = got.path
        if self.top is not None:
            self.entries.append((decoded(got.text), got.logprob,
                                 tuple((decoded(t), a) for _, t, a in got.top)))
        return got.text


def _lp(value: float) -> float:
    return max(value, FLOOR)


def chat(entries: list[tuple[str, float, tuple]], top: int) -> dict[str, Any]:
    def item(token: str, lp: float) -> dict[str, Any]:
        return {"token": token, "logprob": _lp(lp), "bytes": list(token.encode("utf-8", errors="replace"))}

    return {"content": [{**item(tok, lp), "top_logprobs": [item(t, a) for t, a in alts[:top]]}
                        for tok, lp, alts in entries]}


def completion(entries: list[tuple[str, float, tuple]], top: int, start: int = 0) -> dict[str, Any]:
    offsets, at = [], start
    for tok, _, _ in entries:
        offsets.append(at)
        at += len(tok)
    return {"text_offset": offsets, "token_logprobs": [_lp(lp) for _, lp, _ in entries],
            "tokens": [tok for tok, _, _ in entries],
            "top_logprobs": [{t: _lp(a) for t, a in alts[: top + 1]} for _, _, alts in entries]}


def request_top(body: dict[str, Any], chat_api: bool) -> int | None:
    """The alternatives a request asks for (None: no logprobs)."""
    value = body.get("top_logprobs") if chat_api else body.get("logprobs")
    if chat_api and not body.get("logprobs"):
        return None
    if not chat_api and (value is None or value is False):
        return None
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0
