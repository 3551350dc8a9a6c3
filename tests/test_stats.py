"""Speedup intervals, the in-flight profile and the verdict (harness.analysis.stats / verdicts): hand-computed
values, then coverage over many seeds of per-request data drawn from the stand-in's own step model."""

import math
import random

import numpy as np
import pandas as pd
import pytest

from harness.analysis import stats
from harness.analysis.verdicts import _verdict, needing_repeats, phase_profiles
from harness.sim.sglang import model


def test_t_interval_of_log_ratios_by_hand():
    # logs 0.1 and 0.3: mean 0.2, sd sqrt(0.02) = 0.1414, se 0.1, t(0.975, 1) = 12.706
    est, low, high = stats.t_interval_log([math.exp(0.1), math.exp(0.3)])
    assert est == pytest.approx(math.exp(0.2))
    assert (low, high) == pytest.approx((math.exp(0.2 - 1.2706), math.exp(0.2 + 1.2706)))
    assert stats.t975(3) == 3.182 and stats.t975(11) == 2.228 and stats.t975(500) == 1.96
    assert stats.t_interval_log([1.2]) is None  # one repeat: no interval


def test_paired_bootstrap_cancels_prompt_difficulty():
    # every prompt is exactly twice as fast in the variant: each resample's ratio is 2.00, so is the interval
    tok = np.array([10.0, 200.0, 35.0])
    est, low, high = stats.paired_bootstrap_ratio(tok, tok / 20.0, tok, tok / 10.0)
    assert (est, low, high) == pytest.approx((2.0, 2.0, 2.0))
    # point estimate: (30/2) / (30/4) = 2, and the interval brackets it
    est, low, high = stats.paired_bootstrap_ratio(np.array([10.0, 20.0]), np.array([1.0, 1.0]),
                                                  np.array([10.0, 20.0]), np.array([1.0, 3.0]))
    assert est == pytest.approx(2.0) and low <= est <= high
    one = np.array([1.0])
    assert stats.paired_bootstrap_ratio(one, one, one, one) is None


def test_bootstrap_is_reproducible():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(90, 110, 10), rng.uniform(40, 60, 10)
    assert stats.two_sample_bootstrap_ratio(a, b) == stats.two_sample_bootstrap_ratio(a, b)


def test_in_flight_profile_by_hand():
    # concurrency 2; requests [0,4] [0,2] [2,5] [4,6]: two in flight from 0 until the end at 5 (tail 5..6)
    prof = stats.in_flight(np.array([0.0, 0.0, 2.0, 4.0]), np.array([4.0, 2.0, 5.0, 6.0]), 2)
    assert (prof.steady_start, prof.steady_end, prof.steady_s) == (0.0, 5.0, 5.0)
    assert prof.span_s == 6.0 and prof.max_in_flight == 2
    assert prof.mean_in_flight == pytest.approx((4 + 2 + 3 + 2) / 6)
    # a suite of 3 prompts at concurrency 8: never all slots busy, no steady state
    short = stats.in_flight(np.array([0.0, 0.0, 0.0]), np.array([1.0, 2.0, 3.0]), 8)
    assert short.max_in_flight == 3 and short.steady_s == 0.0
    assert short.mean_in_flight == pytest.approx(6 / 3)


def test_window_rates_and_tokens_in():
    t, tok = np.array([0.5, 1.5, 2.5, 3.5]), np.array([1.0, 2.0, 3.0, 4.0])
    assert stats.window_rates(t, tok, 0.0, 4.0, windows=2).tolist() == [1.5, 3.5]
    assert stats.tokens_in(t, tok, 1.0, 3.0) == 5.0


def _requests(variant, phase, conc, sends, ends, tokens, repeat=1):
    return [{"variant": variant, "phase": phase, "concurrency": conc, "repeat": repeat, "ok": True,
             "suite": "s", "prompt_id": f"p{i}", "t_send": s, "t_first": s + 0.1, "t_end": e,
             "output_tokens": n, "chunk_offsets_ms": f"{100.0:.3f} {(e - s) * 1000:.3f}",
             "chunk_tokens": f"1 {n - 1}"}
            for i, (s, e, n) in enumerate(zip(sends, ends, tokens, strict=True))]


