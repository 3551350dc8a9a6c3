"""The stand-in answering as SGLang 0.5.19+ (DRAFTBENCH_SIM_SGLANG_VERSION): per-request spec details in the
`sglext` chunk (REFERENCE §4.2: no choices, after the last content chunk, before the usage chunk), and the
runner taking every timed request's histogram from it (spec_source "stream", no untimed probe)."""

from __future__ import annotations

import contextlib

import orjson
import pandas as pd
import pytest

from harness.bench.runner import run_plan
from tests.retrain_helpers import write_plan
from tests.test_sim_server import ENV, events, launch, post_raw, stop

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Explain tea in detail."}], "max_tokens": 40,
        "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
        "return_spec_tokens_details": True}


@pytest.fixture
def later_release(monkeypatch):
    monkeypatch.setitem(ENV, "DRAFTBENCH_SIM_SGLANG_VERSION", "0.5.19")


def _server(tmp_path):
    from harness.sim.sglang.fixtures import write_eagle3_drafter, write_target_model

    write_target_model(tmp_path / "target", hidden_size=64, num_layers=4, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=128, vocab_size=32000)
    write_eagle3_drafter(tmp_path / "good", target_hidden_size=64, per_position=[0.9, 0.8, 0.7])
    return launch(tmp_path, "eagle3", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                  str(tmp_path / "good"), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", "4")


async def test_sglext_chunk_comes_between_the_last_content_and_the_usage(tmp_path, later_release):
    server = _server(tmp_path)
    try:
        status, raw = await post_raw(server.url + "/v1/chat/completions", CHAT)
        chunks = [orjson.loads(e) for e in events(raw) if e != b"[DONE]"]
        assert status == 200
        at = next(i for i, c in enumerate(chunks) if "sglext" in c)
        assert chunks[at]["choices"] == [] and chunks[at - 1]["choices"][0]["finish_reason"] == "length"
        assert chunks[at + 1]["choices"] == [] and "usage" in chunks[at + 1] and at + 2 == len(chunks)
        d = chunks[at]["sglext"]["spec_tokens_details"]
        assert set(d) == {"spec_accept_rate", "spec_accept_length", "spec_cap_length",
                          "spec_block_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts",
                          "spec_verify_ct", "spec_correct_drafts_histogram", "spec_cap_lens_histogram"}
        hist = d["spec_correct_drafts_histogram"]
        assert sum(hist) == d["spec_verify_ct"] \
            and sum(i * n for i, n in enumerate(hist)) == d["spec_num_correct_drafts"]
        assert d["spec_num_proposed_drafts"] == 3 * d["spec_verify_ct"]
        # without the field, or as 0.5.15, no sglext
        status, raw = await post_raw(server.url + "/v1/chat/completions",
                                     {**CHAT, "return_spec_tokens_details": False})
        assert not any(b"sglext" in e for e in events(raw))
    finally:
        stop(server)
    ENV.pop("DRAFTBENCH_SIM_SGLANG_VERSION", None)
    server = _server(tmp_path / "old")
    try:
        _, raw = await post_raw(server.url + "/v1/chat/completions", CHAT)
        assert not any(b"sglext" in e for e in events(raw))
    finally:
        stop(server)


@pytest.mark.slow
async def test_runner_reads_every_timed_requests_histogram_from_sglext(tmp_path):
    plan, _ = write_plan(tmp_path, env={"DRAFTBENCH_SIM_SGLANG_VERSION": "0.5.19"})
    plan.target.sglang.version = "0.5.19"
    plan.variants = [v for v in plan.variants if v.name in ("baseline", "seed")]
    done = None
    async with contextlib.aclosing(run_plan(plan, results_dir=tmp_path / "results")) as evs:
        async for e in evs:
            done = e
    assert done.complete
    reqs = pd.read_csv(f"{done.run_dir}/requests.csv")
    seed = reqs[reqs.variant == "seed"]
    assert (seed.spec_source == "stream").all() and seed.spec_histogram.notna().all()
    for hist, verify, out in zip(seed.spec_histogram, seed.spec_verify_ct, seed.output_tokens, strict=True):
        counts = [int(x) for x in hist.split()]
        assert sum(counts) == verify and out == 32
    probe = list((tmp_path / "results").glob("*/spec_probe.csv"))  # no untimed second pass was needed
    assert not probe or pd.read_csv(probe[0]).empty
