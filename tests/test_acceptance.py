"""Aggregations of accept length, decode speed, output equality and break-even (hand-computed values)."""

import pandas as pd
import pytest

from harness.analysis import acceptance
from harness.analysis.breakeven import interpolate_break_even, ttft_cost_ms
from harness.analysis.outputs import first_divergence, output_match
from harness.analysis.summary_rows import effective_draft_tokens as _effective_draft_tokens


def test_server_accept_length_across_phases_is_verify_weighted():
    # phase 1: 300 decode tokens at AL 3 = 100 verify steps; phase 2: 100 tokens at AL 1 = 100 steps
    ph = pd.DataFrame({"server_accept_len": [3.0, 1.0], "output_tokens": [310, 110], "requests": [10, 10]})
    # 400 tokens / 200 steps = 2.0, not the token-weighted mean of ratios (300*3 + 100*1) / 400 = 2.5
    assert acceptance.server_accept(ph) == pytest.approx(2.0)
    # a phase whose cache flush failed is left out (its counter holds earlier traffic)
    ph["flush_ok"] = [True, False]
    assert acceptance.server_accept(ph) == pytest.approx(3.0)


def test_decode_tok_s_is_token_weighted():
    ok = pd.DataFrame({"decode_tok_s": [100.0, 40.0], "output_tokens": [301, 101],
                       "first_chunk_tokens": [1, 1]})
    # (300 * 100 + 100 * 40) / 400 = 85, not the plain mean 70
    assert acceptance.decode_tok_s(ok) == pytest.approx(85.0)


def test_pooled_accept_leaves_the_prefill_token_out():
    pooled = acceptance.pooled_accept(pd.Series([10, 20, None]), pd.Series([31, 21, 50]))
    assert pooled == pytest.approx(50 / 30)


def test_headline_source_and_the_probe_check():
    assert acceptance.headline(2.5, 2.9, 2.6, 2.6) == (2.5, "requests")
    # the probe is used only when it agrees with the timed pass (server counter) within 5 %
    assert acceptance.headline(None, 2.70, 2.65, 2.0) == (2.70, "probe")
    assert acceptance.headline(None, 2.94, 2.65, 2.65) == (2.65, "server")
    assert acceptance.headline(None, 2.94, None, 2.65) == (2.65, "log")
    assert acceptance.headline(None, 2.94, None, None) == (2.94, "probe-unchecked")
    assert acceptance.headline(None, None, None, None) == (None, "")


def _req(variant, rid, cat, rate, out, verify=None, ttft=50.0, phase="s@c1#r1"):
    return {"variant": variant, "phase": phase, "request_id": rid, "category": cat, "concurrency": 1,
            "ok": True, "decode_tok_s": rate, "output_tokens": out, "first_chunk_tokens": 1,
            "ttft_ms": ttft, "spec_verify_ct": verify, "text_sha": f"{variant}{rid}"}


def test_by_category_acceptance_from_the_probe_and_speedup():
    reqs = pd.DataFrame([
        _req("base", "a", "code", 50.0, 101), _req("base", "b", "code", 50.0, 101),
        _req("spec", "a", "code", 100.0, 101, verify=None), _req("spec", "b", "code", 150.0, 101, verify=25),
    ])
    # the timed record of "a" has no verify steps (0.5.13-0.5.18): the probe's 50 are used
    probe = pd.DataFrame([{"variant": "spec", "phase": "s@c1#r1", "request_id": "a", "spec_verify_ct": 50,
                           "completion_tokens": 101}])
    out = acceptance.by_category(reqs, probe, {"base"}).set_index("variant")
    # (100 + 100) decode tokens / (50 + 25) verify steps
    assert out.loc["spec", "accept_len_requests"] == pytest.approx(200 / 75)
    assert pd.isna(out.loc["base", "accept_len_requests"])
    # token-weighted decode rates 125 / 50
    assert out.loc["spec", "speedup"] == pytest.approx(2.5)
    lo, hi = out.loc["spec", "speedup_ci_low"], out.loc["spec", "speedup_ci_high"]
    assert 2.0 <= lo <= 2.5 <= hi <= 3.0  # resamples of two prompts: 2.0, 2.5 or 3.0


