"""The Servers section's servers for a plan with several targets: one `Fleet` per node, each able to start
every variant there; members and events are named `variant@node`, as a multi-node run names them.

Same methods as `Fleet` (what a front end calls), so the Servers section treats both alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.common import events as ev
from harness.common.errors import HarnessError
from harness.common.findings import Finding
from harness.serve.fleet import EventCallback, Fleet, MemberStatus
from harness.serve.nodes import node_name, sub_plan, tag_node

if TYPE_CHECKING:
    from harness.inputs.config import Plan


def server_names(plan: Plan) -> list[str]:
    """The Servers section's rows: the variants, or every variant on every node for a plan with targets."""
    if not plan.targets:
        return [v.name for v in plan.variants]
    return [f"{v.name}@{node_name(t)}" for t in plan.node_targets() for v in plan.variants]


class NodeFleet:
    def __init__(self, plan: Plan, *, on_event: EventCallback, results_dir: str | Path = "results",
                 fleet_factory: Callable[..., Fleet] = Fleet):
        self.plan = plan
        self.on_event = on_event
        self.fleets: dict[str, Fleet] = {}
        for t in plan.node_targets():
            node = node_name(t)
            sub = sub_plan(plan, t, [v.name for v in plan.variants])
            self.fleets[node] = fleet_factory(sub, on_event=lambda e, n=node: on_event(tag_node(e, n)),
                                              results_dir=results_dir)
        self.members = {f"{v}@{n}": None for n, f in self.fleets.items() for v in f.members}

    def _split(self, name: str) -> tuple[Fleet, str]:
        variant, _, node = name.rpartition("@")
        if node not in self.fleets or not variant:
            raise HarnessError(f"no server named {name!r}: names are variant@node ({', '.join(self.fleets)})")
        return self.fleets[node], variant

    def _named(self, s: MemberStatus, node: str) -> MemberStatus:
        return dataclasses.replace(s, variant=f"{s.variant}@{node}")

    def _node_of(self, name: str) -> str:
        return name.rpartition("@")[2]

    # ---- queries -----------------------------------------------------------------------------------------
    def status(self, name: str) -> MemberStatus:
        fleet, variant = self._split(name)
        return self._named(fleet.status(variant), self._node_of(name))

    def uptime(self, name: str, now: float | None = None) -> float | None:
        fleet, variant = self._split(name)
        return fleet.uptime(variant, now)

    def base_url(self, name: str) -> str | None:
        fleet, variant = self._split(name)
        return fleet.base_url(variant)

    def live(self) -> list[str]:
        return [f"{v}@{n}" for n, f in self.fleets.items() for v in f.live()]

    # ---- setup -------------------------------------------------------------------------------------------
    async def adopt(self) -> list[str]:
        """Each node's kept servers (a node that cannot be reached adopts nothing; the others go on)."""
        found = await asyncio.gather(*(f.adopt() for f in self.fleets.values()), return_exceptions=True)
        return [f"{v}@{n}" for n, got in zip(self.fleets, found, strict=True)
                if not isinstance(got, BaseException) for v in got]

    async def check(self) -> list[Finding]:
        out: list[Finding] = []
        for f in self.fleets.values():
            out += await f.check()
        return out

    async def preflight(self) -> list[ev.Alarm]:
        out: list[ev.Alarm] = []
        for f in self.fleets.values():
            out += await f.preflight()
        return out

    # ---- lifecycle ---------------------------------------------------------------------------------------
    async def start(self, name: str) -> MemberStatus:
        fleet, variant = self._split(name)
        return self._named(await fleet.start(variant), self._node_of(name))

    async def stop(self, name: str) -> MemberStatus:
        fleet, variant = self._split(name)
        return self._named(await fleet.stop(variant), self._node_of(name))

    async def restart(self, name: str) -> MemberStatus:
        fleet, variant = self._split(name)
        return self._named(await fleet.restart(variant), self._node_of(name))

    async def start_all(self) -> list[MemberStatus]:
        """Nodes at once, one server after another on each node (they share its GPU memory)."""
        per_node = await asyncio.gather(*(f.start_all() for f in self.fleets.values()))
        return [self._named(s, n) for n, got in zip(self.fleets, per_node, strict=True) for s in got]

    async def stop_all(self) -> list[MemberStatus]:
        per_node = await asyncio.gather(*(f.stop_all() for f in self.fleets.values()))
        return [self._named(s, n) for n, got in zip(self.fleets, per_node, strict=True) for s in got]

    async def close(self, *, keep: bool = False) -> None:
        await asyncio.gather(*(f.close(keep=keep) for f in self.fleets.values()), return_exceptions=True)

    async def gpu_memory(self) -> dict[str, int]:
        per_node = await asyncio.gather(*(f.gpu_memory() for f in self.fleets.values()),
                                        return_exceptions=True)
        return {f"{v}@{n}": mib for n, got in zip(self.fleets, per_node, strict=True)
                if isinstance(got, dict) for v, mib in got.items()}
