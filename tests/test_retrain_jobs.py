"""Training job lifecycle with a real long-running trainer (the fake SpecForge script): launch detached,
follow the parsed progress, cancel the whole process group, resume from the last checkpoint, finish.
Locally and over the loopback sshd."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time

import pytest

from harness.common.errors import HarnessError, InputError
from harness.retrain.checkpoints import discover_checkpoints
from harness.retrain.jobs import (
    cancel_job,
    follow_job,
    launch_training,
    list_jobs,
    load_job,
    refresh_job,
    refresh_jobs,
    resume_job,
)
from harness.retrain.progress import CKPT_DIR
from harness.targets import open_target
from harness.targets.local import LocalTarget
from tests.retrain_helpers import trainer_spec, write_plan
from tests.sshd import sshd_missing_reason, start_sshd

ROWS, EPOCHS, SAVE = 8, 3, 5  # 8 steps per epoch, 24 in all, a checkpoint every 5 steps and a final one


def group_members(pgid: int) -> list[int]:
    ps = subprocess.run(
        ["ps", "-A", "-o", "pid=", "-o", "pgid=", "-o", "stat="], capture_output=True, text=True
    )
    return [
        int(p)
        for p, g, s in (line.split() for line in ps.stdout.splitlines())
        if int(g) == pgid and not s.startswith("Z")
    ]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.ssh)])
async def target(request):
    if request.param == "local":
        t = LocalTarget()
    else:
        sshd = request.getfixturevalue("sshd")
        t = open_target(sshd.alias, config=[sshd.ssh_config])
    await t.connect()
    yield t
    await t.close()


async def test_launch_follow_cancel_resume_finish(target, tmp_path):
    _, workdir = write_plan(tmp_path)
    results = tmp_path / "results"
    spec = trainer_spec(workdir, epochs=EPOCHS, save_interval=SAVE, rows=ROWS, step_s=0.1)
    job = await launch_training(target, spec, workdir=str(workdir), results_dir=results)
    assert job.state == "running" and job.era == "script" and await target.alive(job.pgid)
    assert len(group_members(job.pgid)) >= 2  # the exit-status wrapper and the trainer under it
    recorded = json.loads((workdir / "jobs" / job.job_id / "job.json").read_text())
    assert recorded["pgid"] == job.pgid and load_job(job.job_id[:-2], results).job_id == job.job_id
    assert (recorded["nodes"], recorded["gpus_total"]) == (1, spec.nproc)  # the job's size, on record

    # follow until the first checkpoint is reported, then cancel mid-run
    seen = []
    async for p in follow_job(target, job, results_dir=results, poll_s=0.2):
        seen.append(p)
        if p.checkpoints and p.step is not None and p.loss is not None:
            break
    p = seen[-1]
    assert p.state == "running" and p.epoch == 0 and p.num_epochs == EPOCHS and p.steps_in_epoch == ROWS
    assert p.global_step >= SAVE and p.acc is not None and p.eta_s is not None and p.eta_s > 0
    assert any("%|" in q.bar for q in seen) and any(
        line.startswith("Starting training") for q in seen for line in q.lines
    )
    job = await cancel_job(target, job, results, term_timeout=5)
    assert job.state == "cancelled" and group_members(job.pgid) == []
    assert json.loads((workdir / "jobs" / job.job_id / "job.json").read_text())["state"] == "cancelled"
    before = await discover_checkpoints(target, job.output_dir)
    assert before and all(c.servable for c in before)
    last_step = before[-1].step
    assert last_step % SAVE == 0 and last_step < EPOCHS * ROWS

    # resume: a new process group continues from the last checkpoint, appending to the same log
    first_pgid = job.pgid
    job = await resume_job(target, job, results)
    assert job.pgid != first_pgid and len(job.attempts) == 2 and job.attempts[1]["resume"]
    with pytest.raises(HarnessError, match="still running"):
        await resume_job(target, job, results)
    async for p in follow_job(target, job, results_dir=results, poll_s=0.2):
        final = p
    assert (final.state, final.exit_code, final.completed) == ("finished", 0, True)
    assert final.global_step == EPOCHS * ROWS and final.epoch == EPOCHS - 1
    log = (workdir / "jobs" / job.job_id / "train.log").read_text()
    assert f"Restored optimizer/scheduler state: epoch={before[-1].epoch}, step={last_step}," in log
    after = await discover_checkpoints(target, job.output_dir)
    steps = [c.step for c in after]
    assert steps == sorted(set(steps)) and steps[-1] == EPOCHS * ROWS
    total = EPOCHS * ROWS
    assert [c.step for c in after if c.step > last_step] == [*range(last_step + SAVE, total, SAVE), total]
    saved_after_resume = [int(CKPT_DIR.search(c)["s"]) for c in final.checkpoints]
    assert max(saved_after_resume) == EPOCHS * ROWS
    assert [(j.job_id, j.state) for j in list_jobs(results)] == [(job.job_id, "finished")]


async def test_failed_and_lost_jobs(tmp_path):
    target = LocalTarget()
    _, workdir = write_plan(tmp_path)
    results = tmp_path / "results"
    failing = trainer_spec(workdir, epochs=1, save_interval=100, rows=6, step_s=0.01)
    failing.env["DRAFTBENCH_FAKE_FAIL_AT_STEP"] = "3"
    job = await launch_training(target, failing, workdir=str(workdir), results_dir=results)
    async for p in follow_job(target, job, results_dir=results, poll_s=0.1):
        final = p
    assert (final.state, final.exit_code) == ("failed", 1)
    log = (workdir / "jobs" / job.job_id / "train.log").read_text()
    assert "CUDA error" in log and log.rstrip().endswith("draftbench: trainer exited with status 1")

    slow = trainer_spec(workdir, epochs=50, save_interval=100, rows=8, step_s=0.2)
    job = await launch_training(target, slow, workdir=str(workdir), results_dir=results)
    os.killpg(job.pgid, signal.SIGKILL)  # an OOM killer, not us
    deadline = time.monotonic() + 10
    while await target.alive(job.pgid):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert [(j.state, j.exit_code) for j in await refresh_jobs(results)] == [("failed", 1), ("lost", None)]
    async for p in follow_job(target, job, results_dir=results, poll_s=0.1):
        final = p
    assert final.state == "lost" and final.exit_code is None
    assert (await refresh_job(target, load_job(job.job_id, results), results)).state == "lost"
    with pytest.raises(InputError, match="2 jobs matching 'train-'"):
        load_job("train-", results)


async def test_home_relative_paths_are_expanded_on_the_target(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    target = LocalTarget()
    _, workdir = write_plan(tmp_path)
    spec = trainer_spec(workdir, epochs=1, save_interval=2, rows=2, step_s=0.0)
    spec = spec.model_copy(update={"output_dir": "~/ckpts", "data_path": str(workdir / "train.jsonl")})
    job = await launch_training(target, spec, workdir=str(workdir), results_dir=tmp_path / "results")
    assert job.output_dir == f"{tmp_path}/ckpts" and "~" not in " ".join(job.argv)
    async for p in follow_job(target, job, results_dir=tmp_path / "results", poll_s=0.1):
        final = p
    assert final.state == "finished"
    assert [c.name for c in await discover_checkpoints(target, job.output_dir)] == ["epoch_0_step_2"]


FAKE_SPECFORGE_CLI = """
import os, sys, time, yaml


