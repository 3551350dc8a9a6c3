"""A dropped SSH link mid-run (the sshd processes serving it are killed, the listener stays): the harness
reconnects, the server keeps running, in-flight requests are retried, and nothing is lost or repeated."""

from __future__ import annotations

import asyncio
import io
from collections import Counter
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.common import events as ev
from harness.inputs.config import load_plan
from harness.targets import open_target
from tests.faults_helpers import (
    GOOD,
    SIM_LAUNCHER,
    expected_keys,
    last_variant_meta,
    live_groups,
    prompts,
    read_csv,
    reap_servers,
    request_keys,
    sim_env,
    started_pgids,
    write_plan,
)
from tests.sshd import sshd_missing_reason, start_sshd

pytestmark = [
    pytest.mark.ssh,
    pytest.mark.slow,
    pytest.mark.skipif(sshd_missing_reason() is not None, reason=sshd_missing_reason() or ""),
]

N = 12
CONCURRENCY = 4
VARIANTS = ["baseline", "good"]


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


@pytest.fixture
def sshd(tmp_path_factory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


async def test_dropped_link_mid_phase_loses_and_repeats_nothing(sshd, tmp_path: Path):
    workdir = tmp_path / "target work"
    plan_path = write_plan(
        tmp_path / "plan.yaml",
        workdir=workdir,
        launcher=SIM_LAUNCHER,
        host=sshd.alias,
        env=sim_env(0.5),
        variants=[{"name": "baseline"}, GOOD],
        suite_prompts=prompts(N),
        run={"concurrency": [CONCURRENCY], "max_tokens": 64, "retries": 1},
    )
    target = open_target(sshd.alias, config=[sshd.ssh_config])
    seen: list[object] = []
    drops: list[tuple[str, int]] = []

    async def drop_links_mid_phase():
        done: Counter[str] = Counter()
        async for e in run_plan(load_plan(plan_path), results_dir=tmp_path / "results", target=target):
            seen.append(e)
            if isinstance(e, ev.RequestDone):
                done[e.record.variant] += 1
                if done[e.record.variant] == 3:  # requests in flight and queued: cut the link under them
                    drops.append((e.record.variant, await asyncio.to_thread(sshd.kill_connections)))
            yield e

    try:
        rc = await asyncio.wait_for(consume(drop_links_mid_phase(), out=io.StringIO()), 180)
    finally:
        await target.close()
    assert [v for v, killed in drops if killed > 0] == VARIANTS
    assert target.reconnects >= 2
    assert rc == 0
    run_dir = Path(next(e.run_dir for e in seen if isinstance(e, ev.RunStarted)))

    rows = read_csv(run_dir / "requests.csv")
    assert Counter(request_keys(rows)) == Counter(expected_keys(VARIANTS, N, concurrency=CONCURRENCY))
    assert all(r["ok"] == "True" and r["output_tokens"] == "64" for r in rows)
    assert any(int(r["attempts"]) == 2 for r in rows)  # the drops did cut requests, and they were re-sent

    # the same server all along: one start per variant, the pgid announced when it became ready
    ready = {e.variant: e.pgid for e in seen if isinstance(e, ev.ServerState) and e.state == "ready"}
    assert started_pgids(run_dir) == {v: [ready[v]] for v in VARIANTS}
    assert sum(isinstance(e, ev.ServerState) and e.state == "starting" for e in seen) == len(VARIANTS)
    assert {v: m["status"] for v, m in last_variant_meta(run_dir).items()} == dict.fromkeys(VARIANTS, "ok")
    assert not set(ready.values()) & live_groups()

    # the log follower resumed at the byte it had reached: the copy is the server's log, no line lost
    # or doubled around the drop, shutdown lines included
    remote_runs = workdir / "runs" / run_dir.name
    for v in VARIANTS:
        remote = (remote_runs / f"{v}.log").read_bytes()
        assert b"SIGTERM received" in remote
        assert (run_dir / "logs" / f"{v}.log").read_bytes() == remote

    # the work directory and the run's directory on the target are private
    assert (workdir.stat().st_mode & 0o777) == 0o700
    assert (remote_runs.stat().st_mode & 0o777) == 0o700
