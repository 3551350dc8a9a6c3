"""The stand-in's side of the lossless audit: logprobs in SGLang 0.5.15's formats, near-ties whose winner
follows the batch shape, a broken verify path that commits tokens the target ranks low, continue_final_message
and response_format (harness.sim.sglang.numerics, logprobs, structured)."""

from __future__ import annotations

import asyncio
import json

import orjson
import pytest

from harness.sim.sglang import model, numerics
from tests.test_sim_server import ENV, events, http_post, launch, post_raw, stop

CHAT = {"model": "m", "max_tokens": 24, "temperature": 0.0}


def _chat(text: str, **extra) -> dict:
    return {**CHAT, "messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture
def target(tmp_path):
    from harness.sim.sglang.fixtures import write_eagle3_drafter, write_target_model

    write_target_model(tmp_path / "target", hidden_size=64, num_layers=4, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=128, vocab_size=32000)
    write_eagle3_drafter(tmp_path / "good", target_hidden_size=64, per_position=[0.9, 0.8, 0.7])
    return tmp_path


SPEC = ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4")


def test_near_ties_flip_with_the_batch_shape_and_only_there():
    num = numerics.Numerics(near_ties=0.2)
    flipped = 0
    for k in range(50):
        key = model.stable_hash("prompt", k)
        for i in range(1, 40):
            a = numerics.pick(num, key, 0, i, 32000, None, ("decode", 1, 1), k=2)
            b = numerics.pick(num, key, 0, i, 32000, None, ("verify", 1, 4), k=2)
            assert a == numerics.pick(num, key, 0, i, 32000, None, ("decode", 1, 1), k=2)  # same shape, same
            if a.text != b.text:
                flipped += 1
                assert numerics.is_tie(num, key, i, None)
                assert abs(a.logprob - b.logprob) < 1e-12 and a.top[1][2] > a.logprob - numerics.NEAR_TIE_NATS
                assert (a.top[1][1], b.top[1][1]) == (b.text, a.text)  # each pass ranks the other second
    assert flipped > 50  # about half the ties
    off = numerics.Numerics()
    assert all(not numerics.is_tie(off, model.stable_hash("p", k), i, None) for k in range(20)
               for i in range(40))


def test_a_wrong_draft_is_ranked_third_or_lower_at_a_wide_margin():
    num = numerics.Numerics()
    for k in range(40):
        key = model.stable_hash("w", k)
        right = numerics.pick(num, key, 0, 5, 32000, None, ("verify", 1, 4), k=20)
        wrong = numerics.wrong_pick(num, key, 0, 5, 32000, k=20)
        rank = [t for _, t, _ in right.top].index(wrong.text)
        assert rank >= 2 and right.logprob - wrong.logprob > 1.0 and wrong.path != right.path
    assert numerics.broken_draft(num, 0, 1, 1, 3) is None
    always = numerics.Numerics(broken_verify=1.0)
    assert numerics.broken_draft(always, 0, 1, 1, 0) is None  # no accepted draft, nothing to get wrong
    assert numerics.broken_draft(always, 0, 1, 1, 3) in (0, 1, 2)


async def test_logprobs_in_sglangs_formats(target, monkeypatch):
    monkeypatch.setitem(ENV, "DRAFTBENCH_SIM_NEAR_TIES", "0.1")
    server = launch(target, "base")
    try:
        _, raw = await asyncio.to_thread(http_post, server.url + "/v1/chat/completions",
                                         _chat("Tell me about tea.", logprobs=True, top_logprobs=3))
        choice = json.loads(raw)["choices"][0]
        content = choice["logprobs"]["content"]
        assert list(content[0]) == ["token", "bytes", "logprob", "top_logprobs"]
        assert list(content[0]["top_logprobs"][0]) == ["token", "bytes", "logprob"]
        for e in content:
            assert e["bytes"] == list(e["token"].encode()) and len(e["top_logprobs"]) <= 3
            assert e["top_logprobs"][0]["token"] == e["token"] \
                and e["top_logprobs"][0]["logprob"] == e["logprob"]
            assert [a["logprob"]
                    for a in e["top_logprobs"]] == sorted((a["logprob"] for a in e["top_logprobs"]),
                                                                       reverse=True)
        assert len(content) == 24 and "".join(e["token"] for e in content).replace("\ufffd", "") \
            == choice["message"]["content"].replace("\u2014", "")
        _, raw = await asyncio.to_thread(http_post, server.url + "/v1/chat/completions",
                                         _chat("Tell me about tea."))
        assert json.loads(raw)["choices"][0]["logprobs"] is None  # not asked
        # completions: LogProbs, offsets "not supported yet"
        _, raw = await asyncio.to_thread(http_post, server.url + "/v1/completions",
                                         {**CHAT, "prompt": "Tea is", "max_tokens": 5, "logprobs": 2})
        lp = json.loads(raw)["choices"][0]["logprobs"]
        assert list(lp) == ["text_offset", "token_logprobs", "tokens", "top_logprobs"]
        assert lp["text_offset"] == [-1] * 5 and all(len(d) <= 2 for d in lp["top_logprobs"])
        # /generate: return_logprob and top_logprobs_num in meta_info, before the token counts
        _, raw = await asyncio.to_thread(http_post, server.url + "/generate", {
            "text": "Tea is", "sampling_params": {"max_new_tokens": 4, "temperature": 0},
            "return_logprob": True, "top_logprobs_num": 2})
        meta = json.loads(raw)["meta_info"]
        keys = list(meta)
        assert keys.index("output_top_logprobs") < keys.index("completion_tokens")
        assert meta["input_token_logprobs"][0][0] is None and len(meta["output_token_logprobs"]) == 4
        # return_text_in_logprobs off
        assert all(text is None for _, _, text in meta["output_token_logprobs"])
        assert all(len(top) == 2 for top in meta["output_top_logprobs"])
        # streaming chat: each content chunk carries its own tokens' entries
        _, raw = await post_raw(server.url + "/v1/chat/completions",
                                _chat("Tell me about tea.", logprobs=True, top_logprobs=1, stream=True))
        chunks = [orjson.loads(e) for e in events(raw) if e != b"[DONE]"]
        streamed = [e for c in chunks for e in ((c["choices"][0].get("logprobs") or {}).get("content") or [])]
        assert [e["token"] for e in streamed] == [e["token"] for e in content][: len(streamed)]
        assert len(streamed) >= 22
    finally:
        stop(server)


async def test_batch_shape_moves_answers_at_near_ties_and_continue_final_message_resumes(target, monkeypatch):
    monkeypatch.setitem(ENV, "DRAFTBENCH_SIM_NEAR_TIES", "0.05")
    server = launch(target, "base")
    prompts = [f"Item {i}: explain it." for i in range(12)]
    try:
        alone = [json.loads((await asyncio.to_thread(http_post, server.url + "/v1/chat/completions",
                                                     _chat(p, max_tokens=40)))[1]) for p in prompts]

        async def one(p: str) -> dict:
            return json.loads((await post_raw(server.url
                                              + "/v1/chat/completions", _chat(p, max_tokens=40)))[1])

        together = await asyncio.gather(*(one(p) for p in prompts))
        a = [r["choices"][0]["message"]["content"] for r in alone]
        b = [r["choices"][0]["message"]["content"] for r in together]
        assert a != b  # some near-tie went the other way at batch 12
        # the answer continued from its own first words is the rest of it
        text = a[0]
        cut = len(" ".join(text.split(" ")[:5]))
        body = _chat(prompts[0], max_tokens=40, logprobs=True, top_logprobs=2)
        body["messages"].append({"role": "assistant", "content": text[:cut]})
        got = json.loads((await asyncio.to_thread(http_post, server.url + "/v1/chat/completions",
                                                  {**body, "continue_final_message": True}))[1])
        assert text.startswith(text[:cut] + got["choices"][0]["message"]["content"][: len(text) - cut])
        assert got["usage"]["completion_tokens"] == 40  # counted from where the prefix ends
    finally:
        stop(server)


async def test_structured_output_and_a_broken_verify_path_that_ignores_the_grammar(target, monkeypatch):
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": {
        "type": "object", "required": ["city", "n"], "properties": {"city": {"type": "string"},
                                                                    "n": {"type": "integer"}}}}}
    base = launch(target, "base")
    monkeypatch.setitem(ENV, "DRAFTBENCH_SIM_BROKEN_VERIFY", "1.0")
    broken = launch(target, "broken", "--speculative-draft-model-path", str(target / "good"), *SPEC)
    try:
        for server, ok in ((base, True), (broken, False)):
            _, raw = await asyncio.to_thread(http_post, server.url + "/v1/chat/completions",
                                             _chat("A city as JSON.", max_tokens=60, response_format=fmt))
            text = json.loads(raw)["choices"][0]["message"]["content"]
            if ok:
                value = json.loads(text)
                assert isinstance(value["city"], str) and isinstance(value["n"], int)
            else:
                with pytest.raises(ValueError):
                    json.loads(text)
        # free text: the broken path's answer leaves the baseline's at a token the baseline ranks low
        req = _chat("Tell me about tea.", max_tokens=40, logprobs=True, top_logprobs=20)
        b = json.loads((await asyncio.to_thread(http_post, base.url
                                                + "/v1/chat/completions", req))[1])["choices"][0]
        s = json.loads((await asyncio.to_thread(http_post, broken.url
                                                + "/v1/chat/completions", req))[1])["choices"][0]
        bt = [e["token"] for e in b["logprobs"]["content"]]
        st = [e["token"] for e in s["logprobs"]["content"]]
        k = next(i for i, (x, y) in enumerate(zip(bt, st, strict=False)) if x != y)
        alts = {a["token"]: a["logprob"] for a in b["logprobs"]["content"][k]["top_logprobs"]}
        assert st[k] in alts and list(alts).index(st[k]) >= 2 and alts[bt[k]] - alts[st[k]] > 1.0
    finally:
        stop(base)
        stop(broken)


