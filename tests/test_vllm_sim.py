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
