"""Findings about the target machine: python, SGLang, GPUs, paths, port, disk (pure, from gathered facts)."""

from __future__ import annotations

import re

from harness.checks.remote import EnvFacts, Gpu
from harness.common.findings import PLAN_WIDE, Finding, error, info, warning

GPU_FREE_SHARE = 0.9  # less than this share of a GPU's memory free: something else holds it
MIN_DISK_BYTES = 2 << 30  # server logs and pid files only, but a full disk fails the run late
HF_ID = re.compile(r"[\w.-]+/[\w.-]+")


def python_findings(target_name: str, python: str, env: EnvFacts) -> list[Finding]:
    if env.python_ok:
        return []
    return [
        error(
            PLAN_WIDE,
            "python-missing",
            f"'{python}' does not run on {target_name}",
            env.python_error or "no output",
            "set target.python to an interpreter that exists there",
        )
    ]


def visible_gpus(gpus: list[Gpu], env: dict[str, str]) -> list[Gpu]:
    """The GPUs CUDA_VISIBLE_DEVICES (numeric form) leaves to the server; all when unset."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return gpus
    wanted = [int(x) for x in cvd.split(",") if x.strip().isdigit()]
    if not wanted and cvd.strip():
        return gpus  # UUID form: nvidia-smi lists indices, cannot tell
    by_index = {g.index: g for g in gpus}
    return [by_index[i] for i in wanted if i in by_index]


def gpu_findings(gpus: list[Gpu] | None, why: str, tp_size: int, env: dict[str, str]) -> list[Finding]:
    if gpus is None:
        return [
            error(
                PLAN_WIDE,
                "gpu-missing",
                "nvidia-smi failed on the target",
                why or "no output",
                "check the NVIDIA driver on the node (nvidia-smi must work)",
            )
        ]
    usable = visible_gpus(gpus, env)
    out: list[Finding] = []
    if len(usable) < tp_size:
        out.append(
            error(
                PLAN_WIDE,
                "gpu-count",
                f"{len(usable)} GPU(s) visible, model.tp_size is {tp_size}",
                "each server needs tp_size GPUs",
                "lower tp_size or free / expose more GPUs",
            )
        )
    for g in usable[:tp_size]:
        if g.total_mib > 0 and g.free_mib < GPU_FREE_SHARE * g.total_mib:
            out.append(
                warning(
                    PLAN_WIDE,
                    "gpu-busy",
                    f"GPU {g.index} has {g.free_mib / 1024:.1f} of {g.total_mib / 1024:.1f} GiB free",
                    "another process holds memory: SGLang sizes its KV cache from a fraction of the "
                    "total and may run out of memory or measure with a smaller cache",
                    "stop the other process (nvidia-smi shows it) or pick other GPUs",
                )
            )
    if usable:
        names = sorted({g.name for g in usable})
        out.append(
            info(
                PLAN_WIDE,
                "gpus",
                f"{len(usable)} GPU(s): {', '.join(names)}, "
                f"{min(g.free_mib for g in usable) / 1024:.0f} GiB free at least",
            )
        )
    return out


def path_findings(env: EnvFacts, paths: dict[str, tuple[str, str, str]]) -> list[Finding]:
    """paths: target path -> (variant, what it is ('model', "drafter 'x'"), the path as the plan wrote it)."""
    if not env.python_ok:
        return []
    out = []
    for path, (variant, what, plan_path) in paths.items():
        got = env.data.get("paths", {}).get(path, {})
        if got.get("exists") and got.get("config"):
            continue
        if got.get("exists"):
            out.append(
                error(
                    variant,
                    "config-missing",
                    f"{what} directory {path} has no config.json",
                    "SGLang reads the architecture and sizes from it",
                    "point the path at the checkpoint directory itself",
                )
            )
        elif HF_ID.fullmatch(plan_path):
            out.append(
                warning(
                    variant,
                    "path-missing",
                    f"{what} path {path} does not exist on the target",
                    "SGLang will treat it as a Hugging Face id and try to download it",
                    "use an absolute path to the checkpoint on the node",
                )
            )
        else:
            out.append(
                error(
                    variant,
                    "path-missing",
                    f"{what} path {path} does not exist on the target",
                    "the server cannot load it",
                    "fix the path (relative paths are under target.workdir)",
                )
            )
    return out


def port_findings(env: EnvFacts, host: str, port: int | None) -> list[Finding]:
    if port is None or not env.python_ok or env.data.get("port_free", True):
        return []
    return [
        error(
            PLAN_WIDE,
            "port-in-use",
            f"port {port} on {host} is taken on the target",
            env.data.get("port_error", "address already in use"),
            "set server.port: auto, or stop what listens there",
        )
    ]


def disk_findings(env: EnvFacts) -> list[Finding]:
    disk = env.data.get("disk") if env.python_ok else None
    if not disk or disk.get("free", MIN_DISK_BYTES) >= MIN_DISK_BYTES:
        return []
    return [
        warning(
            PLAN_WIDE,
            "disk-low",
            f"{disk['free'] / (1 << 30):.1f} GiB free under {disk['path']}",
            "server logs and run files go to the work directory; a full disk fails the run late",
            "free space or point target.workdir at a larger disk",
        )
    ]
