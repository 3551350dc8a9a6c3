"""Failed variants show their reason (the runner's, and the server's last log line) in the Run tab and the
Results table, not as bare concurrency-0 rows; a run where every variant failed is `failed`, not partial."""

from __future__ import annotations

from harness.analysis.runs import list_runs, result_rows
from harness.bench.runner import run_plan
from harness.tui import messages as msg
from harness.tui.app import build_app
from tests.snapshots.tui_fakes import Recorder, wait_for
from tests.test_tui_fleet import demo_plan


async def test_every_variant_failing_is_a_failed_run_with_its_reasons(tmp_path):
    plan = demo_plan(tmp_path)
    plan.model.path = "demo-models/not-there"  # the stand-in exits: no config.json
    plan.variants = [v for v in plan.variants if v.name in ("baseline", "good-eagle3")]
    app = build_app(str(plan.source_path), tmp_path / "results", plan=plan, run_events=run_plan,
                    section="run", gpu_poll_s=0)
    rec = Recorder()
    async with app.run_test(size=(120, 40), message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.run_state == "failed" and app.result is not None, "the run failed",
                       60)
        assert app.run_status.startswith("every variant failed")
        assert set(app.run_failures) == {"baseline", "good-eagle3"}
        assert all(why.startswith("checkpoint not found: ") and "demo-models/not-there" in why
                   and why.endswith("(exited before it became ready)")
                   for why in app.run_failures.values()), app.run_failures
        status = str(app.screen.query_one("#run-status").render())
        assert "baseline: checkpoint not found: " in status
        assert any("variant failed" in (n.title or "") for n in app._notifications)
        await pilot.press("3")
        table = app.screen.query_one("#results-table")
        await wait_for(pilot, lambda: table.row_count == 2, "two rows")
        rows = result_rows(app.result.summary, app.result.failures)
        assert all(r.failed and r.note.startswith("FAILED: checkpoint not found: ") for r in rows)
        conc = [h for h in table.columns.values()].index(next(c for c in table.columns.values()
                                                                if str(c.label) in ("conc", "concurrency")))
        assert all(str(table.get_row_at(i)[conc]) == "-" for i in range(table.row_count))
    assert [r.status for r in list_runs(tmp_path / "results")] == ["failed"]
    finished = [m for m in rec.of(msg.VariantFinished)]
    assert [(m.variant, m.ok) for m in finished] == [("baseline", False), ("good-eagle3", False)]
