"""The stand-in answering as SGLang 0.5.19+ (DRAFTBENCH_SIM_SGLANG_VERSION): per-request spec details in the
`sglext` chunk (REFERENCE §4.2: no choices, after the last content chunk, before the usage chunk). The runner
reading them on the timed requests: tests/test_per_request_accept.py."""

from __future__ import annotations

import orjson
import pytest

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
        # as pydantic writes them (entrypoints/openai/utils.py, protocol.py): the EAGLE-less DSpark fields at
        # their defaults, and the stream response's `usage` as null
        assert (d["spec_cap_length"], d["spec_block_accept_length"],
                d["spec_cap_lens_histogram"]) == (0.0, 0.0, [])
        assert "usage" in chunks[at] and chunks[at]["usage"] is None
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


@pytest.mark.parametrize("version, old_names", [("0.5.19", True), ("0.5.21", False)])
async def test_meta_info_keeps_the_old_spec_names_until_0_5_20(tmp_path, monkeypatch, version, old_names):
    """tokenizer_manager.py `_calculate_spec_decoding_metrics`: 0.5.12-0.5.20 also send the backward-compat
    aliases of the canonical keys; 0.5.21 dropped them."""
    monkeypatch.setitem(ENV, "DRAFTBENCH_SIM_SGLANG_VERSION", version)
    server = _server(tmp_path)
    try:
        body = {**CHAT, "stream": False, "return_meta_info": True}
        body.pop("stream_options")
        status, raw = await post_raw(server.url + "/v1/chat/completions", body)
        meta = orjson.loads(raw)["choices"][0]["meta_info"]
        assert status == 200 and {"spec_verify_ct", "spec_num_correct_drafts",
                                  "spec_correct_drafts_histogram"} <= set(meta)
        aliases = {"spec_accepted_drafts", "spec_proposed_drafts", "spec_accept_histogram"}
        assert (aliases <= set(meta)) is old_names and (aliases & set(meta) == set()) is not old_names
    finally:
        stop(server)
