"""The exact `vllm serve` argument list for a variant (pure functions), flag spellings by version
(docs/vllm.md: read from vLLM's own `engine/arg_utils.py` of the releases listed there)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from harness.common.errors import HarnessError
from harness.common.versions import version_at_least
from harness.engines.base import SpecShape

if TYPE_CHECKING:
    from harness.inputs.config import Plan, Variant
    from harness.inputs.plan_parts import Target as NodeConfig

DEFAULT_LAUNCHER = ["vllm", "serve"]
# draftbench's algorithm names (harness.inputs.config.ALGORITHMS) -> vLLM's speculative_config "method"
METHODS = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NGRAM": "ngram", "STANDALONE": "draft_model",
           "DFLASH": "dflash", "NEXTN": "mtp"}
PER_REQUEST_SINCE = "0.29.0"  # --per-request-spec-decode-metrics (vllm-project/vllm#48915)
# --max-cudagraph-capture-size present in 0.22.1 .. 0.33.0 (older: not verified)
CAPTURE_SIZE_SINCE = "0.22.0"


def launcher_argv(node: NodeConfig) -> list[str]:
    """The command prefix on the node: target.vllm.launcher (or `vllm serve`), {python} substituted."""
    prefix = list(node.vllm.launcher or DEFAULT_LAUNCHER)
    return [part.replace("{python}", node.python) for part in prefix]


def spec_grid(steps: Iterable[int], topks: Iterable[int], draft_tokens: Iterable[int]) -> list[SpecShape]:
    """The shapes vLLM accepts: one chain of K = num_steps drafts (eagle_topk 1, num_draft_tokens K + 1);
    a tree (topk > 1) is never built (preflight's `vllm-chain-only`)."""
    return sorted({SpecShape(s, 1, s + 1) for s in steps} if 1 in set(topks) else set())


def num_speculative_tokens(variant: Variant) -> int | None:
    """vLLM drafts a chain of K tokens per step: K = num_steps (eagle_topk must be 1; preflight says so)."""
    return int(variant.num_steps) if variant.num_steps is not None else None


def speculative_config(variant: Variant) -> dict[str, Any] | None:
    """The --speculative-config object for a speculative variant, None for a baseline."""
    algorithm = variant.spec_algorithm
    if not algorithm:
        return None
    method = METHODS.get(str(algorithm).upper())
    if method is None:
        raise HarnessError(f"variant {variant.name!r}: vLLM has no speculative method for {algorithm}")
    cfg: dict[str, Any] = {"method": method}
    if variant.drafter is not None and method != "ngram":
        cfg["model"] = str(variant.drafter.path)
    k = num_speculative_tokens(variant)
    if k is not None:
        cfg["num_speculative_tokens"] = k
    return cfg


def build_launch_argv(plan: Plan, variant: Variant, port: int, version: str | None) -> list[str]:
    """Full argv (launcher included). The JSON of --speculative-config is one argv item, never a shell string.
    model.extra_args are SGLang flags (launch_server items) and are not passed; the variant's are."""
    model, server = plan.model, plan.server
    argv = launcher_argv(plan.target) + [str(model.path)]
    argv += ["--host", str(server.host), "--port", str(port)]
    argv += ["--tensor-parallel-size", str(model.tp_size), "--max-num-seqs", str(server.max_running_requests)]
    if model.trust_remote_code:
        argv.append("--trust-remote-code")
    if model.served_model_name:
        argv += ["--served-model-name", str(model.served_model_name)]
    if server.mem_fraction_static is not None:
        # not the same quantity: vLLM's is the share of the whole GPU it may use (weights + KV + graphs)
        argv += ["--gpu-memory-utilization", str(server.mem_fraction_static)]
    if server.cuda_graph_max_bs is not None and (version is None or version_at_least(
            version, CAPTURE_SIZE_SINCE)):
        argv += ["--max-cudagraph-capture-size", str(server.cuda_graph_max_bs)]
    if not variant.cuda_graph:
        argv.append("--enforce-eager")
    cfg = speculative_config(variant)
    if cfg is not None:
        argv += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
        if version is None or version_at_least(version, PER_REQUEST_SINCE):
            argv += ["--per-request-spec-decode-metrics", "summary"]
    argv += [str(a) for a in variant.extra_args]
    return argv
