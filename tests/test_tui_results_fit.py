"""The Results table fits: variant..verdict first with the variant fixed, the runs list collapsing on a narrow
terminal (l brings it back), and the category and comparison tables exported like the summary."""

from __future__ import annotations

import shutil

import pandas as pd

from harness.analysis.compare import compare_runs
from harness.analysis.runs import load_run
from harness.tui import messages as msg
from harness.tui.dialogs import ExportDialog
from harness.tui.screens.results import PRIORITY
from tests.snapshots.tui_fakes import RESULTS, RUN_A, Recorder, wait_for
from tests.test_tui_app import make_app

RUN_B = RESULTS / "20250102-090000-snap"


async def test_narrow_results_put_the_verdict_columns_first_and_collapse_the_runs(tmp_path):
    shutil.copytree(RESULTS, tmp_path / "results")
    app, _ = make_app(tmp_path, section="results")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: len(app.runs) == 2, "runs listed")
        screen = app.screen
        runs = screen.query_one("#runs-pane")
        assert runs.display  # nothing open yet: the list is how to open one
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.result is not None, "run loaded")
        await wait_for(pilot, lambda: not runs.display, "runs list collapsed")
        table = screen.query_one("#results-table")
        assert [c.value for c in table.columns][: len(PRIORITY)] == list(PRIORITY)
        assert table.fixed_columns == 1 and table.has_focus
        await pilot.press("l")
        await wait_for(pilot, lambda: runs.display and screen.query_one("#runs-table").has_focus, "list back")
        await pilot.press("l")
        await wait_for(pilot, lambda: not runs.display, "and away")


async def test_wide_results_keep_the_runs_list(tmp_path):
    shutil.copytree(RESULTS, tmp_path / "results")
    app, _ = make_app(tmp_path, section="results")
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: len(app.runs) == 2, "runs listed")
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.result is not None, "run loaded")
        assert app.screen.query_one("#runs-pane").display


async def test_categories_and_comparison_export(tmp_path):
    shutil.copytree(RESULTS, tmp_path / "results")
    app, _ = make_app(tmp_path, section="results")
    rec = Recorder()
    cats_out, cmp_out = tmp_path / "cats.csv", tmp_path / "cmp.csv"
    async with app.run_test(size=(120, 40), message_hook=rec) as pilot:
        await wait_for(pilot, lambda: len(app.runs) == 2, "runs listed")
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.result is not None, "run loaded")
        await pilot.press("E")  # the Categories tab is the first one
        await wait_for(pilot, lambda: isinstance(app.screen, ExportDialog), "export dialog")
        assert app.screen.what == "categories"
        app.screen.query_one("#export-path").value = str(cats_out)
        await pilot.press("enter")
        await wait_for(pilot, lambda: cats_out.exists(), "categories exported")
        await pilot.press("m", "up", "c")
        await wait_for(pilot, lambda: app.comparison is not None, "compared")
        await pilot.press("E")
        await wait_for(pilot, lambda: isinstance(app.screen, ExportDialog), "export dialog")
        assert app.screen.what == "compare"
        app.screen.query_one("#export-path").value = str(cmp_out)
        await pilot.press("enter")
        await wait_for(pilot, lambda: cmp_out.exists() and len(rec.of(msg.Exported)) == 2, "compare exported")
    assert [m.what for m in rec.of(msg.ExportRequested)] == ["categories", "compare"]
    assert len(pd.read_csv(cats_out)) == len(pd.read_csv(RUN_A / "summary_by_category.csv"))
    expected = compare_runs(load_run(RUN_A), load_run(RUN_B)).table
    assert len(pd.read_csv(cmp_out)) == len(expected)


async def test_a_run_loaded_while_the_screen_comes_down_is_ignored(tmp_path):
    """A run's results that arrive as the App quits (a check's RunFinished right before the end) find the
    Results tables gone: nothing to show, no NoMatches out of the App (seen once in the TUI loop test)."""
    shutil.copytree(RESULTS, tmp_path / "results")
    app, _ = make_app(tmp_path, section="results")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: len(app.runs) == 2, "runs listed")
        screen = app.screen
        await screen.query_one("#categories-table").remove()  # as during the App's shutdown
        app.post_message(msg.ResultsLoaded(load_run(str(RUN_A))))
        await wait_for(pilot, lambda: app.result is not None, "the result set")
        assert screen.query("#results-table") and not screen.query("#categories-table")
