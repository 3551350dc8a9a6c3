"""Step time per batch size from decode windows (harness.analysis.steps), hand-computed values."""

import pandas as pd
import pytest

from harness.analysis.steps import decode_steps, step_ms_by_batch, windows_by_batch


def _w(line, kind, bs, gen=None, acc=None, phase="s@c4#r1", variant="v"):
    return {"variant": variant, "phase": phase, "line": line, "kind": kind, "running_req": bs,
            "gen_throughput": gen, "accept_len": acc, "cuda_graph": True}


def test_step_time_from_clean_windows_only():
    rows = [
        _w(1, "prefill", 0),
        _w(2, "decode", 4, gen=100.0, acc=2.5),  # after a prefill: not clean (5 tokens/step*4 / 100 = 100 ms)
        _w(3, "decode", 4, gen=400.0, acc=2.5),  # clean: 4 * 2.5 / 400 s = 25 ms
        _w(4, "decode", 4, gen=500.0, acc=2.5),  # clean: 20 ms
        _w(5, "decode", 4, gen=200.0, acc=2.5),  # clean: 50 ms
        _w(6, "decode", 3, gen=300.0, acc=2.0),  # batch changed: not clean, 20 ms
        _w(7, "decode", 3, gen=240.0, acc=2.0),  # clean: 25 ms
    ]
    w = pd.DataFrame(rows)
    steps = decode_steps(w, "v")
    assert steps["clean"].tolist() == [False, True, True, True, False, True]
    got = step_ms_by_batch(w, "v")
    assert got[4] == pytest.approx(25.0)  # median of 25, 20, 50
    assert got[3] == pytest.approx(25.0)
    assert windows_by_batch(w, "v") == {3: 2, 4: 4}


def test_baseline_windows_count_one_token_per_step_and_fallback_percentile():
    # no clean window at batch 2: the 20th percentile over all of them (1 token per step without accept len)
    rows = [_w(1, "prefill", 0, variant="b"), _w(2, "decode", 2, gen=200.0, variant="b"),
            _w(3, "prefill", 2, variant="b"), _w(4, "decode", 2, gen=100.0, variant="b")]
    got = step_ms_by_batch(pd.DataFrame(rows), "b")
    # 10 ms and 20 ms: 10 + 0.2 * (20 - 10)
    assert got == {2: pytest.approx(12.0)}


def test_phase_filter_and_unknown_variant():
    rows = [_w(1, "decode", 1, gen=100.0, phase="a"), _w(2, "decode", 1, gen=50.0, phase="b")]
    w = pd.DataFrame(rows)
    assert step_ms_by_batch(w, "v", {"b"}) == {1: pytest.approx(20.0)}
    assert step_ms_by_batch(w, "nobody") == {}
    assert step_ms_by_batch(pd.DataFrame(), "v") == {}
