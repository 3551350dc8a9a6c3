"""The Retrain section driving harness.retrain for real: a training job with the fake SpecForge trainer
(launched, followed, cancelled, resumed), its checkpoint evaluated as a run, and data regenerated through
the baseline server the Servers section started."""

from __future__ import annotations

import pytest

from harness.tui import messages as msg
from harness.tui.app import build_app
from harness.tui.dialogs import FormDialog
from harness.tui.screens.retrain import RetrainScreen, progress_text
from tests.retrain_helpers import conversation, read_jsonl, write_jsonl, write_plan
from tests.snapshots.tui_fakes import Recorder, confirm, wait_for

pytestmark = pytest.mark.slow
SIZE = (120, 40)
LAUNCHER = "{python} -m harness.retrain.fake_trainer"


def make_app(tmp_path, plan):
    return build_app(
        str(plan.source_path),
        tmp_path / "results",
        plan=plan,
        section="retrain",
        gpu_poll_s=0,
        drafter_dirs=[tmp_path / "drafters"],
    )


async def fill(pilot, values: dict[str, str]) -> None:
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, FormDialog), "the dialog")
    for key, value in values.items():
        pilot.app.screen.query_one(f"#field-{key}").value = value
    await pilot.click("#form-ok")


async def start_training(pilot, workdir, rows: int) -> None:
    write_jsonl(workdir / "train.jsonl", [conversation(i, turns=2) for i in range(rows)])
    await pilot.press("t")
    await fill(
        pilot, {"data_path": "train.jsonl", "output_dir": "outputs/tui", "epochs": "1", "launcher": LAUNCHER}
    )


async def test_train_follow_and_evaluate_a_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTBENCH_FAKE_STEP_S", "0.02")  # the trainer inherits it through the local target
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the user's drafters directory
    plan, workdir = write_plan(tmp_path)
    app = make_app(tmp_path, plan)
    rec = Recorder()
    async with app.run_test(size=SIZE, message_hook=rec) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        assert isinstance(app.screen, RetrainScreen)
        await start_training(pilot, workdir, rows=6)
        await wait_for(
            pilot,
            lambda: app.job_progress is not None and app.job_progress.state == "finished",
            "the job finished",
            60,
        )
        await wait_for(pilot, lambda: len(app.checkpoints) > 0, "its checkpoints listed", 30)
        await wait_for(pilot, lambda: [j.state for j in app.jobs] == ["finished"], "the job list says so")
        assert app.job_progress.completed and app.job_progress.loss is not None
        table = app.screen.query_one("#checkpoints-table")
        assert table.row_count == len(app.checkpoints)
        table.focus()
        await pilot.press("v")
        await fill(pilot, {"name": "tui-ckpt"})
        await wait_for(pilot, lambda: app.run_state in ("done", "failed"), "the evaluation run", 120, 0.1)
        assert app.run_state == "done", app.run_status
        await wait_for(
            pilot,
            lambda: app.result is not None and "tui-ckpt" in set(app.result.summary["variant"]),
            "its results",
        )
        await wait_for(
            pilot, lambda: any(d.name == "tui-ckpt" for d in app.drafters), "the new drafter listed"
        )
    # registered under the user's directory, not the checkout's drafters/ (nor the plan's)
    assert (tmp_path / "config" / "draftbench" / "drafters" / "tui-ckpt.yaml").exists()
    assert not (tmp_path / "drafters" / "tui-ckpt.yaml").exists()
    # the baseline and the candidate only: two server loads
    assert set(rec.of(msg.RunLaunched)[-1].variants) == {"baseline", "tui-ckpt"}
    notes = [m.text for m in rec.of(msg.RetrainNote)]
    assert notes[0].startswith("registered drafter tui-ckpt") and notes[1] == "preflight passed: benchmarking"
    order = [
        type(m).__name__
        for m in rec.seen
        if isinstance(m, msg.RetrainNote | msg.RunLaunched | msg.RunFinished)
    ]
    assert order == ["RetrainNote", "RetrainNote", "RunLaunched", "RunFinished"]


