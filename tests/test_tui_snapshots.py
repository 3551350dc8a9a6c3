"""Snapshots of each section on fixed data (tests/snapshots/): textual pinned exactly, 120x40, a fixed
clock, the dark theme, no blinking cursor. Update with `pytest --snapshot-update` after a deliberate change
and look at the report it writes."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from harness.tui import messages as msg
from harness.tui.app import build_app
from harness.tui.state import ProgressSnapshot
from tests.snapshots.tui_fakes import (
    DRAFTERS,
    PLAN_PATH,
    RESULTS,
    RUN_A,
    RUN_B,
    FakeFleet,
    snap_plan,
    wait_for,
)

SIZE = (120, 40)


def snap_app(section: str, **kwargs):
    return build_app(
        str(PLAN_PATH.relative_to(PLAN_PATH.parents[2])),
        RESULTS,
        plan=snap_plan(),
        fleet_factory=FakeFleet,
        section=section,
        gpu_poll_s=0,
        drafter_dirs=[DRAFTERS],
        clock=lambda: 1000.0,
        theme="textual-dark",
        **kwargs,
    )


async def settle(pilot) -> None:
    """No blinking cursor, and let tables re-measure their columns after the last update."""
    for field in pilot.app.screen.query(Input):
        field.cursor_blink = False
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


@pytest.fixture(autouse=True)
def _readonly_results():
    """The results fixture is read, never written: a snapshot run must leave it as it was."""
    before = sorted(p.name for p in RESULTS.rglob("*"))
    yield
    assert sorted(p.name for p in RESULTS.rglob("*")) == before


def test_servers_with_a_ready_server_its_log_and_an_alarm(snap_compare):
    app = snap_app("servers")

    async def run_before(pilot):
        await wait_for(
            pilot,
            lambda: app.servers.get("weak-eagle3") and app.servers["weak-eagle3"].alarms,
            "preflight alarm",
        )
        await pilot.press("s")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "baseline ready")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_servers_log_filtered_to_decode_batch_lines(snap_compare):
    app = snap_app("servers")

    async def run_before(pilot):
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "baseline ready")
        await pilot.press("f")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_run_in_progress_with_plots(snap_compare):
    app = snap_app("run")
    progress = ProgressSnapshot(
        done=7,
        total=18,
        errors=1,
        variant="good-eagle3",
        phase="snap-suite@c4#r1",
        concurrency=4,
        phase_done=1,
        phase_total=2,
        live_tok_s=412.5,
        accept_len={"baseline": 1.0, "good-eagle3": 2.75},
        gen_tok_s={"baseline": 120.0, "good-eagle3": 260.0},
        accept_series={"good-eagle3": (2.1, 2.4, 2.6, 2.9, 2.7, 2.75, 3.0, 2.8)},
        tok_s_series={"baseline": (110.0, 118.0, 121.0, 120.0), "good-eagle3": (200.0, 240.0, 255.0, 260.0)},
    )

    async def run_before(pilot):
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        app.run_state = "running"
        app.run_status = "running: good-eagle3 snap-suite@c4#r1 (2 requests at concurrency 4)"
        app.progress = progress
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def _open(app, run_dir):
    async def run_before(pilot):
        await wait_for(pilot, lambda: len(app.runs) == 2, "runs listed")
        app.post_message(msg.OpenRunRequested(str(run_dir)))
        await wait_for(pilot, lambda: app.result is not None, "run loaded")
        await settle(pilot)

    return run_before


def test_results_table_and_categories(snap_compare):
    app = snap_app("results")
    assert snap_compare(app, terminal_size=SIZE, run_before=_open(app, RUN_A))


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
def test_results_fit_small_and_large_terminals(snap_compare, size):
    """80x24: the runs list collapsed once a run is open, variant..verdict first; 160x45: everything."""
    app = snap_app("results")
    assert snap_compare(app, terminal_size=size, run_before=_open(app, RUN_A))


def test_results_bar_chart(snap_compare):
    app = snap_app("results")
    opened = _open(app, RUN_A)

    async def run_before(pilot):
        await opened(pilot)
        app.screen.query_one("#results-tabs").active = "tab-chart"
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_results_compare_two_runs(snap_compare):
    app = snap_app("results")

    async def run_before(pilot):
        await wait_for(pilot, lambda: len(app.runs) == 2, "runs listed")
        app.post_message(msg.OpenRunRequested(str(RUN_A)))
        app.post_message(msg.CompareRequested(str(RUN_A), str(RUN_B)))
        await wait_for(pilot, lambda: app.comparison is not None and app.result is not None, "compared")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_retrain_lists_drafters_and_their_runs(snap_compare):
    app = snap_app("retrain")

    async def run_before(pilot):
        await wait_for(pilot, lambda: app.screen.query_one("#drafters-table").row_count == 2,
                       "drafters listed")
        await wait_for(pilot, lambda: app.screen.query_one("#drafter-runs").row_count == 3,
                       "their runs listed")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_help_screen(snap_compare):
    app = snap_app("servers")

    async def run_before(pilot):
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        await pilot.press("question_mark")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_tune_finished_grid_heatmap_and_answer(snap_compare):
    """160x45: the form, the tunes list, the grid with measured and predicted rows, the answer, heatmaps."""
    from tests.snapshots.tune_fakes import TUNE_DIR, finished_tune

    app = snap_app("tune")

    async def run_before(pilot):
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        await wait_for(pilot, lambda: all(w.group != "tune-list" for w in app.workers), "tunes listed")
        await pilot.pause()
        app.tunes = (TUNE_DIR,)
        app.tune_state = "done"
        app.tune_status = "finished (confirmed): 7 server starts for a grid of 5; w adds the winner to the " \
            "plan"
        app.tune_stage = ("report", 1834.0, 7200.0)
        app.tune_dir = TUNE_DIR
        app.tune_view = finished_tune()
        await settle(pilot)

    assert snap_compare(app, terminal_size=(160, 45), run_before=run_before)
