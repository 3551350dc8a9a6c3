"""Metric math: per-request records and the comparison table (pure, no servers)."""

from dataclasses import asdict

import pandas as pd
import pytest

from harness.analysis.records import make_record, token_itls_ms
from harness.analysis.report import render_table
from harness.analysis.summary import REQUIRED_COLUMNS, summarise
from harness.client.collect import StreamResult
from harness.engines.sglang.spec import request_spec as spec_from_server


def result(times, tokens, output_tokens, *, ok=True, spec=None, text="abc"):
    return StreamResult(
        ok=ok,
        error=None if ok else "http 500",
        http_status=200,
        t_send=100.0,
        t_first=times[0] if times else None,
        t_end=(times[-1] if times else 100.0) + 0.001,
        wall_send=1.7e9,
        chunk_times=times,
        chunk_tokens=tokens,
        chunk_tokens_exact=True,
        output_tokens=output_tokens,
        prompt_tokens=10,
        text=text,
        finish_reason="length",
        spec=spec,
    )


def test_itl_is_per_token_not_per_chunk():
    # a 3-token chunk 30 ms after the previous one is three 10 ms inter-token gaps
    assert token_itls_ms([0.0, 0.030], [1, 3]) == pytest.approx([10.0, 10.0, 10.0])
    assert token_itls_ms([0.0, 0.010, 0.030], [2, 1, 2]) == pytest.approx([10.0, 10.0, 10.0])
    # a chunk without tokens (e.g. a finish chunk) does not split the gap of the next one
    assert token_itls_ms([0.0, 0.010, 0.030], [1, 0, 2]) == pytest.approx([15.0, 15.0])


def test_record_metrics_use_usage_not_chunk_count():
    # 4 chunks carrying 1+3+3+3 tokens: output tokens come from usage (10), never from the 4 chunks
    r = result([100.1, 100.13, 100.16, 100.19], [1, 3, 3, 3], 10)
    rec = make_record(
        run_id="r",
        variant="v",
        phase="p",
        suite="s",
        prompt_id="a",
        category="c",
        concurrency=1,
        repeat=1,
        request_id="s/a",
        result=r,
    )
    assert rec.output_tokens == 10 and rec.chunks == 4
    assert rec.ttft_ms == pytest.approx(100.0)
    assert rec.decode_tok_s == pytest.approx(9 / 0.09)
    assert rec.itl_ms_p50 == pytest.approx(10.0)
    assert rec.tokens_per_chunk == pytest.approx(2.5)
    assert rec.chunk_tokens == "1 3 3 3"


def test_spec_keys_across_sglang_renames():
    old = spec_from_server({"spec_verify_ct": 50, "completion_tokens": 120, "spec_accepted_drafts": 70}, None)
    new = spec_from_server(
        {"spec_verify_ct": 50, "spec_num_correct_drafts": 70, "spec_num_proposed_drafts": 150}, 120
    )
    # (120 - 1) / 50: the first token comes from prefill, not from a verify step
    assert old["spec_accept_len"] == new["spec_accept_len"] == pytest.approx(2.38)
    assert new["spec_correct_drafts"] == 70 and new["spec_proposed_drafts"] == 150
    assert spec_from_server(None, 5)["spec_verify_ct"] is None


def test_spec_histogram_is_kept_across_renames():
    # 0.5.9-0.5.11 spelled it spec_accept_histogram, 0.5.12+ spec_correct_drafts_histogram (REFERENCE §4.1)
    for key in ("spec_accept_histogram", "spec_correct_drafts_histogram"):
        got = spec_from_server({"spec_verify_ct": 6, "completion_tokens": 13, key: [1, 2, 0, 3]}, None)
        assert got["spec_histogram"] == "1 2 0 3"
    assert spec_from_server({"spec_verify_ct": 6, "completion_tokens": 13}, None)["spec_histogram"] is None


