"""Each run's servers get their own place on the target, and a server follows only its own log lines.

Tune sub-runs are named `wide`, `cost`, ... in every tune: on the target they now live under the tune's own
directory (`<workdir>/runs/<tune-id>/wide/`), so a later tune neither appends to an earlier tune's server log
(and re-reads its lines as its own) nor overwrites the pgid file that names an earlier tune's kept server
(which then no longer counted as ours: forgotten). And a resumed run restarts a variant's server on the log
of the server it replaces: the new server's lines begin where the file ended."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.inputs.config import load_plan
from harness.serve.server import Server
from harness.targets.local import LocalTarget
from tests.faults_helpers import GOOD, SIM_LAUNCHER, prompts, read_jsonl, reap_servers, sim_env, write_plan


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def _plan(tmp_path: Path, *variants: dict):
    return load_plan(write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                                env=sim_env(0.3), variants=[{"name": "baseline"}, *variants],
                                suite_prompts=prompts(2), run={"concurrency": [1], "max_tokens": 8}))


async def test_a_restarted_server_follows_its_log_from_its_own_start(tmp_path: Path):
    plan = _plan(tmp_path, GOOD)
    variant = plan.variants[1]
    remote = tmp_path / "work" / "runs" / "resumed"
    remote.mkdir(parents=True)
    # what the server this one replaces wrote: its ready line, a decode line, its death
    old = ("The server is fired up and ready to roll!\n"
           "[2026-12-03 10:00:00] Decode batch, #running-req: 1, #token: 99, token usage: 0.00, "
           "accept len: 9.99, gen throughput (token/s): 1.00, #queue-req: 0\nOLD SERVER: killed\n")
    (remote / f"{variant.name}.log").write_text(old)
    seen: list[str] = []
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    server = Server(LocalTarget(), plan, variant, run_id="resumed", run_dir=run_dir, engine_version=None,
                    on_lines=seen.extend, api_key=None)
    try:
        await server.start()
        assert server.log_offset == len(old.encode())
        await server.wait_ready(60)
        # its own ready line, read from its own start (the follower may trail the HTTP probe on a busy box)
        await asyncio.wait_for(server.ready_seen.wait(), 30)
    finally:
        await server.stop()
    assert "fired up" in " ".join(seen)
    assert not any("OLD SERVER" in s or "accept len: 9.99" in s for s in seen)
    local = (run_dir / "logs" / f"{variant.name}.log").read_text()
    assert "OLD SERVER" not in local and "9.99" not in local
    assert (remote / f"{variant.name}.log").read_text().startswith(old)  # the remote file was appended to


async def test_a_runs_servers_live_under_its_remote_id(tmp_path: Path):
    plan = _plan(tmp_path)
    for study, remote_id in (("tune-a", "tune-a/wide"), ("tune-b", "tune-b/wide")):
        run_dir = tmp_path / study / "wide"
        run_dir.mkdir(parents=True)
        events = run_plan(plan, results_dir=run_dir.parent, resume_dir=run_dir, remote_id=remote_id)
        async for _ in events:
            pass
        started = [e for e in read_jsonl(run_dir / "servers.jsonl") if e.get("state") == "started"]
        assert [e["variant"] for e in started] == ["baseline"]
        for e in started:
            assert Path(e["pid_path"]).parent == tmp_path / "work" / "runs" / remote_id, e
            assert Path(e["remote_log"]).parent == tmp_path / "work" / "runs" / remote_id
    # each study's logs hold one server's start each: nothing appended from the other study
    for study in ("tune-a", "tune-b"):
        text = (tmp_path / "work" / "runs" / study / "wide" / "baseline.log").read_text()
        assert text.count("fired up") == 1, study
    assert json.loads((tmp_path / "tune-b" / "wide" / "provenance.json").read_text())["status"] == "complete"
