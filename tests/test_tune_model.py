"""tune's pure math, against values computed by hand."""

from __future__ import annotations

import random

import pytest

from harness.analysis import tune_model as tm
from harness.analysis.tune_model import Config
from harness.engines.sglang import SGLANG
from harness.engines.vllm import VLLM
from harness.sim.sglang import model
from harness.sim.sglang.model import SpecShape


def test_accept_len_at_shorter_chains_by_hand():
    h = [2, 1, 1]  # 2 steps with 0 correct, 1 with 1, 1 with 2
    assert tm.accept_len_at(h, 1) == pytest.approx((2 * 1 + 1 * 2 + 1 * 2) / 4)  # 1.5
    assert tm.accept_len_at(h, 2) == pytest.approx((2 * 1 + 1 * 2 + 1 * 3) / 4)  # 1.75
    assert tm.accept_len_at(h, 0) == 1.0
    assert tm.accept_len_at(h, 5) == tm.mean_accept_len(h) == pytest.approx(1.75)
    assert tm.accept_len_at([], 3) is None


def test_marginal_conditional_and_consistency_by_hand():
    h = [2, 1, 1]
    assert tm.marginal_rates(h) == pytest.approx([0.5, 0.25])  # P(acc >= 1), P(acc >= 2)
    assert tm.conditional_rates(h) == pytest.approx([0.5, 0.5])
    assert tm.marginal_rates(h, 3) == pytest.approx([0.5, 0.25, 0.0])
    check = tm.check_consistency(h)
    assert check["passed"] and check["implied_mean_accept_length"] == pytest.approx(1.75)
    assert tm.collapse_position([10, 0, 10], threshold=0.5) is None
    assert tm.collapse_position([1, 4, 5], threshold=0.6) == 2  # P(2 | 1) = 5/9


def test_histogram_parse_and_sum():
    assert tm.parse_histogram("3 0 2") == [3, 0, 2]
    assert tm.parse_histogram(None) == [] and tm.parse_histogram(float("nan")) == []
    assert tm.add_histograms([[1, 2], [0, 1, 4]]) == [1, 3, 4]


def test_speculation_profile_schema_and_check():
    p = tm.speculation_profile([2, 1, 1], 2, per_category={"code": [0, 1, 3]})
    assert p["schema_version"] == "1.0" and p["num_speculative_tokens"] == 2
    assert p["marginal_accept_rates"] == [0.5, 0.25] and p["conditional_accept_rates"] == [0.5, 0.5]
    assert p["acceptance_length_histogram"] == {"1": 2, "2": 1, "3": 1}
    assert p["mean_accept_length"] == 1.75 and p["accept_length_by_k"] == {"1": 1.5, "2": 1.75}
    assert p["validation"]["mean_consistency"]["passed"]
    assert p["validation"]["marginal_monotonicity"]["passed"]
    assert p["per_category"]["code"]["marginal_accept_rates"] == [1.0, 0.75]


