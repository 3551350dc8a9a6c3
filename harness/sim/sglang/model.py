"""Pure simulation of an H200 serving a Llama-8B-class target: step times, draft acceptance, tokens and text.

Nothing here sleeps or does I/O; the scheduler (engine.py) turns these numbers into real (scaled) time.

Timing. A decode step runs the target once over the batch; a speculative step is draft (``num_steps``
drafter passes over ``topk`` branches), verify (one target pass over ``num_draft_tokens`` per request) and
draft-extend plus bookkeeping. Without a CUDA graph every forward pass pays kernel-launch overhead (the
32-layer target far more than the 1-layer drafter), which is what makes a long chain with graphs off
slower than no speculation at all. Defaults (batch 1):
  baseline, graphs on                            11.10 ms/step ->  90.1 tok/s
  baseline, graphs off                           14.10 ms/step ->  70.9 tok/s
  EAGLE-3 (3,1,4), accept len 3.21               17.78 ms/step -> 180.7 tok/s  (2.0x)
  EAGLE-3 (15,1,16), accept len 2.00, eager      38.00 ms/step ->  52.6 tok/s  (rate (2-1)/(16-1) = 0.067)
  EAGLE-3 (5,4,16), accept len 2.00, eager       30.35 ms/step ->  65.9 tok/s
  wrong flag (EAGLE on an EAGLE-3 draft), (3,1,4) accept len 1.00 ->  56.2 tok/s
Memory-bound, then compute-bound. A target pass reads the weights once (``target_base_ms``, the floor at
a tiny batch) and each running request's KV cache and activations (``target_per_req_ms``; a verify pass
also ``verify_per_draft_ms`` per scored draft token), so the step grows with the batch and with the draft
tokens from the start; past ``ridge_tokens`` scored tokens per pass the tensor cores are the limit and every
further token costs ``compute_ms_per_token`` more. A verify pass scores batch x num_draft_tokens tokens, so it
reaches the ridge num_draft_tokens times sooner than a decode pass: the speed-up shrinks with the batch and
speculation stops paying (good drafter (3,1,4): between batch 32 and 48; the demo's weak drafter at
(2,1,3): between 8 and 16; ``tests/test_crossover.py`` finds both). Step cost is not a line in batch or
steps: every ``tile_tokens`` tokens a target pass scores beyond the first tile add a tile wave (a jump in
batch x draft tokens), and one draft step costs more than two (the unfused single-step path), as on the
H200 where the step cost did not fall monotonically with fewer steps.

Acceptance. The drafter's profile gives P(draft i correct | drafts < i correct) for a chain; the step
accepts the longest correct prefix, capped by the tree depth. Top-k > 1 raises each position's chance
(more candidates per depth); sampling (temperature > 0) lowers it.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepCosts:
    """Milliseconds; see the module docstring for the calibration they produce."""

    target_base_ms: float = 10.60  # one target forward at tiny batch (weights read once)
    target_per_req_ms: float = 0.50  # per running request in a target pass
    verify_per_draft_ms: float = 0.35  # per request per extra (draft) token scored in a verify pass
    draft_pass_ms: float = 0.205  # one drafter forward
    draft_per_branch_ms: float = 0.08  # per request per top-k branch in a drafter forward
    spec_overhead_ms: float = 4.775  # draft-extend pass, tree building, verification sampling per step
    eager_target_ms: float = 3.00  # launch overhead of a target pass without a CUDA graph
    eager_draft_ms: float = 0.60  # launch overhead of a drafter pass without a CUDA graph
    tile_tokens: int = 64  # tokens per target pass beyond a multiple of this pay another GEMM tile wave
    tile_ms: float = 0.90  # per extra tile wave: the step cost jumps with batch x tokens, not a line
    ridge_tokens: int = 128  # scored tokens per target pass past which it is compute-bound
    compute_ms_per_token: float = 0.15  # per token past the ridge
    single_step_ms: float = 1.20  # num_steps 1 runs the unfused draft path: dearer than 2 steps
    prefill_base_ms: float = 8.00
    prefill_per_token_ms: float = 0.020  # uncached prompt tokens


DEFAULT_COSTS = StepCosts()


@dataclass(frozen=True)
class SpecShape:
    num_steps: int
    topk: int
    num_draft_tokens: int

    @property
    def max_accepted(self) -> int:
        """Deepest accepted path: a chain of ``num_steps`` drafts, limited by the tree size."""
        return max(0, min(self.num_steps, self.num_draft_tokens - 1))


def _tiles_ms(tokens: int, costs: StepCosts) -> float:
    """Extra tile waves of a target pass over ``tokens`` tokens (none up to one tile), and its compute past
    the ridge (none below it: the pass is memory-bound there)."""
    waves = costs.tile_ms * max(0, math.ceil(tokens / costs.tile_tokens) - 1)
    return waves + costs.compute_ms_per_token * max(0, tokens - costs.ridge_tokens)


def decode_step_seconds(batch: int, graph: bool, costs: StepCosts = DEFAULT_COSTS) -> float:
    ms = costs.target_base_ms + costs.target_per_req_ms * batch + _tiles_ms(batch, costs)
    if not graph:
        ms += costs.eager_target_ms
    return ms / 1000.0


def verify_step_seconds(batch: int, shape: SpecShape, graph: bool, costs: StepCosts = DEFAULT_COSTS) -> float:
    verify = (
        costs.target_base_ms
        + costs.target_per_req_ms * batch
        + costs.verify_per_draft_ms * batch * max(0, shape.num_draft_tokens - 1)
        + _tiles_ms(batch * max(1, shape.num_draft_tokens), costs)
    )
    draft = shape.num_steps * (costs.draft_pass_ms + costs.draft_per_branch_ms * batch * shape.topk)
    if shape.num_steps == 1:
        draft += costs.single_step_ms
    ms = verify + draft + costs.spec_overhead_ms
    if not graph:  # the verify pass, the draft passes and the draft-extend pass each launch eagerly
        ms += costs.eager_target_ms + costs.eager_draft_ms * (shape.num_steps + 1)
    return ms / 1000.0


def prefill_seconds(new_tokens: int, num_seqs: int, costs: StepCosts = DEFAULT_COSTS) -> float:
    return (costs.prefill_base_ms + costs.prefill_per_token_ms * new_tokens + 0.2 * num_seqs) / 1000.0


def graph_used(batch: int, backend: str, max_bs: int) -> bool:
    """A decode batch replays a CUDA graph only when graphs are on and the batch fits the largest capture."""
    return backend != "disabled" and batch <= max_bs


class StepNoise:
    """Seeded timing noise (``DRAFTBENCH_SIM_STEP_NOISE``): each step's time is multiplied by a log-normal
    factor of mean 1 and relative standard deviation ``sd``; sd 0 (the default) is exactly 1.0, no draws."""

    def __init__(self, sd: float = 0.0, seed: int = 0):
        self.sd = max(0.0, sd)
        self._sigma = math.sqrt(math.log1p(self.sd**2))
        self._rng = random.Random(seed)

    def __call__(self) -> float:
        if self.sd == 0:
            return 1.0
        return math.exp(self._rng.gauss(-self._sigma**2 / 2, self._sigma))


def effective_profile(per_position: Sequence[float], topk: int = 1, temperature: float = 0.0) -> list[float]:
    """Per-position conditional acceptance after the top-k boost and the sampling penalty."""
    exponent = 1.0 + 0.5 * math.log2(max(1, topk))
    penalty = 1.0 - 0.3 * min(max(temperature, 0.0), 1.0)
    return [min(1.0, max(0.0, (1.0 - (1.0 - p) ** exponent) * penalty)) for p in per_position]


def content_profile(rules: Sequence[tuple[tuple[str, ...], tuple[float, ...]]], messages: Any
                    ) -> tuple[float, ...] | None:
    """The profile of the first rule one of whose words is in the request's user text (lower case), or
    None."""
    if not rules or not isinstance(messages, list):
        return None
    text = " ".join(str(m.get("content", "")) for m in messages
                    if isinstance(m, dict) and m.get("role") == "user").lower()
    return next((profile for words, profile in rules if any(w in text for w in words)), None)


def expected_accepted(profile: Sequence[float], max_accepted: int) -> float:
    """E[accepted drafts] = sum_i prod_{j<=i} p_j over reachable positions (positions past the profile: 0)."""
    total, run = 0.0, 1.0
    for p in list(profile)[:max_accepted]:
        run *= p
        total += run
    return total


def expected_accept_length(
    per_position: Sequence[float], shape: SpecShape, temperature: float = 0.0
) -> float:
    """Mean committed tokens per verify step (accepted drafts + the bonus token), SGLang's accept len."""
    return 1.0 + expected_accepted(
        effective_profile(per_position, shape.topk, temperature), shape.max_accepted
    )