def test_output_match_and_first_divergence():
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abcd", "abxd") == 2
    assert first_divergence("abc", "abcdef") == 3
    reqs = pd.DataFrame([_req(v, r, "c", 1.0, 10) for v in ("base", "spec") for r in ("a", "b", "c")])
    outs = pd.DataFrame([
        {"variant": "base", "phase": "s@c1#r1", "request_id": "a", "text": "hello", "reasoning": ""},
        {"variant": "base", "phase": "s@c1#r1", "request_id": "b", "text": "world", "reasoning": "think"},
        {"variant": "spec", "phase": "s@c1#r1", "request_id": "a", "text": "hello", "reasoning": ""},
        {"variant": "spec", "phase": "s@c1#r1", "request_id": "b", "text": "world", "reasoning": "thank"},
    ])
    got = output_match(reqs, outs, "base", "spec", 1)
    assert got["output_match"] == pytest.approx(0.5)
    assert got["first_divergence"] == 2  # reasoning text comes first: "think" vs "thank"
    assert output_match(reqs, outs, "base", "spec", 1, greedy=False)["output_match"] is None
    # without outputs.csv: the text hashes (all differ here), no position
    assert output_match(reqs, None, "base", "spec", 1) == {"output_match": 0.0, "first_divergence": None}


def test_ttft_cost_is_paired():
    reqs = pd.DataFrame([_req("base", "a", "c", 1.0, 10, ttft=40.0),
                         _req("base", "b", "c", 1.0, 10, ttft=60.0),
                         _req("spec", "a", "c", 1.0, 10, ttft=45.0),
                         _req("spec", "b", "c", 1.0, 10, ttft=75.0)])
    assert ttft_cost_ms(reqs, "spec", "base", 1) == pytest.approx(10.0)


def test_accept_rate_uses_the_servers_resolved_parameters():
    # the plan left the shape to the server (auto); the server resolved (3, 1, 4): 4 draft tokens
    assert _effective_draft_tokens({"num_steps": None, "server_speculative_num_steps": 3,
                                    "server_speculative_eagle_topk": 1,
                                    "server_speculative_num_draft_tokens": 4}) == 4
    assert _effective_draft_tokens({"num_steps": 5, "eagle_topk": 4, "num_draft_tokens": 8}) == 8


def test_interpolated_break_even():
    # tok/s rises 60 -> 100 -> 140 over accept lengths 1.5 -> 2.5 -> 3.5: baseline 90 is met at 2.25
    assert interpolate_break_even([(2.5, 100.0), (1.5, 60.0), (3.5, 140.0)], 90.0) == pytest.approx(2.25)
    # outside the points: extrapolated from the nearest two
    assert interpolate_break_even([(2.5, 100.0), (3.5, 140.0)], 80.0) == pytest.approx(2.0)
    assert interpolate_break_even([(2.5, 100.0)], 80.0) is None


def test_requests_take_the_probes_stats_and_histogram_where_they_have_none():
    reqs = pd.DataFrame([_req("spec", "a", "c", 1.0, 13), _req("spec", "b", "c", 1.0, 7, verify=3)])
    reqs["spec_histogram"] = [None, "1 1 1"]
    reqs["spec_source"] = ["", "stream"]
    probe = pd.DataFrame([{"variant": "spec", "phase": "s@c1#r1", "request_id": "a", "spec_verify_ct": 6,
                           "completion_tokens": 13, "spec_correct_drafts": 6, "spec_proposed_drafts": 18,
                           "spec_accept_len": 2.0, "spec_histogram": "1 4 1"},
                          {"variant": "spec", "phase": "s@c1#r1", "request_id": "b", "spec_verify_ct": 9,
                           "completion_tokens": 7, "spec_correct_drafts": 0, "spec_proposed_drafts": 27,
                           "spec_accept_len": 0.7, "spec_histogram": "9"}])
    out = acceptance.requests_with_spec(reqs, probe).set_index("request_id")
    assert out.loc["a", "spec_histogram"] == "1 4 1" and out.loc["a", "spec_source"] == "probe"
    assert out.loc["a", "spec_verify_ct"] == 6
    # the timed record's own stats stay
    assert out.loc["b", "spec_histogram"] == "1 1 1" and out.loc["b", "spec_verify_ct"] == 3
