"""The stand-in's greedy numerics: near-ties that flip with the batch shape, a broken verify path, and the
target's distribution at each position (what logprobs report).

Near-ties (``DRAFTBENCH_SIM_NEAR_TIES=p``, default 0: off). At a share p of greedy output positions the
target's top two tokens lie within NEAR_TIE_NATS of each other, and which of the two wins depends on the
shape of the forward pass that scores the position: ("decode", batch, 1) for a baseline decode step,
("verify", batch, draft tokens) for a verify step, ("prefill", sequences) for the first token. bf16 kernels
whose reduction order follows the batch shape do this on a GPU. Once the runner-up wins, the rest of the
answer follows another path (a new content key), so two texts drift apart after a flip, as they do there.

Broken verify (``DRAFTBENCH_SIM_BROKEN_VERIFY=q``, default 0: off). A share q of the verify steps that
accept drafts commit one of those drafts although the target ranks it third or lower, at least a nat below
its top token: a verify path that accepts wrong draft tokens. Inside a structured-output request the
wrong token ignores the grammar (harness.sim.sglang.structured), as lmdeploy #4551 reported.

Everything is a pure function of (prompt key, path, position, shape): a replay of one plan gives the same
texts, and the same prompt at the same shape gives the same token.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from harness.sim.sglang import model

NEAR_TIE_NATS = 0.12  # the widest near-tie margin drawn: a few bf16 ulps of a logit near 20
MAX_TOP = 64  # the most alternatives a logprobs request gets (OpenAI caps top_logprobs at 20)
WRONG_RANKS = 6  # a wrong draft token is the target's 3rd .. (2 + WRONG_RANKS)th choice


def _unit(*parts: object) -> float:
    """A uniform draw in [0, 1) from the parts."""
    return (model.stable_hash(*parts) % 1_000_003) / 1_000_003


def _env_share(name: str) -> float:
    try:
        value = float(os.environ.get(name, "0") or 0)
    except ValueError:
        return 0.0
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0


@dataclass(frozen=True)
class Numerics:
    near_ties: float = 0.0  # share of greedy positions holding a near-tie
    broken_verify: float = 0.0  # share of verify steps with accepted drafts that commit a wrong one

    @classmethod
    def from_env(cls) -> Numerics:
        return cls(_env_share("DRAFTBENCH_SIM_NEAR_TIES"), _env_share("DRAFTBENCH_SIM_BROKEN_VERIFY"))


OFF = Numerics()


def content_key(prompt_key: int, path: int) -> int:
    """The key the tokens of a path come from: the prompt's own until a flip or a wrong token."""
    return prompt_key if path == 0 else model.stable_hash(prompt_key, "path", path)


def token_id(text: str, vocab: int) -> int:
    return 3 + model.stable_hash("tok", text) % max(1, vocab - 3)


@dataclass(frozen=True)
class Dist:
    """The target's distribution at one position: (token id, text, logprob), best first."""

    top: tuple[tuple[int, str, float], ...]
    tie: bool


def is_tie(num: Numerics, ck: int, index: int, sample_key: int | None) -> bool:
    """Whether greedy position `index` of content key `ck` holds a near-tie (a plain word token only: not the
    first token, not a multi-byte character's pieces)."""
    if num.near_ties <= 0 or sample_key is not None or index <= 0:
        return False
    if model.held_back(ck, index) or model.held_back(ck, index - 1):
        return False
    return _unit(ck, index, "tie") < num.near_ties


def distribution(num: Numerics, ck: int, index: int, vocab: int, sample_key: int | None = None,
                 k: int = 2) -> Dist:
    """The top `k` (at least 2) of the target's distribution at `index`; entry 0 is the model's own token."""
    tid, text = model.output_token(ck, index, vocab, sample_key)
    tie = is_tie(num, ck, index, sample_key)
    u = _unit(ck, index, "p")
    words = [text]
    if tie:  # two tokens near 0.45 each, within NEAR_TIE_NATS
        lp1 = -math.log(2.0) - 0.02 - 0.25 * u
        heads = [lp1, lp1 - NEAR_TIE_NATS * (0.1 + 0.9 * _unit(ck, index, "margin"))]
    else:
        heads = [-(0.002 + 0.6 * u * u)]
    rest = max(1e-9, 1.0 - sum(math.exp(h) for h in heads))
    top = [(tid, text, heads[0])]
    for rank in range(1, max(2, min(k, MAX_TOP))):
        word = _alt_word(ck, index, rank, words)
        words.append(word)
        lp = heads[rank] if rank < len(heads) else math.log(rest * 0.5 ** (rank - len(heads) + 1))
        top.append((token_id(word, vocab), word, lp))
    return Dist(tuple(top), tie)


