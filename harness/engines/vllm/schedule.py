"""A per-batch-size schedule in vLLM's terms: the --speculative-config JSON per band, and where the
installed vLLM has it (0.24.0+, docs "Dynamic Speculative Decoding"), one JSON whose
`num_speculative_tokens_per_batch_size` lists [start_bs, end_bs, K] per band (K 0: no drafts). vLLM's
EAGLE drafts one chain (topk 1), K = num_steps."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness.common.versions import version_at_least
from harness.engines.base import ScheduleBand
from harness.engines.vllm.launch import METHODS

PER_BATCH_SINCE = "0.24.0"
PER_BATCH_KEY = "num_speculative_tokens_per_batch_size"


def _config(b: ScheduleBand, method: str, draft_path: str | None) -> dict[str, Any] | None:
    if not b.num_steps:
        return None  # the baseline: no --speculative-config
    cfg: dict[str, Any] = {"method": method}
    if draft_path:
        cfg["model"] = str(draft_path)
    cfg["num_speculative_tokens"] = b.num_steps
    return cfg


def schedule_export(bands: Sequence[ScheduleBand], *, algorithm: str, draft_path: str | None,
                    version: str | None) -> dict[str, Any]:
    method = METHODS.get(str(algorithm or "EAGLE3").upper(), "eagle3")
    per_band = []
    for b in bands:
        c = _config(b, method, draft_path)
        per_band.append({"min_batch": b.min_batch, "max_batch": b.max_batch,
                         "speculative_config": json.dumps(c, separators=(",", ":")) if c else None,
                         "speculative": bool(b.num_steps), "tree_dropped": b.eagle_topk > 1})
    top = max((b.num_steps for b in bands), default=0)
    has = version is not None and version_at_least(version, PER_BATCH_SINCE)
    dynamic = None
    if top:
        dynamic = {"method": method, **({"model": str(draft_path)} if draft_path else {}),
                   "num_speculative_tokens": top,
                   PER_BATCH_KEY: [[b.min_batch, b.max_batch, b.num_steps] for b in bands]}
    return {
        "engine": "vllm",
        "fixed_at_launch": not has,
        "note": ("vLLM drafts one chain: a band's tree (eagle_topk > 1) is exported as its chain of "
                 "num_steps"),
        "per_band": per_band,
        "dynamic": {"available": has, "speculative_config": json.dumps(dynamic, separators=(",", ":"))
                    if dynamic else None,
                    "note": (f"vLLM {version} reads {PER_BATCH_KEY}" if has else
                             f"{PER_BATCH_KEY} needs vLLM {PER_BATCH_SINCE}+ (its V1 model runner); "
                             + (f"this is {version}" if version else
                                "the tune did not run on vLLM, so its version is not known here"))},
    }
