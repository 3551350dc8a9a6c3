"""A run's servers, one per variant: its record begun (`new_meta`), the server started, adopted or (one the
run did not start) checked, then ready with its facts gathered (`start`); a failure recorded (`failed`);
stopped or kept (`stop`). Functions of the run (harness.bench.runner._Run), kept apart so the runner stays
one seam."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from harness.analysis.rundir import redact_argv
from harness.analysis.store import VariantMeta, append_variant
from harness.bench.run_record import on_lines
from harness.bench.sampling_client import variant_temperature
from harness.bench.target_facts import drafter_hash, gpus
from harness.common import events as ev
from harness.common.aio import finish
from harness.engines import engine_of
from harness.inputs.endpoints import api_key
from harness.serve.adopt import launch
from harness.serve.existing import ExistingServer, check_existing, require_auth
from harness.serve.kept import gpu_has_room
from harness.serve.key_handoff import key_in_log_warning
from harness.serve.server import Server, ServerFailed, stopped_detail

if TYPE_CHECKING:
    from harness.bench.run_state import RunState
    from harness.inputs.config import Variant


def new_meta(run: RunState, variant: Variant, version: str | None) -> VariantMeta:
    """The variant's variants.jsonl line before its server starts: what the plan says it is."""
    engine = engine_of(run.plan, variant)
    return VariantMeta(
        variant=variant.name, engine=engine.name, engine_version=version, baseline=bool(variant.is_baseline),
        algorithm=variant.spec_algorithm or "", drafter=variant.drafter.name if variant.drafter else "",
        drafter_path=str(variant.drafter.path) if variant.drafter else "", num_steps=variant.num_steps,
        eagle_topk=variant.eagle_topk, num_draft_tokens=variant.num_draft_tokens,
        cuda_graph=bool(variant.cuda_graph), simulated=bool(run.plan.target.simulated), status="running",
        temperature=variant_temperature(run.plan, variant),
        sampling=variant.sampling.label if variant.sampling is not None else None,
        # a server forced to an accept length: its outputs are not the model's (labelled everywhere)
        forced_acceptance=engine.forced_acceptance({**(run.plan.target.env or {}),
                                                    **(variant.env or {})}),
        # generated prompts: the rows that measured them say so (summary.csv's synthetic_suites)
        **({"synthetic_suites": synthetic} if (synthetic := [s.name for s in run.plan.suites if s.synthetic])
           else {}))


async def start(run: RunState, variant: Variant, version: str | None,
                meta: VariantMeta) -> Server | ExistingServer | None:
    """The variant's server, ready, its facts in `meta`; None when it failed to start (recorded and stopped).
    Any other exception, cancellation included, records `meta`, stops the server and propagates."""
    name = variant.name
    engine = engine_of(run.plan, variant)
    key = api_key(run.plan, variant)
    server = ExistingServer(run.target, run.plan, variant, run_dir=run.run_dir, api_key=key) \
        if variant.is_existing else \
        Server(run.target, run.plan, variant, run_id=run.remote_id, run_dir=run.run_dir,
               engine_version=version, on_lines=lambda lines, s=name: on_lines(run, s, lines),
               api_key=key)
    run.servers.append(server)
    run._log_owner[name] = server
    if run.parked and not gpu_has_room(run.plan, len(run.parked)):
        for other in list(run.parked.values()):  # the stopping rule's parked servers yield the GPU first
            run.parked.pop(other.name, None)
            await stop(run, other)
    try:
        # adopts an offered server with the same command, or starts one
        await launch(run, server, variant)
        meta.port, meta.pgid, meta.launch_command = server.port, server.pgid, redact_argv(server.argv)
        startup = await server.wait_ready(run.plan.server.startup_timeout_s)
        meta.startup_s = round(startup, 2)
        if server.key_in_log:  # SGLang prints its ServerArgs, api_key included
            run.emit(ev.Alarm(name, "warning", "key-in-server-log", key_in_log_warning(server)))
        run.emit(ev.ServerState(name, "ready", server.port, server.pgid))
        await require_auth(server)  # a wrong key: an error now, not a variant at 0 tok/s
        info = await server.admin.server_info() if server.admin else None
        meta.server_facts.update(engine.server_provenance(info))
        if variant.is_existing:
            for alarm in check_existing(variant, meta):  # raises ServerFailed on a mismatch
                run.emit(alarm)
        graph_bs = meta.server_facts.get("server_cuda_graph_max_bs_decode") \
            or meta.server_facts.get("server_cuda_graph_max_bs")
        if isinstance(graph_bs, int):
            run.alarms.set_graph_max_bs(name, graph_bs)
        meta.drafter_config_sha256 = await drafter_hash(run.target, run.plan, variant)
        meta.gpus = await gpus(run.target, run.plan)
    except ServerFailed as exc:
        failed(run, server, meta, exc)
        append_variant(run.run_dir, meta)
        await stop(run, server)
        return None
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            meta.status = "interrupted"
        append_variant(run.run_dir, meta)
        await stop(run, server)
        raise
    return server


def failed(run: RunState, server: Server | ExistingServer, meta: VariantMeta, exc: ServerFailed) -> None:
    run.failures += 1
    run.failed.add(server.name)
    meta.status, meta.failure, meta.last_log_lines = "failed", exc.reason, exc.last_lines[-50:]
    run.emit(ev.ServerState(server.name, "failed", server.port, server.pgid,
                            "\n".join(exc.last_lines[-50:])))
    run.emit(ev.VariantDone(server.name, False, exc.reason))


async def stop(run: RunState, server: Server | ExistingServer) -> None:
    """Stop the server, or keep it (run.keep, unless it failed; never one the run did not start)."""
    if server not in run.servers:
        return
    run.servers.remove(server)
    keep = run.keep and server.name not in run.failed  # a failed server is of no use to anyone
    keep = keep or isinstance(server, ExistingServer)  # not ours to stop
    run.emit(ev.ServerState(server.name, "stopping" if not keep else "kept", server.port, server.pgid))
    # out of run.servers already: a stop cut short by a cancellation would leave the server up, so it runs to
    # the end and the cancellation is passed on after
    stopping = asyncio.ensure_future(server.stop(keep=keep))
    cancelled = await finish(stopping)
    gone = stopping.result()
    if keep and server.pgid is not None:
        run.kept.append(server)
    if not keep:
        run.emit(ev.ServerState(server.name, "stopped" if gone else "failed", server.port, server.pgid,
                                stopped_detail(server) if gone else "processes left after SIGKILL"))
    if cancelled:
        raise asyncio.CancelledError
