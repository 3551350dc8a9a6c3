"""What a run records about the target beside its servers: the drafter's config hash and the GPUs."""

from __future__ import annotations

import contextlib
import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.inputs.config import Plan, Variant
    from harness.targets.base import Target


async def drafter_hash(target: Target, plan: Plan, variant: Variant) -> str:
    """sha256 of the drafter's config.json as the target has it ('' when unreadable)."""
    if variant.drafter is None:
        return ""
    path = str(variant.drafter.path).rstrip("/") + "/config.json"
    if not path.startswith(("/", "~")):
        path = f"{plan.target.workdir}/{path}"
    try:
        data = await target.read_file(path, max_bytes=1 << 20)
    except Exception:
        return ""
    return hashlib.sha256(data).hexdigest()



async def gpus(target: Target, plan: Plan) -> list[str]:
    """The target's GPUs as nvidia-smi names them (model, driver, memory); ['simulated'] on the stand-in."""
    if plan.target.simulated:
        return ["simulated"]
    with contextlib.suppress(Exception):
        res = await target.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], timeout=30)
        if res.rc == 0:
            return [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    return []
