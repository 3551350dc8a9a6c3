"""The exact `python -m sglang.launch_server` argument list for a variant (pure functions).

Flag spellings follow the SGLang version on the target (REFERENCE.md §5): `--cuda-graph-max-bs`
became `--cuda-graph-max-bs-decode` in 0.5.14 and the old name is an argparse error from 0.5.20.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from harness.common.versions import version_at_least
from harness.engines.base import SpecShape

if TYPE_CHECKING:
    from harness.inputs.config import Plan, Variant
    from harness.inputs.plan_parts import Target as NodeConfig

DEFAULT_LAUNCHER = ["{python}", "-m", "sglang.launch_server"]


def cuda_graph_max_bs_flag(version: str | None) -> str:
    return "--cuda-graph-max-bs-decode" if version_at_least(version, "0.5.14") else "--cuda-graph-max-bs"


def launcher_argv(node: NodeConfig) -> list[str]:
    """The command prefix on the node: target.sglang.launcher (or launch_server) with {python} substituted."""
    prefix = list(node.sglang.launcher or DEFAULT_LAUNCHER)
    return [part.replace("{python}", node.python) for part in prefix]


def spec_params(variant: Variant) -> tuple[int, int, int] | None:
    """(steps, topk, draft tokens) or None; with topk 1 SGLang forces draft tokens = steps + 1."""
    if variant.num_steps is None:
        return None
    steps, topk, ndt = int(variant.num_steps), int(variant.eagle_topk), int(variant.num_draft_tokens)
    if topk == 1:
        ndt = steps + 1
    return steps, topk, ndt


def spec_grid(steps: Iterable[int], topks: Iterable[int], draft_tokens: Iterable[int]) -> list[SpecShape]:
    """Every shape SGLang accepts: topk 1 forces num_draft_tokens = steps + 1; a tree holds at most
    steps x topk + 1 tokens (flags.check_spec_params) and is more than a chain."""
    topks, draft_tokens = list(topks), list(draft_tokens)
    out: set[SpecShape] = set()
    for s in steps:
        for k in topks:
            if k == 1:
                out.add(SpecShape(s, 1, s + 1))
                continue
            for d in draft_tokens:
                if s + 1 < d <= s * k + 1:
                    out.add(SpecShape(s, k, d))
    return sorted(out)


def build_launch_argv(plan: Plan, variant: Variant, port: int, sglang_version: str | None) -> list[str]:
    """Full argv (launcher included) for one variant. Every value is one argv item: never a shell string."""
    model, server = plan.model, plan.server
    argv = launcher_argv(plan.target)
    argv += ["--model-path", str(model.path), "--tp-size", str(model.tp_size)]
    if model.trust_remote_code:
        argv.append("--trust-remote-code")
    if model.served_model_name:
        argv += ["--served-model-name", str(model.served_model_name)]
    argv += ["--host", str(server.host), "--port", str(port)]
    argv += ["--max-running-requests", str(server.max_running_requests)]
    argv += ["--enable-metrics", "--decode-log-interval", str(server.decode_log_interval)]
    if server.mem_fraction_static is not None:
        argv += ["--mem-fraction-static", str(server.mem_fraction_static)]
    if server.cuda_graph_max_bs is not None:
        argv += [cuda_graph_max_bs_flag(sglang_version), str(server.cuda_graph_max_bs)]
    algorithm = variant.spec_algorithm
    if algorithm:
        argv += ["--speculative-algorithm", algorithm]
        drafter = variant.drafter
        if drafter is not None:
            argv += ["--speculative-draft-model-path", str(drafter.path)]
        params = spec_params(variant)
        if params is not None:
            steps, topk, ndt = params
            argv += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                     "--speculative-num-draft-tokens", str(ndt)]
    if not variant.cuda_graph:
        argv.append("--disable-cuda-graph")
    argv += [str(a) for a in model.extra_args]
    argv += [str(a) for a in variant.extra_args]
    return argv