def sample_accepted(rng: random.Random, profile: Sequence[float], max_accepted: int) -> int:
    k = 0
    for p in list(profile)[:max_accepted]:
        if rng.random() >= p:
            break
        k += 1
    return k


def accept_rate(accept_len: float, shape: SpecShape) -> float:
    """0.5.15 formula: correct drafts over proposed drafts, (accept_len - 1) / (num_draft_tokens - 1)."""
    per_round = shape.num_draft_tokens - 1 if shape.num_draft_tokens else shape.num_steps
    return (accept_len - 1.0) / per_round if per_round > 0 else 0.0


def steady_tok_per_s(
    batch: int,
    graph: bool,
    shape: SpecShape | None = None,
    accept_len: float = 1.0,
    costs: StepCosts = DEFAULT_COSTS,
) -> float:
    """Output tokens per second per request in steady decode (no prefill)."""
    if shape is None:
        return 1.0 / decode_step_seconds(batch, graph, costs)
    return accept_len / verify_step_seconds(batch, shape, graph, costs)


# --- simulated tokenizer and text -------------------------------------------------------------------------

_WORD_RE = re.compile(r"\w+|[^\w\s]|\n")
WORDS = (
    "the of and to in is that for it as with was on be by this are or from at which an have not they but "
    "one all were can there been has more if will their would when so what some into them time these two "
    "may other than then its also only first new any could used each like way our over such after most "
    "through where before between both under same while many model token draft target step batch value "
    "result system request server speed order data layer first second next state cache memory answer "
    "example function return number list string error check length rate output input tree chain verify"
).split()


