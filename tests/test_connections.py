"""run.connections: keep-alive (the default, as SDK clients do) or per-request (a new TCP connection for every
request, as sglang.bench_serving opens one). Checked on what the stand-in's access log saw: the client port
of every POST, in SGLang's uvicorn format."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.inputs.config import load_plan
from tests.faults_helpers import SIM_LAUNCHER, only_run_dir, prompts, read_csv, sim_env, write_plan

ACCESS = re.compile(r'INFO: +127\.0\.0\.1:(\d+) - "POST /v1/chat/completions HTTP/1\.1" 200')


async def _ports(tmp_path: Path, connections: str) -> tuple[list[str], int]:
    plan_path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                           env=sim_env(0.3), variants=[{"name": "baseline"}], suite_prompts=prompts(6),
                           run={"concurrency": [2], "max_tokens": 8, "connections": connections})
    assert await consume(run_plan(load_plan(plan_path), results_dir=tmp_path / "results"),
                         out=io.StringIO()) == 0
    run_dir = only_run_dir(tmp_path / "results")
    assert run_dir is not None
    ok = sum(r["ok"] == "True" for r in read_csv(run_dir / "requests.csv"))
    return ACCESS.findall((run_dir / "logs" / "baseline.log").read_text()), ok


@pytest.mark.slow
async def test_per_request_opens_a_connection_for_every_request(tmp_path: Path) -> None:
    ports, ok = await _ports(tmp_path, "per-request")
    assert ok == 6 and len(ports) >= 6
    assert len(set(ports)) == len(ports)  # warmup and measured requests alike


@pytest.mark.slow
async def test_keep_alive_reuses_the_connections(tmp_path: Path) -> None:
    ports, ok = await _ports(tmp_path, "keep-alive")
    assert ok == 6 and len(ports) >= 6
    assert len(set(ports)) <= 2 + 2  # at most the two of the warmup and two for the phase
