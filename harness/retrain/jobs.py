"""Training jobs: launched detached on the target (own process group, survives the SSH link), recorded
in the target's work directory (`<workdir>/jobs/<id>/job.json`, next to `train.log`) and in a local
index (`results/jobs/<id>.json`), then listed, followed, cancelled and resumed from either side.

The trainer runs under a small `sh` wrapper that writes its exit status to `exit_status` when it ends
by itself; a group killed by `cancel_job` leaves none. So a job whose group is gone is "finished"
(status 0), "failed" (other status), "cancelled" (recorded before the kill) or "lost" (killed by
something else: OOM killer, reboot).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common.aio import reap
from harness.common.errors import HarnessError, InputError
from harness.retrain.progress import ProgressState, RecordSplitter, TrainProgress
from harness.retrain.train import TrainSpec, build_train_argv, cli_config_yaml, detect_era, resolve

if TYPE_CHECKING:
    from harness.targets.base import Target

STATES = ("running", "finished", "failed", "cancelled", "lost")
_WRAP = (
    'st=$1; shift; "$@"; rc=$?; echo "draftbench: trainer exited with status $rc"; '
    'echo "$rc" > "$st.tmp" && mv -f "$st.tmp" "$st"; exit "$rc"'
)
_WRITE = 'printf "%s" "$1" > "$2.tmp" && mv -f "$2.tmp" "$2"'
DRAIN_TIMEOUT_S = 30.0  # after the group is gone, how long the log follower may take to deliver the rest


@dataclass
class Job:
    job_id: str
    target: str  # the plan's target.host ("local" or an ssh destination)
    ssh_port: int | None
    job_dir: str  # on the target: job.json, train.log, train.pgid, exit_status[, specforge.yaml]
    cwd: str
    era: str
    argv: list[str]  # the trainer command (without the exit-status wrapper)
    env: dict[str, str]
    output_dir: str  # checkpoints, on the target
    created_at: str
    spec: dict[str, Any]
    nodes: int = 1  # nodes of the job (this one is spec.node_rank of them)
    gpus_total: int | None = None  # trainer processes over all nodes
    num_epochs: int | None = None
    total_steps: int | None = None
    run_id: str | None = None
    config_path: str | None = None
    pgid: int | None = None
    state: str = "running"
    exit_code: int | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def log_path(self) -> str:
        return f"{self.job_dir}/train.log"

    @property
    def pid_path(self) -> str:
        return f"{self.job_dir}/train.pgid"

    @property
    def status_path(self) -> str:
        return f"{self.job_dir}/exit_status"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def _now() -> str:
    # milliseconds: jobs started within one second still list in launch order
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def new_job_id() -> str:
    return f"train-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def wrapped_argv(job: Job) -> list[str]:
    """The trainer under the exit-status wrapper (the pgid recorded is the wrapper's group)."""
    return ["sh", "-c", _WRAP, "sh", job.status_path, *job.argv]


async def write_remote_text(target: Target, path: str, text: str) -> None:
    """Write a small text file on the target atomically (argv, not stdin: works the same over SSH)."""
    res = await target.run(["sh", "-c", _WRITE, "sh", text, path], timeout=60)
    if res.rc != 0:
        raise HarnessError(f"{target.name}: cannot write {path}: {res.stderr.strip()[:300]}")


def _index(results_dir: str | Path) -> Path:
    return Path(results_dir) / "jobs"


async def save_job(target: Target | None, job: Job, results_dir: str | Path) -> None:
    text = json.dumps(job.to_dict(), indent=2) + "\n"
    index = _index(results_dir)
    index.mkdir(parents=True, exist_ok=True)
    tmp = index / f"{job.job_id}.json.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(index / f"{job.job_id}.json")
    if target is not None:
        await write_remote_text(target, f"{job.job_dir}/job.json", text)


def list_jobs(results_dir: str | Path = "results") -> list[Job]:
    """Jobs in the local index, oldest first (states as last recorded: `refresh_job` asks the target)."""
    jobs = []
    for path in sorted(_index(results_dir).glob("*.json")):
        try:
            jobs.append(Job.from_dict(json.loads(path.read_text(encoding="utf-8"))))
        except (ValueError, TypeError) as exc:
            raise InputError(str(path), None, None, f"unreadable job record: {exc}") from None
    return sorted(jobs, key=lambda j: (j.created_at, j.job_id))


def load_job(job_id: str, results_dir: str | Path = "results") -> Job:
    """A job from the local index by id or unique id prefix."""
    jobs = list_jobs(results_dir)
    exact = [j for j in jobs if j.job_id == job_id]
    found = exact or [j for j in jobs if j.job_id.startswith(job_id)]
    if len(found) != 1:
        known = ", ".join(j.job_id for j in jobs[-10:]) or "none"
        what = "no job" if not found else f"{len(found)} jobs"
        raise InputError(
            str(_index(results_dir)), None, "job", f"{what} matching {job_id!r} (known: {known})"
        )
    return found[0]


async def refresh_jobs(results_dir: str | Path = "results") -> list[Job]:
    """Every job of the local index, running ones asked on their target (one connection per target);
    an unreachable target leaves its jobs as last recorded."""
    jobs = list_jobs(results_dir)
    by_target: dict[tuple[str, int | None], list[int]] = {}
    for i, job in enumerate(jobs):
        if job.state == "running":
            by_target.setdefault((job.target, job.ssh_port), []).append(i)
    for indices in by_target.values():
        target = open_job_target(jobs[indices[0]])
        try:
            await target.connect()
            for i in indices:
                jobs[i] = await refresh_job(target, jobs[i], results_dir)
        except HarnessError:
            continue
        finally:
            with contextlib.suppress(Exception):
                await target.close()
    return jobs


def open_job_target(job: Job) -> Target:
    from harness.targets import open_target

    return open_target(job.target, ssh_port=job.ssh_port)


async def launch_training(
    target: Target,
    spec: TrainSpec,
    *,
    workdir: str,
    results_dir: str | Path = "results",
    job_id: str | None = None,
    ssh_port: int | None = None,
) -> Job:
    """Start a SpecForge training run detached on the target; returns the recorded job."""
    await target.connect()
    root = await target.makedirs_private(workdir)
    job_id = job_id or new_job_id()
    job_dir = await target.makedirs_private(f"{root}/jobs/{job_id}")
    spec = await _expand_home(target, spec)
    era = await detect_era(target, spec, workdir=root)
    job = Job(
        job_id=job_id,
        target=target.name,
        ssh_port=ssh_port,
        job_dir=job_dir,
        cwd=root,
        era=era,
        argv=[],
        env=spec.trainer_env(),
        output_dir=resolve(spec.output_dir, root),
        created_at=_now(),
        spec=spec.model_dump(mode="json"),
        nodes=spec.nnodes,
        gpus_total=spec.world_size,
        num_epochs=spec.epochs,
        total_steps=spec.max_steps,
    )
    if era == "cli":
        job.run_id = spec.run_id or job_id
        job.config_path = f"{job_dir}/specforge.yaml"
        await write_remote_text(target, job.config_path, cli_config_yaml(spec, run_id=job.run_id))
    job.argv = build_train_argv(spec, era, workdir=root, config_path=job.config_path)
    await _start(target, job, results_dir, resume=False)
    return job


_PATH_FIELDS = (
    "target_model_path",
    "data_path",
    "output_dir",
    "draft_model_config",
    "init_from",
    "eval_data_path",
    "specforge_dir",
)


async def _expand_home(target: Target, spec: TrainSpec) -> TrainSpec:
    """`~/x` -> `$HOME/x` of the target: argv items are quoted, so no shell would expand them. Relative
    paths stay relative (the trainer runs in the work directory; they may also be Hugging Face ids)."""
    fields = {f: getattr(spec, f) for f in _PATH_FIELDS if str(getattr(spec, f) or "").startswith("~")}
    if not fields:
        return spec
    res = await target.run(["sh", "-c", 'printf "%s" "$HOME"'], timeout=30)
    home = res.stdout.strip().rstrip("/")
    if res.rc != 0 or not home.startswith("/"):
        raise HarnessError(f"{target.name}: cannot find the home directory to expand {sorted(fields)}")
    return spec.model_copy(
        update={f: home + v[1:] if v in ("~",) or v.startswith("~/") else v for f, v in fields.items()}
    )


async def _start(target: Target, job: Job, results_dir: str | Path, *, resume: bool) -> None:
    await target.run(["rm", "-f", job.status_path], timeout=30)
    job.pgid = await target.spawn(
        wrapped_argv(job), env=job.env, cwd=job.cwd, log_path=job.log_path, pid_path=job.pid_path
    )
    job.state, job.exit_code = "running", None
    job.attempts.append(
        {
            "pgid": job.pgid,
            "started_at": _now(),
            "resume": resume,
            "argv": list(job.argv),
        }
    )
    await save_job(target, job, results_dir)


async def _exit_status(target: Target, job: Job) -> int | None:
    try:
        text = (await target.read_file(job.status_path, max_bytes=64)).decode().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


async def _remote_record(target: Target, job: Job) -> Job | None:
    """The job as recorded on the target: every change is written there too, so it is the shared truth
    (another client may have cancelled or resumed the job). None when it cannot be read."""
    with contextlib.suppress(FileNotFoundError, ValueError, TypeError, HarnessError):
        data = json.loads(await target.read_file(f"{job.job_dir}/job.json"))
        return Job.from_dict({**data, "target": job.target, "ssh_port": job.ssh_port})
    return None


async def refresh_job(target: Target, job: Job, results_dir: str | Path = "results") -> Job:
    """The job's state as the target sees it now; recorded locally (and on the target when it ended)."""
    remote = await _remote_record(target, job)
    current = remote if remote is not None else job
    if current.state == "running" and current.pgid is not None and not await target.alive(current.pgid):
        rc = await _exit_status(target, current)
        current.state, current.exit_code = (
            ("finished" if rc == 0 else "failed", rc) if rc is not None else ("lost", None)
        )
        await save_job(target, current, results_dir)
    elif current.to_dict() != job.to_dict():
        await save_job(None, current, results_dir)
    return current


async def cancel_job(
    target: Target, job: Job, results_dir: str | Path = "results", *, term_timeout: float = 15.0
) -> Job:
    """Stop the whole process group (TERM, then KILL); the checkpoints already saved stay."""
    if job.pgid is None:
        raise HarnessError(f"job {job.job_id} has no process group recorded")
    job.state = "cancelled"  # recorded first, so a follower that sees the group vanish knows why
    await save_job(target, job, results_dir)
    if not await target.kill_group(job.pgid, term_timeout=term_timeout):
        raise HarnessError(f"job {job.job_id}: processes of group {job.pgid} are left after SIGKILL")
    return job


async def resume_job(target: Target, job: Job, results_dir: str | Path = "results") -> Job:
    """Start a stopped job again from its last checkpoint, appending to the same log."""
    job = await refresh_job(target, job, results_dir)
    if job.state == "running":
        raise HarnessError(f"job {job.job_id} is still running (pgid {job.pgid})")
    if job.state == "finished":
        raise HarnessError(f"job {job.job_id} finished; start a new run to train further")
    spec = TrainSpec.model_validate(job.spec)
    resume_from = None
    if job.era == "cli":
        from harness.retrain.checkpoints import discover_checkpoints

        ckpts = await discover_checkpoints(target, job.output_dir)
        resume_from = ckpts[-1].path if ckpts else None
    job.argv = build_train_argv(
        spec,
        job.era,
        workdir=job.cwd,
        config_path=job.config_path,  # type: ignore[arg-type]
        resume_from=resume_from,
        resume=True,
    )
    await _start(target, job, results_dir, resume=True)
    return job


async def _log_size(target: Target, path: str) -> int:
    res = await target.run(["wc", "-c", path], timeout=30)
    head = res.stdout.split()
    return int(head[0]) if res.rc == 0 and head and head[0].isdigit() else 0


async def follow_job(
    target: Target, job: Job, *, results_dir: str | Path = "results", offset: int = 0, poll_s: float = 1.0
) -> AsyncIterator[TrainProgress]:
    """Progress parsed from the job's log (from `offset`), one event per batch of log records, until the
    process group is gone; the last event carries the final state and exit code."""
    state = ProgressState(job.job_id, num_epochs=job.num_epochs, total_steps=job.total_steps)
    splitter = RecordSplitter()
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    async def pump() -> None:
        async for chunk in target.tail(job.log_path, offset=offset):
            queue.put_nowait(chunk)

    def take() -> bytes:
        parts = []
        while not queue.empty():
            parts.append(queue.get_nowait())
        return b"".join(parts)

    task = asyncio.create_task(pump(), name=f"follow-{job.job_id}")
    consumed = offset
    next_check = 0.0
    try:
        while True:
            first = b""  # kept in front: put back in the queue it would come after the rest (a log over
            with contextlib.suppress(TimeoutError):  # 64 KiB then ended in the state of its first block)
                first = await asyncio.wait_for(queue.get(), timeout=poll_s)
            if task.done():
                task.result()  # the follower died: surface why
            data = first + take()
            if data:
                consumed += len(data)
                yield state.feed_records(splitter.feed(data))
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + poll_s
            if job.pgid is not None and await target.alive(job.pgid):
                continue
            now = await refresh_job(target, job, results_dir)
            if now.state == "running" and now.pgid != job.pgid:
                job = now  # resumed meanwhile (by another client): same log, new process group
                continue
            size = await _log_size(target, job.log_path)
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            rest = []
            while consumed < size and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    chunk = await asyncio.wait_for(queue.get(), timeout=poll_s)
                    consumed += len(chunk)
                    rest.append(chunk)
            records = splitter.feed(b"".join(rest)) + splitter.flush()
            final = await refresh_job(target, now, results_dir)
            progress = state.feed_records(records)
            # an ended job has nothing left to wait for: no ETA
            yield replace(progress, state=final.state, exit_code=final.exit_code, eta_s=None)
            return
    finally:
        task.cancel()
        await reap(task)