def stable_hash(*parts: object) -> int:
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "little")


def tokenize(text: str, vocab_size: int) -> list[int]:
    """Deterministic stand-in tokenizer: words, punctuation and newlines; long words split every 6 chars."""
    ids: list[int] = []
    for piece in _WORD_RE.findall(text):
        for i in range(0, len(piece), 6):
            ids.append(3 + stable_hash(piece[i : i + 6]) % max(1, vocab_size - 3))
    return ids


def tokenizer_json() -> dict[str, Any]:
    """`tokenize`'s pieces as a tokenizer.json (the `tokenizers` format a model directory holds), so that the
    stand-in's target model counts tokens as the stand-in does: `import-suite --synthetic --tokenizer` on it
    writes prompts of exactly N stand-in tokens. A word-level model with one unknown token: the count and the
    offsets are right, the ids are not the stand-in's hashes (nothing reads them)."""
    pieces = r"\w{1,6}|[^\w\s]|\n"  # `tokenize`: words cut every 6 characters, punctuation, newlines
    blanks = r"[^\S\n]+"  # the white space between them, dropped
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pieces}, "behavior": "Isolated", "invert": False},
                {"type": "Split", "pattern": {"Regex": blanks}, "behavior": "Removed", "invert": False}]},
            "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": {"<unk>": 0}, "unk_token": "<unk>"}}


def chat_prompt_ids(messages: Sequence[dict], vocab_size: int) -> list[int]:
    """Llama-3-style template: 4 framing tokens per turn, 5 for the generation prompt, 1 BOS."""
    ids = [1]
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        ids += [5, 6, 7, 8] + tokenize(str(m.get("role", "user")) + " " + str(content or ""), vocab_size)
    return ids + [5, 6, 9, 7, 8]


def natural_length(prompt_key: int) -> int:
    """Where the simulated model would emit EOS on its own (greedy), 160..1183 tokens."""
    return 160 + prompt_key % 1024


SPLIT_CHAR = "\u2014"  # a 3-byte character a byte-level tokenizer splits over two tokens


def _token_hash(prompt_key: int, index: int, sample_key: int | None) -> int:
    return (
        stable_hash(prompt_key, index) if sample_key is None else stable_hash(prompt_key, index, sample_key)
    )


def held_back(prompt_key: int, index: int, sample_key: int | None = None) -> bool:
    """Whether output position ``index`` starts a multi-byte character (about 2% of positions): its text stays
    in SGLang's detokenizer until the next token completes it, or is flushed as U+FFFD when the request
    ends."""
    return index > 0 and 7 <= _token_hash(prompt_key, index, sample_key) % 100 < 9


def output_token(
    prompt_key: int, index: int, vocab_size: int, sample_key: int | None = None
) -> tuple[int, str]:
    """(token id, text) of output position ``index``; a pure function of the prompt when greedy (lossless).

    A held-back token's text is empty (chat streams send no chunk for it, completions streams send
    ``"text": ""``); the next token's text starts with the completed character."""
    h = _token_hash(prompt_key, index, sample_key)
    token_id = 3 + (h >> 20) % max(1, vocab_size - 3)
    completes = SPLIT_CHAR if index > 0 and held_back(prompt_key, index - 1, sample_key) else ""
    if held_back(prompt_key, index, sample_key):
        return token_id, completes
    r = h % 100
    if r < 5 and index > 0:
        text = "."
    elif r < 7 and index > 0:
        text = "\n\n"
    else:
        text = " " + WORDS[(h >> 8) % len(WORDS)]
    return token_id, completes + text
