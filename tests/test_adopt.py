"""A run adopts the servers another run kept when its variant would start exactly the same command
(harness.serve.adopt): no second start, only the new log lines parsed, the process group handed over and
stopped by its new owner; a different command is never adopted; GPU room still rules."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from harness.bench.runner import run_plan
from harness.cli.progress import consume
from harness.common import events as ev
from harness.inputs.config import Plan, load_plan
from harness.serve import adopt as ad
from harness.serve.kept import KeptServer, kept_servers, stop_kept_servers
from tests.faults_helpers import (
    GOOD,
    SIM_LAUNCHER,
    live_groups,
    prompts,
    read_csv,
    read_jsonl,
    reap_servers,
    sim_env,
    write_plan,
)


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path):
    yield
    reap_servers(tmp_path)


def _plan(tmp_path: Path, name: str, server: dict | None = None):
    path = write_plan(tmp_path / f"{name}.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER,
                      env=sim_env(), variants=[{"name": "baseline"}, dict(GOOD)], suite_prompts=prompts(3),
                      run={"concurrency": [2], "max_tokens": 16}, server=server)
    return load_plan(path)


async def _run(plan, results: Path, **kw) -> tuple[int, list, Path]:
    seen: list = []

    async def events():
        async for e in run_plan(plan, results_dir=results, **kw):
            seen.append(e)
            yield e

    rc = await consume(events(), out=io.StringIO())
    run_dir = next(e for e in seen if isinstance(e, ev.RunStarted)).run_dir
    return rc, seen, Path(run_dir)


def _states(seen: list, state: str) -> list[str]:
    return [e.variant for e in seen if isinstance(e, ev.ServerState) and e.state == state]


async def test_a_kept_server_with_the_same_command_is_adopted_and_stopped_by_its_new_owner(tmp_path):
    results = tmp_path / "results"
    rc, seen, first = await _run(_plan(tmp_path, "a"), results, keep_servers=True)
    assert rc == 0 and sorted(_states(seen, "kept")) == ["baseline", "good"]
    kept = kept_servers(results)
    pgids = {k.variant: k.pgid for k in kept}
    assert set(pgids) == {"baseline", "good"} and all(p in live_groups() for p in pgids.values())

    rc, seen, second = await _run(_plan(tmp_path, "a"), results, adopt=kept)
    assert rc == 0
    assert sorted(_states(seen, "adopted")) == ["baseline", "good"] and not _states(seen, "starting")
    started = {e["variant"]: e for e in read_jsonl(second / "servers.jsonl") if e.get("state") == "started"}
    assert {v: e["pgid"] for v, e in started.items()} == pgids  # the same processes, measured again
    assert all(e["adopted_from"] == first.name for e in started.values())
    good = [e["state"] for e in read_jsonl(first / "servers.jsonl") if e["pgid"] == pgids["good"]]
    assert good[-1] == "handed-over"
    # only the new run's log lines: the start-up (before the adoption) is not in its copy of the log
    log = (second / "logs" / "good.log").read_text()
    assert "The server is fired up" not in log and "Decode batch" in log
    assert "The server is fired up" in (first / "logs" / "good.log").read_text()
    windows = [w for w in read_csv(second / "server_windows.csv") if w["variant"] == "good"]
    assert windows and {w["phase"] for w in windows} <= {"s@c2#r1", "probe:s@c2#r1", ""}
    rows = read_csv(second / "requests.csv")
    assert len(rows) == 6 and all(r["ok"] == "True" for r in rows)
    # the new owner did not keep them: stopped, and no run lists them as kept any more
    assert not any(p in live_groups() for p in pgids.values())
    assert kept_servers(results) == []


async def test_a_different_command_is_not_adopted_and_the_offered_server_stays_kept(tmp_path):
    results = tmp_path / "results"
    rc, _, first = await _run(_plan(tmp_path, "a"), results, keep_servers=True)
    assert rc == 0
    kept = kept_servers(results)
    other = _plan(tmp_path, "b", server={"max_running_requests": 8})  # another flag: another server
    rc, seen, second = await _run(other, results, adopt=kept)
    assert rc == 0 and not _states(seen, "adopted")
    assert sorted(_states(seen, "starting")) == ["baseline", "good"]
    still = kept_servers(results)
    assert {k.pgid for k in still} == {k.pgid for k in kept}  # the stand-in has room: they stay, still kept
    assert all(k.pgid in live_groups() for k in still)
    await stop_kept_servers(other, None, still, by="test")
    assert not any(k.pgid in live_groups() for k in still) and kept_servers(results) == []


class _Target:
    def __init__(self):
        self.killed: list[int] = []
        self.name = "local"

    async def alive(self, pgid: int) -> bool:
        return pgid not in self.killed

    async def kill_group(self, pgid: int, **_: object) -> bool:
        self.killed.append(pgid)
        return True


class _Server:
    started = False

    def launch_argv(self, port: int) -> list[str]:
        return ["python", "-m", "sglang.launch_server", "--port", str(port), "--mem-fraction-static", "0.5"]

    async def start(self) -> None:
        self.started = True


def _kept(tmp_path: Path, pgid: int, argv: list[str]) -> KeptServer:
    jsonl = tmp_path / f"{pgid}.jsonl"
    jsonl.write_text("")
    return KeptServer("wide", pgid, 30000, "local", float(pgid), jsonl, "kept", "", tuple(argv), "")


class _Run:
    """What harness.serve.adopt.launch asks of a run (its AdoptingRun protocol)."""

    def __init__(self, plan: Plan, target: _Target, offered: list[KeptServer]):
        self.plan, self.target, self.offered = plan, target, offered
        self.run_id = "r2"
        self.kept: list = []

    def emit(self, event: ev.ServerState) -> None:
        pass


def test_offered_servers_are_stopped_before_a_fresh_start_when_the_gpu_has_no_room(tmp_path):
    def run_with(frac):
        path = write_plan(tmp_path / "room.yaml", workdir=tmp_path / "work", launcher=SIM_LAUNCHER, sim=False,
                          variants=[{"name": "v"}], suite_prompts=prompts(1), run={"concurrency": [1]},
                          server={"mem_fraction_static": frac} if frac is not None else None)
        plan = load_plan(path)  # a GPU server (not the stand-in): only the plan's memory share says what fits
        run = _Run(plan, _Target(), [_kept(tmp_path, 101, ["other"]), _kept(tmp_path, 102, ["another"])])
        server = _Server()
        asyncio.run(ad.launch(run, server, plan.variants[0]))
        return run, server

    run, server = run_with(None)  # the plan says nothing about memory: nothing may stay next to a new server
    assert server.started and run.target.killed == [101, 102] and run.offered == []
    assert '"state": "stopped"' in (tmp_path / "101.jsonl").read_text()
    run, server = run_with(0.3)  # 3 x 0.3 <= 0.9: both fit next to the new one
    assert server.started and run.target.killed == [] and len(run.offered) == 2


def test_matching_is_on_the_exact_command_with_the_kept_servers_port(tmp_path):
    server = _Server()
    same = _kept(tmp_path, 7, server.launch_argv(30000))
    assert ad.matches(same, server)
    assert not ad.matches(_kept(tmp_path, 8, server.launch_argv(30001)), server)  # recorded on another port
    assert not ad.matches(_kept(tmp_path, 9, [*server.launch_argv(30000), "--enable-x"]), server)
    assert not ad.matches(_kept(tmp_path, 10, []), server)  # an entry without its command is never adopted