async def test_the_vllm_stand_in_gives_vllms_logprobs_and_continues_a_final_message(tmp_path, monkeypatch):
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from harness.sim.vllm import args
    from harness.sim.vllm.server import Sim, build_app

    monkeypatch.setenv("DRAFTBENCH_SIM_NEAR_TIES", "0.1")
    sim = Sim.build(args.parse(["serve", str(tmp_path), "--served-model-name", "m"]))
    server = TestServer(build_app(sim))
    await server.start_server()
    try:
        async with ClientSession() as http:
            async def post(path: str, body: dict) -> dict:
                async with http.post(server.make_url(path), json=body) as resp:
                    return await resp.json()

            got = await post("/v1/chat/completions",
                             _chat("Tell me about tea.", logprobs=True, top_logprobs=2))
            choice = got["choices"][0]
            content = choice["logprobs"]["content"]
            # vLLM's order, not SGLang's
            assert list(content[0]) == ["token", "logprob", "bytes", "top_logprobs"]
            assert len(content) == 24 and all(len(e["top_logprobs"]) == 2 for e in content)
            text = choice["message"]["content"]
            cut = len(" ".join(text.split(" ")[:4]))
            body = _chat("Tell me about tea.", continue_final_message=True, add_generation_prompt=False)
            body["messages"].append({"role": "assistant", "content": text[:cut]})
            rest = (await post("/v1/chat/completions", body))["choices"][0]["message"]["content"]
            assert text.startswith(text[:cut] + rest[: len(text) - cut]) and rest
            comp = (await post("/v1/completions",
                               {**CHAT, "prompt": "Tea is", "max_tokens": 4, "logprobs": 1}))
            lp = comp["choices"][0]["logprobs"]
            assert lp["text_offset"][1] == len(lp["tokens"][0]) \
                and all(len(d) == 2 for d in lp["top_logprobs"])
    finally:
        await server.close()
