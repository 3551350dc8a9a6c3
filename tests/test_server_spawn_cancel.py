"""A spawn cut short by a cancellation (a Ctrl-C while the spawn script runs) leaves no server behind: the
process group exists before its pgid is handed back, and Server.start stops it from its pid file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.inputs.config import load_plan
from harness.serve.server import Server
from harness.targets.local import LocalTarget
from tests.faults_helpers import GOOD, SIM_LAUNCHER, live_groups, prompts, sim_env, write_plan


class CutSpawn(LocalTarget):
    """The cancellation lands after the process started, before the pgid reached the caller."""

    spawned: int | None = None

    async def spawn(self, argv, *, env, cwd, log_path, pid_path) -> int:
        self.spawned = await super().spawn(argv, env=env, cwd=cwd, log_path=log_path, pid_path=pid_path)
        raise asyncio.CancelledError


async def test_a_cancelled_spawn_leaves_no_server(tmp_path: Path):
    plan = load_plan(write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                                env=sim_env(0.3), variants=[{"name": "baseline"}, GOOD],
                                suite_prompts=prompts(2), run={"concurrency": [1]}))
    target = CutSpawn()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    server = Server(target, plan, plan.variants[0], run_id="cut", run_dir=run_dir, engine_version=None,
                    on_lines=lambda lines: None, api_key=None)
    with pytest.raises(asyncio.CancelledError):
        await server.start()
    assert target.spawned is not None and server.pgid is None  # the group existed, the server never knew it
    assert target.spawned not in live_groups()  # stopped from its pid file
