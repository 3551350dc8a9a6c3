"""SGLANG_SIMULATE_ACC_LEN in the stand-in: SGLang's two draw methods, one draw per verify step for the
whole batch, token id 100 unless real draft tokens are asked for."""

from __future__ import annotations

import asyncio
import random
import statistics

import pytest

from harness.sim.sglang.engine import Req
from harness.sim.sglang.forced import FIXED_TOKEN_ID, Forced, from_env
from harness.sim.sglang.model import SpecShape
from tests.test_sim_engine import make, run_all


def test_env_parsing_like_sglang():
    assert from_env({}) is None
    assert from_env({"SGLANG_SIMULATE_ACC_LEN": "-1"}) is None  # SGLang's default: off
    f = from_env({"SGLANG_SIMULATE_ACC_LEN": "2.5", "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
                  "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token"})
    assert f == Forced(2.5, "match-expected", True)
    assert from_env({"SGLANG_SIMULATE_ACC_LEN": "3"}).method == "multinomial"
    with pytest.raises(ValueError, match="Invalid simulate_acc_method"):
        from_env({"SGLANG_SIMULATE_ACC_LEN": "3", "SGLANG_SIMULATE_ACC_METHOD": "uniform"})


def test_match_expected_hits_the_mean_and_clamps():
    rng = random.Random(1)
    draws = [Forced(2.25, "match-expected").draw(rng, 3) for _ in range(4000)]
    assert set(draws) == {2, 3}
    assert statistics.fmean(draws) == pytest.approx(2.25, abs=0.03)
    assert {Forced(9.0, "match-expected").draw(rng, 3) for _ in range(20)} == {4}  # num_steps + 1
    assert {Forced(0.5, "match-expected").draw(rng, 3) for _ in range(20)} == {1}


def test_multinomial_is_a_rounded_clamped_normal():
    rng = random.Random(2)
    draws = [Forced(2.0, "multinomial").draw(rng, 3) for _ in range(4000)]
    assert set(draws) <= {1, 2, 3, 4} and {1, 4} <= set(draws)
    # round(N(2, 1)) clamped to [1, 4]: P(1) = P(x < 1.5) = 0.3085, mean ~2.08, not 2.0
    assert draws.count(1) / len(draws) == pytest.approx(0.3085, abs=0.03)


def test_forced_acceptance_in_the_scheduler():
    engine, _ = make(SpecShape(3, 1, 4), profile=(0.0, 0.0, 0.0),
                     forced=Forced(3.0, "match-expected"))
    reqs = [Req(rid=f"r{i}", prompt_ids=[1, 2, 3 + i], max_new_tokens=31) for i in range(3)]
    asyncio.run(run_all(engine, reqs))
    for r in reqs:
        # 1 token from prefill, then 10 verify steps of 3 tokens: drafts forced although the profile is 0
        assert len(r.output_ids) == 31 and r.verify_ct == 10 and r.histogram == [0, 0, 10]
        assert set(r.output_ids[1:]) == {FIXED_TOKEN_ID}  # not the model's tokens
