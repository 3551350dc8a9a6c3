"""Editing the plan in the TUI: any suite under suites/ and the repeats in the Run form, preflight
(`draftbench check`) from the palette, and resuming an interrupted run from Results."""

from __future__ import annotations

import re
from pathlib import Path

from textual.widgets import SelectionList

from harness.analysis.runs import list_runs, narrow_plan, suite_names
from harness.analysis.summary import read_tables
from harness.bench.runner import run_plan
from harness.tui import messages as msg
from harness.tui.app import build_app
from harness.tui.dialogs import FindingsScreen
from harness.tui.state import RunChoice
from tests.snapshots.tui_fakes import FakeRun, Recorder, confirm, snap_plan, wait_for
from tests.test_tui_app import SIZE, make_app
from tests.test_tui_fleet import demo_plan


def test_any_suite_under_suites_and_the_repeats_narrow_the_plan(tmp_path):
    plan = demo_plan(tmp_path)
    names = suite_names(plan)
    assert names[0] == "smoke" and {"categories", "long-output"} <= set(names)
    out = narrow_plan(plan, RunChoice(("smoke", "long-output"), ("baseline",), (1,), 16, repeats=2))
    assert [s.name for s in out.suites] == ["smoke", "long-output"] and out.run.repeats == 2
    assert [s.name for s in plan.suites] == ["smoke"]  # the loaded plan is unchanged


async def test_the_run_form_offers_every_suite_and_the_repeats(tmp_path):
    fake = FakeRun()
    app, _ = make_app(tmp_path, run_events=fake, section="run")
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded")
        picks = app.screen.query_one("#pick-suites", SelectionList)
        await wait_for(pilot, lambda: picks.option_count > len(snap_plan().suites), "suites/ offered")
        assert set(picks.selected) == {s.name for s in snap_plan().suites}  # the plan's own are picked
        picks.select("smoke")
        app.screen.query_one("#repeats").value = "2"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.run_state == "done", "run done")
    choice = rec.of(msg.RunRequested)[0].choice
    assert "smoke" in choice.suites and choice.repeats == 2
    ran = fake.calls[0]["plan"]
    assert "smoke" in [s.name for s in ran.suites] and ran.run.repeats == 2


async def test_preflight_from_the_palette_shows_the_findings(tmp_path):
    plan = demo_plan(tmp_path)
    app = build_app(str(plan.source_path), tmp_path / "results", plan=plan, gpu_poll_s=0)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.fleet is not None, "plan")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Preflight: draftbench check" in titles
        await app.run_action("preflight")
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen) and app.screen.is_mounted
                       and app.screen.query("#findings-table")
                       and app.screen.query_one("#findings-table").row_count,
                       "the findings", 60)
        found = app.screen.findings
        table = app.screen.query_one("#findings-table")
        assert table.row_count == len(found) > 0  # one row per finding
        text = " ".join(f"{f.variant} {f.what} {f.why} {f.fix}" for f in found)
        assert "wrong-flag-eagle" in text and "EAGLE3" in text and "expected" in text
        await pilot.press("escape")
    assert rec.of(msg.PreflightReported)[0].errors == 0  # the plan declares the wrong arm (expect:)


async def test_an_interrupted_run_resumes_from_results(tmp_path):
    plan = narrow_plan(demo_plan(tmp_path), RunChoice(("smoke",), ("baseline", "good-eagle3"), (1,), 16))
    app = build_app(str(plan.source_path), tmp_path / "results", plan=plan, run_events=run_plan,
                    section="run", gpu_poll_s=0)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: any(m.variant == "baseline" for m in rec.of(msg.VariantFinished)),
                       "the baseline measured", 60)
        await pilot.press("ctrl+g")
        await confirm(pilot)
        await wait_for(pilot, lambda: app.run_state == "cancelled", "cancelled", 60)
        # where it stopped: after the baseline's phase, or inside the drafter's
        assert re.match(r"cancelled (after baseline smoke@c1#r1|during good-eagle3 smoke@c1#r1 \(\d+/5 )",
                        app.run_status), app.run_status
        assert "R in Results resumes it" in app.run_status
        run_dir = app.run_dir
        await pilot.press("3")
        await wait_for(pilot, lambda: len(app.runs) == 1, "the run listed")
        app.screen.query_one("#runs-table").focus()
        await pilot.press("R")
        await wait_for(pilot, lambda: app.run_state == "done", "the resumed run done", 120)
    launched = rec.of(msg.RunLaunched)
    assert len(launched) == 2 and launched[1].run_dir == run_dir
    # what the run measured, not the plan file
    assert set(launched[1].variants) == {"baseline", "good-eagle3"}
    requests = read_tables(Path(run_dir), ("requests.csv",))[0]  # a cut phase's first attempt left out
    per_phase = requests.groupby(["variant", "phase"]).size()
    assert set(requests["variant"]) == {"baseline", "good-eagle3"}
    assert (per_phase == per_phase.iloc[0]).all()  # nothing measured twice
    assert [r.status for r in list_runs(tmp_path / "results")] == ["complete"]
