"""The closed loop from the TUI, for real on the stand-in: W in Results writes the weak spots of the opened
run as regeneration data, L in Retrain runs the loop in the run's child process until the gate promotes the
new drafter (the plan is reloaded with it), D checks its drift against the promotion's profile."""

from __future__ import annotations

import pytest
import yaml

from harness.inputs.config import load_drafter
from harness.tui.app import build_app
from harness.tui.dialogs import FormDialog
from tests.loop_helpers import write_scenario
from tests.snapshots.tui_fakes import Recorder, wait_for
from tests.test_retrain_loop import _cli

pytestmark = pytest.mark.slow
SIZE = (120, 40)


async def fill(pilot, values: dict[str, str]) -> None:
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, FormDialog), "the dialog")
    for key, value in values.items():
        pilot.app.screen.query_one(f"#field-{key}").value = value
    await pilot.click("#form-ok")


async def test_weak_spots_loop_and_drift_from_the_tui(tmp_path):
    plan_path = write_scenario(tmp_path)
    results = tmp_path / "results"
    res = _cli("run", str(plan_path), "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    source = res.stdout.strip().splitlines()[-1]
    app = build_app(str(plan_path), results, section="results", gpu_poll_s=0,
                    drafter_dirs=[tmp_path / "drafters"])
    async with app.run_test(size=SIZE, message_hook=Recorder()) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        app.results_control.open_run(source)
        await wait_for(pilot, lambda: app.result is not None, "the run opened")
        table = app.screen.query_one("#results-table")
        await wait_for(pilot, lambda: table.row_count > 0, "its rows")
        keys = [k.value for k in table.rows]
        table.move_cursor(row=keys.index("coder@1"))
        await pilot.press("W")
        await wait_for(pilot, lambda: "weak spots of coder" in app.retrain_note, "the weak spots", 30)
        assert "*  code" in app.retrain_note \
            and (results / "retrain" / f"weak-{source.rsplit('/', 1)[-1]}-coder"
                                                  / "regen_input.jsonl").is_file()

        await pilot.press("4")
        await pilot.press("L")
        await fill(pilot, {"variant": "coder", "epochs": "2"})
        await wait_for(pilot, lambda: app.run_state in ("running", "preparing"), "the loop started")
        await wait_for(pilot, lambda: app.run_state in ("done", "failed", "cancelled"), "the loop", 240, 0.1)
        assert app.run_state == "done", app.run_status
        # the gate's refusal says "not promoted:"
        assert app.retrain_note.startswith("promoted:"), app.retrain_note
        drafter = load_drafter(tmp_path / "drafters" / "weak-coder.yaml")
        assert drafter.lineage and drafter.lineage[-1].evaluation_run
        await wait_for(pilot, lambda: app.plan.variant("coder").drafter.path == drafter.path,
                       "the plan reloaded")
        assert yaml.safe_load((tmp_path / "drafters" / "weak-coder.yaml").read_text())["path"] == drafter.path

        await pilot.press("D")
        await fill(pilot, {"variant": "coder"})
        await wait_for(pilot, lambda: app.run_state == "running", "the check started", 30, 0.05)
        await wait_for(pilot, lambda: app.run_state in ("done", "failed", "cancelled"), "the check", 120, 0.1)
        assert app.retrain_note.startswith("coder: acceptance as recorded"), app.retrain_note
        assert str(app.screen.query_one("#loop-status").render()).startswith("coder: acceptance as recorded")
