"""One node of a plan with several targets, named alike by a multi-node run (harness.bench.multinode) and by
the Servers section's fleets (fleet_nodes.py): the node's name, the plan it runs, its events
`variant@node`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, TypeVar

from harness.common import events as ev

if TYPE_CHECKING:
    from harness.inputs.config import Plan
    from harness.inputs.plan_parts import Target

E = TypeVar("E")


def node_name(target: Target) -> str:
    return str(target.host) + (f":{target.ssh_port}" if target.ssh_port else "")


def sub_plan(plan: Plan, target: Target, names: list[str]) -> Plan:
    """The plan one node runs: that node as the target, only its variants (baselines first)."""
    variants = [v for v in plan.variants if v.name in names]
    return plan.model_copy(update={"target": target, "targets": [], "variants": variants})


def tag_node(e: E, node: str) -> E:
    """The node's name on every event that names a variant (the baseline runs on every node)."""
    if hasattr(e, "variant") and isinstance(e.variant, str) and e.variant \
            and not isinstance(e, ev.RequestDone):
        return dataclasses.replace(e, variant=f"{e.variant}@{node}")
    return e