def _alt_word(ck: int, index: int, rank: int, taken: list[str]) -> str:
    h = model.stable_hash(ck, index, "alt", rank)
    for j in range(len(model.WORDS)):
        word = " " + model.WORDS[(h + j) % len(model.WORDS)]
        if word not in taken:
            return word
    return f" w{rank}"


def flips(ck: int, index: int, shape: tuple) -> bool:
    """At a near-tie: whether the runner-up wins in a forward pass of this shape."""
    return model.stable_hash(ck, index, "flip", shape) & 1 == 1


@dataclass(frozen=True)
class Pick:
    """One committed token: its id and text, the path after it, and the distribution this pass reports
    (winner first)."""

    token_id: int
    text: str
    path: int
    logprob: float
    top: tuple[tuple[int, str, float], ...]


def pick(num: Numerics, prompt_key: int, path: int, index: int, vocab: int, sample_key: int | None,
         shape: tuple, k: int = 0) -> Pick:
    """The token a pass of `shape` commits at `index` (greedy: the top token, or at a near-tie whichever of
    the two this shape favours); `k`: how many alternatives the caller reports (0: none)."""
    ck = content_key(prompt_key, path)
    tie = is_tie(num, ck, index, sample_key)
    if not tie and k <= 0:
        tid, text = model.output_token(ck, index, vocab, sample_key)
        return Pick(tid, text, path, 0.0, ())
    dist = distribution(num, ck, index, vocab, sample_key, max(2, k))
    top = list(dist.top)
    if tie and flips(ck, index, shape):  # the runner-up wins here; this pass reports it first
        (a_id, a_text, a_lp), (b_id, b_text, b_lp) = top[0], top[1]
        top[0], top[1] = (b_id, b_text, a_lp), (a_id, a_text, b_lp)
        path = model.stable_hash(path, index, "runner-up")
    tid, text, lp = top[0]
    return Pick(tid, text, path, lp, tuple(top[:k]))


def wrong_pick(num: Numerics, prompt_key: int, path: int, index: int, vocab: int, k: int = 0) -> Pick:
    """A wrong draft token the broken verify path commits: the target's 3rd .. (2 + WRONG_RANKS)th choice."""
    ck = content_key(prompt_key, path)
    rank = 2 + model.stable_hash(ck, index, "wrong-rank") % WRONG_RANKS
    dist = distribution(num, ck, index, vocab, None, max(k, rank + 1))
    tid, text, lp = dist.top[rank]
    return Pick(tid, text, model.stable_hash(path, index, "wrong"), lp, dist.top[:k])


def broken_draft(num: Numerics, seed: int, prompt_key: int, step: int, accepted: int) -> int | None:
    """Which of a verify step's `accepted` drafts (0-based) the broken path gets wrong, or None."""
    if num.broken_verify <= 0 or accepted <= 0:
        return None
    if _unit(seed, prompt_key, step, "broken") >= num.broken_verify:
        return None
    return model.stable_hash(seed, prompt_key, step, "which") % accepted


def resume(num: Numerics, prompt_key: int, prefix: str, vocab: int,
           limit: int = 1 << 16) -> tuple[int, int] | None:
    """(position, path) after an assistant prefix that this prompt's greedy answer starts with, taking at
    each near-tie whichever token the prefix holds (continue_final_message); None when it is not such a
    prefix (it ends inside a token, or holds a token neither candidate gives)."""
    path, index, cur = 0, 0, 0
    while cur < len(prefix) and index < limit:
        ck = content_key(prompt_key, path)
        _, text = model.output_token(ck, index, vocab)
        if is_tie(num, ck, index, None):
            alt = distribution(num, ck, index, vocab).top[1][1]
            if not prefix.startswith(text, cur) and prefix.startswith(alt, cur):
                text, path = alt, model.stable_hash(path, index, "runner-up")
        if not prefix.startswith(text, cur):
            return None
        cur += len(text)
        index += 1
    return (index, path) if cur == len(prefix) else None
