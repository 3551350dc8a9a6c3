"""The TUI driven headless with Pilot against scripted core events: what the user does, which messages
follow, in which order, and what the screens then show."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from harness.analysis.report import render_table
from harness.analysis.runs import result_rows
from harness.analysis.summary import load_summary
from harness.tui import messages as msg
from harness.tui.app import build_app
from harness.tui.dialogs import ExportDialog, HelpScreen
from harness.tui.screens.results import ResultsScreen
from harness.tui.screens.run import RunScreen
from harness.tui.screens.servers import ServersScreen
from harness.tui.widgets.log_pane import DECODE_MARK, LogPane
from tests.snapshots.tui_fakes import (
    DRAFTERS,
    PLAN_PATH,
    RESULTS,
    RUN_A,
    FakeFleet,
    FakeRun,
    Recorder,
    confirm,
    snap_plan,
    wait_for,
)

SIZE = (120, 40)
RUN_ORDER = {
    "RunRequested",
    "RunLaunched",
    "PhaseBegan",
    "PhaseFinished",
    "VariantFinished",
    "RunFinished",
    "RunCancelled",
    "CancelRequested",
    "ResultsLoaded",
}


def make_app(tmp_path, **kwargs):
    fleets: list[FakeFleet] = []

    def fleet_factory(plan, *, on_event, results_dir):
        fleets.append(FakeFleet(plan, on_event=on_event, results_dir=results_dir))
        return fleets[-1]

    opts = {
        "plan": snap_plan(),
        "fleet_factory": fleet_factory,
        "gpu_poll_s": 0,
        "drafter_dirs": [DRAFTERS],
        "flush_interval": 0.05,
    }
    opts.update(kwargs)
    app = build_app(str(PLAN_PATH), tmp_path / "results", **opts)
    return app, fleets


async def test_a_run_posts_its_messages_in_order_and_ends_on_the_results(tmp_path):
    fake = FakeRun()
    app, _ = make_app(tmp_path, run_events=fake, section="run")
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.run_state == "done" and app.result is not None, "run done, results")
        await pilot.press("3")
        table = app.screen.query_one("#results-table")
        await wait_for(pilot, lambda: table.row_count == len(load_summary(RUN_A)), "the run's table shown")

    order = [n for n in rec.names() if n in RUN_ORDER]
    phases = 3 * 2 * 2  # variants x concurrency levels x suites
    assert order[:2] == ["RunRequested", "RunLaunched"]
    assert order[-2:] == ["RunFinished", "ResultsLoaded"]
    assert order.count("PhaseBegan") == order.count("PhaseFinished") == phases
    assert order.count("VariantFinished") == 3
    # each phase's messages arrive between its start and its end
    for i, name in enumerate(order):
        if name == "PhaseFinished":
            assert order[i - 1] == "PhaseBegan"
    # the last progress snapshot has every request, and accept length from the newest windows
    last = rec.of(msg.ProgressUpdated)[-1].snapshot
    assert last.done == last.total == 3 * 2 * 3
    assert set(last.accept_len) == {"baseline", "good-eagle3", "weak-eagle3"}
    assert (
        rec.of(msg.RunFinished)[0].run_dir
        == fake.calls[0]["results_dir"].joinpath("20250301-000000-snap").as_posix()
    )
    # server rows followed the run's servers and ended stopped
    assert {v.state for v in app.servers.values()} == {"stopped"}
    assert fake.calls[0]["keep_servers"] is False


async def test_the_form_narrows_the_plan_the_run_gets(tmp_path):
    fake = FakeRun()
    app, _ = make_app(tmp_path, run_events=fake, section="run")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        screen = app.screen
        assert isinstance(screen, RunScreen)
        screen.query_one("#pick-variants").deselect("weak-eagle3")
        screen.query_one("#pick-suites").deselect("snap-long")
        screen.query_one("#concurrency").value = "2"
        screen.query_one("#max-tokens").value = "32"
        await pilot.click("#keep-servers")
        await pilot.click("#start-run")
        await wait_for(pilot, lambda: app.run_state == "done", "run done")
    plan = fake.calls[0]["plan"]
    assert [v.name for v in plan.variants] == ["baseline", "good-eagle3"]
    assert [s.name for s in plan.suites] == ["snap-suite"]
    assert plan.run.concurrency == [2] and plan.run.max_tokens == 32
    assert fake.calls[0]["keep_servers"] is True
    assert [v.name for v in app.plan.variants] == ["baseline", "good-eagle3", "weak-eagle3"]  # plan untouched


@pytest.mark.parametrize("field,value", [("#concurrency", "0,x"), ("#max-tokens", "")])
async def test_a_bad_form_value_starts_nothing(tmp_path, field, value):
    fake = FakeRun()
    app, _ = make_app(tmp_path, run_events=fake, section="run")
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        app.screen.query_one(field).value = value
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app._notifications) > 0, "an error notification")
        assert app.run_state == "idle"
    assert rec.of(msg.RunRequested) == [] and fake.calls == []


@pytest.mark.parametrize("keep", [False, True])
async def test_cancel_closes_the_run_and_settles_its_servers(tmp_path, keep):
    fake = FakeRun(block=True)
    app, _ = make_app(tmp_path, run_events=fake, section="run")
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        app.screen.query_one("#keep-servers").value = keep
        await pilot.press("ctrl+r")
        await wait_for(
            pilot,
            lambda: fake.waiting.is_set() and app.servers["baseline"].state == "ready",
            "the run waiting in its first phase",
        )
        await pilot.press("ctrl+g")
        await confirm(pilot)
        await wait_for(pilot, lambda: app.run_state == "cancelled" and app.result is not None, "cancelled")
    assert fake.cancelled and fake.closed.is_set()
    assert app.servers["baseline"].state == ("kept" if keep else "stopped")
    order = [n for n in rec.names() if n in RUN_ORDER]
    assert order[:3] == ["RunRequested", "RunLaunched", "PhaseBegan"]
    assert order[-3:] == ["CancelRequested", "RunCancelled", "ResultsLoaded"]
    assert "RunFinished" not in order


async def test_server_actions_states_logs_filter_and_alarms(tmp_path):
    app, fleets = make_app(tmp_path)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(
            pilot,
            lambda: app.servers.get("weak-eagle3") and app.servers["weak-eagle3"].alarms,
            "the preflight alarm on weak-eagle3",
        )
        screen = app.screen
        assert isinstance(screen, ServersScreen)
        table = screen.query_one("#server-table")
        assert "many-draft-tokens" in str(table.get_cell("weak-eagle3", "alarms"))
        await pilot.press("s")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "baseline ready")
        assert str(table.get_cell("baseline", "state")) == "ready"
        assert table.get_cell("baseline", "port") == "30001" and table.get_cell("baseline", "pid") == "4242"
        pane = screen.query_one(LogPane)
        await wait_for(pilot, lambda: len(pane.visible_lines("baseline")) == 8, "8 log lines shown")
        await pilot.press("f")
        shown = pane.visible_lines("baseline")
        assert len(shown) == 4 and all(DECODE_MARK in ln for ln in shown)
        await pilot.press("f")
        assert len(pane.visible_lines("baseline")) == 8
        await pilot.press("x")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "stopped", "baseline stopped")
        await pilot.press("S")
        await wait_for(pilot, lambda: all(v.state == "ready" for v in app.servers.values()), "all ready")
        await pilot.press("down", "r")
        await wait_for(pilot, lambda: ("restart", "good-eagle3") in fleets[0].calls, "restart sent")
    starts = [c for c in fleets[0].calls if c[0] == "start"]
    assert starts[:4] == [
        ("start", "baseline"),
        ("start", "baseline"),
        ("start", "good-eagle3"),
        ("start", "weak-eagle3"),
    ]
    actions = [(m.action, m.variants) for m in rec.of(msg.ServerActionRequested)]
    assert actions[:3] == [
        ("start", ("baseline",)),
        ("stop", ("baseline",)),
        ("start", ("baseline", "good-eagle3", "weak-eagle3")),
    ]


async def test_gpu_memory_is_sampled_for_ready_servers(tmp_path):
    app, fleets = make_app(tmp_path, gpu_poll_s=0.05)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        assert rec.of(msg.GpuMemorySampled) == []  # nothing up, nothing asked
        await pilot.press("s")
        await wait_for(pilot, lambda: app.servers["baseline"].gpu_mib == 1234, "GPU memory of baseline")
        table = app.screen.query_one("#server-table")
        await wait_for(pilot, lambda: table.get_cell("baseline", "gpu") == "1234", "shown in the table")
        assert table.get_cell("good-eagle3", "gpu") == "-"
        await pilot.press("x")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "stopped", "stopped")
        assert app.servers["baseline"].gpu_mib is None


async def test_server_actions_wait_while_a_run_owns_the_servers(tmp_path):
    fake = FakeRun(block=True)
    app, fleets = make_app(tmp_path, run_events=fake, section="run")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: fake.waiting.is_set(), "run going")
        await pilot.press("1", "s")
        await wait_for(
            pilot, lambda: any("cancel it first" in n.message for n in app._notifications), "the refusal"
        )
        assert fleets[0].calls == []
        await pilot.press("2", "ctrl+g")
        await confirm(pilot)
        await wait_for(pilot, lambda: app.run_state == "cancelled", "cancelled")


async def test_results_open_compare_and_export(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    app, _ = make_app(tmp_path, section="results")
    rec = Recorder()
    out = tmp_path / "out" / "table.csv"
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: len(app.runs) == 2, "two runs listed")
        screen = app.screen
        assert isinstance(screen, ResultsScreen)
        await pilot.press("down", "enter")  # the older run (list is newest first)
        await wait_for(pilot, lambda: app.result is not None, "run loaded")
        assert app.result.info.run_id == RUN_A.name
        table = screen.query_one("#results-table")
        cli_lines = render_table(load_summary(RUN_A)).splitlines()
        for row in result_rows(load_summary(RUN_A)):
            first = str(table.get_row(row.key)[0])
            assert any(line.startswith(first + " ") for line in cli_lines), first  # same marks as the CLI
        assert str(table.get_row("good-eagle3@1")[0]).startswith("*")
        assert str(table.get_row("weak-eagle3@4")[0]).startswith("!")
        assert screen.query_one("#categories-table").row_count == len(
            pd.read_csv(RUN_A / "summary_by_category.csv")
        )
        await pilot.press("m", "up", "c")
        await wait_for(pilot, lambda: app.comparison is not None, "comparison loaded")
        assert (app.comparison.a.run_id, app.comparison.b.run_id) == (RUN_A.name, "20250102-090000-snap")
        assert screen.query_one("#compare-table").row_count == 6
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, ExportDialog), "export dialog")
        app.screen.query_one("#export-path").value = str(out)
        await pilot.press("enter")
        await wait_for(pilot, lambda: out.exists() and rec.of(msg.Exported), "exported")
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(RUN_A / "summary.csv"))
    assert [
        n
        for n in rec.names()
        if n
        in (
            "OpenRunRequested",
            "ResultsLoaded",
            "CompareRequested",
            "ComparisonLoaded",
            "ExportRequested",
            "Exported",
        )
    ] == [
        "OpenRunRequested",
        "ResultsLoaded",
        "CompareRequested",
        "ComparisonLoaded",
        "ExportRequested",
        "Exported",
    ]


async def test_help_palette_sections_and_mouse(tmp_path):
    app, _ = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.text
        for cls in (ServersScreen, RunScreen, ResultsScreen):
            for b in cls.BINDINGS:
                assert b.description in text
        await pilot.press("escape")
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for b in (*ServersScreen.BINDINGS, *RunScreen.BINDINGS, *ResultsScreen.BINDINGS):
            assert any(t.endswith(b.description) for t in titles), b.description
        await pilot.click("#tab-results")
        await wait_for(pilot, lambda: isinstance(app.screen, ResultsScreen), "results by mouse")
        await pilot.press("2")
        assert isinstance(app.screen, RunScreen)


async def test_a_missing_plan_is_reported_not_fatal(tmp_path):
    app = build_app(str(tmp_path / "nope.yaml"), tmp_path / "results", gpu_poll_s=0)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: rec.of(msg.TaskFailed), "the failure")
        assert "could not load the plan" in app.plan_line and "plan file not found" in app.plan_line
        assert app.plan is None


async def test_quit_stops_the_servers_it_started(tmp_path):
    app, fleets = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "baseline ready")
        await pilot.press("q")
        await confirm(pilot)
        await wait_for(pilot, lambda: not app.is_running, "app exited")
    assert ("close", "") in fleets[0].calls and fleets[0].up == set()
    assert app.return_code == 0
