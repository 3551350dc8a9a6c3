"""The token a request commits at one position, from the scheduler's point of view: the model's greedy or
sampled token (harness.sim.sglang.model), a near-tie resolved by the pass's shape or a wrong draft of the
broken verify path (harness.sim.sglang.numerics), or the next token of a structured answer
(harness.sim.sglang.structured); with the logprobs entry the request asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.sim.sglang import model, numerics, structured
from harness.sim.sglang.logprobs import EOS_TEXT, decoded

if TYPE_CHECKING:
    from harness.sim.sglang.request import Req

EOS_LOGPROB = -0.01


def eos_index(r: Req) -> int:
    """The position of the end-of-sequence token: after a structured answer, else the model's own length."""
    return len(r.structured) if r.structured is not None else model.natural_length(r.prompt_key) - 1


def held_back(r: Req, index: int) -> bool:
    if r.structured is not None:
        return False
    return model.held_back(numerics.content_key(r.prompt_key, r.path), index, r.sample_key)


def commit(num: numerics.Numerics, vocab: int, r: Req, index: int, shape: tuple,
           wrong: bool) -> tuple[int, str]:
    """(token id, text) committed at absolute position `index` by a pass of `shape`; `wrong`: this is a draft
    the broken verify path accepts wrongly. Advances the request's path and records its logprobs entry."""
    k = 0 if r.logprob_top is None else max(1, r.logprob_top)  # the chosen token's own logprob needs one
    if r.structured is not None:
        expected = r.structured[index] if index < len(r.structured) else ""
        text = structured.wrong_text(expected) if wrong else expected
        tid = numerics.token_id(text, vocab)
        lp = -1.5 if wrong else -0.001
        _record(r, tid, text, lp, ((tid, text, lp),)[: max(1, k)])
        return tid, text
    if wrong:
        got = numerics.wrong_pick(num, r.prompt_key, r.path, index, vocab, k)
    else:
        got = numerics.pick(num, r.prompt_key, r.path, index, vocab, r.sample_key, shape, k)
    r.path = got.path
    _record(r, got.token_id, got.text, got.logprob, got.top)
    return got.token_id, got.text


def commit_eos(r: Req, eos_id: int) -> None:
    _record(r, eos_id, EOS_TEXT, EOS_LOGPROB, ((eos_id, EOS_TEXT, EOS_LOGPROB),))


def _record(r: Req, tid: int, text: str, lp: float, top: tuple) -> None:
    """The entry as the logprobs report it: texts decoded alone (logprobs.decoded), the chosen token first."""
    if r.logprob_top is None:
        return
    if text != EOS_TEXT:
        text = decoded(text)
        top = tuple((t, decoded(x), a) for t, x, a in top)
    r.token_logprobs.append((tid, text, lp, top[: r.logprob_top]))
