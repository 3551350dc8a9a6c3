"""Regenerate training data with the target model itself (SpecForge's `regenerate_train_data.py`, async).

Each conversation's user turns are replayed in order through the target: system turns are kept, every
assistant turn is replaced by the target's own answer to the conversation so far, and a conversation
that ends with a user turn gains the answer. Rows are appended (and flushed) to the output as they
finish, so a killed run resumes where it stopped: ids already written, to the output or to the error
file, are skipped. A conversation stays on one endpoint so its turns reuse that server's prefix cache;
with several endpoints (or servers behind one sglang-router URL) a row goes to the least busy one.

Connection faults defer a row to the next run; HTTP errors and timeouts go to `<output>_error.jsonl`
(see regen_rows).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness.common.aio import drain
from harness.common.errors import InputError
from harness.retrain.data import drop_ids, error_path, finished_ids, read_conversations
from harness.retrain.regen_rows import RegenProgress, RowEngine

if TYPE_CHECKING:
    from harness.common.aio import Emit
    from harness.inputs.config import Plan
    from harness.targets.base import Target

__all__ = ["REASONING_MODES", "RegenProgress", "normalize_endpoint", "regen", "sglang_version"]

REASONING_MODES = ("none", "save", "disable")


def normalize_endpoint(endpoint: str) -> str:
    """`host:port`, `http://host:port` or `http://host:port/v1` -> the OpenAI base `http://host:port/v1`."""
    ep = endpoint.strip().rstrip("/")
    if not ep:
        raise InputError(None, None, "endpoints", "empty endpoint")
    if "://" not in ep:
        ep = "http://" + ep
    if not ep.startswith(("http://", "https://")):
        raise InputError(None, None, "endpoints", f"{endpoint!r}: only http(s) endpoints are supported")
    return ep if ep.endswith("/v1") else ep + "/v1"


async def regen(
    plan: Plan,
    input_path: str | Path,
    output_path: str | Path,
    *,
    concurrency: int = 64,
    endpoints: list[str] | None = None,
    max_tokens: int = 2048,
    temperature: float = 0.7,
    model: str | None = None,
    reasoning: str = "none",
    retry_errors: bool = False,
    request_timeout_s: float | None = None,
    max_retries: int = 2,
    target: Target | None = None,
    results_dir: str | Path = "results",
    workers: int = 1,
) -> AsyncIterator[RegenProgress]:
    """Regenerate `input_path` into `output_path` (resumable). Without `endpoints` the plan's baseline
    server is started on the plan's target (logs under `results_dir/regen/`) and stopped at the end;
    with `workers` > 1, that many data-parallel servers behind sglang-router (harness.retrain.router).
    Closing the generator stops everything; rows written so far stay."""
    if concurrency < 1:
        raise InputError(None, None, "concurrency", f"must be at least 1, got {concurrency}")
    if workers < 1:
        raise InputError(None, None, "workers", f"must be at least 1, got {workers}")
    if workers > 1 and endpoints:
        raise InputError(None, None, "workers",
                         "give either endpoints (servers you run) or workers (started here)")
    if max_tokens < 1:
        raise InputError(None, None, "max_tokens", f"must be at least 1, got {max_tokens}")
    if reasoning not in REASONING_MODES:
        raise InputError(None, None, "reasoning", f"one of {', '.join(REASONING_MODES)}, not {reasoning!r}")
    urls = [normalize_endpoint(e) for e in endpoints or []]
    out, err = Path(output_path), error_path(output_path)
    if out.resolve() == Path(input_path).resolve():
        raise InputError(str(output_path), None, None, "the output must not be the input file")
    convs = read_conversations(input_path)
    done, failed = finished_ids(out), finished_ids(err)
    if retry_errors:
        drop_ids(err, failed - done)
        failed = set()
    skip = done | failed
    pending = [c for c in convs if c.id not in skip]
    already = len(convs) - len(pending)
    timeout_s = float(request_timeout_s or plan.run.request_timeout_s)
    name = model or plan.model.served_model_name or str(plan.model.path)
    job = RowEngine(
        convs,
        pending,
        out=out,
        err=err,
        already=already,
        concurrency=concurrency,
        max_tokens=max_tokens,
        temperature=temperature,
        model=name,
        reasoning=reasoning,
        emit=lambda _progress: None,  # wired to the event stream below
    )
    try:
        if not pending:
            yield replace(job.state, state="done", detail="nothing to do: every input row is finished")
            return

        def start(emit: Emit) -> Awaitable[None]:
            job.emit = emit
            return _main(job, plan, urls, timeout_s, max_retries, target, Path(results_dir), emit, workers)

        async with contextlib.aclosing(drain(start, name="draftbench-regen")) as events:
            async for progress in events:  # closing us closes the drain, which stops the server
                yield progress
    finally:
        job.close()


async def _main(
    job: RowEngine,
    plan: Plan,
    urls: list[str],
    timeout_s: float,
    max_retries: int,
    target: Target | None,
    results_dir: Path,
    emit: Callable[[RegenProgress], None],
    workers: int = 1,
) -> None:
    if urls:
        job.state = replace(job.state, detail="endpoints: " + ", ".join(urls))
        await job.run(urls, timeout_s, max_retries)
        return
    from harness.analysis.rundir import new_run_dir
    from harness.serve.server import Server
    from harness.targets import open_target

    own = target is None
    if target is None:
        target = open_target(plan.target.host, ssh_port=plan.target.ssh_port)
    server = None
    try:
        await target.connect()
        version = await sglang_version(plan, target)
        run_id, run_dir = new_run_dir(results_dir / "regen", plan.name)
        if workers > 1:
            await _behind_router(job, plan, target, workers, run_id, run_dir, version, timeout_s, max_retries,
                                 emit)
            return
        server = Server(target, plan, plan.baseline, run_id=run_id, run_dir=run_dir, engine_version=version)
        emit(replace(job.state, state="starting-server", detail=f"{plan.baseline.name} on {target.name}"))
        await server.start()
        await server.wait_ready(plan.server.startup_timeout_s)
        job.state = replace(
            job.state, detail=f"server {server.base_url} (pgid {server.pgid}), logs {run_dir}"
        )
        emit(replace(job.state, state="server-ready"))
        await job.run([server.base_url + "/v1"], timeout_s, max_retries)
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(server.stop())
        if own:
            with contextlib.suppress(Exception):
                await target.close()


async def sglang_version(plan: Plan, target: Target) -> str | None:
    from harness.engines import engine_of

    return await engine_of(plan).detect_version(plan, target)


async def _behind_router(job: RowEngine, plan: Plan, target: Target, workers: int, run_id: str, run_dir: Path,
                         version: str | None, timeout_s: float, max_retries: int,
                         emit: Callable[[RegenProgress], None]) -> None:
    from harness.retrain.router import RouterFleet

    fleet = RouterFleet(target, plan, workers, run_id=run_id, run_dir=run_dir, version=version)
    emit(replace(job.state, state="starting-server",
                 detail=f"{workers} x {plan.baseline.name} behind sglang-router"))

    plain_emit = job.emit
    job.emit = lambda state: plain_emit(replace(state, workers=fleet.progress()))  # the workers' own numbers
    try:
        url = await fleet.start(lambda note: emit(replace(job.state, state="starting-server", detail=note)))
        job.state = replace(job.state, detail=f"router {url} over {workers} workers, logs {run_dir}")
        job.emit(replace(job.state, state="server-ready"))
        await job.run([url], timeout_s, max_retries)
        await fleet.settle()  # the last answers' log lines, then the final per-worker numbers
        job.emit(job.state)
    finally:
        job.emit = plain_emit
        with contextlib.suppress(Exception):
            await asyncio.shield(fleet.stop())