def test_phase_profile_steady_tokens_by_hand():
    rq = pd.DataFrame(_requests("v", "s@c2#r1", 2, [0.0, 0.0, 2.0, 4.0], [4.0, 2.0, 5.0, 6.0],
                                [10, 10, 10, 10]))
    prof = phase_profiles(rq).iloc[0]
    # steady state 0..5: first tokens at 0.1, 0.1, 2.1, 4.1 (4) and the rest of the first three (27)
    assert prof["steady_s"] == 5.0 and prof["steady_tokens"] == 31.0
    assert prof["mean_in_flight"] == pytest.approx(11 / 6) and prof["requests"] == 4


def test_verdict_rules():
    assert _verdict(1.02, 1.10, "t-repeats", "3 paired repeats", None, None)[0] == "faster"
    assert _verdict(0.80, 0.95, "t-repeats", "3 paired repeats", None, None)[0] == "slower"
    verdict, reason = _verdict(0.95, 1.05, "t-repeats", "3 paired repeats", None, None)
    assert verdict == "undecided" and "includes 1.00x" in reason
    # the whole interval inside 1.00x +- 3 %: equivalent, decided (also when it excludes 1.00x)
    assert _verdict(0.98, 1.02, "t-repeats", "3 paired repeats", None, None)[0] == "equivalent"
    assert _verdict(1.005, 1.025, "t-repeats", "3 paired repeats", None, None)[0] == "equivalent"
    narrow = _verdict(0.98, 1.02, "t-repeats", "3 paired repeats", None, None, equivalence=0.01)
    assert narrow[0] == "undecided"
    # a too-short phase in either arm never gets a verdict, however narrow its interval
    verdict, reason = _verdict(2.0, 2.1, "bootstrap-prompts", "5 paired prompts", None,
                               "steady state of 3.7 s")
    assert verdict == "too-short" and reason == "too short to decide: baseline: steady state of 3.7 s"
    assert _verdict(None, None, "t-repeats", "1 paired repeats", None, None)[0] == "undecided"
    # one repeat above concurrency 1 sees no noise between runs: never decided, however narrow
    assert _verdict(1.9, 2.0, "bootstrap-windows", "windows", None, None)[0] == "undecided"
    # a look's level is named in the reason
    reason = _verdict(1.2, 1.3, "t-repeats", "6 paired repeats", None, None, level=0.995)[1]
    assert reason.startswith("99.5% CI")


def test_needing_repeats():
    df = pd.DataFrame([
        {"variant": "base", "baseline": True, "verdict": "baseline", "too_short": False, "speedup": 1.0},
        {"variant": "wide", "baseline": False, "verdict": "within-noise", "too_short": False, "speedup": 1.0,
         "speedup_ci_low": 0.9, "speedup_ci_high": 1.1, "ci_method": "t-repeats"},  # 10 % either side
        {"variant": "tight", "baseline": False, "verdict": "faster", "too_short": False, "speedup": 2.0,
         "speedup_ci_low": 1.96, "speedup_ci_high": 2.04, "ci_method": "t-repeats"},  # 2 %
        {"variant": "short", "baseline": False, "verdict": "within-noise", "too_short": True, "speedup": 2.0},
        {"variant": "one-run", "baseline": False, "verdict": "faster", "too_short": False, "speedup": 2.0,
         "speedup_ci_low": 1.99, "speedup_ci_high": 2.01, "ci_method": "bootstrap-windows"},
    ])
    assert needing_repeats(df, 5.0) == {"wide", "one-run"}
    assert needing_repeats(df, 1.0) == {"wide", "tight", "one-run"}


# --- coverage on the stand-in's model ----------------------------------------------------------------------
SHAPE = model.SpecShape(3, 1, 4)
PROFILE = (0.8, 0.65, 0.55)  # conditional acceptance per draft position
NOISE = 0.3  # relative sd of every step's time (DRAFTBENCH_SIM_STEP_NOISE)


