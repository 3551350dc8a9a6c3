"""What the vLLM stand-in says about one request besides its tokens: `metrics.speculative_decoding` (vLLM
0.29.0+ with `--per-request-spec-decode-metrics`, vllm-project/vllm#48915) and `system_fingerprint`."""

from __future__ import annotations

import hashlib
from typing import Any

from harness.sim.vllm.args import emulated_version


def new_stats(k: int) -> dict[str, Any]:
    """One request's counts as the scheduler keeps them: steps, accepted drafts, the dense histogram
    (index = drafts accepted in a step) and the accepted count of each step."""
    return {"steps": 0, "accepted": 0, "hist": [0] * (k + 1), "per_step": []}


def spec_block(k: int, level: str, stats: dict[str, Any]) -> dict[str, Any] | None:
    """`metrics.speculative_decoding` as 0.29.0-0.34.0 send it (v1/metrics/stats.py
    `RequestSpecDecodeMetrics.to_dict`): every count from the dense histogram, every step drafts k tokens;
    the per-step arrays only at `detailed`. vLLM main's `acceptance_histogram_by_draft_length` is in none of
    those releases."""
    if not k or level == "none":
        return None
    hist = list(stats["hist"])
    steps, accepted = sum(hist), sum(j * n for j, n in enumerate(hist))
    drafted = steps * k
    out: dict[str, Any] = {"mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
                           "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
                           "acceptance_histogram": hist, "num_spec_steps": steps,
                           "num_accepted_draft_tokens": accepted, "num_draft_tokens": drafted,
                           "num_spec_tokens": k}
    if level == "detailed" and stats["per_step"]:
        out["per_step_accepted"] = list(stats["per_step"])
        out["per_step_drafted"] = [k] * len(stats["per_step"])
    return out


def fingerprint(ns: Any) -> str:
    """`system_fingerprint` in vLLM's default `full` mode (entrypoints/serve/utils/fingerprint.py): the
    version, tp when above 1, and 8 hex digits of the config's hash (here: of the parsed flags)."""
    tp = f"-tp{ns.tensor_parallel_size}" if ns.tensor_parallel_size > 1 else ""
    digest = hashlib.sha256(repr(sorted(vars(ns).items(), key=lambda kv: kv[0])).encode()).hexdigest()[:8]
    return f"vllm-{emulated_version()}{tp}-{digest}"
