"""Servers draftbench left running are adopted (state, port, pgid, uptime) and stoppable; quitting with live
servers asks; a kept server gives the GPU back before the next variant unless the plan says there is room."""

from __future__ import annotations

import json
from pathlib import Path

from harness.bench.runner import run_plan
from harness.serve import kept
from harness.serve.fleet import Fleet
from harness.tui.app import build_app
from harness.tui.dialogs import ConfirmDialog
from tests.snapshots.tui_fakes import wait_for
from tests.test_tui_fleet import Events, demo_plan

SIZE = (120, 40)


async def _kept_baseline(tmp_path):
    """A Servers section that started the baseline and quit keeping it."""
    plan = demo_plan(tmp_path)
    first = Fleet(plan, on_event=Events(), results_dir=tmp_path / "results")
    status = await first.start("baseline")
    assert status.state == "ready"
    await first.close(keep=True)
    assert await first.target.alive(status.pgid)
    return plan, status


async def test_a_kept_server_is_adopted_and_can_be_stopped(tmp_path):
    plan, status = await _kept_baseline(tmp_path)
    events = Events()
    fleet = Fleet(plan, on_event=events, results_dir=tmp_path / "results")
    try:
        assert await fleet.adopt() == ["baseline"]
        now = fleet.status("baseline")
        assert (now.state, now.port, now.pgid) == ("ready", status.port, status.pgid)
        assert fleet.uptime("baseline") is not None and fleet.uptime("baseline") >= 0
        assert fleet.base_url("baseline") and fleet.live() == ["baseline"]
        assert "adopted" in now.detail
        assert events.states("baseline") == ["ready"]
        stopped = await fleet.stop("baseline")
        assert stopped.state == "stopped" and not await fleet.target.alive(status.pgid)
        assert kept.kept_servers(tmp_path / "results", plan.name) == []  # the stop is on record
    finally:
        await fleet.close()


async def test_the_tui_adopts_on_start_and_quitting_asks(tmp_path):
    plan, status = await _kept_baseline(tmp_path)
    app = build_app(str(plan.source_path), tmp_path / "results", plan=plan, gpu_poll_s=0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot,
                       lambda: app.servers.get("baseline") and app.servers["baseline"].state == "ready",
                       "the kept baseline adopted", 30)
        assert (app.servers["baseline"].port, app.servers["baseline"].pgid) == (status.port, status.pgid)
        table = app.screen.query_one("#server-table")
        assert table.get_cell("baseline", "port") == str(status.port)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the quit question")
        text = str(app.screen.query_one("#confirm-text").render())
        assert "server baseline" in text and str(status.port) in text
        await pilot.press("n")  # cancel: nothing stopped, still here
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmDialog), "dialog closed")
        assert app.is_running and app.servers["baseline"].state == "ready"
        await pilot.press("X")  # stop all asks too
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the stop-all question")
        await pilot.press("y")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "stopped", "stopped by X", 30)
        fleet = app.fleet
        assert not await fleet.target.alive(status.pgid)
        await pilot.press("q")  # nothing live: no question
        await wait_for(pilot, lambda: not app.is_running, "app exited")


async def test_quit_can_keep_the_servers_for_the_next_session(tmp_path):
    plan = demo_plan(tmp_path)
    app = build_app(str(plan.source_path), tmp_path / "results", plan=plan, gpu_poll_s=0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.fleet is not None and app.servers, "plan")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "baseline ready", 30)
        pgid = app.servers["baseline"].pgid
        fleet = app.fleet
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the quit question")
        await pilot.click("#confirm-keep")
        await wait_for(pilot, lambda: not app.is_running, "app exited")
    try:
        assert await fleet.target.alive(pgid)
        left = kept.kept_servers(tmp_path / "results", plan.name)
        assert [(k.variant, k.pgid, k.state) for k in left] == [("baseline", pgid, "kept")]
    finally:
        await fleet.target.kill_group(pgid)


def test_gpu_room_is_what_the_plan_says(tmp_path):
    demo = demo_plan(tmp_path)

    def plan(simulated, frac):
        return demo.model_copy(update={
            "target": demo.target.model_copy(update={"simulated": simulated}),
            "server": demo.server.model_copy(update={"mem_fraction_static": frac})})

    assert kept.gpu_has_room(plan(True, None), 3)  # the stand-in holds no GPU memory
    assert not kept.gpu_has_room(plan(False, None), 1)  # SGLang takes ~0.9 of the GPU by default
    assert kept.gpu_has_room(plan(False, 0.3), 2) and not kept.gpu_has_room(plan(False, 0.3), 3)


async def test_kept_servers_give_the_gpu_back_before_the_next_variant(tmp_path, monkeypatch):
    from harness.analysis.runs import narrow_plan
    from harness.tui.state import RunChoice

    monkeypatch.setattr(kept, "gpu_has_room", lambda plan, up: False)  # as on a real GPU without the room
    plan = narrow_plan(demo_plan(tmp_path), RunChoice(("smoke",), ("baseline", "good-eagle3"), (1,), 16))
    states = []
    try:
        async for e in run_plan(plan, results_dir=tmp_path / "results", keep_servers=True):
            if type(e).__name__ == "ServerState":
                states.append((e.variant, e.state))
        _assert_gpu_given_back(tmp_path, plan, states)
    finally:  # the kept server goes, whatever the assertions said
        from harness.targets import open_target

        t = open_target("local")
        for k in kept.kept_servers(tmp_path / "results", plan.name):
            await t.kill_group(k.pgid)


def _assert_gpu_given_back(tmp_path, plan, states) -> None:
    assert states.index(("baseline", "stopped")) < states.index(("good-eagle3", "ready"))
    run_dir = next(p for p in (tmp_path / "results").iterdir() if (p / "servers.jsonl").exists())
    entries = [json.loads(x) for x in (run_dir / "servers.jsonl").read_text().splitlines()]
    order = [(e["variant"], e["state"]) for e in entries]  # the baseline is gone before the next one launches
    assert order.index(("baseline", "stopped")) < order.index(("good-eagle3", "started"))
    assert [e["state"] for e in entries if e["variant"] == "baseline"] == ["started", "kept", "stopped"]
    left = kept.kept_servers(tmp_path / "results", plan.name)
    assert [k.variant for k in left] == ["good-eagle3"]  # the last one stays, as asked


async def test_a_process_group_the_workdir_no_longer_names_is_not_adopted(tmp_path):
    """The target's workdir keeps the pgid file of every start: a pgid handed to another program after a
    reboot has none (or another number), and is left alone."""
    plan, status = await _kept_baseline(tmp_path)
    (entry,) = kept.kept_servers(tmp_path / "results", plan.name)
    pid_file = Path(entry.pid_path)
    assert pid_file.read_text().strip() == str(status.pgid)
    pid_file.write_text("1\n")
    fleet = Fleet(plan, on_event=Events(), results_dir=tmp_path / "results")
    try:
        assert await fleet.adopt() == [] and fleet.status("baseline").state == "stopped"
    finally:
        await fleet.target.kill_group(status.pgid)
        await fleet.close()