async def test_cancel_and_resume_a_job(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTBENCH_FAKE_STEP_S", "0.5")
    plan, workdir = write_plan(tmp_path)
    app = make_app(tmp_path, plan)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        await start_training(pilot, workdir, rows=40)
        await wait_for(
            pilot, lambda: app.job_progress is not None and app.job_progress.global_step, "training steps", 60
        )
        app.screen.query_one("#jobs-table").focus()
        await pilot.press("k")
        await confirm(pilot)
        await wait_for(pilot, lambda: app.jobs and app.jobs[0].state == "cancelled", "cancelled", 60)
        await wait_for(pilot, lambda: app.job_progress.state == "cancelled", "the follower saw it", 60)
        assert app.job_progress.eta_s is None and "ETA" not in progress_text(app.job_progress)
        stopped_at = app.job_progress.global_step
        await pilot.press("y")
        await wait_for(
            pilot, lambda: app.jobs[0].state == "running" and len(app.jobs[0].attempts) == 2, "resumed", 60
        )
        # the resumed follower reads the whole log in order: it goes on from there, not from epoch 0 step 0
        await wait_for(pilot, lambda: app.job_progress is not None and app.job_progress.state == "running"
                       and (app.job_progress.global_step or 0) >= stopped_at, "progress from the last step",
                       60)
        await pilot.press("k")
        await confirm(pilot)
        await wait_for(pilot, lambda: app.jobs[0].state == "cancelled", "cancelled again", 60)


async def test_regenerate_data_through_the_running_baseline(tmp_path):
    plan, workdir = write_plan(tmp_path)
    src = write_jsonl(tmp_path / "in.jsonl", [conversation(i, turns=2) for i in range(4)])
    out = tmp_path / "out.jsonl"
    app = make_app(tmp_path, plan)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.plan is not None and app.fleet is not None, "plan")
        await pilot.press("1", "s")
        await wait_for(pilot, lambda: app.servers["baseline"].state == "ready", "baseline up", 60)
        url = app.fleet.base_url("baseline")
        await pilot.press("4", "g")
        await fill(pilot, {"input": str(src), "output": str(out), "concurrency": "2", "max_tokens": "16"})
        await wait_for(
            pilot,
            lambda: app.regen_progress is not None and app.regen_progress.state == "done",
            "regeneration done",
            60,
        )
        assert url in app.regen_progress.detail  # no second server: the Servers section's one answered
        assert app.regen_progress.ok == 4
    rows = read_jsonl(out)
    assert sorted(r["id"] for r in rows) == [f"row-{i}" for i in range(4)]
    assert all(r["conversations"][-1]["role"] == "assistant" for r in rows)


async def test_the_train_dialog_offers_the_demo_launcher_and_its_knobs(tmp_path, monkeypatch):
    """On a simulated plan the stand-in trainer and the shipped conversations are filled in; max steps,
    save interval, learning rate and batch size reach the trainer."""
    from harness.retrain.jobs import load_job

    monkeypatch.setenv("DRAFTBENCH_FAKE_STEP_S", "0.01")
    plan, _ = write_plan(tmp_path)
    app = make_app(tmp_path, plan)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.plan is not None, "plan")
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, FormDialog), "the dialog")
        value = lambda key: app.screen.query_one(f"#field-{key}").value  # noqa: E731
        assert value("launcher") == LAUNCHER and value("data_path").endswith("plans/demo-conversations.jsonl")
        for key in ("max_steps", "save_interval", "learning_rate", "batch_size"):
            app.screen.query_one(f"#field-{key}")  # present
        await fill(pilot, {"epochs": "3", "max_steps": "5", "save_interval": "2", "learning_rate": "3e-4",
                           "batch_size": "2"})  # 8 conversations: 4 steps an epoch, stopped at 5
        await wait_for(pilot, lambda: app.job_progress is not None and app.job_progress.state == "finished",
                       "the demo job finished", 60)
        job = load_job(app.jobs[0].job_id, tmp_path / "results")
    assert (job.spec["max_steps"], job.spec["save_interval"], job.spec["batch_size"]) == (5, 2, 2)
    assert job.spec["learning_rate"] == 3e-4
    assert "--max-num-steps" in job.argv and "--batch-size" in job.argv
    assert app.job_progress.global_step == 5
