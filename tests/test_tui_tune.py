"""The Tune view against the real core on the stand-in: draftbench tune in the run's child process, driven
from the Tune section's form and keys (start, cancel, resume, w adds the winner to the plan). A grid of two
configs (num_steps 1 and 3, graphs on) at concurrency 1 keeps it short on a 2-core box."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from textual.widgets import Input, Select

from harness.inputs.config import REPO_ROOT
from harness.tui import messages as msg
from harness.tui.app import build_app
from tests.faults_helpers import live_groups, reap_servers
from tests.snapshots.tui_fakes import Recorder, confirm, wait_for

SIZE = (160, 45)
POLL_S = 0.2  # the CPU is shared with the stand-in: poll the UI gently while the tune measures


def write_plan(tmp_path: Path) -> Path:
    """The demo plan cut to baseline + good-eagle3 (num_steps 3, graphs on), one level, the stand-in sped
    up."""
    from harness.cli.demo import write_demo_models

    workdir = tmp_path / "target"
    write_demo_models(workdir)
    plan = yaml.safe_load((REPO_ROOT / "plans" / "demo.yaml").read_text())
    plan["target"].update(
        host="local",
        workdir=str(workdir),
        python=sys.executable,
        env={"DRAFTBENCH_SIM_TIME_SCALE": "0.3", "DRAFTBENCH_SIM_STARTUP_S": "0.1"},
    )
    plan["variants"] = plan["variants"][:2]
    plan["run"].update(concurrency=[1], max_tokens=32, warmup_requests=1)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def _fill_form(screen, **values: str) -> None:
    for field, value in values.items():
        screen.query_one(f"#{field}", Input).value = value


async def test_tune_view_start_cancel_resume_and_write_the_winner(tmp_path):
    plan_path = write_plan(tmp_path)
    results = tmp_path / "results"
    app = build_app(str(plan_path), results, gpu_poll_s=0, section="tune", clock=lambda: 1000.0)
    rec = Recorder()
    try:
        await _drive(app, rec, plan_path, results)
    finally:
        reap_servers(results)  # a failed test must not leave stand-ins running


async def _drive(app, rec: Recorder, plan_path: Path, results: Path) -> None:
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan loaded", 60)
        screen = app.screen
        assert screen.query_one("#tune-variant", Select).value == "good-eagle3"
        assert screen.query_one("#tune-concurrency", Input).value == "1"
        _fill_form(screen, **{"tune-steps": "1,3", "tune-budget": "1h", "tune-concurrency": "1"})
        screen.query_one("#tune-graphs", Select).value = "on"

        # 1. start, then cancel once the first config's step cost is measured
        await pilot.press("ctrl+r")
        choice = rec.of(msg.TuneRequested)[0].choice
        assert (choice.variant, choice.steps, choice.graphs, choice.concurrency) == (
            "good-eagle3",
            [1, 3],
            [True],
            [1],
        )
        await wait_for(
            pilot,
            lambda: any(
                m.status == "measured" and m.config != "baseline" for m in rec.of(msg.TuneCandidateChanged)
            ),
            "a config measured",
            120,
            POLL_S,
        )
        tune_dir = app.tune_dir
        assert tune_dir and Path(tune_dir).parent == results
        await pilot.press("ctrl+g")
        await confirm(pilot)
        await wait_for(pilot, lambda: app.tune_state == "cancelled", "the tune cancelled", 60, POLL_S)
        ended = rec.of(msg.TuneEnded)
        assert [(m.status, m.tune_dir) for m in ended] == [("cancelled", tune_dir)]
        pgids = {m.pgid for m in rec.of(msg.ServerStateChanged) if m.source == "tune" and m.pgid}
        assert (
            pgids and not pgids & live_groups()
        )  # every server the tune started is gone (or an unreaped zombie)
        assert all(v.state == "stopped" for v in app.servers.values() if v.source == "tune")
        # a tune is not a Run: its sub-runs never became the Run section's run
        assert not rec.of(msg.RunLaunched) and not rec.of(msg.RunFinished) and app.run_state == "idle"

        # 2. resume the interrupted directory (r on the tunes list), run to the end
        await wait_for(pilot, lambda: app.tunes == (tune_dir,), "the tune listed")
        await wait_for(pilot, lambda: screen.query_one("#tune-dirs").row_count == 1, "the tunes table")
        before = len(rec.seen)
        await pilot.press("r")
        await wait_for(
            pilot, lambda: len(rec.of(msg.TuneEnded)) == 2, "the resumed tune's process ended", 180, POLL_S
        )
        assert app.tune_state == "done", app.tune_status
        # TuneLoaded (the cancelled tune's files, read in the background) may still land after `before`
        resumed = [m for m in rec.seen[before:]
                   if type(m).__name__.startswith("Tune") and not isinstance(m, msg.TuneLoaded)]
        names = [type(m).__name__ for m in resumed]
        assert names[0] == "TuneResumeRequested" and resumed[0].tune_dir == tune_dir
        assert names.index("TuneLaunched") < names.index("TuneFinished") < names.index("TuneEnded")
        assert [m.tune_dir for m in resumed if isinstance(m, msg.TuneLaunched)] == [tune_dir]
        stages = [m.stage for m in resumed if isinstance(m, msg.TuneStaged)]
        # what the budget buys is said first (harness.studies.tune_budget), then the stages as before
        assert stages[:2] == ["plan", "wide"] and stages[-2:] == ["verify", "report"]
        assert "step-cost" in stages
        assert all(m.budget_s == 3600.0 for m in resumed if isinstance(m, msg.TuneStaged))
        done = rec.of(msg.TuneFinished)[-1]
        assert done.complete and done.grid_size == 2 and done.tune_dir == tune_dir
        assert [m.status for m in resumed if isinstance(m, msg.TuneEnded)] == ["done"]

        # 3. state: the grid, the answer and the heatmap from the tune's own files
        await wait_for(
            pilot, lambda: app.tune_view is not None and app.tune_view.finished, "the report loaded"
        )
        view = app.tune_view
        assert view.grid == ("s1-k1-d2-g", "s3-k1-d4-g") and view.concurrency == (1,)
        assert {r["measured"] for r in view.rows} <= {"step", "verified"}
        assert any(line.startswith("c1: ") for line in view.answer) and 1 in view.heatmaps
        grid = screen.query_one("#tune-grid")
        assert grid.row_count == 2
        assert str(grid.get_cell("s3-k1-d4-g@c1", "config")) == "s3-k1-d4-g"
        progress = str(screen.query_one("#tune-progress").render())
        assert "stage: report   configs measured: 2 of 2" in progress and "s spent of 3600 s" in progress
        answer = str(screen.query_one("#tune-answer").render())
        assert "c1: " in answer and "predicted speedup at concurrency 1" in answer

        # 4. w: --write-plan's action
        await pilot.press("w")
        await wait_for(pilot, lambda: rec.of(msg.WinnerWritten), "the winner written")
        written = rec.of(msg.WinnerWritten)[0]
        assert written.variant and written.variant.startswith("good-eagle3-tuned-s")
        assert f"name: {written.variant}" in plan_path.read_text()
        from harness.inputs.config import load_plan

        assert written.variant in [v.name for v in load_plan(plan_path).variants]