def test_wide_chain_histogram_predicts_shorter_chains_of_the_stand_in():
    """Sampled the way the stand-in samples: a steps-7 histogram predicts the analytic AL at every k."""
    profile = [0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    rng = random.Random(5)
    h = [0] * 8
    for _ in range(30_000):
        h[model.sample_accepted(rng, profile, 7)] += 1
    for k in range(1, 8):
        truth = model.expected_accept_length(profile, SpecShape(k, 1, k + 1))
        assert tm.accept_len_at(h, k) == pytest.approx(truth, rel=0.01)


def test_grid_respects_sglang_rules():
    grid = tm.build_grid(SGLANG, [1, 2, 3], [1, 4], [4, 8, 16], [True, False])
    assert Config(3, 1, 4, True) in grid and Config(2, 1, 3, False) in grid
    assert all(c.num_draft_tokens == c.num_steps + 1 for c in grid if c.eagle_topk == 1)
    assert all(c.num_draft_tokens <= c.num_steps * c.eagle_topk + 1 for c in grid)
    assert Config(1, 4, 4, True) in grid  # 4 <= 1 x 4 + 1
    assert Config(3, 4, 4, True) not in grid  # no bigger than the chain of 3
    assert Config(3, 4, 8, True) in grid and Config(1, 4, 16, True) not in grid
    assert Config(3, 4, 8, True).depth == 3 and Config(5, 4, 4, True).depth == 3


def test_grid_is_the_engines_own():
    """vLLM drafts one chain (K = num_steps): its grid has no tree, and only the configs it can launch."""
    grid = tm.build_grid(VLLM, [1, 2, 3], [1, 4], [4, 8, 16], [True, False])
    assert grid == sorted(Config(s, 1, s + 1, g) for s in (1, 2, 3) for g in (True, False))
    assert tm.build_grid(VLLM, [3], [4], [8], [True]) == []  # no chain asked for: nothing vLLM builds
    assert Config(3, 4, 8, True) in tm.build_grid(SGLANG, [3], [4], [8], [True])


def test_prediction_formulas():
    assert tm.decode_tok_s(2.0, 4, 20.0) == pytest.approx(400.0)
    assert tm.predicted_speedup(2.0, 20.0, 11.0) == pytest.approx(1.1)
    assert tm.break_even_accept_len(22.0, 11.0) == 2.0


def test_prior_step_interpolates_and_scales_for_graphs():
    m = {Config(1, 1, 2, True): {1: 10.0}, Config(5, 1, 6, True): {1: 18.0}}
    assert tm.prior_step_ms(Config(3, 1, 4, True), 1, m) == pytest.approx(14.0)
    assert tm.prior_step_ms(Config(7, 1, 8, True), 1, m) == pytest.approx(22.0)
    assert tm.prior_step_ms(Config(3, 1, 4, False), 1, m) == pytest.approx(14.0)  # no pair: ratio 1
    m[Config(5, 1, 6, False)] = {1: 27.0}
    assert tm.prior_step_ms(Config(3, 1, 4, False), 1, m) == pytest.approx(27.0)  # one point, same setting
    assert tm.prior_step_ms(Config(3, 1, 4, True), 4, m) is None


def test_the_answer_never_calls_an_undecided_config_a_loss_or_a_win():
    import pandas as pd

    from harness.analysis.tune_report import answer

    def rows(lo, hi, spd, verdict=None, reason=None, need=2.0, pred=1.2, measured="verified", level=None):
        return pd.DataFrame([{"concurrency": 1, "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
                              "cuda_graph": True, "measured": measured, "speedup_pred": pred, "speedup": spd,
                              "speedup_ci_low": lo, "speedup_ci_high": hi, "break_even_accept_len": need,
                              "accept_len_pred": 2.4, "verdict": verdict, "verdict_reason": reason,
                              "status": "verified" if measured == "verified" else "predicted",
                              "ci_level": level}])

    hists = {"code": [10, 20, 30, 40]}
    faster = answer(rows(1.05, 1.3, 1.15, "faster", level=0.995), hists, 3, draft_path="/d")
    assert faster[0] == ("c1: use num_steps 3, eagle_topk 1, num_draft_tokens 4, CUDA graphs on: "
                         "measured 1.15x (99.5% CI 1.05-1.30), faster than the baseline; predicted 1.20x")
    assert faster[1] == ("  launch flags: --speculative-algorithm EAGLE3 --speculative-draft-model-path /d "
                         "--speculative-num-steps 3 --speculative-eagle-topk 1 "
                         "--speculative-num-draft-tokens 4")
    noise = answer(rows(0.9, 1.4, 1.1, "undecided", "95% CI 0.90-1.40x includes 1.00x; needs ~9 repeats"),
                   hists, 3)
    assert noise[0].startswith("c1: cannot tell yet (undecided): the best measured (num_steps 3")
    assert "measured 1.10x (95% CI 0.90-1.40): 95% CI 0.90-1.40x includes 1.00x; needs ~9 repeats" in noise[0]
    assert "no config" not in noise[0] and not any("launch flags" in ln for ln in noise)
    # the H200's c8 (docs/real-gpu.md): predicted 2.18x, a 16-request phase measured 0.75x (0.39-1.43); the
    # point below 1.00 must not turn "cannot tell" into "no config beats the baseline"
    h200 = answer(rows(0.39, 1.43, 0.75, "too-short", "too short to decide: 16 requests in a phase, fewer "
                       "than 4 x 8", need=2.29, pred=2.18), hists, 3)[0]
    assert h200.startswith("c1: cannot tell yet (too-short)") and "no config" not in h200
    assert "measured 0.75x (95% CI 0.39-1.43): too short to decide: 16 requests in a phase" in h200
    # a summary from before the new verdicts: within-noise reads as too-short or undecided, never a win
    old = answer(rows(1.59, 1.88, 1.73, "within-noise",
                      "too short to decide: steady state of 2.6 s, under 3 s"), hists, 3)[0]
    assert old.startswith("c1: cannot tell yet (too-short)") and "faster than" not in old
    equivalent = answer(rows(0.99, 1.02, 1.0, "equivalent"), hists, 3)[0]
    assert equivalent.startswith("c1: speculation does not pay here (equivalent): "
                                 "the best measured (num_steps 3")
    slower = answer(rows(0.7, 0.9, 0.8, "slower", need=2.6), hists, 3)[0]
    assert slower.startswith("c1: speculation does not pay here (slower): no config beats the baseline")
    assert "needs accept length 2.60" in slower and "this drafter reaches 2.40" in slower
    assert "(measured 0.80x (95% CI 0.70-0.90), slower)" in slower
    # slower although its step costs say it should win (2.40 reached, 2.00 needed): the loss is elsewhere
    elsewhere = answer(rows(0.7, 0.9, 0.8, "slower"), hists, 3)[0]
    assert "needs accept length" not in elsewhere and "outside the decode steps" in elsewhere
    # no verdict column (an older summary): the interval decides; no interval: nothing is decided
    assert answer(rows(1.05, 1.3, 1.15), hists, 3)[0].endswith("faster than the baseline; predicted 1.20x")
    assert answer(rows(None, None, 1.15), hists, 3)[0].startswith("c1: cannot tell yet (undecided)")
    # not verified: a prediction, said as one, with its flags and what is left to decide
    unverified = answer(rows(None, None, None, measured=""), hists, 3)
    assert unverified[0].startswith("c1: best predicted num_steps 3") and "not verified" in unverified[0]
    assert unverified[-1].startswith("  left to decide: 1 configs predicted only (steps 3)")
    loss = answer(rows(None, None, None, need=3.0, pred=0.8, measured=""), hists, 3)[0]
    assert loss.startswith("c1: no config beats the baseline") and "(predicted, not verified)" in loss
