"""Servers an earlier run left running, taken over by a later run whose variant would start exactly the same
command: `run_plan(..., adopt=[KeptServer, ...])`. A Kimi-K2.5 server takes many minutes to load, so a run
that needs a server another run kept (tune's wide run, then its step-cost phases) measures it where it
stands instead of restarting it.

Only an exact match is adopted: the recorded launch command (API keys redacted on both sides) equals the
one this variant would start on that server's port, the process group is alive and its pid file still
names it. The adopting run records the group as its own start (`adopted_from`), so it stops it, reaps it
on --resume, or keeps it, like any server it started; the old run's servers.jsonl says `handed-over`.
Offered servers that no variant adopts count against GPU room (harness.serve.kept.gpu_has_room) and are
stopped before a fresh start when the plan does not say they fit; the others stay as they were, kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from harness.analysis.rundir import redact_argv
from harness.common import events as ev
from harness.serve.existing import ExistingServer
from harness.serve.kept import KeptServer, VariantServer, gpu_has_room, make_room, record_stopped, still_ours
from harness.serve.server import Server

if TYPE_CHECKING:
    from harness.inputs.config import Plan, Variant
    from harness.targets.base import Target


class AdoptingRun(Protocol):
    """What `launch` reads and changes of a run (harness.bench.runner's `_Run`)."""

    plan: Plan
    target: Target
    run_id: str
    offered: list[KeptServer]  # other runs' kept servers, not adopted yet
    kept: list[VariantServer]  # this run's kept servers, oldest first
    emit: Callable[[ev.ServerState], None]


def matches(kept: KeptServer, server: Server) -> bool:
    """Would `server` launch exactly the command `kept` was started with?"""
    if kept.port is None or not kept.argv:
        return False
    return list(kept.argv) == redact_argv(server.launch_argv(int(kept.port)))


def hand_over(kept: KeptServer, run_id: str) -> None:
    """The old run's record: this group is no longer its to list as kept, stop or reap."""
    if kept.jsonl is None:
        return
    with open(kept.jsonl, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"variant": kept.variant, "pgid": kept.pgid, "state": "handed-over",
                             "to": run_id}) + "\n")


async def stop_offered(run: AdoptingRun, kept: KeptServer, why: str) -> None:
    gone = await run.target.kill_group(kept.pgid) if await run.target.alive(kept.pgid) else True
    record_stopped(kept, gone, by=run.run_id)
    run.emit(ev.ServerState(kept.variant, "stopped" if gone else "failed", kept.port, kept.pgid, why))


async def _adopt_offered(run: AdoptingRun, server: Server, variant: Variant) -> bool:
    """Adopt the first offered server started with `server`'s exact command that is still alive and ours."""
    for kept in list(run.offered):
        if not matches(kept, server):
            continue
        run.offered.remove(kept)
        if not (await run.target.alive(kept.pgid) and await still_ours(run.target, kept)):
            continue
        run.emit(ev.ServerState(variant.name, "adopted", kept.port, kept.pgid,
                                f"left running by {kept.started_by}"))
        hand_over(kept, run.run_id)
        await server.adopt(kept)
        return True
    return False


async def launch(run: AdoptingRun, server: Server | ExistingServer, variant: Variant) -> None:
    """Bring up `server` for `variant` in `run`: adopt an offered server with its exact command (an existing
    server has no command to match), else make GPU room (offered servers first, then the run's own kept ones)
    and start it."""
    if not isinstance(server, ExistingServer) and await _adopt_offered(run, server, variant):
        return
    run.emit(ev.ServerState(variant.name, "starting",
                            detail=f"connecting to {variant.endpoint}" if variant.is_existing else ""))
    while run.offered and not gpu_has_room(run.plan, len(run.kept) + len(run.offered)):
        await stop_offered(run, run.offered.pop(0), "stopped: no GPU room for it next to the next server "
                           "(server.mem_fraction_static)")
    await make_room(run.plan, run.kept, run.emit)
    await server.start()
