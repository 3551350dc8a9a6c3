"""Soak: 256 concurrent streams against the stand-in, two passes of the suite. No request is lost and the
harness's memory does not grow from the end of the first pass to the end of the second."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.faults_helpers import (
    SIM_LAUNCHER,
    Cli,
    expected_keys,
    prompts,
    read_csv,
    reap_servers,
    request_keys,
    rss_kib,
    run_dir_from,
    sim_env,
    write_plan,
)

pytestmark = pytest.mark.slow

CONCURRENCY = 256
N = 1024  # four times the streams: the closed loop refills as requests finish
MAX_TOKENS = 32
# Generous (measured: < 1 MiB), yet a leak of 16 KiB per request (a response, a connection, a task with
# its buffers) over the second pass's 1024 requests would fail it.
RSS_GROWTH_LIMIT_KIB = 16 * 1024


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def test_256_streams_lose_nothing_and_memory_stays_flat(tmp_path: Path):
    plan = write_plan(
        tmp_path / "plan.yaml",
        workdir=tmp_path / "work",
        launcher=SIM_LAUNCHER,
        env=sim_env(0.05),
        variants=[{"name": "baseline"}],
        suite_prompts=prompts(N),
        server={"max_running_requests": CONCURRENCY},
        run={"concurrency": [CONCURRENCY], "max_tokens": MAX_TOKENS, "repeats": 2, "request_timeout_s": 120},
    )
    cli = Cli(["run", str(plan), "--results-dir", str(tmp_path / "results")])
    try:
        rss = {}
        for repeat in (1, 2):
            cli.wait_line(rf"^\[baseline\] s@c{CONCURRENCY}#r{repeat} done", timeout=120)
            rss[repeat] = rss_kib(cli.proc.pid)
        rc, out, err = cli.finish(timeout=120)
    finally:
        cli.kill()
    assert rc == 0, err[-3000:]
    run_dir = run_dir_from(out)
    rows = read_csv(run_dir / "requests.csv")
    assert Counter(request_keys(rows)) == Counter(expected_keys(["baseline"], N, 2, CONCURRENCY))
    assert all((r["ok"], r["output_tokens"], r["attempts"]) == ("True", str(MAX_TOKENS), "1") for r in rows)
    windows = read_csv(run_dir / "server_windows.csv")
    decode = [int(w["running_req"]) for w in windows if w["kind"] == "decode"]
    assert max(decode) == CONCURRENCY  # the server really had 256 streams running at once
    phases = read_csv(run_dir / "phases.csv")
    assert [(p["requests"], p["errors"]) for p in phases] == [(str(N), "0")] * 2
    assert rss[2] - rss[1] < RSS_GROWTH_LIMIT_KIB, f"harness RSS grew from {rss[1]} KiB to {rss[2]} KiB"