def _tables(base_tok_s=90.0, spec_tok_s=50.0, spec_accept=2.0):
    variants = {
        "baseline": {"variant": "baseline", "baseline": True, "algorithm": "", "status": "ok"},
        "weak": {
            "variant": "weak",
            "baseline": False,
            "algorithm": "EAGLE3",
            "status": "ok",
            "num_steps": 15,
            "eagle_topk": 1,
            "num_draft_tokens": 16,
            "cuda_graph": False,
        },
    }
    phases = pd.DataFrame(
        [
            {
                "variant": "baseline",
                "phase": "s@c1#r1",
                "concurrency": 1,
                "output_tokens": 900,
                "wall_s": 900 / base_tok_s,
                "server_accept_len": None,
            },
            {
                "variant": "weak",
                "phase": "s@c1#r1",
                "concurrency": 1,
                "output_tokens": 1000,
                "wall_s": 1000 / spec_tok_s,
                "server_accept_len": spec_accept,
            },
        ]
    )
    reqs = []
    for v, n, verify in (("baseline", 900, None), ("weak", 1000, 999 / spec_accept)):
        rec = make_record(
            run_id="r",
            variant=v,
            phase="s@c1#r1",
            suite="s",
            prompt_id="a",
            category="code",
            concurrency=1,
            repeat=1,
            request_id="s/a",
            result=result(
                [100.1, 100.2],
                [1, n - 1],
                n,
                spec={"spec_verify_ct": verify, "completion_tokens": n} if verify else None,
            ),
            normalise_spec=spec_from_server,
        )
        reqs.append(asdict(rec))
    # one clean decode window per server after a first one (step times: weak 2.0 * 1 / 50 s = 40 ms,
    # baseline 1 / 80 s = 12.5 ms)
    step_rows = [
        {"variant": v, "phase": "s@c1#r1", "kind": "decode", "running_req": 1, "line": line,
         "accept_len": acc, "accept_rate": 0.07 if acc else None, "cuda_graph": True, "gen_throughput": gen}
        for v, acc, gens in (("weak", spec_accept, (20.0, 50.0)), ("baseline", None, (40.0, 80.0)))
        for line, gen in zip((10, 11), gens, strict=True)
    ]
    windows = pd.DataFrame(
        [
            *step_rows,
            {
                "variant": "weak",
                "phase": "s@c1#r1",
                "kind": "decode",
                "running_req": 1,
                "accept_len": spec_accept,
                "accept_rate": 0.07,
                "cuda_graph": False,
            },
            {
                "variant": "weak",
                "phase": "",
                "kind": "decode",
                "running_req": 1,
                "accept_len": 9.0,  # outside
                "accept_rate": 0.9,
                "cuda_graph": True,
            },
        ]
    )
    return pd.DataFrame(reqs), phases, windows, variants


def test_summary_speedup_and_break_even():
    df = summarise(*_tables())
    assert set(REQUIRED_COLUMNS) <= set(df.columns)
    weak = df[df.variant == "weak"].iloc[0]
    base = df[df.variant == "baseline"].iloc[0]
    assert base["tok_s"] == pytest.approx(90.0) and base["speedup"] == pytest.approx(1.0)
    assert weak["tok_s"] == pytest.approx(50.0)
    assert weak["speedup"] == pytest.approx(50 / 90)
    # break-even from step costs at batch 1: 40 ms verify step / 12.5 ms decode step (not 2.0 * 90 / 50
    # from end-to-end tok/s, which would carry prefill and the tail)
    assert weak["break_even_accept_len"] == pytest.approx(3.2)
    assert weak["step_ms_ratio"] == pytest.approx(3.2) and weak["break_even_batch"] == 1
    assert weak["verify_step_ms"] == pytest.approx(40.0) and weak["decode_step_ms"] == pytest.approx(12.5)
    assert weak["accept_len_source"] == "requests"
    assert weak["ttft_cost_ms"] == pytest.approx(0.0)  # the same first-chunk time in both records
    assert weak["accept_len"] == pytest.approx(2.0)
    assert weak["accept_rate"] == pytest.approx((2.0 - 1) / (16 - 1))
    assert bool(weak["accept_sources_agree"]) is True
    assert weak["accept_len_log"] == pytest.approx(2.0)  # the untagged window is not counted
    assert weak["cuda_graph_false_windows"] == 1
    # one prompt per arm: too short to decide, so 0.56x is no verdict and no "slower" mark
    assert weak["verdict"] == "too-short" and bool(weak["slower_than_baseline"]) is False
    assert weak["output_match"] == pytest.approx(1.0)


def test_summary_flags_disagreeing_sources():
    reqs, phases, windows, variants = _tables()
    phases.loc[phases.variant == "weak", "server_accept_len"] = 3.0
    weak = summarise(reqs, phases, windows, variants).set_index("variant").loc["weak"]
    assert weak["accept_len"] == pytest.approx(2.0)  # per-request source wins
    assert bool(weak["accept_sources_agree"]) is False


def test_failed_variant_keeps_a_row_and_table_marks_it():
    reqs, phases, windows, variants = _tables()
    variants["broken"] = {"variant": "broken", "baseline": False, "algorithm": "EAGLE3", "status": "failed"}
    df = summarise(reqs, phases, windows, variants)
    assert "broken" in set(df.variant)
    df.loc[df.variant == "weak", "slower_than_baseline"] = True  # as a `slower` verdict sets it
    text = render_table(df)
    assert "FAILED" in text and "slower than baseline" in text and "!weak" in text