def main():
    args = sys.argv[1:]
    assert args[:2] == ["train", "--config"], args
    cfg = yaml.safe_load(open(args[2]))
    over = dict(a.split("=", 1) for a in args[3:])
    t, out, run = cfg["training"], cfg["output_dir"], cfg["run_id"]
    os.makedirs(out, exist_ok=True)
    start = 0
    if "training.resume_from" in over:
        start = int(over["training.resume_from"].rsplit("-step", 1)[1])
    for step in range(start + 1, t["max_steps"] + 1):
        time.sleep(0.1)
        print(f"step {step}: {{'acc': {step / 100}, 'loss': {5 - step / 10}, "
              "'perf/optimizer_step_time_s': 0.1}", flush=True)
        if step % t["save_interval"] == 0 or step == t["max_steps"]:
            d = os.path.join(out, f"{run}-step{step}")
            os.makedirs(d)
            open(os.path.join(d, "training_state.pt"), "w").close()
            link = os.path.join(out, f"{run}-latest")
            if os.path.islink(link):
                os.remove(link)
            os.symlink(f"{run}-step{step}", link)


if __name__ == "__main__":
    main()
"""


async def test_cli_era_job_writes_its_config_and_resumes_from_the_latest_checkpoint(tmp_path):
    target = LocalTarget()
    pkg = tmp_path / "site" / "specforge"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text(FAKE_SPECFORGE_CLI)
    _, workdir = write_plan(tmp_path)
    results = tmp_path / "results"
    spec = trainer_spec(workdir, epochs=1, save_interval=3, rows=4).model_copy(
        update={
            "launcher": None,
            "max_steps": 12,
            "run_id": "k25",
            "env": {"PYTHONPATH": str(tmp_path / "site")},
        }
    )
    job = await launch_training(target, spec, workdir=str(workdir), results_dir=results)
    assert job.era == "cli" and job.argv[1:6] == ["-m", "specforge.cli", "train", "--config", job.config_path]
    config = (workdir / "jobs" / job.job_id / "specforge.yaml").read_text()
    assert "run_id: k25" in config and "max_steps: 12" in config
    async for p in follow_job(target, job, results_dir=results, poll_s=0.1):
        if p.global_step is not None and p.global_step >= 4:
            break
    assert p.loss is not None and p.total_steps == 12 and p.eta_s == pytest.approx((12 - p.global_step) * 0.1)
    await cancel_job(target, job, results, term_timeout=5)
    (latest,) = [c for c in await discover_checkpoints(target, job.output_dir) if "latest" in c.aliases]
    assert latest.layout == "run_step" and latest.needs_export
    job = await resume_job(target, job, results)
    assert job.argv[-1] == f"training.resume_from={latest.path}"
    async for p in follow_job(target, job, results_dir=results, poll_s=0.1):
        final = p
    assert (final.state, final.global_step) == ("finished", 12)
    log = (workdir / "jobs" / job.job_id / "train.log").read_text()
    steps = [int(line.split()[1].rstrip(":")) for line in log.splitlines() if line.startswith("step ")]
    restart = next(i for i in range(1, len(steps)) if steps[i] <= steps[i - 1])
    assert steps[restart:] == list(
        range(latest.step + 1, 13)
    )  # resumed after the checkpoint, not from step 1
    names = [c.name for c in await discover_checkpoints(target, job.output_dir)]
    assert (
        names == ["k25-step3", "k25-step6", "k25-step9", "k25-step12"][: len(names)]
        and names[-1] == "k25-step12"
    )


async def test_a_stale_copy_follows_a_job_resumed_by_another_client(tmp_path):
    target = LocalTarget()
    _, workdir = write_plan(tmp_path)
    results = tmp_path / "results"
    job = await launch_training(
        target,
        trainer_spec(workdir, epochs=2, save_interval=3, rows=6, step_s=0.05),
        workdir=str(workdir),
        results_dir=results,
    )
    stale = load_job(job.job_id, results)  # what another terminal loaded before the cancel and resume
    await cancel_job(target, job, results, term_timeout=5)
    job = await resume_job(target, job, results)
    fresh = await refresh_job(target, stale, results)
    assert (fresh.state, fresh.pgid, len(fresh.attempts)) == ("running", job.pgid, 2)
    async for p in follow_job(target, stale, results_dir=results, poll_s=0.1):
        final = p
    assert (final.state, final.global_step) == ("finished", 12)
    assert load_job(job.job_id, results).state == "finished"
