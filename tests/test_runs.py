"""What the TUI reads and writes: run listing, the table rows (the CLI's numbers and marks), comparisons,
exports, plan narrowing and the drafter listing. No textual here."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from harness.analysis.compare import compare_runs
from harness.analysis.report import render_table
from harness.analysis.runs import (
    export_csv,
    list_drafters,
    list_runs,
    load_run,
    narrow_plan,
    parse_concurrency,
    result_rows,
)
from harness.analysis.summary import load_summary
from harness.common.errors import InputError
from harness.tui.state import RunChoice
from tests.snapshots.tui_fakes import DRAFTERS, RESULTS, RUN_A, RUN_B, snap_plan


def test_list_runs_newest_first_and_skips_what_is_not_a_run(tmp_path):
    shutil.copytree(RESULTS, tmp_path, dirs_exist_ok=True)
    (tmp_path / "servers" / "x").mkdir(parents=True)
    (tmp_path / ".demo-target").mkdir()
    (tmp_path / "empty-dir").mkdir()
    runs = list_runs(tmp_path)
    assert [r.run_id for r in runs] == [RUN_B.name, RUN_A.name]
    assert runs[1].plan == "snap" and runs[1].status == "complete" and runs[1].simulated
    assert list_runs(tmp_path / "missing") == []


def test_rows_carry_the_cli_cells_and_marks():
    df = load_summary(RUN_A)
    rows = result_rows(df)
    cli = render_table(df, wide=True).splitlines()  # the TUI's rows carry every column, as `--wide` shows
    for row in rows:
        mark = ("*" if row.winner else "") + ("!" if row.slower else "")
        # the CLI puts "!" before "*"; a variant cannot be both fastest and slower than the baseline
        line = next(
            ln
            for ln in cli
            if ln.split() and ln.split()[0].lstrip("*!") == row.cells[0] and ln.split()[1] == row.cells[1]
        )
        assert line.split()[0] == mark + row.cells[0]
        assert line.split()[2 : 2 + len(row.cells) - 2] == [c for c in row.cells[2:]]
    winners = {r.key for r in rows if r.winner}
    assert winners == {"good-eagle3@1", "good-eagle3@4"}
    assert {r.key for r in rows if r.slower} == {"weak-eagle3@1", "weak-eagle3@4"}


def test_compare_two_runs_per_variant_and_concurrency():
    c = compare_runs(load_run(RUN_A), load_run(RUN_B))
    t = c.table.set_index(["variant", "concurrency"])
    assert t.loc[("good-eagle3", 1), "tok_s_a"] == 190.0 and t.loc[("good-eagle3", 1), "tok_s_b"] == 215.0
    assert t.loc[("good-eagle3", 1), "tok_s_delta_pct"] == pytest.approx((215 / 190 - 1) * 100)
    assert pd.isna(t.loc[("good-eagle3", 4), "tok_s_b"])  # run B had no concurrency 4
    assert len(c.table) == 6


def test_export_writes_summary_csv_as_is(tmp_path):
    df = load_summary(RUN_A)
    out = tmp_path / "new" / "dir" / "t.csv"
    assert export_csv(df, out) == len(df)
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(RUN_A / "summary.csv"))
    with pytest.raises(InputError, match="is a directory"):
        export_csv(df, tmp_path)


def test_load_run_summarises_a_run_that_never_got_that_far(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    shutil.copy(RUN_A / "requests.csv", run / "requests.csv")
    loaded = load_run(run)
    assert (run / "summary.csv").exists() and loaded.summary.empty
    with pytest.raises(InputError, match="not a run directory"):
        load_run(tmp_path / "nothing")


def test_narrow_plan_keeps_the_chosen_parts_and_leaves_the_plan_alone():
    plan = snap_plan()
    narrow = narrow_plan(plan, RunChoice(("snap-long",), ("baseline", "weak-eagle3"), (2, 8), 16))
    assert [v.name for v in narrow.variants] == ["baseline", "weak-eagle3"]
    assert [s.name for s in narrow.suites] == ["snap-long"]
    assert (narrow.run.concurrency, narrow.run.max_tokens) == ([2, 8], 16)
    assert narrow.source_path == plan.source_path and narrow.target == plan.target
    assert len(plan.variants) == 3 and plan.run.concurrency == [1, 4] and plan.run.max_tokens == 64
    with pytest.raises(InputError, match="at least one variant"):
        narrow_plan(plan, RunChoice(("snap-long",), (), (1,), 16))
    with pytest.raises(InputError, match="at least one suite"):
        narrow_plan(plan, RunChoice((), ("baseline",), (1,), 16))


@pytest.mark.parametrize("text,levels", [("1,4", (1, 4)), (" 2  8 ,16", (2, 8, 16))])
def test_parse_concurrency(text, levels):
    assert parse_concurrency(text) == levels


@pytest.mark.parametrize("text", ["", "0", "1,x", "4,4", "-1"])
def test_parse_concurrency_refuses(text):
    with pytest.raises(InputError, match="concurrency"):
        parse_concurrency(text)


def test_drafters_with_the_runs_that_served_them(tmp_path):
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    found = {d.name: d for d in list_drafters([DRAFTERS, tmp_path], list_runs(RESULTS))}
    assert set(found) == {"snap-good-eagle3", "snap-weak-eagle3", "broken"}
    good = found["snap-good-eagle3"]
    assert good.algorithm == "EAGLE3" and good.trained_for == "demo-models/target"
    assert sorted((r[0], r[2], r[3]) for r in good.results) == [
        (RUN_A.name, 1, 2.9),
        (RUN_A.name, 4, 2.8),
        (RUN_B.name, 1, 3.2),
    ]
    assert found["broken"].algorithm == "?" and found["broken"].results == ()
