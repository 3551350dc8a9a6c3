"""The vLLM stand-in: vLLM's argparse behaviour, its /metrics text read back by the engine's parser, and its
log lines read back by the engine's log parser (the parser itself is tested on vLLM's own lines)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.engines.vllm.logline import parse_line
from harness.engines.vllm.metrics import parse_metrics, phase_means
from harness.sim.vllm import args, logs
from harness.sim.vllm.server import Sim, metrics_text


@pytest.mark.parametrize("extra", [["--bogus"], ["--speculative-config", "{not json"],
                                   ["--speculative-config", '{"method": "medusa2"}']])
def test_bad_flags_are_argparse_errors(extra):
    proc = subprocess.run([sys.executable, "-m", "harness.sim.vllm", "serve", "m", *extra],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "error" in proc.stderr


def test_metrics_counters_round_trip(tmp_path):
    ns = args.parse(["serve", str(tmp_path), "--speculative-config",
                     f'{{"method": "eagle3", "model": "{tmp_path}", "num_speculative_tokens": 3}}'])
    sim = Sim.build(ns)
    before = parse_metrics(metrics_text(sim))
    for acc in (3, 1, 0, 2):
        sim.observe_step(acc)
    row = phase_means(before, parse_metrics(metrics_text(sim)))
    assert row["server_spec_drafts"] == 4 and row["server_accept_len"] == pytest.approx(1 + 6 / 4)
    assert row["server_accept_per_pos"] == "0.7500 0.5000 0.2500"


def test_log_lines_parse():
    w = parse_line(logs.spec_decoding(4, 12, 6, [3, 2, 1], 2.0), 1)
    assert w.accept_len == pytest.approx(2.5) and w.accept_rate == pytest.approx(0.5)
    s = parse_line(logs.engine_stats(10.0, 20.0, 3, 0, 0.1), 2)
    assert (s.kind, s.running_req, s.queue_req) == ("stats", 3, 0)


@pytest.mark.parametrize("dev", [False, True])
async def test_dev_mode_endpoints_through_the_engine_admin(tmp_path, monkeypatch, dev):
    """/reset_prefix_cache and /server_info exist only with VLLM_SERVER_DEV_MODE=1; the admin says so."""
    from aiohttp.test_utils import TestServer

    from harness.engines.vllm.admin import Admin
    from harness.sim.vllm.server import build_app

    if dev:
        monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    else:
        monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    sim = Sim.build(args.parse(["serve", str(tmp_path), "--served-model-name", "m"]))
    server = TestServer(build_app(sim))
    await server.start_server()
    admin = Admin(str(server.make_url("")))
    try:
        assert await admin.healthy() and await admin.model_id() == "m"
        assert await admin.flush_cache() is dev
        info = await admin.server_info()
        assert info["version"] == "0.33.0" and ("server_info" in info) is dev
        scrape = await admin.histograms()
        assert scrape is not None and scrape.counters == {}  # no speculation: no spec counters exported
    finally:
        await admin.close()
        await server.close()


async def test_acceptance_falls_with_context_and_with_the_sampler(tmp_path):
    """The vLLM stand-in draws each verify step as the SGLang one does (harness.sim.sglang.conditions): its
    per-request stats converge to the documented accept length at the step's context and sampler."""
    from harness.sim.sglang.conditions import ContextDecay, expected_accept_length_at
    from harness.sim.sglang.fixtures import write_acceptance
    from harness.sim.sglang.model import SpecShape
    from harness.sim.vllm import logprobs as lp
    from harness.sim.vllm.server import VOCAB, _generate

    profile = [0.9, 0.8, 0.7]
    write_acceptance(tmp_path, profile)
    spec = f'{{"method": "eagle3", "model": "{tmp_path}", "num_speculative_tokens": 3}}'
    sim = Sim.build(args.parse(["serve", str(tmp_path), "--speculative-config", spec]))
    sim.time_scale = 0.0

    async def measured(prompt: int, sampler: tuple[float, float]) -> tuple[float, float]:
        steps = accepted = tokens = 0
        for key in range(12):
            toks = lp.Tokens(1000 * prompt + key, sim.numerics, VOCAB)
            stats: dict = {}
            async for texts, _, stats in _generate(sim, [1] * prompt, 300, toks, 0, sampler):  # noqa: B007
                tokens += len(texts)
            steps, accepted = steps + stats["steps"], accepted + stats["accepted"]  # the request's totals
        return 1 + accepted / steps, prompt + tokens / 24  # the steps' mean context, about

    for prompt, sampler in ((100, (0.0, 1.0)), (100, (0.7, 0.95)), (16000, (0.0, 1.0))):
        got, context = await measured(prompt, sampler)
        want = expected_accept_length_at(profile, SpecShape(3, 1, 4), temperature=sampler[0],
                                         top_p=sampler[1], context=int(context), decay=ContextDecay())
        assert got == pytest.approx(want, rel=0.06), (prompt, sampler)


async def test_stream_options_without_stream_is_refused_as_real_vllm_refuses_it(tmp_path):
    """The H200's vLLM 0.26.0 answered a non-streamed request carrying stream_options with a 400
    (tests/fixtures/vllm-0.26.0/smoke/probe.json): the stand-in gives that answer byte for byte, and
    draftbench's own non-streamed request (the lossless audit's) carries no stream_options: it is served."""
    import json
    from pathlib import Path

    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from harness.client.stream import ReplayClient, ReplayRequest
    from harness.sim.vllm.server import build_app

    smoke = Path(__file__).parent / "fixtures" / "vllm-0.26.0" / "smoke"
    capture = json.loads((smoke / "probe.json").read_text())
    real = capture["POST /v1/chat/completions"]
    sim = Sim.build(args.parse(["serve", str(tmp_path), "--served-model-name", "tiny"]))
    sim.time_scale = 0.0
    server = TestServer(build_app(sim))
    await server.start_server()
    sent = {"model": "tiny", "messages": [{"role": "user", "content": "def fibonacci(n):"}], "max_tokens": 64,
            "temperature": 0.0, "ignore_eos": True, "stream": False,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    client = ReplayClient(str(server.make_url("/v1")), "tiny", endpoint="chat")
    try:
        async with ClientSession() as http:
            async with http.post(server.make_url("/v1/chat/completions"), json=sent) as resp:
                assert resp.status == real["status"] == 400
                assert json.loads(await resp.text()) == json.loads(real["body"])
        got = await client.complete_json(ReplayRequest("a", None, "def fibonacci(n):", max_tokens=8))
        assert got is not None and got["usage"]["completion_tokens"] == 8
    finally:
        await client.aclose()
        await server.close()