def _request(rng: random.Random, noise: model.StepNoise, tokens: int, spec: bool) -> tuple[float, float]:
    """(output tokens, seconds) of one request at concurrency 1, step by step as the stand-in runs it."""
    made = secs = 0.0
    while made < tokens:
        if spec:
            made += 1 + model.sample_accepted(rng, PROFILE, SHAPE.max_accepted)
            secs += model.verify_step_seconds(1, SHAPE, True) * noise()
        else:
            made += 1
            secs += model.decode_step_seconds(1, True) * noise()
    return made, secs


def _arm(seed: int, spec: bool, lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    rng, noise = random.Random(seed), model.StepNoise(NOISE, seed)
    out = [_request(rng, noise, n, spec) for n in lengths]
    return np.array([o[0] for o in out]), np.array([o[1] for o in out])


def test_prompt_bootstrap_covers_the_true_speedup():
    """c1, 16 prompts: the 95 % interval must cover the stand-in's expected speedup in >= 90 % of 200 seeds;
    two baseline servers (true speedup 1.00) must never read faster or slower in more than 10 % of them."""
    truth = model.steady_tok_per_s(1, True, SHAPE, 1 + model.expected_accepted(PROFILE, 3)) \
        / model.steady_tok_per_s(1, True)
    covered = within = 0
    seeds = range(200)
    for seed in seeds:
        lengths = [random.Random(seed * 31 + i).randint(40, 160) for i in range(16)]
        tv, sv = _arm(2 * seed + 1, True, lengths)
        tb, sb = _arm(2 * seed + 2, False, lengths)
        est, low, high = stats.paired_bootstrap_ratio(tv, sv, tb, sb, samples=1000)
        covered += low <= truth <= high
        tt, st = _arm(10_000 + seed, False, lengths)
        _, low1, high1 = stats.paired_bootstrap_ratio(tt, st, tb, sb, samples=1000)
        within += _verdict(low1, high1, "bootstrap-prompts", "16 paired prompts", None, None)[0] \
            in ("undecided", "equivalent")
    assert 1.5 < truth < 2.5
    assert covered / len(seeds) >= 0.90, covered
    assert within / len(seeds) >= 0.90, within


def test_repeat_t_interval_covers_the_true_speedup():
    """c8, 3 repeats: per-repeat tok/s of 300 noisy batch steps per arm; t interval coverage >= 90 %."""
    accept = 1 + model.expected_accepted(PROFILE, 3)
    truth = model.steady_tok_per_s(8, True, SHAPE, accept) / model.steady_tok_per_s(8, True)
    covered = within = 0
    for seed in range(200):
        def tok_s(arm_seed: int, spec: bool) -> float:
            rng, noise = random.Random(arm_seed), model.StepNoise(NOISE, arm_seed)
            step = model.verify_step_seconds(8, SHAPE, True) if spec else model.decode_step_seconds(8, True)
            tokens = sum(8 + (sum(model.sample_accepted(rng, PROFILE, 3) for _ in range(8)) if spec else 0)
                         for _ in range(300))
            return tokens / sum(step * noise() for _ in range(300))
        ratios = [tok_s(seed * 100 + r, True) / tok_s(seed * 100 + 50 + r, False) for r in range(3)]
        _, low, high = stats.t_interval_log(ratios)
        covered += low <= truth <= high
        same = [tok_s(seed * 100 + 20 + r, False) / tok_s(seed * 100 + 50 + r, False) for r in range(3)]
        _, low1, high1 = stats.t_interval_log(same)
        verdict = _verdict(low1, high1, "t-repeats", "3 paired repeats", None, None)[0]
        within += verdict in ("undecided", "equivalent")
    assert covered >= 180, covered
    assert within >= 180, within


def test_repeats_default_follows_concurrency():
    from harness.inputs.run_settings import RunSettings

    assert RunSettings().repeats == 1 and RunSettings(concurrency=[1, 8]).repeats == 3
    assert RunSettings(concurrency=[1, 8], repeats=1).repeats == 1  # a plan's own value stays
    assert RunSettings().min_steady_s == 10.0 and RunSettings().until_ci_pct is None
    with pytest.raises(ValueError, match="below repeats"):
        RunSettings(concurrency=[8], until_ci_pct=5.0, max_repeats=2)
