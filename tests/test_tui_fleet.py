"""harness.serve.fleet: long-lived servers of a plan on the real stand-in (local target), and its pure
helpers."""

from __future__ import annotations

import asyncio

import pytest

from harness.common import events as ev
from harness.serve.fleet import Fleet, finding_to_alarm, parse_gpu_memory

FAST = {"DRAFTBENCH_SIM_TIME_SCALE": "0.05", "DRAFTBENCH_SIM_STARTUP_S": "0.2"}


def demo_plan(tmp_path, **env):
    from harness.cli.demo import prepare_demo

    plan = prepare_demo(tmp_path / "results")
    plan.target.env = {**FAST, **env}
    # the TUI tests count requests and server starts: one pass per phase and a fixed design (the demo's own
    # run, with phase sizing and the stopping rule, is tests/test_packaging.py's)
    plan.run.phase_sizing, plan.run.stop = False, "fixed"
    return plan


class Events:
    def __init__(self) -> None:
        self.all: list = []

    def __call__(self, e) -> None:
        self.all.append(e)

    def states(self, variant: str) -> list[str]:
        return [e.state for e in self.all if isinstance(e, ev.ServerState) and e.variant == variant]

    def lines(self, variant: str) -> list[str]:
        return [
            ln for e in self.all if isinstance(e, ev.ServerLog) and e.variant == variant for ln in e.lines
        ]


async def wait_until(condition, what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_start_stop_restart_one_variant(tmp_path):
    events = Events()
    fleet = Fleet(demo_plan(tmp_path), on_event=events, results_dir=tmp_path / "results")
    try:
        status = await fleet.start("good-eagle3")
        assert status.state == "ready" and status.port and status.pgid
        assert await fleet.target.alive(status.pgid)
        assert fleet.uptime("good-eagle3") is not None and fleet.uptime("baseline") is None
        assert events.states("good-eagle3") == ["starting", "starting", "ready"]
        assert any("fired up and ready to roll" in ln for ln in events.lines("good-eagle3"))
        log = fleet.session_dir / "logs" / "good-eagle3.log"
        assert "fired up and ready to roll" in log.read_text()
        assert await fleet.start("good-eagle3") == fleet.status("good-eagle3")  # already up: nothing new
        first = status.pgid

        again = await fleet.restart("good-eagle3")
        assert again.state == "ready" and again.pgid != first
        assert not await fleet.target.alive(first)
        # a restart tails a fresh log: the first start's ready line is not delivered twice
        assert sum("fired up and ready to roll" in ln for ln in events.lines("good-eagle3")) == 2

        stopped = await fleet.stop("good-eagle3")
        assert stopped.state == "stopped" and stopped.pgid is None
        assert not await fleet.target.alive(again.pgid)
        assert events.states("good-eagle3")[-2:] == ["stopping", "stopped"]
        assert fleet.status("baseline").state == "stopped" and events.states("baseline") == []
    finally:
        await fleet.close()


async def test_stop_during_start_kills_the_group(tmp_path):
    events = Events()
    fleet = Fleet(
        demo_plan(tmp_path, DRAFTBENCH_SIM_STARTUP_S="60"), on_event=events, results_dir=tmp_path / "results"
    )
    try:
        starting = asyncio.create_task(fleet.start("baseline"))
        await wait_until(lambda: fleet.status("baseline").pgid is not None, "the server spawned")
        pgid = fleet.status("baseline").pgid
        assert (await fleet.stop("baseline")).state == "stopped"
        assert (await starting).state == "stopped"
        assert not await fleet.target.alive(pgid)
        assert events.states("baseline")[-1] == "stopped" and "ready" not in events.states("baseline")
    finally:
        await fleet.close()


async def test_a_server_that_exits_fails_with_its_last_lines(tmp_path):
    plan = demo_plan(tmp_path)
    plan.variant("baseline").extra_args.append("--no-such-flag")
    events = Events()
    fleet = Fleet(plan, on_event=events, results_dir=tmp_path / "results")
    try:
        status = await fleet.start("baseline")
        assert status.state == "failed"
        assert "exited before it became ready" in status.detail and "--no-such-flag" in status.detail
        assert events.states("baseline")[-1] == "failed"
        assert (await fleet.start("good-eagle3")).state == "ready"  # the others are unaffected
    finally:
        await fleet.close()
    assert fleet.status("good-eagle3").state == "stopped"


async def test_a_pinned_port_serves_one_variant_at_a_time(tmp_path):
    plan = demo_plan(tmp_path)
    plan.server.port = 20000 + (hash(str(tmp_path)) % 10000)
    fleet = Fleet(plan, on_event=Events(), results_dir=tmp_path / "results")
    try:
        assert (await fleet.start("baseline")).state == "ready"
        refused = await fleet.start("good-eagle3")
        assert (
            refused.state == "failed"
            and "pins server.port" in refused.detail
            and "baseline" in refused.detail
        )
        await fleet.stop("baseline")
        assert (await fleet.start("good-eagle3")).state == "ready"
    finally:
        await fleet.close()


async def test_preflight_findings_become_alarms_on_their_variant(tmp_path):
    events = Events()
    fleet = Fleet(demo_plan(tmp_path), on_event=events, results_dir=tmp_path / "results")
    try:
        alarms = await fleet.preflight()
    finally:
        await fleet.close()
    wrong = [a for a in alarms if a.variant == "wrong-flag-eagle"]
    assert any(a.code == "eagle3-drafter-with-eagle" and a.severity == "info" and a.message.startswith(
        "expected (error, the plan says `expect: drafter-inert`)") for a in wrong)  # the plan declares it
    assert [e for e in events.all if isinstance(e, ev.Alarm)] == alarms
    assert fleet.session_dir is None  # checks alone leave no server session behind


def test_unknown_variant_is_a_clear_error(tmp_path):
    from harness.common.errors import HarnessError

    fleet = Fleet(demo_plan(tmp_path), on_event=Events(), results_dir=tmp_path / "results")
    with pytest.raises(HarnessError, match="no variant named 'nope' in plan 'demo'"):
        fleet.status("nope")


def test_gpu_memory_is_summed_per_process_group():
    smi = "101, 30000\n102, 2000\n300, 5\nnot a line\n"
    ps = "  101   100\n  102   100\n  200   200\n  300   300\n"
    assert parse_gpu_memory(smi, ps, {"a": 100, "b": 200, "c": 300}) == {"a": 32000, "c": 5}
    assert parse_gpu_memory("", ps, {"a": 100}) == {}


def test_findings_become_alarms():
    from harness.common.findings import error

    f = error("v", "some-code", "the problem", "why it matters", "what to do")
    a = finding_to_alarm(f)
    assert (a.variant, a.severity, a.code) == ("v", "error", "some-code")
    assert a.message == "the problem (fix: what to do)"
    same = ev.Alarm("v", "info", "c", "m")
    assert finding_to_alarm(same) is same
