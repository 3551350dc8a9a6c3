"""The exact `python -m sglang.launch_server` argument list for a variant (pure functions).

Flag spellings follow the SGLang version on the target (REFERENCE.md §5): `--cuda-graph-max-bs`
became `--cuda-graph-max-bs-decode` in 0.5.14 and the old name is an argparse error from 0.5.20.
"""

from __future__ import annotations

from typing import Any

from harness.common.versions import version_at_least

DEFAULT_LAUNCHER = ["{python}", "-m", "sglang.launch_server"]


def cuda_graph_max_bs_flag(version: str | None) -> str:
    return "--cuda-graph-max-bs-decode" if version_at_least(version, "0.5.14") else "--cuda-graph-max-bs"


def launcher_argv(target: Any) -> list[str]:
    """The command prefix on the target: the configured launcher with {python} substituted."""
    prefix = list(getattr(target, "launcher", None) or DEFAULT_LAUNCHER)
    python = getattr(target, "python", None) or "python3"
    return [part.replace("{python}", python) for part in prefix]


def spec_params(variant: Any) -> tuple[int, int, int] | None:
    """(steps, topk, draft tokens) or None; with topk 1 SGLang forces draft tokens = steps + 1."""
    if variant.num_steps is None:
        return None
    steps, topk, ndt = int(variant.num_steps), int(variant.eagle_topk), int(variant.num_draft_tokens)
    if topk == 1:
        ndt = steps + 1
    return steps, topk, ndt


def build_launch_argv(plan: Any, variant: Any, port: int, sglang_version: str | None) -> list[str]:
    """Full argv (launcher included) for one variant. Every value is one argv item: never a shell string."""
    model, server = plan.model, plan.server
    argv = launcher_argv(plan.target)
    argv += ["--model-path", str(model.path), "--tp-size", str(model.tp_size)]
    if getattr(model, "trust_remote_code", False):
        argv.append("--trust-remote-code")
    if getattr(model, "served_model_name", None):
        argv += ["--served-model-name", str(model.served_model_name)]
    argv += ["--host", str(server.host), "--port", str(port)]
    argv += ["--max-running-requests", str(server.max_running_requests)]
    argv += ["--enable-metrics", "--decode-log-interval", str(server.decode_log_interval)]
    if getattr(server, "mem_fraction_static", None) is not None:
        argv += ["--mem-fraction-static", str(server.mem_fraction_static)]
    if getattr(server, "cuda_graph_max_bs", None) is not None:
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
    if not getattr(variant, "cuda_graph", True):
        argv.append("--disable-cuda-graph")
    argv += [str(a) for a in (getattr(model, "extra_args", None) or [])]
    argv += [str(a) for a in (getattr(variant, "extra_args", None) or [])]
    return argv
