"""A server left running by a run into one results dir is found from the target's workdir (its pgid file,
the live group, the port from its argv) by a TUI opened with another results dir, and stopped from there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.inputs.config import load_plan
from harness.serve import kept
from harness.targets.local import LocalTarget
from harness.tui import messages as msg
from harness.tui.app import build_app
from tests.faults_helpers import SIM_LAUNCHER, only_run_dir, reap_servers, sim_env, write_plan
from tests.snapshots.tui_fakes import wait_for

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def test_an_engine_servers_port_comes_from_its_argv():
    assert kept.server_port("python -m harness.sim --model-path m --port 30001 --tp-size 1") == 30001
    assert kept.server_port("vllm serve m --port=8001") == 8001
    assert kept.server_port("sleep 100 --port 5") is None  # not an engine server
    assert kept.server_port("python -m sglang.launch_server --model-path m") is None  # no port


@pytest.mark.slow
async def test_a_server_kept_under_another_results_dir_is_adopted_and_stopped(tmp_path, monkeypatch):
    # ps cuts args= at $COLUMNS unless told -ww: the port must still be read
    monkeypatch.setenv("COLUMNS", "80")
    plan_path = write_plan(tmp_path / "plan.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                           env=sim_env(0.2), variants=[{"name": "baseline"}],
                           suite_prompts=[{"id": "q1", "category": "chat", "text": "Tell me about tea."}],
                           run={"concurrency": [1], "max_tokens": 8, "repeats": 1})
    plan = load_plan(plan_path)
    assert await consume(run_plan(plan, results_dir=tmp_path / "results-a", keep_servers=True)) == 0
    run_dir = only_run_dir(tmp_path / "results-a")
    entry = json.loads((run_dir / "servers.jsonl").read_text().splitlines()[0])
    pgid, port = entry["pgid"], entry["port"]
    target = LocalTarget()
    assert await target.alive(pgid)
    assert kept.kept_servers(tmp_path / "results-b", plan.name) == []  # nothing on record there

    app = build_app(str(plan_path), tmp_path / "results-b", plan=plan, gpu_poll_s=0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "the kept baseline adopted",
                       30)
        view = app.servers["baseline"]
        assert (view.port, view.pgid) == (port, pgid)
        assert f"by {run_dir.name}" in view.detail
        assert app.screen.query_one("#server-table").get_cell("baseline", "port") == str(port)
        assert app.fleet.base_url("baseline")
        app.post_message(msg.ServerActionRequested("stop", ("baseline",)))
        await wait_for(pilot, lambda: app.servers["baseline"].state == "stopped", "the baseline stopped", 30)
        assert not await target.alive(pgid)
    assert await kept.workdir_servers(target, str(tmp_path / "work"), plan.name) == []
