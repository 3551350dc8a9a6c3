"""`jobs follow` on a job that already ended reads its whole train.log (a log past the tail's 64 KiB blocks
used to end in the state of its first block), and an ended job carries no ETA."""

from __future__ import annotations

from harness.retrain.jobs import follow_job, launch_training
from harness.targets.local import LocalTarget
from tests.retrain_helpers import trainer_spec, write_plan

EPOCHS, ROWS = 200, 4


async def test_following_a_finished_job_reads_the_whole_log(tmp_path):
    target = LocalTarget()
    _, workdir = write_plan(tmp_path)
    spec = trainer_spec(workdir, epochs=EPOCHS, save_interval=10_000, rows=ROWS, step_s=0.0)
    job = await launch_training(target, spec, workdir=str(workdir), results_dir=tmp_path / "results")
    async for _ in follow_job(target, job, results_dir=tmp_path / "results", poll_s=0.05):
        pass  # until it ends
    log = workdir / "jobs" / job.job_id / "train.log"
    assert log.stat().st_size > 3 * (1 << 16), log.stat().st_size  # several of the tail's blocks

    final = None
    async for p in follow_job(target, job, results_dir=tmp_path / "results", poll_s=0.05):
        final = p
    assert (final.state, final.exit_code, final.completed) == ("finished", 0, True)
    assert (final.epoch, final.num_epochs, final.global_step) == (EPOCHS - 1, EPOCHS, EPOCHS * ROWS)
    assert final.eta_s is None
