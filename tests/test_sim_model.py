"""Pure simulation math: acceptance statistics, step times, calibration, deterministic text."""

from __future__ import annotations

import random

import pytest

from harness.sim.sglang import model
from harness.sim.sglang.model import SpecShape

GOOD = [0.9, 0.82, 0.78]
WEAK = [0.6, 0.45, 0.3, 0.2, 0.1, 0.05, 0.03, 0.02] + [0.01] * 7  # the demo's seed drafter


@pytest.mark.parametrize(
    "profile, shape",
    [
        (GOOD, SpecShape(3, 1, 4)),
        (WEAK, SpecShape(15, 1, 16)),
        ([0.38, 0.25, 0.2, 0.1, 0.05], SpecShape(5, 4, 16)),
        ([0.95, 0.9, 0.9, 0.8, 0.7, 0.6, 0.5], SpecShape(5, 4, 8)),
        ([0.7, 0.6], SpecShape(6, 1, 7)),  # positions past the profile are never accepted
    ],
)
def test_sampled_accept_length_matches_analytic(profile, shape):
    rng = random.Random(1234)
    eff = model.effective_profile(profile, shape.topk)
    n = 40_000
    total = sum(model.sample_accepted(rng, eff, shape.max_accepted) for _ in range(n))
    expected = model.expected_accept_length(profile, shape)
    assert 1 + total / n == pytest.approx(expected, abs=0.02)


def test_accepted_never_exceeds_tree_depth():
    rng = random.Random(0)
    shape = SpecShape(num_steps=5, topk=4, num_draft_tokens=3)  # tree of 2 drafts: at most 2 accepted
    assert shape.max_accepted == 2
    assert max(model.sample_accepted(rng, [1.0] * 8, shape.max_accepted) for _ in range(100)) == 2
    assert model.expected_accept_length([1.0] * 8, shape) == 3.0


def test_topk_raises_and_sampling_lowers_acceptance():
    chain = model.expected_accept_length(WEAK, SpecShape(5, 1, 6))
    tree = model.expected_accept_length(WEAK, SpecShape(5, 4, 16))
    sampled = model.expected_accept_length(WEAK, SpecShape(5, 4, 16), temperature=0.8)
    assert chain < tree and sampled < tree


def test_accept_rate_uses_the_0515_formula():
    assert model.accept_rate(2.0, SpecShape(5, 4, 16)) == pytest.approx(1 / 15)
    assert model.accept_rate(3.2, SpecShape(3, 1, 4)) == pytest.approx(2.2 / 3)
    assert model.accept_rate(1.0, SpecShape(3, 1, 4)) == 0.0


def test_calibration_at_batch_one():
    base = model.steady_tok_per_s(1, graph=True)
    good_shape, weak_shape = SpecShape(3, 1, 4), SpecShape(15, 1, 16)
    good_len = model.expected_accept_length(GOOD, good_shape)
    weak_len = model.expected_accept_length(WEAK, weak_shape)
    assert good_len == pytest.approx(3.2, abs=0.05) and weak_len == pytest.approx(2.0, abs=0.05)
    good = model.steady_tok_per_s(1, True, good_shape, good_len)
    weak = model.steady_tok_per_s(1, False, weak_shape, weak_len)
    wide = model.steady_tok_per_s(1, False, SpecShape(5, 4, 16), 2.0)  # the other weak setup
    wrong = model.steady_tok_per_s(1, True, good_shape, 1.0)
    assert 85 <= base <= 95
    assert 1.9 <= good / base <= 2.1
    assert 48 <= weak <= 57 and wide < base
    assert wrong < base
    assert model.steady_tok_per_s(1, graph=False) < base


def test_step_time_grows_with_batch_draft_tokens_and_without_graphs():
    s4, s16 = SpecShape(3, 1, 4), SpecShape(3, 4, 16)
    assert model.decode_step_seconds(8, True) > model.decode_step_seconds(1, True)
    assert model.verify_step_seconds(1, s16, True) > model.verify_step_seconds(1, s4, True)
    assert model.verify_step_seconds(8, s4, True) > model.verify_step_seconds(1, s4, True)
    assert model.verify_step_seconds(1, s4, False) > model.verify_step_seconds(1, s4, True)
    assert model.decode_step_seconds(1, False) > model.decode_step_seconds(1, True)


def test_speculation_stops_paying_at_high_concurrency():
    shape = SpecShape(3, 1, 4)
    speedup = [
        model.steady_tok_per_s(b, True, shape, 3.2) / model.steady_tok_per_s(b, True) for b in (1, 16, 256)
    ]
    assert speedup[0] > speedup[1] > 1.0 > speedup[2]


def test_graph_used_only_within_captured_batch_sizes():
    assert model.graph_used(16, "full", 16) and not model.graph_used(17, "full", 16)
    assert not model.graph_used(1, "disabled", 256)


def test_tokenizer_and_text_are_deterministic():
    ids = model.tokenize("Hello, world!\nsupercalifragilistic", 32000)
    assert ids == model.tokenize("Hello, world!\nsupercalifragilistic", 32000)
    assert len(ids) == 9  # Hello , world ! \n + a 20-letter word in 4 pieces
    chat = model.chat_prompt_ids([{"role": "user", "content": "Hello, world!"}], 32000)
    assert len(chat) == 1 + 4 + 5 + 5
    greedy = [model.output_token(7, i, 32000) for i in range(20)]
    assert greedy == [model.output_token(7, i, 32000) for i in range(20)]
    sampled = [model.output_token(7, i, 32000, sample_key=99) for i in range(20)]
    assert sampled != greedy
    assert all(3 <= t < 32000 and text for t, text in greedy)


def test_held_back_bytes_come_with_the_next_token():
    """About 2% of positions start a multi-byte character: no text until the next token completes it."""
    held = [i for i in range(3000) if model.held_back(7, i)]
    assert 20 < len(held) < 120 and not model.held_back(7, 0)
    for i in held:
        own = model.output_token(7, i, 32000)[1]
        assert own == (model.SPLIT_CHAR if model.held_back(7, i - 1) else "")
        assert model.output_token(7, i + 1, 32000)[1].startswith(model.SPLIT_CHAR)
    plain = [i for i in range(1, 3000) if i not in held and i - 1 not in held]
    assert all(not model.output_token(7, i, 32000)[1].startswith(model.SPLIT_CHAR) for i in plain)
