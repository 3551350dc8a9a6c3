"""Acceptance by context length and output position from per-request step data (harness.analysis.by_context):
how a request's verify steps are placed, the buckets, and the table pooled back to the summary's number."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.analysis.by_context import Buckets, bucket_label, by_context, segments, uncovered
from harness.analysis.by_context_report import context_grid, coverage_line
from harness.sim.sglang.conditions import ContextDecay, step_profile
from harness.sim.sglang.model import effective_profile


def test_bucket_labels_and_edges():
    b = Buckets((1024, 4096))
    assert b.labels == ["0-1k", "1k-4k", "4k+"]
    assert [b.index(x) for x in (1, 1024, 1025, 4096, 5000)] == [0, 0, 1, 1, 2]
    assert b.split(1020, 10) == [(0, 5), (1, 5)]  # 1020..1024 in the first, 1025..1029 in the second
    assert bucket_label(64, 128) == "64-128" and bucket_label(2048, math.inf) == "2k+"


def test_each_chunk_after_the_first_is_a_verify_step():
    # 1 prefill token, then steps of 4, 2, 1, 4 tokens; 12 tokens in all, 4 verify steps
    segs = segments(12, 4, "1 4 2 1 4", True, 12, max_tokens_per_step=4)
    assert [(s.start, s.tokens, s.steps) for s in segs] == [(1, 4, 1), (5, 2, 1), (7, 1, 1), (8, 4, 1)]
    assert all(s.per_step for s in segs)


def test_a_chunk_carrying_two_steps_counts_as_two():
    # the server counted 4 steps; a step with no text rode along with the next: 6 tokens in one chunk
    segs = segments(12, 4, "1 4 6 1", True, 12, max_tokens_per_step=4)
    assert [s.steps for s in segs] == [1, 2, 1]
    assert sum(s.steps for s in segs) == 4 and sum(s.tokens for s in segs) == 11


def test_a_stop_token_sent_in_no_chunk_belongs_to_the_last_step():
    segs = segments(10, 3, "1 4 3 1", True, 10)  # 9 decode tokens, 8 of them in chunks
    assert [(s.tokens, s.steps) for s in segs] == [(4, 1), (3, 1), (1 + 1, 1)]


def test_without_exact_chunks_the_request_is_one_spread_segment():
    for chunks, exact, output in (("1 4 4", False, 9), ("", True, 9), ("1 4 4", True, 10)):
        segs = segments(9, 3, chunks, exact, output)
        assert [(s.start, s.tokens, s.steps, s.per_step) for s in segs] == [(1, 8, 3.0, False)]
    assert segments(1, 0, "1", True, 1) == []


def _records(rows: list[dict]) -> pd.DataFrame:
    base = {"ok": True, "concurrency": 1, "phase": "s@c1#r1", "chunk_tokens_exact": True}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_the_table_places_steps_where_they_ran_and_pools_to_the_requests_accept_length():
    req = _records([
        # a short prompt whose steps accept 4, 4, 4 tokens, and a long one whose steps accept 1, 1, 2
        {"variant": "e", "request_id": "a", "category": "code", "prompt_tokens": 100, "output_tokens": 13,
         "spec_verify_ct": 3, "chunk_tokens": "1 4 4 4"},
        {"variant": "e", "request_id": "b", "category": "chat", "prompt_tokens": 5000, "output_tokens": 5,
         "spec_verify_ct": 3, "chunk_tokens": "1 1 1 2"},
        {"variant": "base", "request_id": "a", "category": "code", "prompt_tokens": 100, "output_tokens": 13,
         "spec_verify_ct": None, "chunk_tokens": "1 12"},
    ])
    t = by_context(req, {"e": {"num_steps": 3, "temperature": 0.0}}, None, [1024, 4096])
    assert set(t["variant"]) == {"e"}  # a baseline has no verify steps
    ctx = t[(t["axis"] == "context") & (t["category"] == "all")].set_index("bucket")
    assert ctx.loc["0-1k", "accept_len"] == pytest.approx(4.0)
    assert ctx.loc["4k+", "accept_len"] == pytest.approx(4 / 3)
    assert ctx.loc["0-1k", "context_mean"] == pytest.approx((101 + 105 + 109) / 3)
    assert (ctx["tokens"].sum() / ctx["verify_steps"].sum()) == pytest.approx((12 + 4) / 6)
    cats = t[(t["axis"] == "context") & (t["category"] == "code")]
    assert list(cats["bucket"]) == ["0-1k"] and int(cats["requests"].iloc[0]) == 1
    pos = t[(t["axis"] == "position") & (t["category"] == "all")]
    assert list(pos["bucket"]) == ["0-64"] and set(t["sampling"]) == {"t0"}


def test_a_spread_request_shares_its_steps_by_tokens_across_a_bucket_edge():
    req = _records([{"variant": "e", "request_id": "a", "category": "c", "prompt_tokens": 1000,
                     "output_tokens": 51, "spec_verify_ct": 20, "chunk_tokens": "",
                     "chunk_tokens_exact": False}])
    t = by_context(req, {}, None, [1024])
    ctx = t[(t["axis"] == "context") & (t["category"] == "all")].set_index("bucket")
    # decode tokens at contexts 1001..1050: 24 up to 1024, 26 beyond; steps in proportion
    assert ctx.loc["0-1k", "tokens"] == 24 and ctx.loc["1k+", "tokens"] == 26
    assert ctx.loc["0-1k", "verify_steps"] == pytest.approx(20 * 24 / 50)
    assert ctx.loc["0-1k", "per_step_share"] == 0


def test_the_grid_and_what_is_not_covered():
    req = _records([{"variant": "e", "request_id": f"r{i}", "category": "c", "prompt_tokens": 50,
                     "output_tokens": 41, "spec_verify_ct": 20, "chunk_tokens": "1 " + " ".join(["2"] * 20)}
                    for i in range(3)])
    t = by_context(req, {}, None, [1024, 4096])
    headers, rows = context_grid(t, "context")
    assert headers == ["variant", "conc", "0-1k"] and rows == [["e", "1", "2.00"]]
    assert uncovered(t, [1024, 4096], 20) == ["1k-4k"]
    assert "1k-4k" in (coverage_line(t, [1024, 4096]) or "")
    few = by_context(req.iloc[:1], {}, None, [1024])
    assert context_grid(few, "context")[1] == [["e", "1", "2.00?"]]  # 20 steps: marked as few


def test_the_stand_ins_step_profile():
    d = ContextDecay()
    assert d.factor(2048) == 1.0 and d.factor(4096) == pytest.approx(0.88)
    assert d.factor(16384) == pytest.approx(0.64)
    assert d.factor(10 ** 9) == d.floor
    base = [0.9, 0.8, 0.7]
    # short and greedy: as before
    assert step_profile(base, 1, 0.0, 1.0, 1000, d) == effective_profile(base, 1, 0.0)
    assert step_profile(base, 1, 0.7, 1.0, 0, d) == pytest.approx([p * 0.79 for p in base])
    assert step_profile(base, 1, 0.7, 0.5, 0, d) == pytest.approx([p * (1 - 0.3 * 0.35) for p in base])
    assert step_profile(base, 1, 0.0, 1.0, 8192, d) == pytest.approx([p * 0.76 for p in base])


def test_the_decay_from_the_environment(monkeypatch):
    monkeypatch.setenv("DRAFTBENCH_SIM_CONTEXT_DECAY", "off")
    assert ContextDecay.from_env().factor(10 ** 6) == 1.0
    monkeypatch.setenv("DRAFTBENCH_SIM_CONTEXT_DECAY", "1024:0.2:0.5")
    d = ContextDecay.from_env()
    assert (d.knee, d.per_doubling, d.floor) == (1024, 0.2, 0.5) and d.factor(2048) == pytest.approx(0.8)
    monkeypatch.setenv("DRAFTBENCH_SIM_CONTEXT_DECAY", "fast")
    with pytest.raises(ValueError, match="KNEE:PER_DOUBLING"):
        ContextDecay.from_env()
