"""A per-batch-size schedule in SGLang's terms: the launch flags per band. SGLang fixes num_steps, eagle_topk,
num_draft_tokens and CUDA graphs at launch (REFERENCE.md §5.1), so a schedule is one server per band behind a
router that sends each load to its band's server, or the one config for a mix of loads; SGLang's own dynamic
option (`--speculative-adaptive`, 0.5.11+) adapts num_steps by its own rule, not by this schedule."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from harness.common.versions import version_at_least
from harness.engines.base import ScheduleBand
from harness.engines.sglang.flags import FLAG_HISTORY

ADAPTIVE = "--speculative-adaptive"


def _flags(b: ScheduleBand, algorithm: str, draft_path: str | None, version: str | None) -> list[str]:
    if not b.num_steps:
        return []  # the baseline: no speculative flag at all
    argv = ["--speculative-algorithm", algorithm or "EAGLE3"]
    if draft_path:
        argv += ["--speculative-draft-model-path", str(draft_path)]
    argv += ["--speculative-num-steps", str(b.num_steps), "--speculative-eagle-topk", str(b.eagle_topk),
             "--speculative-num-draft-tokens", str(b.num_draft_tokens)]
    if not b.cuda_graph:
        disabled = FLAG_HISTORY["--disable-cuda-graph"]
        newer = disabled.deprecated and version_at_least(version, disabled.deprecated)
        off = "--disable-cuda-graph"
        argv += (disabled.replacement or off).split() if newer else [off]
    return argv


def schedule_export(bands: Sequence[ScheduleBand], *, algorithm: str, draft_path: str | None,
                    version: str | None) -> dict[str, Any]:
    since = FLAG_HISTORY[ADAPTIVE].since or "0.5.11"
    has_adaptive = version is not None and version_at_least(version, since)
    dynamic = (f"SGLang {version} has {ADAPTIVE} (since {since}): it adapts num_steps at run time by its own "
               "rule, not by this schedule; measure it as a variant before trusting it" if has_adaptive else
               f"SGLang {version or '(version unknown)'} has no per-batch-size speculative option here "
               f"({ADAPTIVE} came in {since})")
    return {
        "engine": "sglang",
        "fixed_at_launch": True,
        "note": "SGLang fixes the speculative settings at launch: one server per band (a router sends "
                "each load to its band's server), or the single config for the mix",
        "per_band": [{"min_batch": b.min_batch, "max_batch": b.max_batch,
                      "launch_flags": shlex.join(_flags(b, algorithm, draft_path, version)),
                      "speculative": bool(b.num_steps)} for b in bands],
        "dynamic": {"available": has_adaptive, "flag": ADAPTIVE if has_adaptive else None, "note": dynamic},
    }
